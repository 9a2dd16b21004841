"""polecat.dedup."""
