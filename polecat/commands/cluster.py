"""``polecat cluster status --etcd URL``: the members of a cluster, the slices each holds, and each
node's queue depth, fetch rate (page fetches per second over the last minute) and stray URLs (read from
its API; ``$POLECAT_TOKEN`` as for the other clients).

etcd is the source of truth for membership and ownership; a node whose API does not answer is listed
with ``-`` for its figures (it may be starting, stopping or cut off). A warning follows the table for
every node that holds URLs it will not fetch: queued in slices it does not own (strays, which its
reconciliation ships to their owners: a number that does not fall means they are stuck), or queued while
it holds no slice at all (stranded)."""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from typing import Any

from polecat.errors import PolecatError
from polecat.frontier.slices import SLICES


async def cluster_status(endpoint: str, cluster: str) -> tuple[list[dict[str, Any]], int]:
    """One row per member (id, address, slices) and the count of unowned slices."""
    # Here, not at the top: every `polecat` command builds its parser with this module, and the etcd
    # stack (membership, ownership, the ring and its numpy) is for this command only.
    from polecat.cluster.aetcd_client import AetcdClient
    from polecat.cluster.etcd import members_prefix, parse_members

    client = AetcdClient([e.strip() for e in endpoint.split(",") if e.strip()])
    try:
        kvs, _ = await client.get_prefix(members_prefix(cluster))
        owners, _ = await client.get_prefix(f"/{cluster}/owner/")
    except Exception as exc:  # the client raises its own error types for an unreachable etcd
        raise PolecatError(f"--etcd {endpoint}: {exc}") from exc
    finally:
        await client.close()
    held = Counter(v.decode() for v in owners.values())
    rows = [{"id": m.id, "address": m.address, "slices": held.get(m.id, 0)}
            for m in parse_members(cluster, kvs)]
    return rows, SLICES - sum(held.values())


def cmd_cluster_status(args: argparse.Namespace) -> int:
    from polecat.commands.node import call

    rows, unowned = asyncio.run(cluster_status(args.etcd, args.name))
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
    for line in warnings:
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


def register(sub: Any) -> None:
    """Add ``polecat cluster status`` to the ``polecat`` parser."""
    p = sub.add_parser("cluster", help="a multi-machine cluster coordinated by etcd")
    actions = p.add_subparsers(dest="action", required=True)
    st = actions.add_parser("status", help="members, the slices each owns, queue depths, fetch rates")
    st.add_argument("--etcd", required=True, metavar="URL", help="etcd endpoints, http://host:2379[,http://host2:2379...]")
    st.add_argument("--name", default="polecat", help="the cluster's name (cluster.name, default polecat)")
    st.set_defaults(func=cmd_cluster_status)
