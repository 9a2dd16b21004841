"""A crawl's settings, saved in its data dir so that resuming it needs no flags.

Rules:

1. ``polecat crawl`` saves the settings a run starts with in ``DIR/settings.json`` (plain data in the
   shape of :func:`polecat.config.config_from_mapping`), written atomically before the crawl starts.
   Seeds are not saved (the frontier keeps them), nor what shapes one run only (``max_pages``,
   ``--refresh``), the data dir or the progress switch.
2. A later run on the same dir starts from the saved settings; the ``--config`` file goes over them and
   flags over that. ``polecat crawl --data DIR`` with no URL therefore resumes the crawl as it was.
3. What a run changes is saved and listed (:func:`changes`) so the user sees it. A change that can fail
   or drop queued work comes with what it does to that work (:data:`CONSEQUENCES`); the CLI warns.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from polecat.errors import ConfigError

FILENAME = "settings.json"
UNSAVED_TOP = frozenset({"data_dir", "progress"})
UNSAVED_FIELDS = frozenset({"scope.seeds", "scope.seeds_file", "scope.max_pages", "refresh.enabled",
                            "fetch.proxy"})
"""Seeds live in the frontier (a seeds file is read by the run it is given to);
``max_pages`` bounds one run, and so does ``--refresh`` (a later plain
resume must not re-crawl what is due); a proxy may carry credentials, which a data dir must not keep."""

CONSEQUENCES = {
    "dns.allow_private": "queued URLs on private or loopback addresses will be given up",
    "scope.block": "queued URLs of newly blocked hosts are dropped (recorded as blocked)",
    "scope.max_depth": "queued URLs beyond the new depth stay queued and are still fetched",
    "dedup.keep_query_order": "URLs of these hosts are keyed anew: some may be fetched a second time",
    "fetch.user_agent": "robots.txt rules for the new user agent apply from the next robots.txt fetch",
    "workers": "slices move to their new owners (export/adopt) before anything is fetched",
}


def savable(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """``mapping`` without what rule 1 leaves out."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if key in UNSAVED_TOP:
            continue
        if isinstance(value, Mapping):
            section = {k: v for k, v in value.items() if f"{key}.{k}" not in UNSAVED_FIELDS}
            if section:
                out[key] = section
        else:
            out[key] = value
    return out


def load(data_dir: Path) -> dict[str, Any]:
    """The saved settings of the crawl in ``data_dir`` ({} when there are none)."""
    path = data_dir / FILENAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read saved crawl settings: {exc} (fix or delete it)") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: saved crawl settings are not a JSON object (fix or delete the file)")
    return data


def save(data_dir: Path, mapping: Mapping[str, Any]) -> None:
    """Write ``mapping`` (already :func:`savable`) atomically as the crawl's saved settings."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / FILENAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(mapping, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _flat(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


def changes(saved: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(field, saved value, new value)`` for every field a run changes (None: not set)."""
    old_flat, new_flat = _flat(saved), _flat(new)
    return [(k, old_flat.get(k), new_flat.get(k)) for k in sorted(set(old_flat) | set(new_flat))
            if _norm(old_flat.get(k)) != _norm(new_flat.get(k))]


def _norm(value: Any) -> Any:
    return json.loads(json.dumps(value)) if value is not None else None
