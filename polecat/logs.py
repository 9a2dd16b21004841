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
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TextIO

__all__ = ["LEVELS", "LogFormat", "configure", "fields", "level_from_flags"]

LogFormat = Literal["text", "json"]
LEVELS = ("debug", "info", "warning", "error", "critical")

_CLEAR_LINE = "\r\x1b[K"
_HANDLER_TAG = "_polecat_handler"


def fields(**values: Any) -> dict[str, Any]:
    """``extra=`` for a log call carrying structured fields: ``log.info("...", extra=fields(url=u))``."""
    return {"fields": values}


def _record_fields(record: logging.LogRecord) -> Mapping[str, Any]:
    found = getattr(record, "fields", None)
    return found if isinstance(found, Mapping) else {}


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={_text_value(v)}" for k, v in _record_fields(record).items())
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
    """One JSON object a line: ``ts``, ``level``, ``logger``, ``msg``, the fields, ``exc`` if any."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": _utc(record.created), "level": record.levelname.lower(),
                               "logger": record.name, "msg": record.getMessage()}
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


def level_from_flags(*, verbose: int = 0, quiet: int = 0, level: str | None = None) -> int:
    """The logging level for ``-v``/``-q`` counts or an explicit ``--log-level`` (which wins).
    Default warning; ``-v`` info, ``-vv`` debug; ``-q`` error, ``-qq`` critical."""
    if level is not None:
        return logging.getLevelNamesMapping()[level.upper()]
    step = max(-2, min(2, verbose - quiet))
    return {2: logging.DEBUG, 1: logging.INFO, 0: logging.WARNING, -1: logging.ERROR,
            -2: logging.CRITICAL}[step]


def configure(level: int = logging.WARNING, *, file: Path | None = None, fmt: LogFormat = "text",
              stream: TextIO | None = None) -> logging.Logger:
    """Send the ``polecat`` loggers at ``level`` and above to ``file`` (appended) or to ``stream``
    (default stderr), in ``fmt``. Replaces handlers an earlier call installed; returns the logger."""
    logger = logging.getLogger("polecat")
    for old in [h for h in logger.handlers if getattr(h, _HANDLER_TAG, False)]:
        logger.removeHandler(old)
        old.close()
    handler: logging.Handler
    if file is not None:
        handler = logging.FileHandler(file, encoding="utf-8")
    else:
        handler = _TerminalHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    setattr(handler, _HANDLER_TAG, True)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    return logger
