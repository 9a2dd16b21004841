"""polecat.cluster: slice ownership and hand-over between members."""
