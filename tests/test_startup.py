"""What a polecat process pays before its first page: start-up leaves out what a plain crawl never uses."""

from __future__ import annotations

import platform
import subprocess
import sys

from polecat.heap import fix_mmap_threshold


def test_importing_the_cli_leaves_out_what_a_plain_crawl_never_uses() -> None:
    # ctypes.util: find_library runs ldconfig in a subprocess (heap.py asks the process's own symbols).
    code = "import sys, polecat.cli; print(' '.join(sys.modules))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True, timeout=60).stdout.split())
    assert "polecat.node" in loaded
    assert not {"ctypes.util"} & loaded


def test_the_mmap_threshold_is_fixed_where_glibc_runs() -> None:
    assert fix_mmap_threshold() == (platform.libc_ver()[0] == "glibc")
