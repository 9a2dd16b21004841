"""``polecat cluster status --etcd URL`` (or ``--config NODE.toml``): the members of a cluster, the slices
each holds, and each node's queue depth, fetch rate (page fetches per second over the last minute) and
stray URLs (read from its API; ``$POLECAT_TOKEN``
as for the other clients).

With ``--config``, etcd is reached as the node reaches it (TLS, client certificate, etcd user; the
password from ``$POLECAT_ETCD_PASSWORD`` or the file the config names), and with the cluster secret
(``$POLECAT_CLUSTER_SECRET``) only members whose records prove it are listed; the others are named in a
warning (cluster/member_records.py). With ``--etcd`` alone the records are listed as they claim.

etcd is the source of truth for membership and ownership; a node whose API does not answer is listed
with ``-`` for its figures (it may be starting, stopping or cut off). A warning follows the table for
every node that holds URLs it will not fetch: queued in slices it does not own (strays, which its
reconciliation ships to their owners: a number that does not fall means they are stuck), or queued while
it holds no slice at all (stranded). While members of several releases run (a rolling upgrade), a line
names each release's members, and a warning each pair of members that share no wire version
(polecat/cluster/wire.py).

``polecat cluster cat --config NODE.toml HASH``: a stored body, from whichever node stored it: the
members are read from etcd as for ``status``, and each is asked ``GET /internal/pages/{hash}`` (signed
with the cluster secret, as nodes sign their internal requests: polecat/cluster/auth.py), the owner of
the hash's content slice first (polecat/cluster/claims.py rule 1: the node that answered its claims),
then the others, until one has it; the body is checked against the hash before it is written. With a
URL instead (canonicalized by the node config's rules), the owner of the URL's slice is asked first
(the node that fetched it, unless the slice moved since), then the others,
``GET /internal/pages/url/{key}`` (polecat/store/http.py): the body of the URL's newest fetch there, or
the hash of a body another member holds (a revisit's original), then asked for by hash as above."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polecat.errors import ConfigError, PolecatError
from polecat.frontier.slices import SLICES

if TYPE_CHECKING:
    from polecat.cluster.wire import Wire


async def cluster_status(args: argparse.Namespace) -> tuple[list[dict[str, Any]], int, list[str]]:
    """One row per member (id, address, slices), the count of unowned slices, and the ids of member
    records that do not prove the cluster secret (with ``--config`` only)."""
    # Here, not at the top: every `polecat` command builds its parser with this module, and the etcd
    # stack (membership, ownership, the ring and its numpy) is for this command only.
    from polecat.cluster.aetcd_client import AetcdClient, etcd_access
    from polecat.cluster.auth import hmac_signer, hmac_verifier
    from polecat.cluster.etcd import members_prefix, parse_members
    from polecat.cluster.member_records import MemberRecords
    from polecat.commands.node import node_config

    if args.config is None and args.etcd is None:
        raise ConfigError("cluster status: give --etcd URL or --config NODE.toml")
    records = None
    cluster = args.name
    if args.config is not None:
        cc = node_config(argparse.Namespace(config=args.config, listen=None, data=None)).cluster
        if not cc.etcd:
            raise ConfigError(f"--config {args.config}: it sets no cluster.etcd")
        cluster = cc.name
        client = AetcdClient(cc.etcd, access=etcd_access(cc))
        records = MemberRecords(cc.name, hmac_signer(cc.secret), hmac_verifier(cc.secret))
    else:
        client = AetcdClient([e.strip() for e in args.etcd.split(",") if e.strip()])
    prefix = members_prefix(cluster)
    try:
        kvs, _ = await client.get_prefix_leased(prefix)
        owners, _ = await client.get_prefix(f"/{cluster}/owner/")
    except Exception as exc:  # the client raises its own error types for an unreachable etcd
        if args.config is not None:  # the wrong CA, user or password named as for the node
            raise client.explain(exc) from exc
        raise PolecatError(f"--etcd {args.etcd}: {exc}") from exc
    finally:
        await client.close()
    held = Counter(v.decode() for v in owners.values())
    ignored: list[str] = []
    if records is None:
        members = list(parse_members(cluster, {k: raw for k, (raw, _) in kvs.items()}))
    else:
        members = []
        for key, (raw, lease) in sorted(kvs.items()):
            member = records.decode(key[len(prefix):], raw, lease)
            if member is None:
                ignored.append(key[len(prefix):])
            else:
                members.append(member)
    rows = [{"id": m.id, "address": m.address, "slices": held.get(m.id, 0), "wire": m.wire} for m in members]
    return rows, SLICES - sum(held.values()), ignored


def cmd_cluster_cat(args: argparse.Namespace) -> int:
    import sys

    from polecat.cluster.claims import content_slice
    from polecat.cluster.ring import Ring
    from polecat.commands.node import node_config
    from polecat.dedup.canon import Canonicalizer
    from polecat.errors import NotFound
    from polecat.frontier.slices import slice_of
    from polecat.hosts import host_key
    from polecat.store.http import url_route

    key = args.key.strip()
    try:
        digest = bytes.fromhex(key)
    except ValueError:
        digest = b""
    cfg = node_config(argparse.Namespace(config=args.config, listen=None, data=None))
    url = None if len(digest) == 32 else \
        Canonicalizer(cfg.dedup.tracking_params, cfg.dedup.keep_query_order).canonicalize(key)
    if len(digest) != 32 and url is None:
        raise ConfigError(f"cluster cat: expected a content hash of 64 hex digits or an http(s) URL, got "
                          f"{key[:80]!r}")
    rows, _, _ = asyncio.run(cluster_status(args))
    if not rows:
        raise PolecatError("cluster cat: the cluster has no members")
    ring = Ring(sorted(row["id"] for row in rows))
    ask = _PageAsker(cfg.cluster.secret)
    body: bytes | None = None
    if url is not None:  # the owner of the URL's slice fetched it, unless the slice moved since
        body, named = ask.first(rows, ring.owner(slice_of(host_key(url))), url_route(url))
        if body is None and named is None:
            raise NotFound(f"no member has a page of {url} ({'; '.join(ask.asked)})")
        digest = named or b""
    if body is None:  # a hash, or a body another member holds (a revisit's original)
        body, _ = ask.first(rows, ring.owner(content_slice(digest)), f"/internal/pages/{digest.hex()}")
    if body is None:
        raise NotFound(f"no member has a body with hash {digest.hex()} ({'; '.join(ask.asked)})")
    sys.stdout.buffer.write(body)
    sys.stdout.buffer.flush()
    return 0


class _PageAsker:
    """Signed ``GET``s of the nodes' page routes (polecat/store/http.py) for ``cluster cat``."""

    def __init__(self, secret: str) -> None:
        import urllib.request

        from polecat.cluster.auth import hmac_signer

        self._sign = hmac_signer(secret)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # nodes directly
        self.asked: list[str] = []
        """Why each member asked did not answer with the body."""

    def first(self, rows: list[dict[str, Any]], owner: str, route: str) -> tuple[bytes | None, bytes | None]:
        """Ask ``owner`` first, then the others, until one answers a body that hashes to the hash it names:
        (body, hash); (None, hash) once one names the hash of a body it does not hold; (None, None) if none
        has it."""
        for row in sorted(rows, key=lambda r: (r["id"] != owner, r["id"])):
            body, named = self._ask(row, route)
            if named is not None:
                return body, named
        return None, None

    def _ask(self, row: dict[str, Any], route: str) -> tuple[bytes | None, bytes | None]:
        import urllib.error
        import urllib.request

        from polecat.cluster.auth import AUTH_HEADER, request_proof
        from polecat.cluster.wire import RELEASE_HEADER, THIS, WIRE_HEADER
        from polecat.commands.node import CLIENT_TIMEOUT
        from polecat.store.base import content_hash
        from polecat.store.http import HASH_HEADER

        address = row["address"].rstrip("/")
        headers = {AUTH_HEADER: request_proof(self._sign, route, address, 0, time.time()),
                   WIRE_HEADER: THIS.header, RELEASE_HEADER: THIS.release}
        try:
            with self._opener.open(urllib.request.Request(address + route, headers=headers),
                                   timeout=CLIENT_TIMEOUT) as resp:
                body, named = resp.read(), resp.headers.get(HASH_HEADER, "")
        except urllib.error.HTTPError as exc:
            named = exc.headers.get(HASH_HEADER, "") if exc.code == 404 and "/url/" in route else ""
            self.asked.append(f"{row['id']}: {exc.code}")
            return None, _hash(named)
        except (urllib.error.URLError, OSError) as exc:  # a node down: the body may be on another
            self.asked.append(f"{row['id']}: {getattr(exc, 'reason', exc)}")
            return None, None
        digest = _hash(named) if "/url/" in route else _hash(route.rsplit("/", 1)[-1])
        if digest is None or content_hash(body) != digest:
            self.asked.append(f"{row['id']}: answered a body of another hash")
            return None, None
        return body, digest


