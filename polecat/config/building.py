"""Building the one :class:`~polecat.config.sections.Config` from plain data: a parsed TOML document, CLI
overrides, a library caller's mapping. Every value is coerced to its field's type or refused with the field
named; unknown and renamed keys are caught here."""

from __future__ import annotations

import dataclasses
import logging
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from polecat.config.sections import SECTIONS, Config
from polecat.errors import ConfigError


def _coerce(name: str, hint: Any, value: Any) -> Any:
    """Convert a TOML/CLI value to the annotated type, or raise ConfigError naming the field."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(name, inner[0], value)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{name}: must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if origin is tuple:
        if isinstance(value, Mapping) and len(args) == 2 and args[1] is Ellipsis:
            value = list(value.items())
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(f"{name}[{i}]", args[0], v) for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"{name}: expected {len(args)} items, got {value!r}")
        return tuple(_coerce(f"{name}[{i}]", a, v) for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name}: expected a string, got {value!r}")
        return value
    if hint is Path:
        if not isinstance(value, str | Path):
            raise ConfigError(f"{name}: expected a path, got {value!r}")
        if value == "":  # Path("") is the current directory: never what an empty setting meant
            raise ConfigError(f"{name}: an empty path (give . for the current directory)")
        return Path(value)
    raise ConfigError(f"{name}: unsupported type {hint!r}")  # pragma: no cover - schema bug


def _near_duplicates(value: Any) -> Any:
    # false was the old default, which dropped near-duplicate bodies: an old setting must not make a
    # crawl lossy now, so it becomes the lossless delta.
    return {True: "full", False: "delta"}.get(value, value) if isinstance(value, bool) else value


_RENAMED: dict[str, tuple[str, Callable[[Any], Any], str]] = {
    "dedup.simhash_distance": ("dedup.minhash_distance", lambda v: v, "same meaning"),
    "dedup.store_near_duplicates": ("dedup.near_duplicates", _near_duplicates,
                                    'true is "full"; false is now "delta"'),
}
"""Old setting name -> (new name, how its value reads there, what the log says). An old name still
works, with a deprecation warning in the log; giving both is an error. (``simhash_distance``: the page
fingerprint has been a MinHash since before 0.1; ``store_near_duplicates``: polecat/store/delta.py.)"""


def _renamed(prefix: str, data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` with deprecated names of section ``prefix`` replaced by their new names."""
    out = dict(data)
    for key in data:
        if (renamed := _RENAMED.get(prefix + key)) is None:
            continue
        new, convert, meaning = renamed
        new_key = new.removeprefix(prefix)
        if new_key in data:
            raise ConfigError(f"{prefix}{key}: deprecated name of {new}, which is also set; keep only {new}")
        logging.getLogger(__name__).warning("%s%s is deprecated: use %s (%s)", prefix, key, new, meaning)
        out[new_key] = convert(out.pop(key))
    return out


def _build(cls: type[Any], prefix: str, data: Mapping[str, Any]) -> Any:
    data = _renamed(prefix, data)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown setting (known: {', '.join(sorted(names))})")
    if prefix == "cluster." and isinstance(data.get("etcd"), str):  # one string: comma-separated
        data = {**data, "etcd": [e.strip() for e in data["etcd"].split(",") if e.strip()]}
    kwargs = {k: _coerce(f"{prefix}{k}", hints[k], v) for k, v in data.items()}
    return cls(**kwargs)


def config_from_mapping(data: Mapping[str, Any]) -> Config:
    """Build and validate a Config from nested plain data (a parsed TOML document, CLI overrides)."""
    top: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS:
            if not isinstance(value, Mapping):
                raise ConfigError(f"[{key}]: expected a table")
            top[key] = _build(SECTIONS[key], f"{key}.", value)
        elif key in ("data_dir", "progress", "workers"):
            value = 0 if key == "workers" and value == "auto" else value
            top[key] = _coerce(key, typing.get_type_hints(Config)[key], value)
        else:
            known = ", ".join(sorted([*SECTIONS, "data_dir", "progress", "workers"]))
            raise ConfigError(f"{key}: unknown setting (known: {known})")
    return Config(**top)


def load_toml(path: Path) -> dict[str, Any]:
    """Read a TOML config file into plain data, with a clear error on a bad file."""
    import tomllib  # only a run with a config file pays for it (~6 ms)

    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:  # TOML must be UTF-8
        raise ConfigError(f"config file {path}: {exc}") from exc


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two config mappings; ``over`` wins (CLI flags over the TOML file)."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out
