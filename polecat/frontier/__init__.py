"""polecat.frontier: every "what next" decision, and the LMDB state they read and write (ARCHITECTURE.md)."""
