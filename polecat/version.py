"""The release of polecat this code is: one leaf every layer may read (the CLI, the WARC ``warcinfo``, the
user agent)."""

__version__ = "0.3.0"
