"""The pages of each frontier LMDB table after N seed hosts admitted by the frontier alone (issue 39: which
table's leaves a seeds-only run dirties; benchmarks/README.md, "Issue 39: bytes written per URL at the
defaults, frontier schema 7 (stop 54)").

    python benchmarks/bench_table_pages.py 1000000

It imports only ``polecat``, so ``PYTHONPATH=TREE python THIS_FILE N`` measures the tree TREE (a baseline
checkout, say) with this script. The seeds are bench_scale's (``http://s<i>.seeds.test:8080/``), admitted in
the seed feed's batches, committing every ``frontier.commit_ops`` changes as the node does.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from polecat.config import Config, FrontierConfig, ScopeConfig
from polecat.dedup.canon import Canonicalizer
from polecat.dedup.seen import SeenSet
from polecat.frontier.db import FrontierDB
from polecat.frontier.frontier import Frontier
from polecat.frontier.robots import RobotsPolicy
from polecat.node.seed_feed import BATCH


def admit(work: Path, n: int) -> FrontierDB:
    """A frontier in ``work`` with ``n`` seed hosts admitted and committed; its db, open."""
    cfg = Config(scope=ScopeConfig(mode="host"), frontier=FrontierConfig())
    db = FrontierDB(work / "frontier", map_size=cfg.frontier.map_size, params={})
    seen = SeenSet.restore(db.seen_keys, db.count("seen"), work / "seen.bloom", db.seq, n, 0.01)
    frontier = Frontier(db, cfg, RobotsPolicy(cfg.robots, cfg.fetch.user_agent), seen, 0.0)
    canon = Canonicalizer()
    for start in range(0, n, BATCH):
        ids = range(start, min(start + BATCH, n))
        urls = [canon.canonicalize(f"http://s{i}.seeds.test:8080/") for i in ids]
        db.apply(frontier.add_seeds([u for u in urls if u is not None], 1.0).writes)
        if db.pending >= cfg.frontier.commit_ops:
            frontier.commit()
    frontier.commit()
    return db


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("seeds", type=int)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="table-pages-"))
    try:
        db = admit(work, args.seeds)
        txn, total = db.txn, 0
        for name, tree in sorted(db.tables.items()):
            if name == "seen":  # sorted runs beside the LMDB (db.py rule 4), not a table of it
                continue
            st = txn.stat(tree)
            pages = st["leaf_pages"] + st["branch_pages"] + st["overflow_pages"]
            total += pages
            if st["entries"]:
                print(f"{name:10} {st['entries']:>10} rows {st['leaf_pages']:>8} leaves "
                      f"{st['branch_pages']:>6} branches: "
                      f"{st['leaf_pages'] * st['psize'] / st['entries']:.1f} B of leaf a row")
        print(f"all tables: {total} pages ({total * txn.stat(db.meta)['psize'] / 2**20:.0f} MiB)")
        db.close()
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
