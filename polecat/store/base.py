"""The page store's contract: records, the ``PageStore`` protocol, and how to open one.

A page body is addressed by its content hash: SHA-256 in every store made now (:data:`HASH_NAME`),
which is also the WARC payload digest, so a page is hashed once; stores made before 2026-12 keep
BLAKE2b-256, the hash they were made with (their index records it, ``PageStore.hash_name``). Every fetch
appends one :class:`FetchRecord` to the store's log (the URL's fetch history); a body is written at most
once per hash, so storing is idempotent and a crawler that fetches at least once stores exactly once.

Durability contract (what the node relies on): ``put`` may buffer; after ``flush`` returns, everything
put so far is durable on disk *and* indexed. The node flushes the store before it commits the frontier,
so a crash never leaves the frontier claiming a page that the store lost.

Threads: one thread calls ``put``, ``get``, ``has``, ``history`` and ``records`` (the event loop);
``flush`` may run in another (``await asyncio.to_thread(store.flush)``) so its fsyncs do not stall the
loop; puts made while it runs go to the next flush.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

SHA256 = "sha256"
"""The name of SHA-256 among :data:`HASHES`: a store hashing with it takes the address as the WARC payload
digest too."""
HASH_NAME = SHA256
"""The content-hash function of new stores, recorded in the index's meta table and checked at open.

