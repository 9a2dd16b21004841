"""``polecat crawl``: its flags, the config they build, and the run with its progress line and verdict.

Flags and the TOML file build one :class:`~polecat.config.Config` (flags win); a config error names the
flag that set the field (``--rate (politeness.rate): ...``). A run gives up failing hosts
(``politeness.give_up_after``, politeness rule 6) so that it ends, and exits with a code from
polecat/node/verdict.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from polecat import runloop
from polecat.clock import SYSTEM_CLOCK
from polecat.commands import saved_settings as settings
from polecat.config import Config, config_from_mapping, load_toml, merge
from polecat.errors import ConfigError
from polecat.logs import say
from polecat.node import verdict
from polecat.node.stats import LAG_TICK, CrawlStats, LoopLagSamples
from polecat.node.summary import print_summary, progress_line, wrap_line

RUN_GIVE_UP_AFTER = 3
"""``politeness.give_up_after`` of a ``polecat crawl`` run unless the config or flag says otherwise."""


def _rate_pair(text: str) -> tuple[str, float]:
    pattern, sep, rate = text.rpartition("=")
    if not sep or not pattern:
        raise argparse.ArgumentTypeError(f"expected HOSTPATTERN=REQ_PER_S, got {text!r}")
    try:
        return pattern, float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad rate in {text!r}") from None


def data_path(text: str) -> Path:
    """A ``--data`` directory: ``""`` is refused (it was the current directory, crawled into unasked)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (give . for the current directory)")
    return Path(text)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


def _duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``10m``, ``2h`` or ``14d``."""
    unit = _UNITS.get(text[-1:].lower())
    try:
        value = float(text[:-1] if unit else text) * (unit or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration (90s, 10m, 2h, 14d), got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"duration must be > 0, got {text!r}")
    return value


def register(sub: Any) -> None:
    """Add ``crawl`` to the ``polecat`` command."""
    p = sub.add_parser("crawl", help="crawl from seed URLs (resumes when --data already holds a crawl)")
    p.add_argument("urls", nargs="*", metavar="URL", help="seed URLs")
    p.add_argument("--seeds-file", type=Path,
                   help="file with one seed URL per line (# comments), read while the crawl runs")
    p.add_argument("--data", type=data_path, help="state directory (default ./polecat-data)")
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
    p.add_argument("--allow-private", action=argparse.BooleanOptionalAction, default=None,
                   help="allow private/loopback addresses (local crawls and tests)")
    p.add_argument("--proxy", metavar="http://[USER:PASS@]HOST:PORT",
                   help="send every request through this HTTP proxy (CONNECT for https); not saved")
    p.add_argument("--proxy-env", action=argparse.BooleanOptionalAction, default=None,
                   help="use HTTP_PROXY, HTTPS_PROXY and NO_PROXY from the environment, as curl does")
    p.add_argument("--dns-server", action="append", metavar="IP[:PORT]", help="DNS server (repeatable)")
    p.add_argument("--give-up-after", type=int, metavar="N",
                   help=f"give up a host after N attempts without an answer ({RUN_GIVE_UP_AFTER}; 0: never)")
    p.add_argument("--workers", type=_workers, metavar="N|auto",
                   help="worker processes sharing the crawl (1; auto: one per core); data in DIR/workers/")
    p.add_argument("--requisites", action=argparse.BooleanOptionalAction, default=None,
                   help="also fetch and store the images, stylesheets, scripts, icons and fonts of each page")
    p.add_argument("--archive", action="store_true",
                   help="the archive preset: --requisites (a page replays as it was shown)")
    g = p.add_argument_group("refresh")
    g.add_argument("--refresh", action="store_true", default=None,
                   help="re-crawl the fetched URLs whose refresh is due (and what they link to), then exit")
    g.add_argument("--refresh-min", type=_duration, metavar="DURATION",
                   help="shortest interval between two fetches of a URL (1h)")
    g.add_argument("--refresh-max", type=_duration, metavar="DURATION",
                   help="longest interval between two fetches of a URL (30d)")
    g.add_argument("--feed", action="append", metavar="URL",
                   help="an RSS/Atom feed to poll; its new items are crawled at once (repeatable)")
    p.set_defaults(func=cmd_crawl)


def _workers(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or auto, got {text!r}") from None


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What a ``polecat crawl`` command line amounts to."""

    config: Config
    saved: dict[str, Any]
    """The settings the data dir held before this run (polecat/commands/saved_settings.py)."""
    to_save: dict[str, Any]
    """The settings this run saves."""


