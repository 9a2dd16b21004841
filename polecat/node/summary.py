"""What ``polecat crawl`` shows a person: the live progress line and the final summary.

Pure formatting of :class:`~polecat.node.stats.CrawlStats`, so both are tested without a terminal.

- The progress line is redrawn in place: it starts with a carriage return, ends by clearing to the end of
  the line (a shorter line leaves no stale digits behind) and is cut to the terminal's width (a line
  that wraps scrolls a new line per redraw). When nothing is in flight it says what the run waits on.
- The summary keeps this run and the whole crawl (every run on the data dir) apart, says why the run
  ended, and names every host given up with its reason and, where there is one, the fix. Internal
  figures (Bloom false positives, canonical collapses, commits) are left to ``polecat status`` and
  :class:`CrawlStats`, but how late the event loop ran (a node that stalls its hosts) and, in a run
  that made TLS connections, how many of their handshakes resumed a session (a full one is most of
  what a new https connection costs).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from typing import TextIO

from polecat.node.stats import CrawlStats
from polecat.node.verdict import explained

CLEAR_TO_EOL = "\x1b[K"
MAX_GIVEN_UP_LISTED = 20


def _counts(pairs: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{k} {v}" for k, v in pairs) or "none"


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    value = float(n)
    for unit in ("kB", "MB", "GB"):
        value /= 1000
        if value < 1000 or unit == "GB":
            break
    return f"{value:.1f} {unit}"


def _hosts(n: int) -> str:
    return f"{n} host" + ("" if n == 1 else "s")


def waiting_on(s: CrawlStats) -> str:
    """What an idle run waits for, or ``""`` while requests are in flight, hosts are ready, or the next
    one is due within a second (ordinary pacing is not worth a word)."""
    if s.in_flight or s.hosts_ready or not s.hosts_waiting:
        return ""
    if not s.hosts_backoff and s.next_ready_in < 1.0:
        return ""
    why = f"{_hosts(s.hosts_backoff)} in backoff" if s.hosts_backoff else f"{_hosts(s.hosts_waiting)} paced"
    return f"waiting {s.next_ready_in:.0f} s: {why}" if s.next_ready_in else f"waiting: {why}"


def progress_line(s: CrawlStats, width: int) -> str:
    """One redraw of the progress line for a terminal ``width`` columns wide (see the module rules)."""
    text = progress_text(s)[: max(1, width - 1)]  # the last column would wrap on some terminals
    return "\r" + text + CLEAR_TO_EOL


def progress_text(s: CrawlStats) -> str:
    """The progress line's words, plain (also a service's status line). The most useful facts come
    first, so a narrow terminal cuts the least useful."""
    errors = sum(n for _, n in s.errors)
    wait = waiting_on(s)
    parts = [f"{s.fetches} fetched", f"{s.queued} queued"]
    if not wait:
        parts.append(f"{s.in_flight} in flight")
    parts += [f"{errors} errors", f"{s.fetches_per_s:.1f} pages/s"]
    if wait:
        parts.append(wait)
    if s.parked:
        host, reason = s.parked[-1]
        gave_up = _hosts(max(s.hosts_parked, len(s.parked)))
        parts.append(f"gave up {gave_up}, last {host} ({short_reason(reason)})")
    return "  ".join(parts)


def short_reason(reason: str) -> str:
    """The gist of a give-up reason for the progress line: ``gave up after 3 attempts (dns: h: NXDOMAIN)``
    -> ``dns``; ``... (robots.txt answered 503)`` -> ``robots.txt answered 503``."""
    inner = reason[reason.find("(") + 1 : reason.rfind(")")] if "(" in reason else reason
    head, sep, _ = inner.partition(": ")
    return head if sep else inner


def print_summary(s: CrawlStats, out: TextIO, *, data_dir: str = "", interrupted: bool = False,
                  refresh: bool = False) -> None:
    """The end-of-run summary (see the module rules), each line wrapped at :data:`SUMMARY_WIDTH`
    columns. The freshness SLO is shown with ``refresh`` on (a one-off crawl has no refresh schedule to
    keep), and the politeness self-check only when it found a request sent early (it must never)."""
    ended = "Ctrl-C" if interrupted else (s.ended or "running")
    errors = sum(n for _, n in s.errors)
    lines = [f"this run: {s.fetches} fetches, {s.answered} answered, {errors} errors in {s.elapsed_s:.1f}s "
             f"({s.fetches_per_s:.1f}/s)",
             f"  ended: {ended}",
             f"  outcomes: {_counts(s.urls_done)}",
             f"  errors: {_counts(s.errors)}",
             f"  links: {s.urls_accepted} new URLs queued, {s.urls_seen_again} already known",
             f"  links refused: {_counts(s.urls_rejected)}"]
    if s.pages_cut:
        lines.append(f"  pages cut by the parse budget: {s.pages_cut} (links before the cut kept)")
    if s.requisites_queued:
        lines.append(f"  page requisites: {s.requisites_queued} queued (images, stylesheets, scripts, fonts)")
    if s.near_rebuild_left:
        lines.append(f"  near-dup index: {s.near_rebuild_left} older records left to index "
                     "(next run goes on)")
    if s.near_duplicates:
        lines.append(f"  near-duplicates: {s.near_duplicates} pages recorded as duplicates of another")
    if s.loop_lag_max:
        lines.append(f"  event loop late: p99 {1000 * s.loop_lag_p99:.0f} ms, "
                     f"max {1000 * s.loop_lag_max:.0f} ms; with polecat on a CPU: "
                     f"p99 {1000 * s.loop_busy_p99:.0f} ms, max {1000 * s.loop_busy_max:.0f} ms; "
                     f"{s.loop_stalls} stalls of 50 ms or more; with the loop's thread on a CPU: "
                     f"p99 {1000 * s.loop_own_p99:.0f} ms, max {1000 * s.loop_own_max:.0f} ms, "
                     f"{s.loop_own_stalls} stalls")
    if s.collector:
        lines.append(f"  garbage collector: {s.collector}")
    if s.tls_handshakes:
        lines.append(f"  TLS handshakes: {s.tls_handshakes}, {s.tls_resumed} resumed "
                     f"({s.tls_resumed / s.tls_handshakes:.0%})")
    lines += [f"  gave up {host}: {explained(reason)}" for host, reason in s.parked[:MAX_GIVEN_UP_LISTED]]
    listed = min(len(s.parked), MAX_GIVEN_UP_LISTED)
    if max(s.hosts_parked, len(s.parked)) > listed:  # the hosts parked out of memory are counted only
        lines.append(f"  ... and {max(s.hosts_parked, len(s.parked)) - listed} more hosts given up")
    where = f" ({data_dir})" if data_dir else ""
    total = sum(n for _, n in s.urls_done_total)
    lines += [f"whole crawl{where}:",
              f"  {s.queued} still queued, {total} URLs done, {_hosts(s.hosts)}; "
              f"store {s.pages_stored} bodies, {_size(s.bytes_stored)}"]
    if s.politeness_violations:
        lines.append(f"  politeness violations {s.politeness_violations}: requests sent before their host's "
                     "next-allowed time (a bug in polecat: please report it)")
    if refresh and s.freshness is not None and s.freshness[0]:
        lines.append(f"  refresh: {freshness_line(*s.freshness)}; {s.refresh_queued} queued again "
                     "in this run")
    for line in lines:
        print(wrap_line(line), file=out)


SUMMARY_WIDTH = 80


def wrap_line(line: str) -> str:
    """``line`` wrapped at :data:`SUMMARY_WIDTH`, continuation lines indented two more spaces than it (a
    word longer than the width, such as a URL, stays whole)."""
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.fill(line, SUMMARY_WIDTH, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)


def freshness_line(tracked: int, due: int, important: int, within: int) -> str:
    """The freshness SLO in words (summary and ``polecat status``)."""
    slo = f"{within / important:.1%} of {important} important pages" if important else "no important pages"
    return f"{tracked} URLs scheduled, {due} due now; freshness SLO {slo} within their change window"
