"""The public surface is small and deliberate: adding or removing a name must be a conscious change."""

import polecat


def test_public_names() -> None:
    assert sorted(polecat.__all__) == ["Config", "CrawlStats", "Crawler", "Page", "PolecatError",
                                       "config_from_mapping"]
    for name in polecat.__all__:
        assert getattr(polecat, name).__module__.startswith("polecat.")
