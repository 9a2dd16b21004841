"""URLs waiting for their owner: one outbox per peer, persisted in LMDB until the peer acknowledges.

Rules:
1. ``put`` stages URLs in memory; they are sealed into numbered batches (per peer, increasing ``seq``)
   when a peer has ``batch_urls`` staged, and all at once by :meth:`commit`.
2. The node commits the outbox in its checkpoint after the store flush and *before* the frontier commit,
   so a page is never recorded done while the URLs it discovered for other owners could be lost: a crash
   in between re-fetches the page and stages its URLs again (the owner's seen-set absorbs the repeat).
3. A batch leaves the outbox only through :meth:`ack`, called when its receiver answered that the URLs
   are committed in its own frontier (at-least-once delivery).
4. Not thread-safe: one event-loop thread, like the frontier.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from pathlib import Path

import lmdb

from polecat.cluster.batch import HandoffUrl, encode_urls
from polecat.errors import FrontierError

_KEY = struct.Struct(">Q")
_COUNT = struct.Struct(">I")


def _key(peer: str, seq: int) -> bytes:
    return peer.encode() + b"\0" + _KEY.pack(seq)


class Outbox:
    """Per-peer batches in their own LMDB environment (``DIR/handoff``)."""

    def __init__(self, path: Path, *, batch_urls: int = 1024, map_size: int = 4 * 1024**3) -> None:
        path.mkdir(parents=True, exist_ok=True)
        try:
            self._env = lmdb.open(str(path), map_size=map_size, max_dbs=2, subdir=True, sync=True,
                                  metasync=False, readahead=False)
        except lmdb.Error as exc:
            raise FrontierError(f"cannot open hand-off outbox in {path}: {exc}") from exc
        self._batches = self._env.open_db(b"batches")
        self._txn: lmdb.Transaction = self._env.begin(write=True)
        self._batch_urls = batch_urls
        self._staged: dict[str, list[HandoffUrl]] = defaultdict(list)
        self._next_seq: dict[str, int] = {}
        self._pending: dict[str, dict[int, int]] = defaultdict(dict)
        """peer -> seq -> URL count of each sealed, unacknowledged batch."""
        for raw_key, raw in self._txn.cursor(db=self._batches):
            key = bytes(raw_key)
            peer, seq = key[: -_KEY.size - 1].decode(), _KEY.unpack(key[-_KEY.size :])[0]
            self._pending[peer][seq] = _COUNT.unpack_from(raw)[0]
            self._next_seq[peer] = seq + 1

    def put(self, peer: str, urls: list[HandoffUrl]) -> list[int]:
        """Stage ``urls`` for ``peer``; returns the seqs of the full batches this sealed (rule 1)."""
        staged = self._staged[peer]
        staged.extend(urls)
        return self._seal(peer, full_only=True) if len(staged) >= self._batch_urls else []

    def _seal(self, peer: str, *, full_only: bool) -> list[int]:
        staged = self._staged.pop(peer, [])
        size = self._batch_urls
        cut = len(staged) - len(staged) % size if full_only else len(staged)
        if cut < len(staged):
            self._staged[peer] = staged[cut:]
        seqs = []
        for start in range(0, cut, size):
            chunk = staged[start : min(start + size, cut)]
            seq = self._next_seq.get(peer, 1)
            self._next_seq[peer] = seq + 1
            self._txn.put(_key(peer, seq), _COUNT.pack(len(chunk)) + encode_urls(chunk), db=self._batches)
            self._pending[peer][seq] = len(chunk)
            seqs.append(seq)
        return seqs

    def peers(self) -> set[str]:
        """Peers with URLs staged or batches unacknowledged."""
        return {p for p, urls in self._staged.items() if urls} | {p for p, b in self._pending.items() if b}

    def take_staged(self, peer: str) -> list[HandoffUrl]:
        """Remove and return the URLs staged (not yet sealed) for ``peer``."""
        return self._staged.pop(peer, [])

    def seal_all(self) -> list[tuple[str, int]]:
        """Seal every staged URL into batches; returns the new ``(peer, seq)`` pairs."""
        return [(peer, seq) for peer in list(self._staged) for seq in self._seal(peer, full_only=False)]

    def commit(self) -> list[tuple[str, int]]:
        """Seal everything staged and make the outbox durable (rule 2); returns the new batches."""
        sealed = self.seal_all()
        try:
            self._txn.commit()
        except lmdb.MapFullError as exc:
            raise FrontierError("hand-off outbox is full: a peer has not acknowledged for too long") from exc
        self._txn = self._env.begin(write=True)
        return sealed

    def read(self, peer: str, seq: int) -> bytes:
        """The msgpack URL list of a sealed batch (framed by :func:`~polecat.cluster.batch.encode_batch`)."""
        raw = self._txn.get(_key(peer, seq), db=self._batches)
        if raw is None:
            raise KeyError((peer, seq))
        return bytes(raw[_COUNT.size :])

    def ack(self, peer: str, seq: int) -> int:
        """Drop an acknowledged batch (rule 3); returns its URL count (0 if it was already gone)."""
        self._txn.delete(_key(peer, seq), db=self._batches)
        return self._pending[peer].pop(seq, 0)

    def pending(self) -> dict[str, list[int]]:
        """Sealed, unacknowledged batch seqs per peer, oldest first."""
        return {peer: sorted(seqs) for peer, seqs in self._pending.items() if seqs}

    def backlog(self) -> int:
        """URLs not yet acknowledged, over all peers (staged and sealed)."""
        return sum(len(s) for s in self._staged.values()) + sum(
            sum(b.values()) for b in self._pending.values())

    def close(self) -> None:
        """Close, dropping what is uncommitted (the frontier replays it, rule 2)."""
        self._txn.abort()
        self._env.close()
