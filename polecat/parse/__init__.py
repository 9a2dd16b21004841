"""polecat.parse: turn fetched bytes into links and text."""
