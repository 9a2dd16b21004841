"""Failover with real processes (polecat/testing/failover.py): three ``polecat node`` processes share a
crawl with slice checkpoints in an object store; one is SIGKILLed mid-crawl and its data dir deleted. Its
slices resume on the others from its last checkpoint, and the URLs it had accepted since come back from
the senders' outboxes: every page is fetched, no host is asked too fast, every stored record verifies.
``python -m benchmarks.bench_failover`` runs the same scenario for the figures."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import sys
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pytest

from polecat.cluster.checkpoints import CheckpointStore
from polecat.config import StoreConfig
from polecat.frontier.records import PAGE_OUTCOMES, UrlRecord
from polecat.hosts import host_key
from polecat.store.segstore import open_store
from polecat.testing.etcd import EtcdServer
from polecat.testing.failover import (
    CLUSTER,
    every_page,
    loopback_port,
    node_toml,
    page_urls,
    run_failover,
    start_node,
    until,
    wait_exit,
)
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import queue_counts_disagree
from tests.replay_helpers import replay

RATE = 10.0


@pytest.mark.slow
async def test_a_killed_node_with_its_disk_lost_resumes_on_the_others_from_object_storage(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=12, pages_per_host=40, seed=14))
    truth = web.ground_truth("host")
    run = await run_failover(web, etcd_server, tmp_path, rate=RATE, ttl=2, interval=0.5)
    survivors = [n for n in run.data if n != run.victim]
    assert all(run.exit_codes[n] == 0 for n in survivors), [run.logs[n].read_text()[-3000:]
                                                            for n in survivors]
    fetched = Counter(page_urls(web))
    assert set(fetched) == truth
    assert politeness_violations(web.log, web.min_intervals(RATE)) == []
    twice = [u for u, n in fetched.items() if n > 1]
    # Only the dead node's pages fetched after its last checkpoint are fetched again (at-least-once).
    assert sum(host_key(u) not in run.victim_hosts for u in twice) <= 0.02 * len(truth), twice
    # Every slice of the dead node was restored from its checkpoint, by the Ring's new owners.
    assert sum(slices for _, slices, _ in run.restored) == run.slices_of_victim
    assert run.expired - run.killed <= 2 * 1.5 and run.first_fetch > run.expired
    assert run.handed and sum(slices for slices, _ in run.handed) > 0  # the graceful leave at the end
    for node in survivors:
        verify = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "polecat", "store", "verify", str(run.data[node]),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out = (await asyncio.wait_for(verify.communicate(), 60))[0]
        assert verify.returncode == 0, out.decode()
    # Each survivor's frontier agrees with itself after the restores and hand-offs (host_table.py rule 9,
    # polecat/node/commits.py rule 16).
    assert {n: queue_counts_disagree(run.data[n]) for n in survivors} == {n: [] for n in survivors}
    # No [store] url: the heirs say what they restored as done without its pages (failover rule 7), when
    # its last checkpoint had any (on a loaded machine its rounds before the kill may have recorded none).
    if _done_pages(f"file://{tmp_path}/checkpoints", (), run.victim):
        assert any("have their pages on its disk only" in run.logs[n].read_text() for n in survivors)


def _done_pages(checkpoints: str, options: tuple[tuple[str, str], ...], member: str) -> set[str]:
    """The URLs ``member``'s last checkpoint records as done with a page."""
    store = CheckpointStore.open(checkpoints, options, CLUSTER)
    manifest = store.read_manifest(member)
    assert manifest is not None
    return {record.url for bundle in store.fetch(manifest, manifest.slices)
            for table, _, value in bundle.records() if table == "urls"
            and (record := UrlRecord.decode(value)).outcome in PAGE_OUTCOMES}


def _recorded(checkpoints: str, options: tuple[tuple[str, str], ...], member: str) -> int:
    """How many URLs ``member``'s last checkpoint records as done with a page (0 before its first)."""
    store = CheckpointStore.open(checkpoints, options, CLUSTER)
    try:
        return 0 if store.read_manifest(member) is None else len(_done_pages(checkpoints, options, member))
    except Exception:  # a round replaced what the manifest read named: ask again
        return 0


async def _polecat(*args: str) -> bytes:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "polecat", *args,
                                                stdout=asyncio.subprocess.PIPE)
    out = (await asyncio.wait_for(proc.communicate(), 120))[0]
    assert proc.returncode == 0, args
    return out


