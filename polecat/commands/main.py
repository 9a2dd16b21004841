"""The ``polecat`` command: its parser, the logging flags every subcommand takes, and the entry point.

Each subcommand lives in its own module of this package and adds itself with ``register(subparsers)``;
their handlers are named ``cmd_<command>``. Exit codes: polecat/node/verdict.py."""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from polecat.errors import ConfigError, PolecatError
from polecat.logs import LEVELS, configure, level_from_flags
from polecat.node import verdict


def _add_logging_flags(p: argparse.ArgumentParser) -> None:
    """-v/-q and the --log-* flags, accepted before and after the subcommand (SUPPRESS keeps a value
    given before the subcommand from being reset by the subcommand's defaults)."""
    g = p.add_argument_group("logging")
    g.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                   help="more log detail: -v info (one line per error), -vv debug (one line per fetch)")
    g.add_argument("-q", "--quiet", action="count", default=argparse.SUPPRESS,
                   help="less output: no progress line, only errors logged")
    g.add_argument("--log-level", choices=LEVELS, default=argparse.SUPPRESS, help="overrides -v/-q")
    g.add_argument("--log-file", type=Path, default=argparse.SUPPRESS, metavar="FILE",
                   help="append log lines to FILE instead of stderr")
    g.add_argument("--log-format", choices=["text", "json"], default=argparse.SUPPRESS,
                   help="text (default) or json, one object per line")


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += [child, *_subparsers(child)]
    return found


def _unrecognized(parser: argparse.ArgumentParser, args: argparse.Namespace, unknown: list[str]) -> NoReturn:
    """argparse's "unrecognized arguments" error, from the subcommand's parser (its usage, not the top
    level's) and with the closest flag it takes for each mistyped one (``--max-page``: ``--max-pages``)."""
    chosen = _chosen(parser, args)
    flags = [flag for action in chosen._actions for flag in action.option_strings]
    words = []
    for word in unknown:
        close = difflib.get_close_matches(word.partition("=")[0], flags, n=1) if word.startswith("--") else []
        words.append(f"{word} (did you mean {close[0]}?)" if close else word)
    chosen.error("unrecognized arguments: " + " ".join(words))


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost subcommand parser ``args`` went through."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name in action.choices:
                return _chosen(action.choices[name], args)
    return parser


def make_parser() -> argparse.ArgumentParser:
    from polecat.commands import cat, cluster, crawl, export, node, pages, status, store, upgrade
    from polecat.version import __version__

    parser = argparse.ArgumentParser(prog="polecat", description="A polite, fast, crash-safe web crawler.",
                                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"polecat {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (crawl, status, pages, cat, export, store, node, cluster, upgrade):
        command.register(sub)
    for p in [parser, *_subparsers(parser)]:
        p.allow_abbrev = False  # --allow-priv must not silently mean --allow-private
        _add_logging_flags(p)
    return parser


def setup_logging(args: argparse.Namespace) -> None:
    """Configure polecat/logs.py from the parsed flags."""
    level = level_from_flags(verbose=getattr(args, "verbose", 0), quiet=getattr(args, "quiet", 0),
                             level=getattr(args, "log_level", None))
    configure(level, file=getattr(args, "log_file", None), fmt=getattr(args, "log_format", "text"))


BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS",)
"""The thread-pool size numpy's bundled OpenBLAS reads when it loads. polecat does no linear algebra, and a
pool of one thread per core cost ~0.1 s of CPU at the start on 2 cores (benchmarks/README.md, "Issue 17,
fifth pass"), in each ``--workers`` child too (they inherit this environment). A crawl with the native
kernels no longer loads numpy; the pure-Python fallbacks, Bloom rebuilds and refresh plans still do."""


def limit_blas_threads() -> None:
    """One BLAS thread in the processes this command starts, unless the operator set the variable. Only
    the command does this: a program that embeds polecat keeps its own BLAS (polecat/__init__.py loads
    the crawler's modules lazily so that this runs before numpy loads)."""
    for var in BLAS_THREAD_VARS:
        os.environ.setdefault(var, "1")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``polecat`` command."""
    limit_blas_threads()
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C outside a crawl's own handler (start-up, a reader command)
        print("\npolecat: interrupted", file=sys.stderr)
        return verdict.EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    parser = make_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _unrecognized(parser, args, unknown)
    try:
        setup_logging(args)
    except OSError as exc:
        print(f"polecat: error: --log-file {args.log_file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    started = time.monotonic()  # the command's own duration, for its debug line: no Clock decides on it
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"polecat: error: {exc}", file=sys.stderr)
        return verdict.EXIT_USAGE
    except PolecatError as exc:  # (NotFound is a KeyError too: print its text, not its repr)
        print(f"polecat: error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return verdict.EXIT_FAILED
    except BrokenPipeError:  # the reader went away (`polecat pages DIR | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error when Python flushes
        return verdict.EXIT_BROKEN_PIPE
    logging.getLogger("polecat").debug("%s took %.2fs", args.command, time.monotonic() - started)
    return code


