"""polecat.fetch."""
