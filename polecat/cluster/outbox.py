"""URLs waiting for their owner: one outbox per peer, persisted in LMDB until the peer acknowledges.

Rules:
1. ``put`` stages URLs in memory; they are sealed into numbered batches (per peer, increasing ``seq``)
   when a peer has ``batch_urls`` staged, and all at once by :meth:`commit`.
2. The node commits the outbox in its own commit after the store flush and *before* the frontier commit,
   so a page is never recorded done while the URLs it discovered for other owners could be lost: a crash
   in between re-fetches the page and stages its URLs again (the owner's seen-set absorbs the repeat).
3. A batch leaves the outbox only through :meth:`ack`, called when its receiver answered that the URLs
   are committed in its own frontier (at-least-once delivery), or, when the receiver named a checkpoint
   round in its answer (a cluster with slice checkpoints), through :meth:`hold` then :meth:`release`
   once the receiver's checkpoint reached that round: until then the batch is *held* (delivered, not
   sent again, kept in case the receiver dies with its disk) and :meth:`take_held` gives its URLs back
   to be routed to the receiver's heirs.
4. Not thread-safe: one event-loop thread, like the frontier. The commit's fsync runs on the outbox's own
   writer thread (polecat/frontier/writer.py, :meth:`Outbox.start_commit`); a call that touches the
   transaction meanwhile waits for it.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import lmdb

from polecat.cluster.batch import HandoffUrl, decode_urls, encode_urls
from polecat.errors import FrontierError
from polecat.frontier.writer import TxnWriter

_KEY = struct.Struct(">Q")
_COUNT = struct.Struct(">I")
_ROUND = struct.Struct(">Q")


def _key(peer: str, seq: int) -> bytes:
    return peer.encode() + b"\0" + _KEY.pack(seq)


def _split(key: bytes) -> tuple[str, int]:
    return key[: -_KEY.size - 1].decode(), _KEY.unpack(key[-_KEY.size :])[0]


class Outbox:
    """Per-peer batches in their own LMDB environment (``DIR/handoff``)."""

    def __init__(self, path: Path, *, batch_urls: int = 1024, map_size: int = 4 * 1024**3) -> None:
        path.mkdir(parents=True, exist_ok=True)
        try:
            self._env = lmdb.open(str(path), map_size=map_size, max_dbs=3, subdir=True, sync=True,
                                  metasync=False, readahead=False)
        except lmdb.Error as exc:
            raise FrontierError(f"cannot open hand-off outbox in {path}: {exc}") from exc
        self._batches = self._env.open_db(b"batches")
        self._held_db = self._env.open_db(b"held")
        """Batch key -> the receiver's checkpoint round that must hold it before it is dropped (rule 3)."""
        self._writer = TxnWriter(self._env, "polecat-outbox-writer")
        self._sealed: list[tuple[str, int]] = []
        """Batches sealed for the commit in flight (:meth:`start_commit`)."""
        self._batch_urls = batch_urls
        self._staged: dict[str, list[HandoffUrl]] = defaultdict(list)
        self._next_seq: dict[str, int] = {}
        self._pending: dict[str, dict[int, int]] = defaultdict(dict)
        """peer -> seq -> URL count of each sealed, unacknowledged batch."""
        self._held: dict[str, dict[int, int]] = defaultdict(dict)
        """peer -> seq -> the checkpoint round each held batch waits for (rule 3)."""
        for raw_key, raw in self._txn.cursor(db=self._held_db):
            peer, seq = _split(bytes(raw_key))
            self._held[peer][seq] = _ROUND.unpack(raw)[0]
        for raw_key, raw in self._txn.cursor(db=self._batches):
            peer, seq = _split(bytes(raw_key))
            if seq not in self._held[peer]:
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
        """Peers with URLs staged, batches unacknowledged or batches held."""
        return ({p for p, urls in self._staged.items() if urls} | {p for p, b in self._pending.items() if b}
                | self.held_peers())

    def held_peers(self) -> set[str]:
        """Peers with batches held until their checkpoint (rule 3)."""
        return {p for p, b in self._held.items() if b}

    def take_staged(self, peer: str) -> list[HandoffUrl]:
        """Remove and return the URLs staged (not yet sealed) for ``peer``."""
        return self._staged.pop(peer, [])

    def seal_all(self) -> list[tuple[str, int]]:
        """Seal every staged URL into batches; returns the new ``(peer, seq)`` pairs."""
        return [(peer, seq) for peer in list(self._staged) for seq in self._seal(peer, full_only=False)]

    @property
    def _txn(self) -> lmdb.Transaction:
        return self._writer.txn

    def commit(self) -> list[tuple[str, int]]:
        """Seal everything staged and make the outbox durable (rule 2); returns the new batches."""
        self.start_commit()
        return self.finish_commit()

    def start_commit(self) -> Future[lmdb.Transaction]:
        """:meth:`commit` on the writer thread: seals, starts the commit and returns at once;
        :meth:`finish_commit` ends it."""
        self._sealed += self.seal_all()
        return self._writer.start_commit()

    def finish_commit(self) -> list[tuple[str, int]]:
        """Wait for the commit :meth:`start_commit` started; returns the batches it sealed."""
        try:
            self._writer.finish_commit()
        except lmdb.MapFullError as exc:
            raise FrontierError("hand-off outbox is full: a peer has not acknowledged for too long") from exc
        sealed, self._sealed = self._sealed, []
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

    def hold(self, peer: str, seq: int, round_: int) -> int:
        """The receiver committed the batch and will checkpoint it in ``round_``: keep it until then
        (rule 3). Returns its URL count (0 if it was not pending)."""
        count = self._pending[peer].pop(seq, 0)
        if count:
            self._txn.put(_key(peer, seq), _ROUND.pack(round_), db=self._held_db)
            self._held[peer][seq] = round_
        return count

    def release(self, peer: str, round_: int) -> int:
        """``peer``'s checkpoint reached ``round_``: drop the held batches it holds (rule 3); returns
        how many."""
        done = [seq for seq, r in self._held[peer].items() if r <= round_]
        for seq in done:
            self._drop_held(peer, seq)
        return len(done)

    def take_held(self, peer: str) -> list[HandoffUrl]:
        """Remove every batch held for ``peer`` and return its URLs (``peer`` died before its
        checkpoint held them: they go to its heirs)."""
        urls: list[HandoffUrl] = []
        for seq in sorted(self._held[peer]):
            urls += decode_urls(self.read(peer, seq))
            self._drop_held(peer, seq)
        return urls

    def _drop_held(self, peer: str, seq: int) -> None:
        del self._held[peer][seq]
        self._txn.delete(_key(peer, seq), db=self._held_db)
        self._txn.delete(_key(peer, seq), db=self._batches)

    def pending(self) -> dict[str, list[int]]:
        """Sealed, unacknowledged batch seqs per peer, oldest first."""
        return {peer: sorted(seqs) for peer, seqs in self._pending.items() if seqs}

    def backlog(self, peers: Callable[[str], bool] = lambda _: True) -> int:
        """URLs not yet acknowledged (staged and sealed), over the peers that ``peers`` keeps (all by
        default)."""
        return sum(len(s) for p, s in self._staged.items() if peers(p)) + sum(
            sum(b.values()) for p, b in self._pending.items() if peers(p))

    def close(self) -> None:
        """Close, dropping what is uncommitted (the frontier replays it, rule 2)."""
        try:
            self._writer.close()
        finally:
            self._env.close()