def build_settings(args: argparse.Namespace) -> RunSettings:
    """Saved settings of the data dir, then the TOML file, then the flags: one validated Config."""
    toml: dict[str, Any] = load_toml(args.config) if args.config else {}
    data_dir = args.data if args.data is not None else Path(toml.get("data_dir", Config().data_dir))
    try:
        saved = settings.load(data_dir) if data_dir.is_dir() else {}
    except ConfigError as exc:
        raise ConfigError(name_flag(f"data_dir: {exc}")) from exc
    base = merge(saved, toml)
    over: dict[str, Any] = {"scope": {}, "politeness": {}, "fetch": {}, "dns": {}, "refresh": {}}
    seeds = list(args.urls)
    for seed in seeds:
        if "://" not in seed and Path(seed).is_file():  # the list of seeds, given as a seed
            raise ConfigError(f"URL {seed!r} is a file: to crawl the URLs it lists, --seeds-file {seed}")
    if args.seeds_file:  # streamed by the node while it crawls (polecat/node/seed_feed.py), not read here
        over["scope"]["seeds_file"] = str(args.seeds_file)
    if seeds:
        over["scope"]["seeds"] = [*toml.get("scope", {}).get("seeds", []), *seeds]
    over["data_dir"] = str(data_dir)
    if getattr(args, "workers", None) is not None:
        over["workers"] = args.workers
    for flag, section, key in _FLAG_FIELDS:
        value = getattr(args, flag)
        if value is not None:
            over[section][key] = value
    if args.throttle:  # a pattern given again replaces its earlier rate
        rates = dict(base.get("politeness", {}).get("throttle", []))
        over["politeness"]["throttle"] = [list(t) for t in {**rates, **dict(args.throttle)}.items()]
    if getattr(args, "archive", False) and "requisites" not in over["scope"]:
        over["scope"]["requisites"] = True  # the archive preset; an explicit --no-requisites wins
    if "give_up_after" not in over["politeness"] and "give_up_after" not in base.get("politeness", {}):
        over["politeness"]["give_up_after"] = RUN_GIVE_UP_AFTER  # a run ends; a node would keep trying
    over["progress"] = not getattr(args, "quiet", 0) and sys.stderr.isatty()
    mapping = merge(base, {k: v for k, v in over.items() if v != {}})
    try:
        cfg = config_from_mapping(mapping)
    except ConfigError as exc:
        raise ConfigError(name_flag(str(exc))) from exc
    return RunSettings(cfg, saved, settings.savable(mapping))


_FLAG_FIELDS = (
    ("max_pages", "scope", "max_pages"), ("scope", "scope", "mode"), ("allow", "scope", "allow"),
    ("deny", "scope", "deny"), ("block", "scope", "block"), ("rate", "politeness", "rate"),
    ("throttle", "politeness", "throttle"), ("concurrency", "fetch", "concurrency"),
    ("user_agent", "fetch", "user_agent"), ("allow_private", "dns", "allow_private"),
    ("dns_server", "dns", "nameservers"), ("proxy", "fetch", "proxy"),
    ("proxy_env", "fetch", "proxy_env"), ("give_up_after", "politeness", "give_up_after"),
    ("refresh", "refresh", "enabled"), ("refresh_min", "refresh", "min_interval"),
    ("refresh_max", "refresh", "max_interval"), ("feed", "refresh", "feeds"),
    ("requisites", "scope", "requisites"),
)
"""``(argparse dest, config section, config key)`` of the crawl flags that set one config field."""

