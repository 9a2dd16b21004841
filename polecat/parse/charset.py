"""Decode an HTML body to text without ever failing on a wrong or unknown charset.

Order, after the WHATWG encoding sniffing algorithm (simplified): a byte-order mark wins; then the
Content-Type charset; then ``<meta charset>`` / ``<meta http-equiv content="...charset=...">`` within the
first 2 KiB; then UTF-8. Labels map as browsers map them (``latin1``, ``iso-8859-1`` and ``ascii`` mean
windows-1252; a UTF-16 label found in a meta tag means UTF-8, since a document that can be read as ASCII
to find its meta tag is not UTF-16). Unknown labels, non-text codecs and Python's codecs that are no web
encoding (``punycode`` decodes in O(n^2): 10 MiB would take hours) are skipped. Decoding always uses
``errors="replace"``, so it is linear in the body.
"""

from __future__ import annotations

import codecs
import functools
import re

__all__ = ["decode_html", "sniff_charset", "utf8_body"]

_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_META = re.compile(
    rb"""<meta[^>]+?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""",
    re.IGNORECASE,
)
_ALIASES = {
    "latin1": "cp1252", "latin-1": "cp1252", "iso-8859-1": "cp1252", "iso8859-1": "cp1252",
    "l1": "cp1252", "us-ascii": "cp1252", "ascii": "cp1252", "iso-8859-9": "cp1254",
    "x-sjis": "shift_jis", "gb2312": "gbk", "x-gbk": "gbk", "tis-620": "cp874", "iso-8859-11": "cp874",
}
_SNIFF_BYTES = 2048
_NOT_WEB = frozenset({"punycode", "idna", "unicode-escape", "raw-unicode-escape", "utf-7", "undefined"})


@functools.lru_cache(maxsize=256)
def _codec(label: str | None) -> str | None:
    """Python codec name for a charset label, or None if unknown or not a text encoding."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    label = _ALIASES.get(label, label)
    try:
        info = codecs.lookup(label)
    except (LookupError, ValueError):
        return None
    if not getattr(info, "_is_text_encoding", True) or info.name in _NOT_WEB:  # base64, rot13...
        return None
    return info.name


def sniff_charset(body: bytes, header_charset: str | None) -> str:
    """The Python codec name ``decode_html`` would use for ``body``."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name
    codec = _codec(header_charset)
    if codec is not None:
        return codec
    m = _META.search(body, 0, _SNIFF_BYTES)
    if m is not None:
        codec = _codec(m.group(1).decode("ascii"))
        if codec is not None:
            return "utf-8" if codec.startswith("utf-16") else codec
    return "utf-8"


def utf8_body(body: bytes, header_charset: str | None) -> bytes | None:
    """The body less its byte-order mark when :func:`decode_html` would read it as UTF-8, else None (the
    bytes are not checked: they may be malformed)."""
    if sniff_charset(body, header_charset) != "utf-8":
        return None
    return body.removeprefix(codecs.BOM_UTF8)


def decode_html(body: bytes, header_charset: str | None) -> str:
    """Text of an HTML body (see the module docstring for the order of sources). Never raises."""
    codec = sniff_charset(body, header_charset)
    if codec in ("utf-8", "utf-16-le", "utf-16-be"):
        for bom, name in _BOMS:
            if name == codec and body.startswith(bom):
                body = body[len(bom):]
                break
    try:
        return body.decode(codec, errors="replace")
    except (LookupError, UnicodeError):  # a codec that rejects errors="replace"
        return body.decode("utf-8", errors="replace")
