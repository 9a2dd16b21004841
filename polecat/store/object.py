"""Sealed segments in object storage (obstore): ship whole, read back by byte range.

The backend comes from the store URL (``file://``, ``s3://bucket/prefix``, ``gs://``, ``az://`` ...);
``StoreConfig.options`` carries the backend's settings as key/value strings. Keys that obstore's HTTP
client takes (``allow_http``, ``timeout``, ``proxy_url``...) go to the client; the rest (``endpoint``,
``region``, ``access_key_id``, ``secret_access_key``...) to the store builder, which rejects unknown keys.

Shipping runs in one background thread so that the event loop never waits on an upload. A segment is
marked remote in the index only after the upload is confirmed (size checked with a HEAD); its local
file is deleted after that commit, so a crash at any point leaves the segment readable somewhere.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import obstore
import obstore.store

from polecat.errors import NotFound, StorageFault, StoreError
from polecat.store.index import Locator

log = logging.getLogger(__name__)

_CLIENT_KEYS = frozenset({
    "allow_http", "allow_invalid_certificates", "connect_timeout", "default_content_type",
    "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url", "proxy_ca_certificate", "proxy_excludes",
    "root_certificate", "randomize_addresses", "read_timeout", "timeout", "user_agent",
})
_BOOL_KEYS = frozenset({"allow_http", "allow_invalid_certificates", "randomize_addresses"})


def make_object_store(url: str, options: tuple[tuple[str, str], ...]) -> Any:
    """Build the obstore backend for ``url``; raise StoreError naming the problem."""
    config: dict[str, str] = {}
    client: dict[str, Any] = {}
    for key, value in options:
        if key in _BOOL_KEYS:
            client[key] = value.strip().lower() in ("1", "true", "yes")
        elif key in _CLIENT_KEYS:
            client[key] = value
        else:
            config[key] = value
    try:
        if url.startswith("file://"):
            if config or client:
                raise StoreError(f"store.options: a file:// store takes no options, got {sorted(config)}")
            return obstore.store.from_url(url, mkdir=True)
        settings: Any = config or None  # obstore types these per backend; the builder validates keys
        client_settings: Any = client or None
        return obstore.store.from_url(url, config=settings, client_options=client_settings)
    except (ValueError, OSError, obstore.exceptions.BaseError) as exc:
        raise StoreError(f"store.url {url!r}: {exc}") from exc


def read_range(store: Any, name: str, loc: Locator) -> bytes:
    """One frame of a remote segment, by ranged GET."""
    try:
        return bytes(obstore.get_range(store, name, start=loc.offset, length=loc.length))
    except FileNotFoundError as exc:
        raise NotFound(f"segment {name} is not in object storage") from exc
    except (OSError, obstore.exceptions.BaseError) as exc:
        err = StoreError(f"ranged read of {name} failed: {exc}")
        err.retryable = True
        raise err from exc


class Shipper:
    """Uploads sealed segments in a background thread; ``on_shipped(seg)`` runs after each upload."""

    def __init__(self, store: Any, on_shipped: Callable[[int], None]) -> None:
        self._store = store
        self._on_shipped = on_shipped
        self._queue: queue.Queue[tuple[int, Path, str] | None] = queue.Queue()
        self._mu = threading.Lock()
        self._failed: list[tuple[int, Path, str]] = []
        """Uploads that failed, for :meth:`retry_failed`."""
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="polecat-store-shipper", daemon=True)
        self._thread.start()

    def ship(self, seg: int, path: Path, name: str) -> None:
        self._queue.put((seg, path, name))

    def retry_failed(self) -> int:
        """Queue again the uploads that failed (a checkpoint round waits for them:
        polecat/cluster/failover.py rule 7); returns how many."""
        with self._mu:
            jobs, self._failed = self._failed, []
        for job in jobs:
            self._queue.put(job)
        return len(jobs)

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            seg, path, name = job
            try:
                obstore.put(self._store, name, path)
                size = obstore.head(self._store, name)["size"]
                if size != path.stat().st_size:
                    raise StoreError(f"uploaded {name} has {size} bytes, local {path.stat().st_size}")
                self._on_shipped(seg)
            except (OSError, StoreError, StorageFault, obstore.exceptions.BaseError) as exc:
                # The segment stays local and sealed; the next seal or open of the store retries it.
                self.failures += 1
                with self._mu:
                    self._failed.append(job)
                log.warning("shipping segment %s failed: %s", name, exc)

    def close(self) -> None:
        """Finish the queued uploads, then stop the thread."""
        self._queue.put(None)
        self._thread.join()
