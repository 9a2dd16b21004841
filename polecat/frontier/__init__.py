"""polecat.frontier."""
