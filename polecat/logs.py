"""Logging for every polecat command and for the library's embedders.

Rules:

1. One call, :func:`configure`, sets up the ``polecat`` logger tree from a level, an optional file and a
   format (``text``: ``2026-12-01T02:33:04Z INFO polecat.fetch: message key=value``; ``json``: one object a
   line with ``ts``, ``level``, ``logger``, ``msg`` and the record's fields). Calling it again replaces
   the previous set-up, so tests and long-running services can reconfigure.
2. Structured fields travel as ``extra={"fields": {...}}`` (see :func:`fields`): the text format appends
   them as ``key=value``, the json format as keys, so a log line is both readable and machine-parsed.
3. What is logged where (the node follows this): ``info`` one line per failed request with host, URL and
   reason; ``debug`` one line per request with status, bytes and milliseconds; ``warning`` and above
   what an operator must act on.
4. A live progress line on the same terminal is cleared before a log line is written (the line is
   redrawn on its next tick), so the two never run into each other.
5. Processes a command starts (``--workers`` workers) log as it does: :func:`current` is the set-up the
   last :func:`configure` made, and a worker configures the same level, file and format with ``tag``
   fields on every record (``worker=w1``). Several processes share one file: it is opened for append
   and each record goes out in one ``write``, so their lines never cut into each other.
6. A message to the person at the terminal (:func:`say`) is best effort: a stop request or a progress
   tick never depends on stderr being writable (``polecat crawl ... 2>&1 | tee log``: tee dies at
   Ctrl-C before polecat does, and the write then fails with EPIPE).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

__all__ = ["LEVELS", "LogFormat", "LogSettings", "configure", "current", "fields", "level_from_flags", "say"]

LogFormat = Literal["text", "json"]
LEVELS = ("debug", "info", "warning", "error", "critical")

_CLEAR_LINE = "\r\x1b[K"
_HANDLER_TAG = "_polecat_handler"


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` for a log call carrying structured fields: ``log.info("...", extra=fields(url=u))``."""
    return {"fields": values}


def say(text: str, *, end: str = "\n") -> None:
    """Write ``text`` to stderr and flush, ignoring a stderr that is closed or cannot be written (rule 6)."""
    with contextlib.suppress(OSError, ValueError):  # EPIPE, EBADF; ValueError: the stream was closed
        print(text, end=end, file=sys.stderr, flush=True)


def _record_fields(record: logging.LogRecord) -> Mapping[str, Any]:
    found = getattr(record, "fields", None)
    return found if isinstance(found, Mapping) else {}


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class LogSettings:
    """What :func:`configure` was given (rule 5)."""

    level: int = logging.WARNING
    file: Path | None = None
    fmt: LogFormat = "text"
    tag: Mapping[str, str] = field(default_factory=dict)


_current = LogSettings()


def current() -> LogSettings:
    """The set-up of the last :func:`configure` call in this process (the defaults before any)."""
    return _current


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value ...``, then the ``tag`` fields."""

    def __init__(self, tag: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._tag = dict(tag or {})

    def format(self, record: logging.LogRecord) -> str:
        pairs = {**_record_fields(record), **self._tag}
        extra = " ".join(f"{k}={_text_value(v)}" for k, v in pairs.items())
        line = f"{_utc(record.created)} {record.levelname} {record.name}: {record.getMessage()}"
        if extra:
            line += " " + extra
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if not text or any(c.isspace() or c == '"' for c in text) else text


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts``, ``level``, ``logger``, ``msg``, the fields and ``tag``, ``exc`` if
    any."""

    def __init__(self, tag: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._tag = dict(tag or {})

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": _utc(record.created), "level": record.levelname.lower(),
                               "logger": record.name, "msg": record.getMessage(), **self._tag}
        for key, value in _record_fields(record).items():
            out.setdefault(key, value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class _TerminalHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that clears a progress line before writing (rule 4)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._clear = stream.isatty()

    def emit(self, record: logging.LogRecord) -> None:
        if self._clear:
            self.stream.write(_CLEAR_LINE)
        super().emit(record)


class _AppendHandler(logging.Handler):
    """Appends each record to a file in one ``write`` (rule 5: lines of several processes never mix)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            os.write(self._fd, (self.format(record) + "\n").encode("utf-8", "replace"))
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        super().close()


def level_from_flags(*, verbose: int = 0, quiet: int = 0, level: str | None = None) -> int:
    """The logging level for ``-v``/``-q`` counts or an explicit ``--log-level`` (which wins).
    Default warning; ``-v`` info, ``-vv`` debug; ``-q`` error, ``-qq`` critical."""
    if level is not None:
        return logging.getLevelNamesMapping()[level.upper()]
    step = max(-2, min(2, verbose - quiet))
    return {2: logging.DEBUG, 1: logging.INFO, 0: logging.WARNING, -1: logging.ERROR,
            -2: logging.CRITICAL}[step]


def configure(level: int = logging.WARNING, *, file: Path | None = None, fmt: LogFormat = "text",
              stream: TextIO | None = None, tag: Mapping[str, str] | None = None) -> logging.Logger:
    """Send the ``polecat`` loggers at ``level`` and above to ``file`` (appended) or to ``stream``
    (default stderr), in ``fmt``, with the ``tag`` fields on every record. Replaces handlers an earlier
    call installed; returns the logger."""
    global _current
    logger = logging.getLogger("polecat")
    handler: logging.Handler
    if file is not None:
        handler = _AppendHandler(file)  # before the old handlers go: an unusable file changes nothing
    else:
        handler = _TerminalHandler(stream if stream is not None else sys.stderr)
    for old in [h for h in logger.handlers if getattr(h, _HANDLER_TAG, False)]:
        logger.removeHandler(old)
        old.close()
    handler.setFormatter(JsonFormatter(tag) if fmt == "json" else TextFormatter(tag))
    setattr(handler, _HANDLER_TAG, True)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    _current = LogSettings(level, file if file is None else file.absolute(), fmt, dict(tag or {}))
    return logger
