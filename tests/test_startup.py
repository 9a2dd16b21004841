"""What a polecat process pays before its first page: start-up leaves out what a plain crawl never uses."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

import polecat
from polecat import native
from polecat.commands.main import BLAS_THREAD_VARS
from polecat.heap import fix_mmap_threshold
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory


def _run(code: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=60, env=env).stdout


def test_importing_the_cli_leaves_out_what_a_plain_crawl_never_uses() -> None:
    # ctypes.util: find_library runs ldconfig in a subprocess (heap.py asks the process's own symbols).
    # importlib.metadata: ~20 ms for the default user agent's version (config.py takes polecat's own).
    # urllib.request (with http.client and email): ~8 ms for the node API client of `polecat seeds` & co.
    loaded = set(_run("import sys, polecat.commands.main, polecat.node.crawler; "
                      "polecat.commands.main.make_parser(); "
                      "print(' '.join(sys.modules))").split())
    assert "polecat.node.crawler" in loaded
    assert not {"ctypes.util", "importlib.metadata", "urllib.request", "http.client"} & loaded


def test_the_workers_parent_leaves_out_what_only_the_workers_use() -> None:
    # The --workers parent coordinates: the node, the hand-off transport's aiohttp (~0.1 s of CPU, ~10 MB)
    # and numpy are the workers' alone.
    loaded = set(_run("import sys, polecat.commands.main, polecat.commands.crawl, "
                      "polecat.processes.supervisor; "
                      "print(' '.join(sys.modules))").split())
    assert "polecat.processes.supervisor" in loaded
    assert not {"aiohttp", "numpy", "polecat.node.crawler", "polecat.cluster.transport"} & loaded


def test_a_worker_hands_off_without_aiohttp() -> None:
    # The workers of one machine speak polecat/cluster/unixwire.py: aiohttp (~0.13 s of CPU, ~12 MB) is
    # the multi-machine transport's alone.
    loaded = set(_run("import sys, polecat.processes.worker, polecat.node.crawler; "
                      "print(' '.join(sys.modules))").split())
    assert "polecat.cluster.unixwire" in loaded
    assert not {"aiohttp", "polecat.cluster.transport"} & loaded


def test_the_cli_loads_before_numpy_and_gives_blas_one_thread() -> None:
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARS}
    # The package and the CLI module load nothing numeric: the command settles the BLAS pool first.
    assert _run("import sys, polecat, polecat.commands.main; print('numpy' in sys.modules)",
                env).split() == ["False"]
    code = ("import os, polecat.commands.main; polecat.commands.main.limit_blas_threads(); import numpy; "
            "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))")
    assert _run(code, env).split() == ["1", "1"]  # OpenBLAS started no pool threads
    # An operator's own setting stands; a program that only imports polecat keeps its environment.
    assert _run(code, {**env, "OPENBLAS_NUM_THREADS": "2"}).split()[0] == "2"
    assert _run("import os, polecat, polecat.commands.main; print('OPENBLAS_NUM_THREADS' in os.environ)",
                env).split() == ["False"]


def test_the_package_names_load_on_first_use() -> None:
    out = _run("import sys, polecat; a = 'polecat.node.crawler' in sys.modules; from polecat import Crawler; "
               "print(a, Crawler.__module__, 'Crawler' in dir(polecat))").split()
    assert out == ["False", "polecat.node.crawler", "True"]
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        polecat.nothing  # noqa: B018


def test_the_mmap_threshold_is_fixed_where_glibc_runs() -> None:
    assert fix_mmap_threshold() == (platform.libc_ver()[0] == "glibc")


def test_a_crawl_with_the_native_kernels_loads_only_what_it_uses(test_web: TestWebFactory,
                                                                 tmp_path: Path) -> None:
    # numpy (with its BLAS) costs ~30 ms of CPU and ~11 MB at start: a crawl loads it at its first commit,
    # for the seen table's runs (polecat/frontier/seenlog.py), as do the pure-Python fallbacks, Bloom
    # rebuilds and refresh budget plans; the --workers parent does not (the test above). aiohttp costs
    # ~80 ms: only the service API, the cluster's transport and object storage's HTTP server use it; the
    # fetcher is polecat's own. Nor
    # what only some runs need, ~40 ms together: yarl (a URL not in canonical form), tomllib (a config
    # file), email (a dated Retry-After), obstore (a store with a remote), the cluster's hand-off
    # batches. (msgpack is every crawl's: the frontier's write-ahead log, polecat/frontier/wal.py.)
    if any(native.load(name) is None for name in native.KERNELS):
        pytest.skip("a native kernel is not built: its fallback uses numpy")
    web = test_web(SiteSpec(hosts=2, pages_per_host=8, seed=3))
    unused = ["aiohttp", "yarl", "tomllib", "email", "obstore", "polecat.cluster.batch"]
    code = ("import sys; from polecat.commands.main import main; code = main(sys.argv[1:]); "
            f"print(','.join(m for m in {unused!r} if m in sys.modules) or '-', code)")
    args = ["-q", "crawl", *web.seeds, "--data", str(tmp_path / "d"), "--rate", "50", "--dns-server",
            web.dns_address, "--allow-private"]
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[-2:] == ["-", "0"], out.stderr
