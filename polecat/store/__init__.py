"""polecat.store."""
