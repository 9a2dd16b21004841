"""The service commands: ``polecat node`` and the client commands that talk to a running node
(``seeds add``, ``throttle set|rm|ls``, ``block add|rm|ls``, ``pause``, ``resume``; ``status --node`` is
polecat/commands/status.py).

The client reads the token from ``$POLECAT_TOKEN`` (never from a flag: flags show in ``ps``). The node's
address comes from ``--node`` or ``$POLECAT_NODE`` (default http://127.0.0.1:8470). A node's answer is
printed as JSON; an error answer exits 1 with the node's message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from polecat import runloop
from polecat.commands.crawl import data_path
from polecat.config import Config, config_from_mapping, load_toml, merge
from polecat.errors import ConfigError, PolecatError

DEFAULT_NODE = "http://127.0.0.1:8470"
CLIENT_TIMEOUT = 30.0


def node_config(args: argparse.Namespace) -> Config:
    """The node's Config: the TOML file, then flags, then ``$POLECAT_TOKEN``,
    ``$POLECAT_CLUSTER_SECRET`` and ``$POLECAT_ETCD_PASSWORD``. A node keeps its pages
    fresh: ``refresh.enabled`` is on unless the file turns it off."""
    base: dict[str, Any] = load_toml(args.config) if args.config else {}
    over: dict[str, Any] = {"node": {}}
    if "enabled" not in base.get("refresh", {}):
        over["refresh"] = {"enabled": True}
    if args.listen is not None:
        over["node"]["listen"] = args.listen
    if os.environ.get("POLECAT_TOKEN"):
        over["node"]["token"] = os.environ["POLECAT_TOKEN"]
    if os.environ.get("POLECAT_CLUSTER_SECRET"):
        over.setdefault("cluster", {})["secret"] = os.environ["POLECAT_CLUSTER_SECRET"]
    if os.environ.get("POLECAT_ETCD_PASSWORD"):  # never a flag: flags show in ps
        over.setdefault("cluster", {})["etcd_password"] = os.environ["POLECAT_ETCD_PASSWORD"]
    if args.data is not None:
        over["data_dir"] = str(args.data)
    return config_from_mapping(merge(base, over))


def cmd_node(args: argparse.Namespace) -> int:
    from polecat.processes.service_runner import serve

    cfg = node_config(args)
    return runloop.run(serve(cfg))


def call(node: str | None, method: str, path: str, body: Any = None) -> Any:
    """One request to a node's API; returns the decoded JSON answer or raises PolecatError."""
    # Here, not at the top: every command's parser imports this module, and urllib.request (with
    # http.client and email) cost a crawl ~8 ms of start-up for a client only these commands use.
    import urllib.error
    import urllib.request

    base = (node or os.environ.get("POLECAT_NODE") or DEFAULT_NODE).rstrip("/")
    try:
        parts = urllib.parse.urlsplit(base)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a bad IPv6 literal or port
        ok = False
    if not ok:
        raise ConfigError(f"--node (POLECAT_NODE): expected the node's http://host:port, got {base[:200]!r}")
    headers = {"Accept": "application/json"}
    token = os.environ.get("POLECAT_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None or method == "POST":  # the node takes a POST only as JSON (CSRF, api.py rules)
        data = json.dumps(body if body is not None else {}).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(base + path, data=data, headers=headers, method=method)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the node is addressed directly
    try:
        with opener.open(req, timeout=CLIENT_TIMEOUT) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            message = json.loads(raw)["error"]
        except (ValueError, KeyError, TypeError):
            message = raw.decode("utf-8", "replace").strip() or exc.reason
        raise PolecatError(f"{base}{path}: {exc.code} {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PolecatError(f"cannot reach the node at {base}: {reason}") from None


def _quote(pattern: str) -> str:
    return urllib.parse.quote(pattern, safe="")


def _print(answer: Any) -> int:
    json.dump(answer, sys.stdout, indent=2)
    print()
    return 0


def cmd_seeds_add(args: argparse.Namespace) -> int:
    answer = call(args.node, "POST", "/admin/seeds", {"urls": args.urls, "priority": args.priority})
    for r in answer["results"]:
        print(f"{r['result']:8} {r['url']}" + (f"  ({r['reason']})" if "reason" in r else ""))
    return 0


def _need_pattern(args: argparse.Namespace) -> None:
    if args.action != "ls" and not args.pattern:
        raise PolecatError(f"{args.command} {args.action}: give a HOSTPATTERN")


def cmd_throttle(args: argparse.Namespace) -> int:
    _need_pattern(args)
    if args.action == "set":
        if args.rate is None:
            raise PolecatError("throttle set: give HOSTPATTERN and REQ_PER_S")
        return _print(call(args.node, "POST", "/admin/throttles",
                           {"host_pattern": args.pattern, "req_per_s": args.rate}))
    if args.action == "rm":
        return _print(call(args.node, "DELETE", f"/admin/throttles/{_quote(args.pattern)}"))
    for t in call(args.node, "GET", "/admin/throttles")["throttles"]:
        print(f"{t['host_pattern']} = {t['req_per_s']:g} req/s")
    return 0


def cmd_block(args: argparse.Namespace) -> int:
    _need_pattern(args)
    if args.action == "add":
        return _print(call(args.node, "POST", "/admin/blocks", {"host_pattern": args.pattern}))
    if args.action == "rm":
        return _print(call(args.node, "DELETE", f"/admin/blocks/{_quote(args.pattern)}"))
    for pattern in call(args.node, "GET", "/admin/blocks")["blocks"]:
        print(pattern)
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    return _print(call(args.node, "POST", f"/admin/{args.command}"))


def _node_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node", metavar="URL", help=f"the node's API ($POLECAT_NODE, default {DEFAULT_NODE}); "
                                                 "token from $POLECAT_TOKEN")


def register(sub: Any) -> None:
    """Add the service commands to the ``polecat`` parser."""
    p = sub.add_parser("node", help="run a long-lived crawler node with an HTTP API (see contrib/)")
    p.add_argument("--config", type=Path, help="TOML config file (contrib/node.toml is an example)")
    p.add_argument("--listen", metavar="HOST:PORT", help="API address (node.listen, default 127.0.0.1:8470)")
    p.add_argument("--data", type=data_path, help="state directory (data_dir)")
    p.set_defaults(func=cmd_node)

    p = sub.add_parser("seeds", help="add seed URLs to a running node")
    seeds = p.add_subparsers(dest="action", required=True)
    add = seeds.add_parser("add", help="queue seed URLs")
    add.add_argument("urls", nargs="+", metavar="URL")
    add.add_argument("--priority", type=float, default=1.0, help="importance in (0, 1] (default 1)")
    _node_flag(add)
    add.set_defaults(func=cmd_seeds_add)

    p = sub.add_parser("throttle", help="per-host-pattern rates of a running node")
    p.add_argument("action", choices=["set", "rm", "ls"])
    p.add_argument("pattern", nargs="?", metavar="HOSTPATTERN")
    p.add_argument("rate", nargs="?", type=float, metavar="REQ_PER_S")
    _node_flag(p)
    p.set_defaults(func=cmd_throttle)

    p = sub.add_parser("block", help="blocked host patterns of a running node")
    p.add_argument("action", choices=["add", "rm", "ls"])
    p.add_argument("pattern", nargs="?", metavar="HOSTPATTERN")
    _node_flag(p)
    p.set_defaults(func=cmd_block)

    for name, text in (("pause", "stop a running node leasing new requests"),
                       ("resume", "let a paused node lease again")):
        p = sub.add_parser(name, help=text)
        _node_flag(p)
        p.set_defaults(func=cmd_pause)