def _hash(text: str) -> bytes | None:
    try:
        digest = bytes.fromhex(text)
    except ValueError:
        return None
    return digest if len(digest) == 32 else None


def cmd_cluster_status(args: argparse.Namespace) -> int:
    from polecat.commands.node import call

    rows, unowned, ignored = asyncio.run(cluster_status(args))
    print(f"{'node':<16} {'address':<28} {'slices':>6} {'queued':>9} {'stray':>7} {'fetches/s':>9}")
    warnings = []
    for row in rows:
        try:
            t = call(row["address"], "GET", "/admin/crawl/status")
            c = call(row["address"], "GET", "/admin/cluster/status")
            # The last minute's rate; a node of 0.2.0 only has its average since it started.
            rate = f"{c.get('fetches_per_s', t['fetches_per_s']):.1f}"
            queued, stray = str(t["queued"]), str(c["stray_urls"])
            warnings += _warnings(row["id"], row["slices"], int(t["queued"]), c)
        except PolecatError:
            queued = rate = stray = "-"
        print(f"{row['id']:<16} {row['address']:<28} {row['slices']:>6} {queued:>9} {stray:>7} {rate:>9}")
    print(f"{len(rows)} members, {SLICES - unowned}/{SLICES} slices owned")
    for member_id in ignored:
        print(f"warning: the member record of {member_id} does not prove the cluster secret: the nodes "
              "ignore it (an impostor, or a node of an earlier release)")
    releases, apart = release_lines({row["id"]: row["wire"] for row in rows})
    if releases:
        print(releases)
    for line in [*apart, *warnings]:
        print(f"warning: {line}")
    return 0


