"""A vectorised upper bound on the nesting the parse guard counts, so that ordinary pages skip its scan.

:func:`polecat.parse.guard.bound_html` counts open elements tag by tag in Python (rule 2 of the guard,
the *scan*), at ~0.3 us a tag: 2.7 ms on a 150 KB documentation page. :meth:`DepthBound.may_exceed`
answers in numpy passes over the page's UTF-8 bytes whether that count *could* pass a limit anywhere.
When it says no, the scan would find no cut and is skipped; when it says yes, the scan runs and decides.
So the guard's result is exactly the scan's.

Why the bound is never below the scan's count, rule by rule:

1. Every ``<`` followed by an ASCII letter counts as a start tag of its name, even where the scan sees
   none (inside a comment, raw text such as a script, or another tag's name): extra starts only raise
   the count.
2. An end tag (``</`` and a letter) lowers the count of its own name only, never below zero, as in the
   scan. It is left out (which only raises the count) wherever the scan might not see it: in any span
   from *any* ``<!--`` to the next ``-->``, or from *any* ``<`` + raw-text element name (``script``...,
   ASCII case-insensitive, whatever follows) to the next end tag of that name; or when a ``<`` lies in
   the run of name characters before it, or that run follows a ``</`` (it may be part of a tag's name).
   Runs end only at ASCII delimiters here, so they are never shorter than the scan's.
3. Names compare as the scan compares them: ASCII names of at most 7 bytes as packed integers (the same
   lowercase), all others as the scan's own names (decoded, cut at Unicode whitespace, ``str.lower()``).
   Elements the scan never counts (its ``flat`` set) are left out of both.

Per name, the scan's count is ``c = max(0, c + step)`` (a stray end tag is ignored). That recursion
never decreases when a +1 step is added or a -1 step removed, and the total is the sum over names, so
each rule keeps the bound at or above the scan's count at every tag.
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

__all__ = ["DepthBound"]

IntArray = npt.NDArray[np.int64]
U64Array = npt.NDArray[np.uint64]

_DELIMITER = bytes(int((b < 128 and chr(b).isspace()) or chr(b) in "/>") for b in range(256))
"""``bytes.translate`` table: 1 for a byte that ends a tag name in the scan (``[\\s/>]``, its ASCII part;
runs here are never shorter than the scan's)."""
_SHORT = 7
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
_HIGH_BITS = np.uint64(0x8080808080808080)
_NAME = re.compile(r"[^\s/>]*")
_PAD = bytes(16)


def _key(name: str) -> int:
    """The packed key of a short ASCII name: its bytes, little-endian, and its length above them."""
    return int.from_bytes(name.encode(), "little") | len(name) << 56


class DepthBound:
    """The bound for a scan that does not count the elements ``flat`` and skips the bodies of the
    raw-text elements ``raw`` (``plaintext``, if there, to the end of the page)."""

    def __init__(self, flat: frozenset[str], raw: frozenset[str]) -> None:
        self._flat = flat
        self._flat_keys = np.array(sorted(_key(n) for n in flat if len(n) <= _SHORT), dtype=np.uint64)
        # (opener, closer) of every span the scan may skip; plaintext's never closes.
        self._pairs = [(b"<!--", b"-->")] + [
            (b"<" + r.encode(), b"" if r == "plaintext" else b"</" + r.encode()) for r in sorted(raw)
        ]

    def skipped_spans(self, data: bytes, lt: IntArray, heads: U64Array) -> tuple[IntArray, IntArray]:
        """Disjoint sorted spans of lowercase ``data`` covering every comment and raw-text body the scan
        could skip (rule 2); ``lt`` are the positions of its "<" and ``heads`` the 8 bytes from each."""
        n = len(data)
        spans: list[tuple[int, int]] = []
        for opener, closer in self._pairs:
            key = np.uint64(int.from_bytes(opener[:8], "little"))
            hits = lt[(heads & _MASKS[min(8, len(opener))]) == key].tolist()
            # Each opener's span runs to the next closer; the closer found last is reused while it is
            # still ahead, so a page of many openers and no closer is not searched to its end each time.
            closing = -1
            for at in hits:
                start = at + len(opener)
                if not data.startswith(opener, at):
                    continue  # an opener longer than 8 bytes that matched only its head
                if closing < start:
                    closing = n if not closer else data.find(closer, start)
                    closing = n if closing < 0 else closing
                spans.append((at, min(n, closing + len(closer))) if opener == b"<!--" else (start, closing))
                if closing >= n:
                    break
        merged: list[list[int]] = []
        for lo, hi in sorted(spans):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        bounds = np.array(merged, dtype=np.int64).reshape(-1, 2)
        return bounds[:, 0], bounds[:, 1]

    def _keys(self, data: bytes, at: U64Array, starts: IntArray, ends: IntArray) -> U64Array:
        """One key per name ``data[starts[i]:ends[i]]`` (rule 3); a flat name's key is a flat key."""
        lengths = ends - starts
        head = at.take(starts) & _MASKS.take(np.minimum(lengths, 8))
        keys: U64Array = head | (lengths.astype(np.uint64) << np.uint64(56))
        other = np.flatnonzero((lengths > _SHORT) | ((head & _HIGH_BITS) != 0))
        if len(other):
            ids: dict[str, int] = {}
            spans = zip(starts[other].tolist(), ends[other].tolist(), strict=True)
            # A span is whole characters (it starts and ends at ASCII bytes): the decode is exact.
            texts = [data[s:e].decode("utf-8", "surrogatepass") for s, e in spans]
            names = [m.group().lower() if (m := _NAME.match(t)) else t for t in texts]
            keys[other] = [(1 << 63) + ids.setdefault(name, len(ids)) for name in names]
            flat = np.array([name in self._flat for name in names], dtype=np.bool_)
            keys[other[flat]] = self._flat_keys[0]
        return keys

    def may_exceed(self, html: str, limit: int) -> bool:
        """False only if the scan's count of open elements stays at or below ``limit`` through ``html``."""
        data = html.encode("utf-8", "surrogatepass").lower()
        n = len(data)
        raw = np.frombuffer(data + _PAD, dtype=np.uint8)
        at = np.ndarray((n + 8,), dtype="<u8", buffer=data + _PAD, strides=(1,))
        delimiters = np.append(np.flatnonzero(np.frombuffer(data.translate(_DELIMITER), dtype=np.bool_)), n)
        lt = np.flatnonzero(raw[:n] == ord("<"))
        after = raw.take(lt + 1)
        letter = (after | 32) - ord("a") < 26
        end = (after == ord("/")) & ((raw.take(lt + 2) | 32) - ord("a") < 26)
        # Rule 2: an end tag counts only if no "<" lies in the run of name bytes before it and that run
        # does not follow a "</", and it is outside every span the scan could skip.
        before = np.searchsorted(delimiters, lt) - 1
        run_start = np.where(before >= 0, delimiters.take(np.maximum(before, 0)) + 1, 0)
        previous_lt = np.concatenate(([-1], lt[:-1]))
        after_end_tag = (run_start >= 2) & (run_start < lt)
        after_end_tag &= raw.take(np.maximum(run_start - 1, 0)) == ord("/")
        after_end_tag &= raw.take(np.maximum(run_start - 2, 0)) == ord("<")
        end &= (previous_lt < run_start) & ~after_end_tag
        span_lo, span_hi = self.skipped_spans(data, lt, at.take(lt))
        if len(span_lo):
            inside = np.searchsorted(span_lo, lt, side="right") - 1
            end &= ~((inside >= 0) & (lt < span_hi.take(np.maximum(inside, 0))))
        tags = np.flatnonzero(letter | end)
        if len(tags) <= limit:
            return False
        is_end = end[tags]
        name_start = lt[tags] + 1 + is_end
        keys = self._keys(data, at, name_start, delimiters.take(np.searchsorted(delimiters, name_start)))
        counted = ~np.isin(keys, self._flat_keys)
        keys, step = keys[counted], np.where(is_end[counted], -1, 1)
        if len(keys) <= limit:
            return False
        # Per name, in document order: c = max(0, c + step) is S - min(0, running min of S), S the sums.
        order = np.argsort(keys, kind="stable")
        grouped, steps = keys[order], step[order]
        new_group = np.concatenate(([True], grouped[1:] != grouped[:-1]))
        first = np.flatnonzero(new_group)
        group = np.cumsum(new_group) - 1
        sums = np.cumsum(steps)
        local = sums - (sums - steps)[first][group]
        shift = (2 * len(grouped) + 2) * group  # later groups lower: the running min restarts in each
        counts = local - np.minimum(np.minimum.accumulate(local - shift) + shift, 0)
        previous = np.concatenate(([0], counts[:-1]))
        previous[first] = 0
        delta = np.empty_like(counts)
        delta[order] = counts - previous
        return bool(np.cumsum(delta).max() > limit)
