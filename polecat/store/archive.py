"""What makes the store's WARC archive-grade: ``warcinfo`` records and ``request`` records.

Rules:

1. Every segment starts with a ``warcinfo`` record, and so does every export
   (polecat/store/export.py): the software and its version, the format, the crawler's user agent (whose
   contact URL names the operator) and the robots.txt policy.
2. With ``store.request_records`` (default on), each response or revisit is preceded by the ``request``
   record of the GET that fetched it: request line, ``Host`` and the headers the fetcher sends on every
   request; ``WARC-Concurrent-To`` names the response's record ID. Conditional headers
   (``If-None-Match``, ``If-Modified-Since``) are not listed.
3. Both live in the same zstd frame as the record they belong to, in front of it: a frame stays the unit
   the index points at (no bytes outside an index entry), and a decompressed segment is a WARC file in
   the order Heritrix writes (warcinfo, request, response).
"""

from __future__ import annotations

from dataclasses import dataclass

from polecat.version import __version__

WARC_FORMAT = "WARC File Format 1.1"
CONFORMS_TO = "http://bibnum.bnf.fr/WARC/WARC_ISO_28500_version1-1_latestdraft.pdf"


@dataclass(frozen=True, slots=True)
class ArchiveInfo:
    """Rule 1's fields and rule 2's headers, for a writer of the store."""

    warcinfo: tuple[tuple[str, str], ...]
    request_headers: tuple[tuple[str, str], ...]
    requests: bool = True


def archive_info(*, user_agent: str, request_headers: tuple[tuple[str, str], ...],
                 requests: bool = True) -> ArchiveInfo:
    """The :class:`ArchiveInfo` of a crawl that identifies as ``user_agent`` and obeys robots.txt."""
    fields = (
        ("software", f"polecat/{__version__}"),
        ("format", WARC_FORMAT),
        ("conformsTo", CONFORMS_TO),
        ("http-header-user-agent", user_agent),
        ("robots", "obey (RFC 9309)"),
    )
    return ArchiveInfo(fields, request_headers, requests)
