"""``polecat status DIR``: a summary of a data dir's frontier (safe during a crawl); ``polecat status --node
URL``: the same summary from a running node's API (polecat/commands/node.py), with what only a running
node knows (rate, requests in flight, parked hosts, recent errors). ``--json`` prints the figures for
machines instead: the node's API answer as it is, or the data dir's status record."""

from __future__ import annotations

import argparse
import dataclasses
import json
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from polecat.errors import PolecatError

RECENT_ERRORS = 5
"""Recent errors a node's summary lists (the API answer carries more)."""


def cmd_status(args: argparse.Namespace) -> int:
    from polecat.cluster.layout import collection_dirs
    from polecat.frontier.status import merge_status, read_status

    if args.node is not None or not args.data:
        if args.data:
            raise PolecatError("status: give DIR or --node URL, not both")
        return _node_status(args.node, args.host, as_json=args.json)
    if args.host is not None:
        raise PolecatError("status: --host needs --node URL (a running node)")
    # A --workers crawl keeps one frontier per worker, a cluster one per node; each host is in one of them.
    s = merge_status([read_status(d / "frontier", busiest=args.busiest) for d in collection_dirs(args.data)])
    if args.json:
        print(json.dumps(dataclasses.asdict(s), indent=2))
        return 0
    f = s.freshness
    lines = [f"hosts {s.hosts} ({s.hosts_with_queue} with queued URLs), queued {s.queued}, "
             f"fetched {s.fetched}, URLs seen {s.seen_urls}, commits {s.commits} (state saved to disk)",
             f"written by polecat {', '.join(s.releases)}",
             _counts("done", s.done),
             # A one-off crawl's schedule and SLO describe a refresh that never ran: shown once one has.
             *(_freshness(f.tracked, f.due, f.important, f.within) if s.revisited else ()),
             *_controls(s.busiest, s.paused, s.blocked, s.throttled)]
    lines += [f"  traps {host}: " + ", ".join(f"{rule} {n}" for rule, n in rules) for host, rules in s.traps]
    _print(lines)
    return 0


def _print(lines: Iterable[str]) -> None:
    from polecat.node.summary import wrap_line

    print("\n".join(map(wrap_line, lines)))


def _node_status(node: str | None, host: str | None, *, as_json: bool) -> int:
    from polecat.commands.node import call

    query = f"?host={urllib.parse.quote(host)}" if host else ""
    answer = call(node, "GET", f"/admin/crawl/status{query}")
    if as_json:
        print(json.dumps(answer, indent=2))
    else:
        _print(host_summary(answer) if host else node_summary(answer))
    return 0


def node_summary(t: Mapping[str, Any]) -> list[str]:
    """The lines of ``polecat status --node URL``, from the node's ``/admin/crawl/status`` answer."""
    fresh = t.get("freshness") or {}
    lines = [f"hosts {t['hosts']} ({t['hosts_ready']} ready, {t['hosts_waiting']} waiting, "
             f"{t['hosts_parked']} parked), queued {t['queued']}, in flight {t['in_flight']}",
             f"fetched {t['fetches']} in {t['elapsed_s']:.0f}s ({t['fetches_per_s']:.1f}/s), "
             f"{t['pages_stored']} pages stored",
             _counts("done", t["urls_done"].items()),
             _counts("errors", t["errors"].items()),
             *_freshness(fresh.get("tracked", 0), fresh.get("due", 0), fresh.get("important", 0),
                         fresh.get("within_window", 0)),
             *_controls([(q["host"], q["queued"]) for q in t["top_queues"]], t["paused"], t["blocks"],
                        [(r["host_pattern"], r["req_per_s"]) for r in t["throttles"]])]
    lines += [f"  parked {p['host']}: {p['reason']}" for p in t["parked"]]
    lines += [f"  error {e['host']}: {e['reason']} {e['url']}" for e in t["recent_errors"][-RECENT_ERRORS:]]
    return lines


def host_summary(d: Mapping[str, Any]) -> list[str]:
    """The lines of ``polecat status --node URL --host H``, from the node's answer for one host."""
    robots = d["robots"]
    state = ("parked: " + str(d["park_reason"]) if d["parked"]
             else f"quarantined after {d['consecutive_failures']} failures" if d["quarantined"]
             else "blocked" if d["blocked"] else "active")
    return [f"host {d['host']}: {state}",
            f"queued {d['queued']}, in flight {int(d['in_flight'])}, fetched {d['fetched_total']} "
            f"({d['fetched_24h']} in 24 h, {d['errors_24h']} errors)",
            f"rate {d['req_per_s']:g} req/s x {d['aimd_factor']:g} (AIMD): one request every "
            f"{d['interval_s']:g}s",
            f"robots.txt {robots['state']}" + (f" ({robots['origin']})" if robots.get("origin") else "")]


def _counts(label: str, items: Iterable[tuple[str, int]]) -> str:
    return f"{label}: " + (", ".join(f"{k} {v}" for k, v in items) or "none")


def _freshness(tracked: int, due: int, important: int, within: int) -> Iterator[str]:
    from polecat.node.summary import freshness_line

    if tracked:
        yield f"refresh: {freshness_line(tracked, due, important, within)}"


def _controls(busiest: Iterable[tuple[str, int]], paused: bool, blocked: Iterable[str],
              throttled: Iterable[tuple[str, float]]) -> list[str]:
    """The lines both summaries share: the longest queues and what an operator set."""
    lines = [f"  queue {n:>9}  {host}" for host, n in busiest]
    if paused:
        lines.append("  paused by an operator: `polecat resume --node URL` lets the node lease again")
    lines += [f"  blocked {pattern}" for pattern in blocked]
    lines += [f"  throttle {pattern} = {rate:g} req/s" for pattern, rate in throttled]
    return lines


def register(sub: Any) -> None:
    """Add ``status`` to the ``polecat`` command."""
    status = sub.add_parser("status", help="summarize the frontier of a data dir (safe during a crawl), "
                                           "or ask a running node (--node)")
    status.add_argument("data", type=Path, nargs="*", metavar="DIR",
                        help="data dir; several (a cluster's nodes, or their parent dir) as one crawl")
    status.add_argument("--node", metavar="URL", help="a running node's API (token from $POLECAT_TOKEN)")
    status.add_argument("--host", help="with --node: one host's state")
    status.add_argument("--json", action="store_true", help="the figures as JSON, for machines")
    status.add_argument("--busiest", action="store_true",
                        help="DIR: list the hosts with the longest queues (reads every host record: "
                             "seconds at a million hosts)")
    status.set_defaults(func=cmd_status)