_FLAG_OF = {f"{section}.{key}": "--" + dest.replace("_", "-") for dest, section, key in _FLAG_FIELDS}
_FLAG_OF |= {"data_dir": "--data", "scope.seeds": "URL", "scope.seeds_file": "--seeds-file",
             "workers": "--workers"}
_CONTACT = re.compile(r"https?://|@")
"""A user agent names a contact when it carries a URL or an e-mail address."""
_FIELD_PREFIX = re.compile(r"^([a-z_]+(?:\.[a-z_]+)?)((?:\[\d+\])*): ")


def name_flag(message: str) -> str:
    """A config error as a command-line user reads it: ``--rate (politeness.rate): must be ...``."""
    m = _FIELD_PREFIX.match(message)
    flag = _FLAG_OF.get(m.group(1)) if m else None
    return f"{flag} ({message[: m.end() - 2]}){message[m.end() - 2 :]}" if m and flag else message


async def _crawl(cfg: Config) -> int:
    from polecat.node.crawler import Crawler

    interrupted = 0
    loop = asyncio.get_running_loop()
    async with Crawler(cfg) as crawler:
        opened = crawler.opened
        if opened.schema is not None or opened.near_dropped is not None:  # a data dir of an older release
            from polecat.commands.upgrade import describe

            print(f"polecat: {cfg.data_dir} upgraded: " + "; ".join(describe(opened)), file=sys.stderr)
        run = asyncio.ensure_future(crawler.run())
        lag = LoopLagSamples.with_busy()
        sampling = asyncio.ensure_future(_sample_lag(lag))

        def on_signal() -> None:
            nonlocal interrupted
            interrupted += 1
            if interrupted == 1:
                crawler.stop()  # before saying so: the stop must not depend on stderr (logs.py rule 6)
                say(f"\npolecat: stopping; requests in flight get {cfg.fetch.stop_grace:g}s "
                    "(Ctrl-C again to abort)")
            else:
                run.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        while not run.done():
            await asyncio.wait([run], timeout=0.5)
            if cfg.progress and not run.done():
                say(progress_line(crawler.stats(), shutil.get_terminal_size().columns), end="")
        if cfg.progress:
            say("\r\x1b[K", end="")
        sampling.cancel()
        try:
            stats = run.result()
        except asyncio.CancelledError:
            stats = crawler.stats()
    busy, own = lag.busy or lag, lag.own or lag
    stats = replace(stats, loop_lag_p99=lag.quantile(0.99), loop_lag_max=lag.max,
                    loop_busy_p99=busy.quantile(0.99), loop_busy_max=busy.max, loop_stalls=lag.stalls,
                    loop_own_p99=own.quantile(0.99), loop_own_max=own.max, loop_own_stalls=own.stalls,
                    collector=runloop.COLLECTOR.line())
    return _verdict(cfg, stats, bool(interrupted))


async def _sample_lag(lag: LoopLagSamples) -> None:
    """Record how late the loop runs a timer, every :data:`LAG_TICK` seconds, until cancelled (with the
    process's and the loop thread's CPU time over each interval: time.process_time and time.thread_time,
    not clocks of the crawl's decisions)."""
    while True:
        due = SYSTEM_CLOCK.monotonic() + LAG_TICK
        cpu, loop_cpu = time.process_time(), time.thread_time()
        await asyncio.sleep(LAG_TICK)
        lag.record(max(0.0, SYSTEM_CLOCK.monotonic() - due), time.process_time() - cpu,
                   time.thread_time() - loop_cpu)


