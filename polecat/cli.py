"""The ``polecat`` command: ``crawl``, plus ``pages``, ``cat`` and ``store`` from the store package."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from polecat.config import Config, config_from_mapping, load_toml, merge
from polecat.errors import PolecatError
from polecat.logs import LEVELS, configure, level_from_flags
from polecat.stats import CrawlStats


def _rate_pair(text: str) -> tuple[str, float]:
    pattern, sep, rate = text.rpartition("=")
    if not sep or not pattern:
        raise argparse.ArgumentTypeError(f"expected HOSTPATTERN=REQ_PER_S, got {text!r}")
    try:
        return pattern, float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rate in {text!r}") from None


def _add_crawl(sub: Any) -> None:
    p = sub.add_parser("crawl", help="crawl from seed URLs (resumes when --data already holds a crawl)")
    p.add_argument("urls", nargs="*", metavar="URL", help="seed URLs")
    p.add_argument("--seeds-file", type=Path, help="file with one seed URL per line (# comments)")
    p.add_argument("--data", type=Path, help="state directory (default ./polecat-data)")
    p.add_argument("--config", type=Path, help="TOML config file; flags override it")
    p.add_argument("--max-pages", type=int, help="stop after this many page fetches in this run")
    p.add_argument("--scope", choices=["host", "domain", "any"], help="which hosts links may lead to")
    p.add_argument("--allow", action="append", metavar="REGEX", help="only URLs matching (repeatable)")
    p.add_argument("--deny", action="append", metavar="REGEX", help="skip URLs matching (repeatable)")
    p.add_argument("--rate", type=float, metavar="REQ_PER_S", help="requests per second per host (1)")
    p.add_argument("--throttle", action="append", type=_rate_pair, metavar="HOSTPATTERN=REQ_PER_S",
                   help="per-host-pattern rate override, e.g. '*.example.com=0.2' (repeatable)")
    p.add_argument("--block", action="append", metavar="HOSTPATTERN", help="never fetch these hosts")
    p.add_argument("--concurrency", type=int, help="requests in flight at most (256)")
    p.add_argument("--user-agent", help="User-Agent; include a contact URL")
    p.add_argument("--allow-private", action="store_true", default=None,
                   help="allow private/loopback addresses (local crawls and tests)")
    p.add_argument("--dns-server", action="append", metavar="IP[:PORT]", help="DNS server (repeatable)")
    p.set_defaults(func=cmd_crawl)


def build_config(args: argparse.Namespace) -> Config:
    """Merge the TOML file (if any) and the flags into one validated Config."""
    base: dict[str, Any] = load_toml(args.config) if args.config else {}
    seeds = list(args.urls)
    if args.seeds_file:
        try:
            lines = args.seeds_file.read_text().splitlines()
        except OSError as exc:
            raise PolecatError(f"--seeds-file {args.seeds_file}: {exc.strerror or exc}") from exc
        seeds += [s.strip() for s in lines if s.strip() and not s.lstrip().startswith("#")]
    over: dict[str, Any] = {"scope": {}, "politeness": {}, "fetch": {}, "dns": {}}
    if seeds:
        over["scope"]["seeds"] = [*base.get("scope", {}).get("seeds", []), *seeds]
    if args.data is not None:
        over["data_dir"] = str(args.data)
    for flag, section, key in (
        ("max_pages", "scope", "max_pages"), ("scope", "scope", "mode"), ("allow", "scope", "allow"),
        ("deny", "scope", "deny"), ("block", "scope", "block"), ("rate", "politeness", "rate"),
        ("concurrency", "fetch", "concurrency"), ("user_agent", "fetch", "user_agent"),
        ("allow_private", "dns", "allow_private"), ("dns_server", "dns", "nameservers"),
    ):
        value = getattr(args, flag)
        if value is not None:
            over[section][key] = value
    if args.throttle:
        over["politeness"]["throttle"] = [*base.get("politeness", {}).get("throttle", []),
                                          *[list(t) for t in args.throttle]]
    over["progress"] = not getattr(args, "quiet", 0) and sys.stderr.isatty()
    return config_from_mapping(merge(base, {k: v for k, v in over.items() if v != {}}))


def _progress_line(s: CrawlStats) -> str:
    errors = sum(n for _, n in s.errors)
    return (f"{s.fetches_per_s:7.1f} pages/s  fetched {s.fetches}  queued {s.queued}  "
            f"in flight {s.in_flight}  hosts ready {s.hosts_ready} waiting {s.hosts_waiting}  "
            f"errors {errors}")


def print_summary(s: CrawlStats, out: TextIO) -> None:
    done = ", ".join(f"{k} {v}" for k, v in s.urls_done) or "none"
    errors = ", ".join(f"{k} {v}" for k, v in s.errors) or "none"
    rejected = ", ".join(f"{k} {v}" for k, v in s.urls_rejected) or "none"
    print(
        f"crawl finished in {s.elapsed_s:.1f}s: {s.fetches} fetches ({s.fetches_per_s:.1f}/s), "
        f"{s.queued} still queued, {s.hosts} hosts ({s.hosts_parked} parked)\n"
        f"  done: {done}\n  errors: {errors}\n  refused: {rejected}\n"
        f"  politeness violations {s.politeness_violations}, robots failure rate "
        f"{s.robots_failure_rate:.3f}, DNS hit ratio {s.dns_hit_ratio:.3f}\n"
        f"  bloom fp rate {s.bloom_fp_rate:.4f}, canonical collapses {s.canon_collapsed}, "
        f"near-duplicates {s.near_duplicates} (collapse ratio {s.simhash_collapse_ratio:.3f})\n"
        f"  stored {s.pages_stored} pages, {s.bytes_stored} bytes",
        file=out,
    )
    for host, reason in s.parked[:20]:
        print(f"  parked {host}: {reason}", file=out)
    if len(s.parked) > 20:
        print(f"  ... and {len(s.parked) - 20} more parked hosts", file=out)


async def _crawl(cfg: Config) -> int:
    from polecat.node import Crawler

    interrupted = 0
    loop = asyncio.get_running_loop()
    async with Crawler(cfg) as crawler:
        run = asyncio.ensure_future(crawler.run())

        def on_signal() -> None:
            nonlocal interrupted
            interrupted += 1
            if interrupted == 1:
                print("\npolecat: stopping after in-flight requests (Ctrl-C again to abort)", file=sys.stderr)
                crawler.stop()
            else:
                run.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        while not run.done():
            await asyncio.wait([run], timeout=0.5)
            if cfg.progress and not run.done():
                print("\r" + _progress_line(crawler.stats()), end="", file=sys.stderr, flush=True)
        if cfg.progress:
            print(file=sys.stderr)
        try:
            stats = run.result()
        except asyncio.CancelledError:
            stats = crawler.stats()
    print_summary(stats, sys.stdout)
    return 130 if interrupted else 0


def cmd_crawl(args: argparse.Namespace) -> int:
    cfg = build_config(args)
    if not cfg.scope.seeds and not (cfg.data_dir / "frontier").exists():
        raise PolecatError("nothing to crawl: give seed URLs or --seeds-file, or --data of a crawl to resume")
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.run(_crawl(cfg))
    return uvloop.run(_crawl(cfg))


def cmd_status(args: argparse.Namespace) -> int:
    from polecat.frontier.status import read_status

    s = read_status(args.data / "frontier")
    print(f"hosts {s.hosts} ({s.hosts_with_queue} with queued URLs), queued {s.queued}, "
          f"fetched {s.fetched}, URLs seen {s.seen_urls}, commits {s.commits}")
    print("done: " + (", ".join(f"{k} {v}" for k, v in s.done) or "none"))
    for host, n in s.busiest:
        print(f"  queue {n:>9}  {host}")
    for pattern in s.blocked:
        print(f"  blocked {pattern}")
    for pattern, rate in s.throttled:
        print(f"  throttle {pattern} = {rate:g} req/s")
    return 0


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


def make_parser() -> argparse.ArgumentParser:
    from polecat import __version__
    from polecat.store.cli import register

    parser = argparse.ArgumentParser(prog="polecat", description="A polite, fast, crash-safe web crawler.",
                                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"polecat {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_crawl(sub)
    status = sub.add_parser("status", help="summarize the frontier of a data dir (safe during a crawl)")
    status.add_argument("data", type=Path, metavar="DIR")
    status.set_defaults(func=cmd_status)
    register(sub)
    for p in [parser, *_subparsers(parser)]:
        p.allow_abbrev = False  # --allow-priv must not silently mean --allow-private
        _add_logging_flags(p)
    return parser


def setup_logging(args: argparse.Namespace) -> None:
    """Configure polecat/logs.py from the parsed flags."""
    level = level_from_flags(verbose=getattr(args, "verbose", 0), quiet=getattr(args, "quiet", 0),
                             level=getattr(args, "log_level", None))
    configure(level, file=getattr(args, "log_file", None), fmt=getattr(args, "log_format", "text"))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``polecat`` command."""
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        setup_logging(args)
    except OSError as exc:
        print(f"polecat: error: --log-file {args.log_file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        code: int = args.func(args)
    except PolecatError as exc:
        print(f"polecat: error: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("polecat").debug("%s took %.2fs", args.command, time.monotonic() - started)
    return code


if __name__ == "__main__":
    sys.exit(main())
