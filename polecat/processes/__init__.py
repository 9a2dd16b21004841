"""polecat.processes: the processes that run nodes: the ``--workers`` parent and its workers, a cluster
machine, the ``polecat node`` service (ARCHITECTURE.md)."""