async def _crawl_workers(cfg: Config, workers: int) -> int:
    """The same run over ``workers`` processes (polecat/processes/supervisor.py)."""
    from polecat.processes.supervisor import Supervisor

    def on_progress(stats: CrawlStats) -> None:
        if cfg.progress:
            say(progress_line(stats, shutil.get_terminal_size().columns), end="")

    result = await Supervisor(cfg, workers, on_progress=on_progress).run()
    if cfg.progress:
        say("\r\x1b[K", end="")
    code = _verdict(cfg, result.stats, result.interrupted)
    limit, fetched = cfg.scope.max_pages, result.stats.fetches
    if result.stats.ended == verdict.MAX_PAGES and fetched < limit:  # supervisor rule 4
        print(wrap_line(f"  --max-pages {limit} is split over the {workers} workers by the hosts each owns: "
                        f"{fetched} fetched, as a worker spent its share and the others had none left"))
    h = result.handoff
    print(wrap_line(f"  {workers} workers: {h.urls_routed_out} URLs handed to other workers, {h.urls_acked} "
                    f"acknowledged, {h.urls_received} received, {h.bytes_sent} bytes; back-pressure: "
                    f"{h.inbox_waits} inbox waits, {h.busy_replies} busy replies, {h.lease_pauses} lease "
                    f"pauses; {h.send_failures} failed sends; {result.restarts} worker restarts"))
    if cfg.cluster.content_claims:
        print(wrap_line(f"  content claims: {h.content_copies} copies stored as revisits of the first, "
                        f"{h.claims_unanswered} pages stored in full without an answer"))
    return code


def _verdict(cfg: Config, stats: CrawlStats, interrupted: bool) -> int:
    print_summary(stats, sys.stdout, data_dir=str(cfg.data_dir), interrupted=interrupted,
                  refresh=cfg.refresh.enabled)
    if interrupted:
        return verdict.EXIT_INTERRUPTED
    if stats.fetched_nothing:
        print(f"polecat: {stats.cause}", file=sys.stderr)  # one line, unwrapped: scripts read it whole
        return verdict.EXIT_NOTHING_FETCHED
    return verdict.EXIT_OK


def _report_changes(run: RunSettings) -> None:
    """Settings rule 3: say what this run changes in a crawl that already has saved settings."""
    if not run.saved:
        return
    path = run.config.data_dir / settings.FILENAME
    for field, old, new in settings.changes(run.saved, run.to_save):
        flag = _FLAG_OF.get(field)
        name = f"{flag} ({field})" if flag else field
        consequence = settings.CONSEQUENCES.get(field)
        print(f"polecat: {name} changes from {old!r} to {new!r} (saved in {path})"
              + (f": {consequence}" if consequence else ""), file=sys.stderr)


def cmd_crawl(args: argparse.Namespace) -> int:
    from polecat.cluster.layout import LAYOUT_FILE, node_dirs, resolve_workers, uses_workers
    from polecat.store.segments import check_unlocked

    run = build_settings(args)
    cfg = run.config
    data = cfg.data_dir
    for node in node_dirs(data):  # before anything is saved or opened: a crawl of it is running
        check_unlocked(node / "store")
    if cfg.fetch.proxy_env:  # a variable naming no usable proxy is a bad setting too: refused before a start
        from polecat.fetch.proxy import routes_from

        routes_from(cfg.fetch, os.environ)
    seeded = cfg.scope.seeds or cfg.scope.seeds_file is not None or cfg.refresh.feeds
    if not seeded and not (data / "frontier").exists() and not (data / LAYOUT_FILE).exists():
        raise ConfigError("nothing to crawl: give seed URLs, --seeds-file or --feed, or --data of a crawl to "
                          "resume")
    workers = resolve_workers(cfg)
    _report_changes(run)
    settings.save(data, run.to_save)
    if not _CONTACT.search(cfg.fetch.user_agent):
        print(f"polecat: warning: the user agent {cfg.fetch.user_agent!r} names no contact; site operators "
              "need one: --user-agent 'yourbot/1.0 (+https://your.site/bot)'", file=sys.stderr)
    main = _crawl_workers(cfg, workers) if uses_workers(data, workers) else _crawl(cfg)
    return runloop.run(main)


