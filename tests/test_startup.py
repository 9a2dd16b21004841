"""What a polecat process pays before its first page: start-up leaves out what a plain crawl never uses."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

import polecat
from polecat.cli import BLAS_THREAD_VARS
from polecat.heap import fix_mmap_threshold


def _run(code: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=60, env=env).stdout


def test_importing_the_cli_leaves_out_what_a_plain_crawl_never_uses() -> None:
    # ctypes.util: find_library runs ldconfig in a subprocess (heap.py asks the process's own symbols).
    loaded = set(_run("import sys, polecat.cli, polecat.node; print(' '.join(sys.modules))").split())
    assert "polecat.node" in loaded
    assert not {"ctypes.util"} & loaded


def test_the_cli_loads_before_numpy_and_gives_blas_one_thread() -> None:
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARS}
    # The package and the CLI module load nothing numeric: the command settles the BLAS pool first.
    assert _run("import sys, polecat, polecat.cli; print('numpy' in sys.modules)", env).split() == ["False"]
    code = ("import os, polecat.cli; polecat.cli.limit_blas_threads(); import numpy; "
            "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))")
    assert _run(code, env).split() == ["1", "1"]  # OpenBLAS started no pool threads
    # An operator's own setting stands; a program that only imports polecat keeps its environment.
    assert _run(code, {**env, "OPENBLAS_NUM_THREADS": "2"}).split()[0] == "2"
    assert _run("import os, polecat, polecat.cli; print('OPENBLAS_NUM_THREADS' in os.environ)", env).split() \
        == ["False"]


def test_the_package_names_load_on_first_use() -> None:
    out = _run("import sys, polecat; a = 'polecat.node' in sys.modules; from polecat import Crawler; "
               "print(a, Crawler.__module__, 'Crawler' in dir(polecat))").split()
    assert out == ["False", "polecat.node", "True"]
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        polecat.nothing  # noqa: B018


def test_the_mmap_threshold_is_fixed_where_glibc_runs() -> None:
    assert fix_mmap_threshold() == (platform.libc_ver()[0] == "glibc")
