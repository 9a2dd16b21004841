"""What a node's wait for a host's time costs: CPU per wait and lateness, per alarm clock (polecat/runloop.py
rule 4), on uvloop.

    python -m benchmarks.bench_alarm [--waits 300] [--gaps 0.3,2,5,17.3]

For each gap (milliseconds) and each clock, arms the alarm ``--waits`` times in a row, each for the gap
from now, and awaits it as the node does (an ``asyncio.Event``). Prints CPU microseconds per wait
(``process_time``: what the loop spent, spinning included), wall microseconds per wait, and how late the
waiter woke after the time, mean and worst. ``loop`` is :class:`~polecat.runloop.LoopAlarmClock` (uvloop's
millisecond timers, re-armed for the remainder), ``timerfd`` :class:`~polecat.runloop.TimerFdAlarmClock`
(the kernel's timer; Linux only).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import uvloop

from polecat.runloop import AlarmClock, LoopAlarmClock, TimerFdAlarmClock


async def measure(kind: str, gap: float, waits: int) -> tuple[float, float, float, float]:
    """(CPU us a wait, wall us a wait, mean lateness us, worst lateness us) for ``waits`` alarms."""
    loop = asyncio.get_running_loop()
    clock: AlarmClock = TimerFdAlarmClock(loop) if kind == "timerfd" else LoopAlarmClock(loop, time.time)
    event = asyncio.Event()
    late: list[float] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(waits):
        event.clear()
        until = time.time() + gap
        clock.set(until, event)
        await event.wait()
        late.append(time.time() - until)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    clock.close()
    return 1e6 * cpu / waits, 1e6 * wall / waits, 1e6 * sum(late) / waits, 1e6 * max(late)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--waits", type=int, default=300)
    ap.add_argument("--gaps", default="0.3,2,5,17.3", help="milliseconds, comma-separated")
    args = ap.parse_args()
    kinds = ["loop", *(["timerfd"] if sys.platform == "linux" else [])]
    print("| gap ms | clock | CPU us/wait | wall us/wait | late us (mean) | late us (max) |")
    print("|---|---|---|---|---|---|")
    for gap in (float(g) / 1000 for g in args.gaps.split(",")):
        for kind in kinds:
            cpu, wall, mean, worst = uvloop.run(measure(kind, gap, args.waits))
            print(f"| {gap * 1000:g} | {kind} | {cpu:.0f} | {wall:.0f} | {mean:.0f} | {worst:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
