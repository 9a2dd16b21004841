"""A seeds file streamed into the frontier while the crawl runs.

Rules (this module owns them):

1. The file is read in batches (rule 7 sizes them), each admitted through the node's ``add_seed``
   between leases (the loop runs between batches), so the first request goes out after the first batch,
   not after the whole file: a file of a million hosts used to be read, validated and admitted whole
   before anything was fetched.
2. A line is a seed URL; blank lines and ``#`` comments are skipped. A line longer than
   :data:`MAX_LINE` bytes, one that is not UTF-8, or one that is not an http(s) URL is skipped, counted
   and logged (the first :data:`LOGGED` of them): a bad line in a million is not a reason to stop. A
   line still running past :data:`GIVE_UP` bytes means the file is no list of URLs (``/dev/zero``, a
   binary): the feed stops with a ConfigError naming the line, in bounded memory and time.
3. A batch waits while the frontier is committing (its write transaction is on the writer thread).
4. While the feed runs, the crawl does not end idle (polecat/node/leases.py rule 2 asks
   :attr:`SeedFeed.running`); when it ends it wakes the loop, which then may.
5. A resume reads the file again from its start: seeds already admitted are SEEN (the seen set
   decides), so nothing is queued twice.
6. The loop gets a turn every :data:`BATCH` lines read, whether they were admitted or skipped, so a file
   of bad lines cannot hold it.
7. A batch is sized by time, not by a fixed count: the first holds :data:`FIRST_BATCH` seeds; each next
   one the last one's size scaled to take :data:`BATCH_SECONDS` on the node's clock at the rate the last
   admission ran, at most twice the last, between :data:`MIN_BATCH` and :data:`BATCH`. A fixed 2,000
   took 177 ms a batch (median) in a 50,000-host breadth crawl on a loaded VM, each one step of the
   event loop (benchmarks/README.md "Issue 39: loop stalls").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.errors import ConfigError

__all__ = ["BATCH", "BATCH_SECONDS", "FIRST_BATCH", "GIVE_UP", "LOGGED", "MAX_LINE", "MIN_BATCH", "SeedFeed"]

log = logging.getLogger("polecat")

BATCH = 2000
"""Seeds admitted between two looks at the loop at most (rules 1, 7), and lines read between two (rule 6)."""
FIRST_BATCH = 200
"""Seeds in the first batch (rule 7): the first request waits for it."""
MIN_BATCH = 50
"""Seeds in a batch at least (rule 7), however slow the last one was: the file still moves."""
BATCH_SECONDS = 0.01
"""Seconds one batch's admission aims to take (rule 7): well under the 50 ms a step of the loop may."""
MAX_LINE = 8192
"""Bytes in a seed line at most (rule 2); a URL longer than ``scope.max_url_length`` is refused later."""
LOGGED = 10
"""Skipped lines logged one by one (rule 2); the rest are only counted."""
_READ = 1 << 20
GIVE_UP = 1 << 20
"""Bytes of one line past which the file is taken for no seeds file at all (rule 2)."""


class SeedFeed:
    """Streams ``path`` into ``add_seed``; see the module docstring."""

    def __init__(self, path: Path, *, add_seeds: Callable[[list[str]], Sequence[object | None]],
                 frontier_free: Callable[[], Awaitable[object]], wake: Callable[[], None],
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._path = path
        self._clock = clock
        self.size = FIRST_BATCH
        """Seeds the next batch holds (rule 7)."""
        self._add_seeds = add_seeds
        self._frontier_free = frontier_free
        self._wake = wake
        self.running = False
        """True from :meth:`run`'s start to its end (rule 4)."""
        self.admitted = 0
        """Seed lines admitted by ``add_seeds`` (accepted, seen or refused by the frontier)."""
        self.skipped = 0
        """Lines skipped by rule 2."""

    async def run(self) -> None:
        """Admit every line of the file (rules 1-4). An unreadable file raises ConfigError."""
        self.running = True
        try:
            try:
                with self._path.open("rb", buffering=_READ) as f:
                    batch: list[str] = []
                    read = 0
                    while line := f.readline(MAX_LINE + 1):
                        read += 1
                        if read % BATCH == 0:  # rule 6
                            await asyncio.sleep(0)
                        if len(line) > MAX_LINE and not line.endswith(b"\n"):
                            self._skip_rest(f, read, line)
                            continue
                        try:
                            text = line.decode("utf-8").strip()
                        except UnicodeDecodeError:
                            self._skip(repr(line[:80]), "not UTF-8")
                            continue
                        if text and not text.startswith("#"):
                            batch.append(text)
                        if len(batch) >= self.size:
                            await self._admit(batch)
                            batch = []
                    await self._admit(batch)
            except OSError as exc:
                raise ConfigError(f"--seeds-file {self._path}: {exc.strerror or exc}") from exc
        finally:
            self.running = False
            self._wake()

    def _skip_rest(self, f: BinaryIO, number: int, start: bytes) -> None:
        """Read through the rest of an over-long line, or give up on the file (rule 2)."""
        length = len(start)
        while (rest := f.readline(_READ)) and not rest.endswith(b"\n"):
            length += len(rest)
            if length > GIVE_UP:
                raise ConfigError(f"--seeds-file {self._path}: line {number} runs past {GIVE_UP} bytes: "
                                  "not a file of seed URLs, one a line")
        self._skip(start[:80].decode("utf-8", "replace") + "...", f"longer than {MAX_LINE} bytes")

    async def _admit(self, batch: list[str]) -> None:
        await self._frontier_free()  # rule 3
        began = self._clock.monotonic()
        answers = self._add_seeds(batch)
        self._resize(len(batch), self._clock.monotonic() - began)
        refused = answers.count(None)
        self.admitted += len(batch) - refused
        if refused:  # a look at each line only in a batch that has one not a URL
            for url, answer in zip(batch, answers, strict=True):
                if answer is None:
                    self._skip(url[:200], "not an http(s) URL")
        await asyncio.sleep(0)  # rule 1: the loop leases between batches

    def _resize(self, seeds: int, took: float) -> None:
        """Rule 7: the next batch's size from how long ``seeds`` took to admit."""
        if seeds < self.size:
            return  # the file's last batch: nothing follows it
        fits = seeds * BATCH_SECONDS / took if took > 0 else BATCH
        self.size = int(max(MIN_BATCH, min(BATCH, 2 * seeds, fits)))

    def _skip(self, line: str, why: str) -> None:
        self.skipped += 1
        if self.skipped <= LOGGED:
            log.warning("seeds file %s: skipped %s: %s", self._path, line, why)
        elif self.skipped == LOGGED + 1:
            log.warning("seeds file %s: more lines skipped; counted, not logged", self._path)
