"""polecat.parse."""
