"""One :class:`~polecat.node.stats.CrawlStats` for a crawl run by several worker processes.

Rules:
1. Counters (fetches, errors, outcomes, refusals...) add up over every worker, including the earlier
   lives of a worker that died and was restarted (its last report before dying).
2. Gauges (queue depth, hosts, in flight, what the store holds now) add up over the live workers only.
3. Rates are recomputed over the parent's elapsed time; ratios are averaged over the live workers;
   ``next_ready_in`` is the soonest of any worker.
4. ``(label, count)`` tuples merge by label, fixed-size count vectors add item by item, other lists
   (``parked``) are united.
5. Why the run ended is the parent's to say (``ended``); a "fetched nothing" cause stands only when no
   worker got an answer.
"""

from __future__ import annotations

import dataclasses
import typing
from collections import Counter
from collections.abc import Sequence
from typing import Any

from polecat.node.stats import CrawlStats

GAUGES = frozenset({"queued", "in_flight", "hosts", "hosts_ready", "hosts_waiting", "hosts_parked",
                    "hosts_backoff", "pages_stored", "bytes_stored", "bloom_memory_bytes", "urls_done_total",
                    "freshness"})


def merge_stats(live: Sequence[CrawlStats], retired: Sequence[CrawlStats], elapsed: float, *,
                ended: str = "") -> CrawlStats:
    """The crawl's stats from its workers' latest reports (rules above)."""
    hints = typing.get_type_hints(CrawlStats)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(CrawlStats):
        name, hint = f.name, hints[f.name]
        pool = live if name in GAUGES else [*live, *retired]
        values = [getattr(s, name) for s in pool]
        if hint is str:
            out[name] = next((v for v in values if v), "")
        elif hint is int:
            out[name] = sum(values)
        elif hint is float:  # ratios: of the live workers
            ratios = [getattr(s, name) for s in live]
            out[name] = sum(ratios) / len(ratios) if ratios else 0.0
        else:
            out[name] = _merge_tuples([v for v in values if v is not None], f.default)
    out["next_ready_in"] = min((s.next_ready_in for s in live if s.next_ready_in > 0), default=0.0)
    out["ended"] = ended
    out["cause"] = out["cause"] if ended and not out["answered"] else ""
    out["elapsed_s"] = elapsed
    out["fetches_per_s"] = out["fetches"] / elapsed if elapsed > 0 else 0.0
    return CrawlStats(**out)


def _merge_tuples(values: list[tuple[Any, ...]], default: Any) -> Any:
    """Rule 4 (and rule 1 for fixed-size count vectors such as ``freshness``, summed item by item)."""
    if not values:
        return default if default is not dataclasses.MISSING else ()
    if all(isinstance(x, int) for v in values for x in v):
        return tuple(sum(items) for items in zip(*values, strict=True))
    if all(isinstance(pair[1], int) for v in values for pair in v):
        total: Counter[str] = Counter()
        for v in values:
            total.update(dict(v))
        return tuple(sorted(total.items()))
    return tuple(sorted({item for v in values for item in v}))


def stats_from_dict(data: dict[str, Any]) -> CrawlStats:
    """A worker's reported stats back into the record (JSON lists back into tuples)."""
    fields: dict[str, Any] = {
        k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
        for k, v in data.items()
    }
    return CrawlStats(**fields)
