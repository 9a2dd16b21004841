"""polecat.dedup: the seen-URL set, URL canonicalization and near-duplicate fingerprints."""
