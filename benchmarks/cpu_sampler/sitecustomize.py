"""Samples where every polecat process started with this directory first on PYTHONPATH spends its CPU,
and writes one JSON file per process to $CPU_SAMPLE_OUT at exit (read by ``python -m
benchmarks.cpu_parts``):

    PYTHONPATH=benchmarks/cpu_sampler:. CPU_SAMPLE_OUT=/tmp/s1 timeout 900 \\
        python -m benchmarks.bench_claims --hosts 200 --pages-per-host 10 --workers 4 --without
    python -m benchmarks.cpu_parts /tmp/s1

A process-CPU timer (``ITIMER_PROF``: it runs only while the process runs, so other sessions' load on
the machine does not add samples) interrupts the process every tick of the kernel (4 ms at HZ=250); the
handler counts the main thread's Python stack. Time in C (msgpack, LMDB, the event loop's system calls)
lands on the Python frame that called it, or for uvloop's own work on the first Python callback after it.
Unlike cProfile, the cost does not grow with the number of calls (about 1 % of the CPU), so a crawl keeps
its timing (claims answered within ``claim_wait``).
"""

import atexit
import collections
import json
import os
import signal
import sys
import time
from types import CodeType, FrameType

_OUT = os.environ.get("CPU_SAMPLE_OUT")
_ARGV = [*getattr(sys, "orig_argv", sys.argv)]

if _OUT and any("polecat" in a for a in _ARGV):
    _stacks: collections.Counter[str] = collections.Counter()
    _names: dict[CodeType, str] = {}

    def _name(code: CodeType) -> str:
        name = _names.get(code)
        if name is None:
            path = code.co_filename
            for root, keep in (("/polecat/", "polecat/"), ("/site-packages/", ""), ("/python3.11/", "")):
                if root in path:
                    path = keep + path.rsplit(root, 1)[1]
                    break
            name = _names[code] = f"{path}:{code.co_name}"
        return name

    def _sample(signum: int, frame: FrameType | None) -> None:
        stack = []
        while frame is not None:
            stack.append(_name(frame.f_code))
            frame = frame.f_back
        _stacks[";".join(reversed(stack))] += 1

    def _write() -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        with open(os.path.join(_OUT or ".", f"{os.getpid()}.json"), "w") as out:
            json.dump({"pid": os.getpid(), "ppid": os.getppid(), "argv": _ARGV, "cpu": time.process_time(),
                       "stacks": _stacks}, out)

    signal.signal(signal.SIGPROF, _sample)
    signal.siginterrupt(signal.SIGPROF, False)  # system calls it interrupts resume (SA_RESTART)
    signal.setitimer(signal.ITIMER_PROF, 0.001, 0.001)  # rounded up to the kernel's tick
    atexit.register(_write)
