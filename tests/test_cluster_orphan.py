"""A worker outlives no parent and no stop hangs for ever (polecat/processes/orphan.py), in small
processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from polecat.processes.orphan import parent_gone


def test_parent_gone_compares_the_parent_id_with_the_one_given() -> None:
    assert not parent_gone(os.getppid())
    assert parent_gone(os.getppid() + 1)
    assert not parent_gone(0)  # no parent to watch


def test_a_stop_that_does_not_end_exits_after_the_bound_with_every_stack_dumped() -> None:
    stuck = ("import time\nfrom polecat.processes.orphan import StopBound\n"
             "b = StopBound(0.5)\nb.arm()\nb.arm()\ntime.sleep(30)\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", stuck], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 1
    assert time.monotonic() - started < 10
    assert "Timeout (0:00:00.500000)!" in proc.stderr
    assert 'File "<string>", line 6' in proc.stderr  # where it was stuck
