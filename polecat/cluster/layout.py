"""Where a ``--workers N`` crawl keeps its state, and how readers find every worker's part of it.

Rules:
1. A one-process crawl is a node data dir: ``DATA/frontier``, ``DATA/seen.bloom``, ``DATA/store``.
2. A ``--workers N`` crawl writes ``DATA/workers.json`` (``{"workers": N}``) and gives worker ``k``
   (member id ``w<k>``) a whole node data dir of its own, ``DATA/workers/<k>/``, plus its hand-off outbox
   ``DATA/workers/<k>/handoff``. A page is stored by the worker that fetched it.
3. Readers (``status``, ``pages``, ``cat``, ``store ...``) take ``DATA`` either way and read every node
   dir (:func:`node_dirs`), so they see the whole crawl whichever worker fetched a page.
4. The worker count is fixed for a data dir until re-assignment by export/adopt exists: a run with
   another count, or a ``--workers`` run on a one-process crawl, is refused with the command that works.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from polecat.config import Config
from polecat.errors import ConfigError

LAYOUT_FILE = "workers.json"


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


def node_dirs(data: Path) -> list[Path]:
    """Every node data dir of the crawl in ``data`` (rule 3)."""
    n = recorded_workers(data)
    return [data] if n is None else [worker_dir(data, k) for k in range(n)]


def resolve_workers(cfg: Config) -> int:
    """``cfg.workers``, with 0 ("auto") as the number of cores."""
    return cfg.workers or os.cpu_count() or 1


def check_layout(data: Path, workers: int) -> None:
    """Rule 4, before anything is created."""
    had = recorded_workers(data)
    if had is not None and had != workers:
        raise ConfigError(f"--workers: {data} holds a crawl run with --workers {had}; run it again with "
                          f"--workers {had} (changing the count between runs is not supported yet)")
    if had is None and workers > 1 and (data / "frontier").exists():
        raise ConfigError(f"--workers: {data} holds a one-process crawl; resume it without --workers, or "
                          "give a new --data for a --workers crawl")


def record_layout(data: Path, workers: int) -> None:
    (data / "workers").mkdir(parents=True, exist_ok=True)
    (data / LAYOUT_FILE).write_text(json.dumps({"workers": workers}))