SHA-256 rather than BLAKE2b because the WARC payload digest is SHA-256 anyway: one hash a page instead of
two (on x86 with SHA extensions SHA-256 is also the faster of the two; see benchmarks/README.md)."""

RecordKind = Literal["response", "revisit"]

SKIPPED_HEADER = "X-Polecat-Skipped"
"""Added to the headers of a fetch recorded without its body: why (``type``, ``noindex``)."""
OWN_HASH_HEADER = "X-Polecat-Own-Hash"
"""Added to the headers of a near-duplicate revisit: the hex hash of the body it received."""
REFERS_DATE_HEADER = "X-Polecat-Refers-To-Date"
"""Added to the headers of a revisit whose original another member's store holds (its claim's answer
named it, polecat/cluster/claims.py): the original's fetch time in unix seconds. A store that does not
hold the original writes it as ``WARC-Refers-To-Date`` (and keeps it out of the record's headers)."""


def _sha256(body: bytes) -> bytes:
    return hashlib.sha256(body).digest()


def _blake2b_256(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=32).digest()


HASHES: dict[str, Callable[[bytes], bytes]] = {SHA256: _sha256, "blake2b-256": _blake2b_256}
"""Every content hash a store may be made with, by the name its index records: 32-byte digests."""


def hasher(name: str) -> Callable[[bytes], bytes]:
    """The content-hash function called ``name`` (ValueError for a name polecat does not know)."""
    try:
        return HASHES[name]
    except KeyError:
        raise ValueError(f"unknown content hash {name!r} (known: {', '.join(HASHES)})") from None


def content_hash(body: bytes, name: str = HASH_NAME) -> bytes:
    """The page's address: the 32-byte digest of the (decoded) body by the hash ``name``, SHA-256 unless
    the store was made with another (``PageStore.hash_name``)."""
    return hasher(name)(body)


@dataclass(frozen=True, slots=True)
class FetchRecord:
    """One fetch of one URL, as the store keeps it in the URL's history."""

    url: str
    fetched_at: float
    """Unix seconds."""
    status: int
    headers: tuple[tuple[str, str], ...]
    """Response headers as received (before the body was decoded)."""
    content_hash: bytes
    """Hash of the decoded body; for a revisit, the hash of the original it points to."""
    size: int
    """Body length in bytes."""
    truncated: bool = False
    """The body was cut at the size cap."""
    duplicate_of: str | None = None
    """For a near-duplicate or an unchanged refetch: the URL of the original."""
    kind: RecordKind = "response"
    """``response`` (body stored or already present) or ``revisit`` (no body: points at the original)."""

    def header(self, name: str) -> str | None:
        """The first value of the response header ``name`` (lower-case), or None."""
        return next((v for k, v in self.headers if k.lower() == name), None)

    @property
    def own_hash(self) -> bytes:
        """The hash of the body this fetch received: for a near-duplicate revisit the
        :data:`OWN_HASH_HEADER` the pipeline records (``content_hash`` is the original's), else
        ``content_hash``."""
        own = next((v for k, v in self.headers if k == OWN_HASH_HEADER), None)
        return bytes.fromhex(own) if own else self.content_hash

    @classmethod
    def for_body(cls, url: str, body: bytes, *, fetched_at: float, status: int = 200,
                 headers: tuple[tuple[str, str], ...] = (), truncated: bool = False,
                 hash_name: str = HASH_NAME) -> FetchRecord:
        """The record of a fetch that returned ``body`` (hash and size computed here, the hash by
        ``hash_name``: the store's)."""
        return cls(url=url, fetched_at=fetched_at, status=status, headers=headers,
                   content_hash=content_hash(body, hash_name), size=len(body), truncated=truncated)


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counters of a store (committed and pending together)."""

    records: int
    """Fetch records in the log."""
    bodies: int
    """Distinct bodies stored."""
    revisits: int
    """Records written without a body (revisits, identical bodies put again)."""
    raw_bytes: int
    """Uncompressed body bytes stored."""
    stored_bytes: int
    """Bytes appended to segments (compressed WARC records, bodies and revisits)."""
    segments: int
    sealed_segments: int
    remote_segments: int
    """Sealed segments shipped to object storage."""
    pending_records: int
    """Records put since the last flush."""


class PageStore(Protocol):
    """Content-addressed, append-only page storage. One writer per store; readers may be many."""

    @property
    def hash_name(self) -> str:
        """The content hash this store addresses bodies by (a key of :data:`HASHES`), fixed when it was
        made: writers compute ``record.content_hash`` with it."""
        ...

    def put(self, record: FetchRecord, body: bytes | None) -> bool:
        """Append a fetch record and, when its hash is new, its body.

        ``body`` None writes a revisit record pointing at ``record.content_hash``. A body whose hash
        is already stored writes no body bytes again; a small revisit record is still appended so the
        URL's history is complete. Returns True when new body bytes were written. The caller computes
        ``record.content_hash`` with :func:`content_hash` by :attr:`hash_name`; a SHA-256 store takes it
        as the body's WARC payload digest too (reads verify it).
        """
        ...

    def has(self, digest: bytes) -> bool:
        """Whether a body with this hash is stored (flushed or pending)."""
        ...

    def get(self, digest: bytes) -> bytes:
        """The body with this hash, verified; raises NotFound or CorruptRecord."""
        ...

    def history(self, url: str) -> list[FetchRecord]:
        """Every fetch record of ``url``, oldest first (empty when never fetched)."""
        ...

    def records(self) -> Iterator[FetchRecord]:
        """Every fetch record, in append order."""
        ...

    def records_since(self, seq: int) -> Iterator[FetchRecord]:
        """The fetch records from the ``seq``-th on (0-based, in append order)."""
        ...

    def record_count(self) -> int:
        """Fetch records in the log, flushed or pending: the next record's sequence number."""
        ...

    def flush(self) -> None:
        """Make everything put so far durable and indexed before returning."""
        ...

    def seal(self) -> None:
        """End the open segment (if it holds a record), so that the next :meth:`flush` ships it to object
        storage (``[store] url``), and upload again the sealed segments whose upload failed; a store
        without object storage keeps writing where it was."""
        ...

    def unshipped(self) -> int | None:
        """Sealed segments not yet confirmed in object storage (None: the store has none, so nothing it
        holds is readable once its disk is gone)."""
        ...

    def stats(self) -> StoreStats:
        """Current counters."""
        ...

    def close(self) -> None:
        """Flush, finish shipping sealed segments, release the store. Idempotent."""
        ...
