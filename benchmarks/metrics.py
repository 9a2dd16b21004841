"""Figures of one benchmark run, computed from the server's request log and the runner's rusage, and
the comparison table (medians over runs, ratios between runners)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

from polecat.testing.serverlog import RequestRecord, politeness_violations, robots_violations
from polecat.testing.sitegen import Site

__all__ = ["RunFigures", "figures", "median_figures", "politeness_ceiling", "table"]


@dataclass(frozen=True, slots=True)
class RunFigures:
    pages: int
    """Distinct ground-truth URLs served with status 200."""
    seconds: float
    """Crawl span at the server: first request's arrival to last request's end."""
    wall: float
    """Runner process lifetime (start-up and shutdown included)."""
    pages_per_s: float
    """Distinct ground-truth pages per second of crawl span."""
    fetches_per_s: float
    """Every 200 response per second of crawl span, duplicates included."""
    cpu_ms_per_page: float
    peak_rss_mb: float
    coverage: float
    dup_fetches: int
    """Requests beyond the first for one canonical URL (robots.txt included)."""
    politeness_violations: int
    robots_violations: int
    other_requests: int
    """Requests for URLs outside the ground truth other than robots.txt (404s, disallowed...)."""
    exit_code: int


def figures(
    log: Sequence[RequestRecord],
    site: Site | None,
    truth: set[str],
    intervals: dict[str, float],
    *,
    wall: float,
    cpu_s: float,
    maxrss_kb: int,
    exit_code: int,
    slack: float,
) -> RunFigures:
    fetched = {r.url for r in log if r.status == 200 and r.url in truth}
    pages = len(fetched)
    seconds = (max(r.end for r in log) - min(r.start for r in log)) if log else 0.0
    counts = Counter(r.url for r in log)
    return RunFigures(
        pages=pages,
        seconds=seconds,
        wall=wall,
        pages_per_s=pages / seconds if seconds else 0.0,
        fetches_per_s=sum(1 for r in log if r.status == 200) / seconds if seconds else 0.0,
        cpu_ms_per_page=1000 * cpu_s / pages if pages else 0.0,
        peak_rss_mb=maxrss_kb / 1024,
        coverage=pages / len(truth) if truth else 0.0,
        dup_fetches=sum(c - 1 for c in counts.values()),
        politeness_violations=len(politeness_violations(log, intervals, slack)),
        robots_violations=len(robots_violations(log, site)) if site is not None else 0,
        other_requests=sum(1 for r in log if r.url not in truth and r.target != "/robots.txt"),
        exit_code=exit_code,
    )


def median_figures(runs: Sequence[RunFigures]) -> RunFigures:
    """Each figure's median over the runs (exit code: the worst)."""
    values: dict[str, float | int] = {}
    for f in fields(RunFigures):
        column = [getattr(r, f.name) for r in runs]
        values[f.name] = max(column, key=abs) if f.name == "exit_code" else statistics.median(column)
    return RunFigures(**values)  # type: ignore[arg-type]


def politeness_ceiling(truth: set[str], intervals: dict[str, float]) -> float:
    """Pages/s a perfectly polite crawler could reach: the slowest host needs (requests - 1) intervals,
    its robots.txt fetch counted."""
    per_host = Counter(url.split("/")[2].split(":")[0] for url in truth)
    slowest = max(per_host[h] * intervals[h] for h in per_host) if per_host else 0.0
    return len(truth) / slowest if slowest else 0.0


_COLUMNS = (
    ("pages/s", "pages_per_s", "{:.0f}"),
    ("fetches/s", "fetches_per_s", "{:.0f}"),
    ("CPU ms/page", "cpu_ms_per_page", "{:.2f}"),
    ("peak RSS MB", "peak_rss_mb", "{:.0f}"),
    ("coverage", "coverage", "{:.1%}"),
    ("dup fetches", "dup_fetches", "{:.0f}"),
    ("politeness viol.", "politeness_violations", "{:.0f}"),
    ("robots viol.", "robots_violations", "{:.0f}"),
    ("other reqs", "other_requests", "{:.0f}"),
    ("crawl s", "seconds", "{:.1f}"),
    ("exit", "exit_code", "{:.0f}"),
)


def table(results: dict[str, RunFigures]) -> str:
    """A Markdown table of the median figures, then the polecat/Scrapy and polecat/limit ratios."""
    lines = [
        "| runner | " + " | ".join(c[0] for c in _COLUMNS) + " |",
        "|---" * (len(_COLUMNS) + 1) + "|",
    ]
    for name, fig in results.items():
        cells = [fmt.format(asdict(fig)[attr]) for _, attr, fmt in _COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    polecat = results.get("polecat")
    for other in ("scrapy", "limit"):
        if polecat is None or other not in results:
            continue
        ref = results[other]
        cells = []
        for _, attr, _fmt in _COLUMNS:
            mine, theirs = asdict(polecat)[attr], asdict(ref)[attr]
            ratio = attr in ("pages_per_s", "cpu_ms_per_page", "peak_rss_mb")
            cells.append(f"{mine / theirs:.2f}x" if ratio and theirs else "")
        lines.append(f"| polecat/{other} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
