"""Replay a WARC collection as a replay tool does (pywb's revisit resolution), with warcio: every URL's
bytes, a revisit resolved to the response its ``WARC-Refers-To-Target-URI`` and ``-Date`` name, whose
payload digest must be the revisit's."""

from __future__ import annotations

from pathlib import Path

from warcio.archiveiterator import ArchiveIterator


def replay(path: Path) -> dict[str, bytes]:
    """URL -> the payload a replay of the collection at ``path`` returns for it. A revisit whose original
    is not in the collection, or whose digest differs from its original's, fails the calling test."""
    responses: dict[tuple[str, str], tuple[str, bytes]] = {}
    revisits: list[tuple[str, str, str, str]] = []
    with open(path, "rb") as fh:
        for rec in ArchiveIterator(fh, check_digests="raise"):
            h = rec.rec_headers
            uri, date, digest = (h.get_header(n) for n in ("WARC-Target-URI", "WARC-Date",
                                                           "WARC-Payload-Digest"))
            if rec.rec_type == "response":
                responses[(uri, date)] = (digest, rec.content_stream().read())
            elif rec.rec_type == "revisit":
                revisits.append((uri, h.get_header("WARC-Refers-To-Target-URI"),
                                 h.get_header("WARC-Refers-To-Date"), digest))
    pages = {uri: payload for (uri, _), (_, payload) in responses.items()}
    for uri, target, date, digest in revisits:
        found = responses.get((target, date))
        assert found is not None, f"revisit {uri} refers to {target} at {date}: not in the collection"
        assert found[0] == digest, f"revisit {uri}: digest {digest}, its original's {found[0]}"
        pages.setdefault(uri, found[1])
    return pages
