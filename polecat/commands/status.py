"""``polecat status DIR``: a summary of a data dir's frontier (safe during a crawl); ``polecat status --node
URL``: ask a running node (polecat/commands/node.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from polecat.errors import PolecatError


def cmd_status(args: argparse.Namespace) -> int:
    from polecat.cluster.layout import node_dirs
    from polecat.frontier.status import merge_status, read_status
    from polecat.node.summary import freshness_line

    if args.node is not None or args.data is None:
        from polecat.commands.node import node_status

        if args.data is not None:
            raise PolecatError("status: give DIR or --node URL, not both")
        return node_status(args.node, args.host)
    # A --workers crawl keeps one frontier per worker; each host is in one of them.
    s = merge_status([read_status(d / "frontier") for d in node_dirs(args.data)])
    print(f"hosts {s.hosts} ({s.hosts_with_queue} with queued URLs), queued {s.queued}, "
          f"fetched {s.fetched}, URLs seen {s.seen_urls}, commits {s.commits} (state saved to disk)")
    print(f"written by polecat {', '.join(s.releases)}")
    print("done: " + (", ".join(f"{k} {v}" for k, v in s.done) or "none"))
    f = s.freshness
    if f.tracked:
        print(f"refresh: {freshness_line(f.tracked, f.due, f.important, f.within)}")
    for host, n in s.busiest:
        print(f"  queue {n:>9}  {host}")
    if s.paused:
        print("  paused by an operator: `polecat resume --node URL` lets the node lease again")
    for pattern in s.blocked:
        print(f"  blocked {pattern}")
    for pattern, rate in s.throttled:
        print(f"  throttle {pattern} = {rate:g} req/s")
    for host, counts in s.traps:
        print(f"  traps {host}: " + ", ".join(f"{rule} {n}" for rule, n in counts))
    return 0


def register(sub: Any) -> None:
    """Add ``status`` to the ``polecat`` command."""
    status = sub.add_parser("status", help="summarize the frontier of a data dir (safe during a crawl), "
                                           "or ask a running node (--node)")
    status.add_argument("data", type=Path, nargs="?", metavar="DIR")
    status.add_argument("--node", metavar="URL", help="a running node's API (token from $POLECAT_TOKEN)")
    status.add_argument("--host", help="with --node: one host's state")
    status.set_defaults(func=cmd_status)
