"""File descriptors: how many connections a node may hold open, from the process's descriptor limit.

Rules (this module owns them):

1. At start the soft ``RLIMIT_NOFILE`` is raised to the hard one, as servers do (nginx's
   ``worker_rlimit_nofile``, systemd's advice for services): the soft limit of a login shell (often
   1024) is a default for interactive programs, not a budget a crawler should live in. A hard limit of
   "unlimited" is taken as :data:`UNLIMITED_AS` (the kernel refuses an infinite soft limit).
2. Of the limit, :data:`RESERVED` descriptors are kept for everything that is not a connection: the
   LMDB environments (frontier, store index; each holds a data and a lock file), the store's open
   segment, the Bloom snapshot being written, log files, c-ares' DNS sockets, the service's listening
   and accepted sockets, the standard streams. The rest is the connection budget: connections open in
   total (in use + idle) never exceed it (polecat/fetch/pool.py rule 6).
3. ``fetch.concurrency`` above the connection budget is lowered to it, with a warning that names the
   limit: a request in flight holds a connection, so more of them could only fail with EMFILE.
4. A budget below :data:`MIN_CONNECTIONS` is an error at start (a clear one), not a crawl that fails
   at every connect.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from polecat.errors import ConfigError

__all__ = ["MIN_CONNECTIONS", "RESERVED", "UNLIMITED_AS", "DescriptorBudget", "plan_descriptors",
           "raise_nofile_limit"]

RESERVED = 96
"""Descriptors kept for all but connections (rule 2): ~20 counted in a running node, the rest slack for
the service's clients and a cluster's peers."""
MIN_CONNECTIONS = 8
"""The smallest connection budget a node starts with (rule 4)."""
UNLIMITED_AS = 1 << 20
"""The soft limit asked for when the hard one is unlimited (Linux's default ``fs.nr_open``)."""


@dataclass(frozen=True, slots=True)
class DescriptorBudget:
    """What a node may hold open, and what the configuration asked for."""

    nofile: int
    """The soft ``RLIMIT_NOFILE`` the budget comes from."""
    connections: int
    """Connections open in total (in use + idle) at most (rule 2)."""
    concurrency: int
    """Requests in flight at most: the configured concurrency, lowered to ``connections`` (rule 3)."""
    asked: int
    """The configured concurrency."""

    @property
    def lowered(self) -> bool:
        return self.concurrency < self.asked

    def warning(self) -> str | None:
        """The words of rule 3's warning, or None when the concurrency fits."""
        if not self.lowered:
            return None
        return (f"fetch.concurrency {self.asked} lowered to {self.concurrency}: the open-file limit "
                f"(RLIMIT_NOFILE, ulimit -n) is {self.nofile}, {RESERVED} of it kept for files, logs, "
                f"DNS and the store; raise the hard limit to allow more")


def plan_descriptors(nofile: int, concurrency: int) -> DescriptorBudget:
    """The budget for a soft descriptor limit of ``nofile`` (rules 2-4); raises ConfigError below
    :data:`MIN_CONNECTIONS`."""
    connections = nofile - RESERVED
    if connections < MIN_CONNECTIONS:
        raise ConfigError(f"the open-file limit (RLIMIT_NOFILE, ulimit -n) is {nofile}: a node needs at "
                          f"least {RESERVED + MIN_CONNECTIONS} ({RESERVED} for its files, "
                          f"{MIN_CONNECTIONS} for connections)")
    return DescriptorBudget(nofile=nofile, connections=connections,
                            concurrency=min(concurrency, connections), asked=concurrency)


def raise_nofile_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one (rule 1); the soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_AS if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # e.g. above fs.nr_open: keep what we have
            return soft
        return target
    return UNLIMITED_AS if soft == resource.RLIM_INFINITY else soft
