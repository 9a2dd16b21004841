"""A worker process never outlives its parent for long, and a worker's stop always ends.

Rules:
1. On Linux the kernel sends the worker SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``, asked
   for first thing at start); SIGTERM stops a worker like the parent's ``stop`` (before the worker's
   handler is installed, it ends the process: crash-safe). A parent that died before the request is
   seen by rule 2.
2. Everywhere (and as the fallback), the worker compares its parent id with the one the parent gave it
   (:func:`parent_gone`) every report period: an orphan is re-parented, so the id changes. End of its
   stdin is a third sign (polecat/processes/worker.py), but another process that inherited the pipe (a
   forked child of an embedding application) can keep it open after the parent died.
3. A stop is bounded inside the worker too (:class:`StopBound`): once told to stop in any way, a worker
   still running ``seconds`` later has every thread's stack dumped to stderr and exits with status 1
   (crash-safe: at most its commit window is fetched again). faulthandler's watchdog is a C thread, so it
   fires even when the event loop is stuck; with its parent alive, the parent's own bound (abort, then
   kill: polecat/processes/supervisor.py rule 4) comes first.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""


def die_with_parent() -> None:
    """Rule 1: ask for SIGTERM when the parent dies (Linux only; elsewhere rule 2 alone)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def parent_gone(parent_pid: int) -> bool:
    """Rule 2: whether the parent ``parent_pid`` died (this process was re-parented); 0: never."""
    return parent_pid > 0 and os.getppid() != parent_pid


class StopBound:
    """Rule 3: :meth:`arm` once a stop is asked for; the process exits ``seconds`` later if still alive."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = False

    def arm(self) -> None:
        if not self.armed:
            self.armed = True
            faulthandler.dump_traceback_later(self.seconds, exit=True)
