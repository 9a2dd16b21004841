"""Where a ``--workers N`` crawl keeps its state, and how readers find every worker's part of it.

Rules:
1. A one-process crawl is a node data dir: ``DATA/frontier``, ``DATA/seen.bloom``, ``DATA/store``.
2. A ``--workers N`` crawl writes ``DATA/workers.json`` (``{"workers": N}``) and gives worker ``k``
   (member id ``w<k>``) a whole node data dir of its own, ``DATA/workers/<k>/``, plus its hand-off outbox
   ``DATA/workers/<k>/handoff``. A page is stored by the worker that fetched it.
3. Readers (``status``, ``pages``, ``cat``, ``store ...``) take ``DATA`` either way and read every node
   dir (:func:`node_dirs`), so they see the whole crawl whichever worker fetched a page.
4. A run with another count (or a ``--workers`` run on a one-process crawl) first moves slices to
   their new owners (polecat/cluster/resize.py); once a crawl has the workers layout it keeps it, also
   with one worker.
5. Sizing: worker ``k`` of ``N`` sizes a new seen-set Bloom filter for its share of
   ``dedup.expected_urls`` (:func:`share`, at least ``MIN_EXPECTED_URLS``), not for the whole crawl.
   A saved filter keeps the sizing it was made with (polecat/dedup/seen.py), so after a resize a
   worker that adopted more than its old share grows it by layers (polecat/dedup/bloom.py: each twice
   the last, the false-positive rate stays under 6.7x the configured one), and one that gave slices
   away keeps their bits (a few more false positives, each costing one LMDB lookup, never a wrong
   answer); a worker new in the layout, or one whose filter is rebuilt, gets its share of the new count
   (or its entry count, if larger).
6. ``workers.json`` also names the Ring version the slices are placed by (``"ring"``; absent: 1). A
   layout of another version is resized to the current one like a change of count (ring rule 4).
7. One collection: readers take several dirs (the nodes of a cluster, a dead node's dir kept aside) and
   read them as one crawl (:func:`collection_dirs`). Each is a crawl data dir (rule 3: its node dirs) or,
   when it holds no crawl itself, a parent of crawl data dirs (a cluster's nodes side by side), each
   child read as a crawl data dir. A node dir named twice (directly and through its parent) is read once.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path

from polecat.cluster.ring import RING_VERSION
from polecat.config import Config
from polecat.errors import ConfigError

LAYOUT_FILE = "workers.json"
MIN_EXPECTED_URLS = 1000
"""The least ``dedup.expected_urls`` the configuration accepts (polecat/config/validation.py)."""


def worker_dir(data: Path, index: int) -> Path:
    return data / "workers" / str(index)


def recorded_workers(data: Path) -> int | None:
    """N of a ``--workers N`` crawl in ``data``; None for a one-process crawl or an empty dir."""
    try:
        return int(json.loads((data / LAYOUT_FILE).read_text())["workers"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--data: {data / LAYOUT_FILE} is unreadable: {exc}") from exc


def recorded_ring(data: Path) -> int:
    """The Ring version of the workers layout in ``data`` (rule 6; 1 when the file predates it)."""
    try:
        return int(json.loads((data / LAYOUT_FILE).read_text()).get("ring", 1))
    except FileNotFoundError:
        return RING_VERSION
    except (ValueError, AttributeError, TypeError) as exc:
        raise ConfigError(f"--data: {data / LAYOUT_FILE} is unreadable: {exc}") from exc


def node_dirs(data: Path) -> list[Path]:
    """Every node data dir of the crawl in ``data`` (rule 3), including those of workers a smaller
    count left behind (their stores still hold pages)."""
    if recorded_workers(data) is None:
        return [data]
    found = [p for p in (data / "workers").iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(found, key=lambda p: int(p.name))


def is_crawl_dir(path: Path) -> bool:
    """Whether ``path`` holds a crawl (rules 1 and 2) rather than being a parent of crawls (rule 7)."""
    return any((path / name).exists() for name in (LAYOUT_FILE, "store", "frontier"))


def collection_dirs(dirs: Sequence[Path]) -> list[Path]:
    """Every node data dir of the crawls in ``dirs``, in order, each once (rule 7). A dir that is neither
    a crawl nor a parent of crawls is kept as given, so that its reader says what is missing there."""
    found: dict[Path, Path] = {}
    for d in dirs:
        children = [] if is_crawl_dir(d) or not d.is_dir() else \
            sorted(c for c in d.iterdir() if c.is_dir() and is_crawl_dir(c))
        for crawl in children or [d]:
            for node in node_dirs(crawl):
                found.setdefault(node.resolve(), node)
    return list(found.values())


def worker_config(cfg: Config, index: int, workers: int) -> Config:
    """The configuration of worker ``index`` of ``workers`` for the crawl ``cfg`` describes: its own data
    dir, one process, no terminal progress of its own, its share of the seen-set sizing (rule 5)."""
    dedup = dataclasses.replace(cfg.dedup, expected_urls=max(MIN_EXPECTED_URLS, share(
        cfg.dedup.expected_urls, workers, index)))
    return dataclasses.replace(cfg, data_dir=worker_dir(cfg.data_dir, index), workers=1, progress=False,
                               dedup=dedup)


def share(total: int, n: int, k: int) -> int:
    """Worker ``k``'s part of ``total`` split over ``n`` (the parts add up to ``total``); at least 1,
    as a worker with nothing would have no limit at all."""
    return max(1, total // n + (1 if k < total % n else 0))


def resolve_workers(cfg: Config) -> int:
    """``cfg.workers``, with 0 ("auto") as the number of cores."""
    return cfg.workers or os.cpu_count() or 1


def uses_workers(data: Path, workers: int) -> bool:
    """Whether the crawl in ``data`` runs under the parent supervisor (rule 4)."""
    return workers > 1 or recorded_workers(data) is not None


def needs_resize(data: Path, workers: int) -> bool:
    """Whether slices must move before ``workers`` workers may start (rule 4; an interrupted resize
    left its journal)."""
    had = recorded_workers(data)
    if (data / "resize.json").exists():
        return True
    if had is None:
        return (data / "frontier").exists()
    return had != workers or recorded_ring(data) != RING_VERSION


def record_layout(data: Path, workers: int) -> None:
    (data / "workers").mkdir(parents=True, exist_ok=True)
    (data / LAYOUT_FILE).write_text(json.dumps({"workers": workers, "ring": RING_VERSION}))