@pytest.mark.slow
async def test_with_pages_in_object_storage_a_dead_nodes_checkpointed_pages_are_all_readable(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path, s3_endpoint: str) -> None:
    """Failover rule 7: with ``[store] url``, every URL the dead node's last checkpoint records as done
    with a page has that page in object storage (its own sealed segments) or on a survivor, though its
    disk is gone; the heirs fetch none of them again and count none as lost."""
    bucket = f"polecat-{uuid.uuid4().hex[:12]}"
    make = urllib.request.Request(f"{s3_endpoint}/{bucket}", method="PUT")
    await asyncio.to_thread(lambda: urllib.request.urlopen(make, timeout=10).close())
    options = (("endpoint", s3_endpoint), ("region", "us-east-1"), ("access_key_id", "test"),
               ("secret_access_key", "test"), ("allow_http", "true"))
    web = test_web(SiteSpec(hosts=12, pages_per_host=30, seed=16))
    truth = web.ground_truth("host")
    # Slower, and killed later, than above: the victim's rounds record many of its own pages done.
    # Killed once its checkpoints record 10 of its pages done: how soon they do depends on the load.
    checkpoints = f"s3://{bucket}/checkpoints"
    run = await run_failover(web, etcd_server, tmp_path, rate=4.0, ttl=2, interval=0.5, kill_at=0.6,
                             checkpoints=checkpoints, options=options, store=f"s3://{bucket}/pages",
                             ready=lambda victim: _recorded(checkpoints, options, victim) >= 10)
    survivors = [n for n in run.data if n != run.victim]
    assert all(run.exit_codes[n] == 0 for n in survivors), [run.logs[n].read_text()[-3000:]
                                                            for n in survivors]
    assert set(page_urls(web)) == truth
    done = _done_pages(checkpoints, options, run.victim)
    # One collection: the survivors' stores, and the dead node's sealed segments in object storage.
    warc, conf = tmp_path / "all.warc.gz", tmp_path / "store.toml"
    conf.write_text(f'[store]\nurl = "s3://{bucket}/pages"\noptions = {{'
                    + ", ".join(f'{k} = "{v}"' for k, v in options) + "}\n")
    export = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "polecat", "store", "export", *(str(run.data[n]) for n in survivors),
        "--config", str(conf), "--warc", str(warc),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    said = (await asyncio.wait_for(export.communicate(), 120))[0].decode()
    assert export.returncode == 0 and f"store {run.victim_store} is in object storage only" in said, said
    readable = set(replay(warc))
    assert len(done) >= 10 and done <= readable, sorted(done - readable)[:10]
    dirs = [str(run.data[n]) for n in survivors]
    rows = (await _polecat("pages", *dirs, "--config", str(conf), "--format", "jsonl")).decode().splitlines()
    assert done <= {json.loads(row)["url"] for row in rows}
    feed = (await _polecat("export", *dirs, "--config", str(conf), "--jsonl", "-")).decode().splitlines()
    assert done <= {json.loads(item)["url"] for item in feed}
    local: set[str] = set()
    for node in survivors:
        with open_store(run.data[node] / "store", StoreConfig(), read_only=True) as store:
            local |= {r.url for r in store.records()}
    only_dead = min(done - local)  # on the dead node's sealed segments only
    assert await _polecat("cat", "--config", str(conf), *dirs, only_dead) == replay(warc)[only_dead]
    assert not any("have their pages on its disk only" in run.logs[n].read_text() for n in survivors)


@pytest.mark.slow
async def test_a_node_restarted_on_an_empty_data_dir_restores_its_own_slices_from_object_storage(
        test_web: TestWebFactory, etcd_server: EtcdServer, tmp_path: Path) -> None:
    """One node, SIGKILLed mid-crawl with its disk lost and started again at once: its old lease still
    holds its slices, nobody else took them, so it restores them from its own checkpoint."""
    web = test_web(SiteSpec(hosts=4, pages_per_host=30, seed=15))
    truth = web.ground_truth("host")
    host = "127.0.0.45"
    conf = tmp_path / "n0.toml"
    conf.write_text(node_toml(web, tmp_path / "n0", f"{host}:{loopback_port(host)}", etcd_server.endpoint,
                              "n0", f"file://{tmp_path}/checkpoints", rate=5.0, ttl=2, interval=0.5))
    log = tmp_path / "n0.log"
    proc = start_node(conf, log)
    try:
        await until(lambda: len(set(page_urls(web))) >= len(truth) // 2, 90, "half the pages")
        proc.kill()
        await wait_exit(proc, 10)
        before = set(page_urls(web))
        shutil.rmtree(tmp_path / "n0")
        proc = start_node(conf, log)
        await every_page(web, truth, 120, "every page")
        proc.send_signal(signal.SIGTERM)
        assert await wait_exit(proc, 60) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert politeness_violations(web.log, web.min_intervals(5.0)) == []
    text = log.read_text()
    assert re.search(r"restored \d+ slices of n0 from its checkpoint", text), text[-2000:]
    # Only what it fetched after its last checkpoint is fetched again, not the whole crawl so far.
    twice = sum(n > 1 for n in Counter(page_urls(web)).values())
    print(f"\nrestart on an empty data dir: {twice} of the {len(before)} pages fetched before the kill again")
    assert twice < len(before) / 2