def _warnings(node: str, slices: int, queued: int, cluster: dict[str, Any]) -> list[str]:
    """What a person should look at on one node (the module docstring)."""
    if queued and not slices:
        return [f"{node} has {queued} URLs queued and owns no slice: they are stranded"]
    if cluster["stray_urls"]:
        return [f"{node} holds {cluster['stray_urls']} URLs in {cluster['stray_slices']} slices it does "
                "not own (it ships them to their owners; if this does not fall, they are stuck)"]
    return []


def release_lines(wires: dict[str, Wire]) -> tuple[str, list[str]]:
    """With members of more than one release: the line naming them, and a warning for each pair that
    shares no wire version (wire rule 4); ``("", [])`` otherwise."""
    from polecat.cluster.wire import common

    by_release: dict[str, list[str]] = {}
    for node, wire in sorted(wires.items()):
        by_release.setdefault(str(wire), []).append(node)
    if len(by_release) < 2:
        return "", []
    line = "releases: " + "; ".join(f"{release}: {', '.join(nodes)}" for release, nodes in by_release.items())
    nodes = sorted(wires)
    apart = [f"{a} ({wires[a]}) and {b} ({wires[b]}) share no wire version: nothing goes between them "
             "until one is upgraded" for i, a in enumerate(nodes) for b in nodes[i + 1:]
             if common(wires[a], wires[b]) is None]
    return line, apart


def register(sub: Any) -> None:
    """Add ``polecat cluster status`` to the ``polecat`` parser."""
    p = sub.add_parser("cluster", help="a multi-machine cluster coordinated by etcd")
    actions = p.add_subparsers(dest="action", required=True)
    st = actions.add_parser("status", help="members, the slices each owns, queue depths, fetch rates")
    st.add_argument("--etcd", metavar="URL", help="etcd endpoints, http://host:2379[,http://host2:2379...]")
    st.add_argument("--config", metavar="NODE.toml", type=Path,
                    help="a node's config: reach etcd as it does (TLS, etcd user) and list only members "
                         "whose records prove the cluster secret ($POLECAT_CLUSTER_SECRET)")
    st.add_argument("--name", default="polecat", help="the cluster's name (cluster.name, default polecat; "
                                                      "with --config, the config's)")
    st.set_defaults(func=cmd_cluster_status)
    cat = actions.add_parser("cat", help="a stored body, from whichever node stored it")
    cat.add_argument("--config", metavar="NODE.toml", type=Path, required=True,
                     help="a node's config: etcd as it reaches it, and the cluster secret "
                          "($POLECAT_CLUSTER_SECRET) the nodes check on their internal routes")
    cat.add_argument("key", metavar="URL-or-HASH",
                     help="a URL (its newest fetch, asked of the owner of its slice first) or a body's "
                          "content hash (64 hex digits)")
    cat.set_defaults(func=cmd_cluster_cat, etcd=None, name="polecat")
