"""The public surface is small and deliberate: adding or removing a name must be a conscious change."""

import dataclasses

import polecat


def test_public_names() -> None:
    assert sorted(polecat.__all__) == ["Config", "CrawlStats", "Crawler", "Page", "PolecatError",
                                       "config_from_mapping"]
    for name in polecat.__all__:
        assert getattr(polecat, name).__module__.startswith("polecat.")


def test_crawler_surface() -> None:
    """What ``help(polecat.Crawler)`` lists: the README's surface and the parts the node's own layers
    (service, processes) read; the cluster's calls go through ``crawler.member``."""
    public = sorted(n for n in dir(polecat.Crawler) if not n.startswith("_"))
    assert public == ["add_seed", "add_seeds", "block", "bytes_fetched", "commit", "fetcher", "frontier",
                      "last_commit", "member", "opened", "pages", "pause", "paused", "robots", "robots_file",
                      "run", "stats", "stop",
                      "store", "throttle", "throttle_now", "unblock", "unthrottle"]


def test_page_fields() -> None:
    fields = [f.name for f in dataclasses.fields(polecat.Page)]
    assert fields == ["url", "status", "fetched_at", "content_type", "content_hash", "body", "text", "links",
                      "depth", "truncated", "duplicate_of", "title"]
