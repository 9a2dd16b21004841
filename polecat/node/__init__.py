"""polecat.node: one crawler node, which runs the frontier's decisions (ARCHITECTURE.md)."""
