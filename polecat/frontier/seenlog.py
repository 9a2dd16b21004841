"""The ``seen`` table as sorted immutable runs of fixed-size keys, written in sequence, never in place.

Why (issue 39, benchmarks/README.md "Issue 39: bytes written per URL"): in an LMDB B-tree every new URL
fingerprint is a random key, so each insert dirties a leaf page of its own, and LMDB copies every dirty
page (4 KiB, plus its branch pages) at each commit: ~4 KB written per 18-byte key. Here a commit writes
its new keys once, sorted and packed (18 bytes each), and merges rewrite each key once per level.

Rules:

1. Keys are 18 bytes (a slice prefix and a URL fingerprint, polecat/frontier/keys.py rule 2); values are
   empty. A ``Put`` goes to the memtable (a set); reads see it at once (polecat/frontier/tables.py rule 2).
2. A commit writes the memtable, less the keys already in a run, as one sorted run file, fsynced (the
   file and its directory) before the LMDB commit whose ``meta`` lists it (:data:`MANIFEST`). The run is
   prepared (:meth:`SeenRuns.prepare`: the memtable sorted, the keys in runs taken out, the manifest)
   on the writer thread too, as the commit's first step (polecat/frontier/db.py rule 4): on the event
   loop it held the loop 55-160 ms at an LMDB commit of a 100,000-host breadth crawl (benchmarks/README.md
   "Issue 39: loop stalls, second pass"). The memtable is sorted as one numpy array of its keys joined
   (81 ms a Python sort of 150,000 keys into an array, 30 ms so). So a run
   is listed only once it is durable, and what was applied after the last commit is lost on a crash,
   nothing committed is (tables.py rule 4). At open, a run file the manifest does not list (a commit or
   a merge cut short by a crash, or the inputs of a merge whose commit was durable) is deleted.
3. Each run has an order (flushed runs count up). ``DeleteSlices`` drops the memtable's keys of those
   slices and records, per slice, the order of the next run: a key of that slice in a run ordered below
   it is released, invisible to reads. Released keys are dropped when their run is merged; a release is
   forgotten once no run is ordered below it.
4. Merges are tiered: once a level holds :data:`FANOUT` runs, they are merged (released keys dropped)
   into one run of the next level on a background thread; the merged run takes the largest order of its
   inputs (so a release recorded during the merge still hides what it must), is listed by the next
   commit's manifest in place of its inputs, and the inputs are deleted once that commit is durable.
5. A lookup asks the memtable, then each run by binary search over its memory-mapped sorted array. Live
   keys are in one place only (rule 2 skips those in a run, merges are of disjoint runs), so counts add
   up and :meth:`SeenRuns.items` yields each key once.
6. A :meth:`SeenRuns.view` reads the runs and releases of the last commit (tables.py rule 5); a merged
   run's inputs stay readable by the views holding them (a deleted file's mapping lives on).
7. Each run records the sequence of the LMDB commit that listed it (a merged run: the largest of its
   inputs'; the manifest's fourth field, absent from runs listed before this rule: unknown), so
   :meth:`SeenRuns.keys_after` answers a superset of the keys committed after a given commit: the
   memtable's and every run's whose sequence is later or unknown. The seen-set's Bloom snapshot of an
   earlier commit is brought up to date with them at open (polecat/dedup/seen.py), not rebuilt from every
   key: after a kill -9 of a 1M-host crawl the rebuild was ~0.9 s of CPU of a ~2.2 s open at 1.28M keys,
   and grows with the table (38-99 s at 50M; benchmarks/README.md, "Issue 39: a resume after a kill -9").
"""

from __future__ import annotations

import heapq
import json
import logging
import os
from collections.abc import Collection, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from polecat.frontier.slices import PREFIX_LEN

if TYPE_CHECKING:
    import numpy as np
# Elsewhere numpy is imported by the functions that use it: what imports the frontier without reading a
# run (the --workers parent, the read commands) loads no numpy (tests/test_startup.py).

KEY_LEN = 18
"""Bytes of a seen key (rule 1)."""
FANOUT = 8
"""Runs of one level merged into one of the next (rule 4)."""
MANIFEST = b"seen_runs"
"""Meta key of the manifest: the runs, the releases, the live count (rule 2)."""
_DTYPE = f"S{KEY_LEN}"
"""The numpy dtype of a run's keys (a string: numpy is imported where a run is used)."""
_FIRST_RUN = 2_000
"""Keys of a commit's run, roughly (``frontier.commit_ops``): sizes a loaded run's level."""
_CHUNK = 8192
"""Keys decoded at a time by :meth:`SeenView.items`."""
_MERGE_CHUNK = 262_144
"""Keys read from each input at a time by a merge (~4.5 MB each)."""

log = logging.getLogger("polecat")


@dataclass(frozen=True, slots=True)
class Run:
    """One sorted run file (rule 2): ``keys`` is its memory-mapped array (an empty one, of a merge whose
    every key was released, is an empty array: mmap refuses an empty file)."""

    name: int
    order: int
    level: int
    keys: np.ndarray
    seq: int | None = None
    """The LMDB commit that listed it (rule 7; None: listed before the rule)."""

    def __len__(self) -> int:
        return len(self.keys)

    def span(self, prefix: bytes) -> tuple[int, int]:
        """The index range of the keys starting with ``prefix``."""
        keys = self.keys
        if not prefix:
            return 0, len(keys)
        # The array's own methods: no import statement on the lookup path.
        lo = int(keys.searchsorted(prefix, "left"))
        hi = int(keys.searchsorted(prefix + b"\xff" * (KEY_LEN - len(prefix)), "right"))
        return lo, hi

    def has(self, key: bytes) -> bool:
        keys = self.keys
        i = int(keys.searchsorted(key))
        # Compare raw bytes: numpy strips the trailing NULs of an element it returns.
        return i < len(keys) and keys[i : i + 1].tobytes() == key


def manifest_count(manifest: bytes | memoryview | None) -> int:
    """The live keys a stored manifest counts (0 for none: no commit wrote a run yet)."""
    return int(json.loads(bytes(manifest))["live"]) if manifest is not None else 0


def run_path(directory: Path, name: int) -> Path:
    return directory / f"{name:012d}.run"


def _released(run: Run, key: bytes, releases: Mapping[bytes, int]) -> bool:
    bound = releases.get(key[:PREFIX_LEN])
    return bound is not None and run.order < bound


def _live_spans(run: Run, prefix: bytes, releases: Mapping[bytes, int]) -> list[tuple[int, int]]:
    """The index ranges of ``run``'s live keys starting with ``prefix`` (rule 3), in order."""
    lo, hi = run.span(prefix)
    if len(prefix) >= PREFIX_LEN:  # within one slice (an export reads slice by slice): one lookup
        bound = releases.get(prefix[:PREFIX_LEN])
        return [] if lo >= hi or (bound is not None and run.order < bound) else [(lo, hi)]
    dead = sorted(run.span(p) for p, bound in releases.items() if run.order < bound and p.startswith(prefix))
    spans = []
    for start, end in dead:
        if start > lo:
            spans.append((lo, min(start, hi)))
        lo = max(lo, end)
    if lo < hi:
        spans.append((lo, hi))
    return [(a, b) for a, b in spans if a < b]


def _needed(releases: Mapping[bytes, int], runs: Iterable[Run]) -> dict[bytes, int]:
    """The releases that still hide keys of some run (rule 3: the others are forgotten)."""
    oldest = min((r.order for r in runs), default=None)
    return {p: b for p, b in releases.items() if oldest is not None and oldest < b}


def _split(raw: bytes) -> list[bytes]:
    return [raw[i : i + KEY_LEN] for i in range(0, len(raw), KEY_LEN)]


def _keys_in(run: Run, lo: int, hi: int) -> Iterator[bytes]:
    """The keys ``lo`` to ``hi`` of ``run``, decoded :data:`_CHUNK` at a time."""
    for start in range(lo, hi, _CHUNK):
        yield from _split(run.keys[start : min(hi, start + _CHUNK)].tobytes())


@dataclass(frozen=True, slots=True)
class SeenView:
    """The seen keys in runs (with their releases), without a memtable: a commit's state (rule 6)."""

    runs: tuple[Run, ...]
    releases: Mapping[bytes, int]

    def get(self, key: bytes) -> bytes | None:
        releases = self.releases
        for run in self.runs:
            if run.has(key):
                return None if _released(run, key, releases) else b""
        return None

    def items(self, prefix: bytes = b"", extra: Iterable[bytes] = ()) -> Iterator[tuple[bytes, bytes]]:
        """``(key, b"")`` of every live key starting with ``prefix``, in key order; ``extra``: more keys,
        sorted (the memtable's)."""
        streams = [self._run_keys(run, prefix) for run in self.runs]
        last = None
        for key in heapq.merge(extra, *streams):
            if key != last:  # a memtable key put again while in a run (rule 5 holds from the commit on)
                yield key, b""
            last = key

    def _run_keys(self, run: Run, prefix: bytes) -> Iterator[bytes]:
        for lo, hi in _live_spans(run, prefix, self.releases):
            yield from _keys_in(run, lo, hi)

    def close(self) -> None:
        """Nothing to release: the runs' mappings go with the last reference."""


@dataclass(slots=True)
class _Prepared:
    """A commit being made: its new run (written on the writer thread), the merge it installs."""

    fresh: np.ndarray
    name: int
    order: int
    merged: tuple[Run, tuple[Run, ...]] | None
    manifest: bytes
    seq: int


@dataclass(slots=True)
class _State:
    runs: list[Run] = field(default_factory=list)
    releases: dict[bytes, int] = field(default_factory=dict)
    next_name: int = 1
    next_order: int = 1
    live: int = 0
    """Live keys in runs (the memtable's not counted)."""


def _not_a_key(key: bytes) -> ValueError:
    """The error of a write of ``key``, not :data:`KEY_LEN` bytes long, to the table (rule 1)."""
    return ValueError(f"seen keys are {KEY_LEN} bytes (slice and URL fingerprint), not {len(key)}: {key!r}")


class SeenRuns:
    """The log-structured ``seen`` table of one frontier database (see the module docstring). Its
    callers are one thread (the event loop's), but for :meth:`write_run`, called on the writer thread
    between :meth:`prepare` and :meth:`committed`."""

    def __init__(self, directory: Path, manifest: bytes | None, *, fanout: int | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.fanout = fanout or FANOUT
        self._state = self._load(manifest)
        self._mem: set[bytes] = set()
        self._merging: Future[Run] | None = None
        self._merge_inputs: tuple[Run, ...] = ()
        self._merger = ThreadPoolExecutor(1, thread_name_prefix="polecat-seen-merge")
        self._prepared: _Prepared | None = None
        self._committed = SeenView(tuple(self._state.runs), dict(self._state.releases))

    # --- opening ---------------------------------------------------------------------------------

    def _load(self, manifest: bytes | None) -> _State:
        state = _State()
        listed: set[str] = set()
        if manifest is not None:
            info = json.loads(manifest)
            state.next_name, state.next_order = info["next_name"], info["next_order"]
            state.live = info["live"]
            state.releases = {bytes.fromhex(p): b for p, b in info["releases"].items()}
            for name, order, level, *seq in info["runs"]:
                path = run_path(self.directory, name)
                state.runs.append(Run(name, order, level, _map(path), seq[0] if seq else None))
                listed.add(path.name)
        for path in self.directory.iterdir():
            if path.name not in listed:
                log.info("seen table: removing %s, a run no commit lists (rule 2)", path)
                path.unlink()
        state.runs.sort(key=lambda r: -r.order)
        return state

    # --- reads -----------------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        """``b""`` if ``key`` is seen (applied, committed or not), None if not (rule 5)."""
        if key in self._mem:
            return b""
        state = self._state
        releases = state.releases
        for run in state.runs:
            if run.has(key):
                return None if _released(run, key, releases) else b""
        return None

    def keys_after(self, seq: int) -> Iterator[bytes]:
        """Every key committed after the commit ``seq``, and maybe more (rule 7): the memtable's, then
        those of each run whose LMDB commit is later than ``seq`` or unknown (released or not)."""
        yield from self._mem
        for run in self._state.runs:
            if run.seq is None or run.seq > seq:
                yield from _keys_in(run, 0, len(run))

    def items(self, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Every seen key starting with ``prefix``, in key order, with its empty value."""
        mem = sorted(k for k in self._mem if k.startswith(prefix))
        view = SeenView(tuple(self._state.runs), dict(self._state.releases))
        return view.items(prefix, iter(mem))

    def count(self) -> int:
        """The seen keys: those in runs and the memtable's new ones."""
        return self._state.live + len(self._fresh(self._mem_sorted()))

    def _mem_sorted(self) -> np.ndarray:
        """The memtable's keys, sorted, as one array (rule 2)."""
        import numpy as np
        return np.sort(np.frombuffer(b"".join(self._mem), dtype=_DTYPE))

    def view(self) -> SeenView:
        """The last commit's keys (rule 6)."""
        return self._committed

    # --- writes ----------------------------------------------------------------------------------

    def put(self, key: bytes) -> None:
        """Add ``key`` (rule 1)."""
        if len(key) != KEY_LEN:
            raise _not_a_key(key)
        self._mem.add(key)

    def put_many(self, keys: Collection[bytes]) -> None:
        """:meth:`put` of each of ``keys`` (a seeds batch's, a replay's), checked in one pass, no call a key:
        none is added if one is not a key (rule 1)."""
        if any(map(KEY_LEN.__ne__, map(len, keys))):
            raise _not_a_key(next(key for key in keys if len(key) != KEY_LEN))
        self._mem.update(keys)

    def delete(self, key: bytes) -> None:
        """Remove one key (only from the memtable: the frontier deletes seen keys by slice only)."""
        if self.get(key) is not None and key not in self._mem:
            raise ValueError("a committed seen key is removed with its slice (DeleteSlices), not alone")
        self._mem.discard(key)

    def delete_slices(self, prefixes: list[bytes]) -> int:
        """Release every key of the slices with ``prefixes`` (rule 3); returns how many there were."""
        state = self._state
        gone = 0
        for prefix in prefixes:
            mem = [k for k in self._mem if k.startswith(prefix)]
            self._mem.difference_update(mem)
            gone += len(mem)
            for run in state.runs:
                if not _released(run, prefix, state.releases):
                    lo, hi = run.span(prefix)
                    state.live -= hi - lo
                    gone += hi - lo
            state.releases[prefix] = state.next_order
        return gone

    def load_sorted(self, keys: Iterator[bytes]) -> int:
        """Write ``keys`` (in key order, distinct: an LMDB table's) as one run, durable, to be listed by
        the next commit (an upgrade, polecat/frontier/db.py rule 5); returns how many."""
        state = self._state
        name, order = state.next_name, state.next_order
        path = run_path(self.directory, name)
        tmp = path.with_suffix(".tmp")
        n = 0
        last = b""
        with open(tmp, "wb") as fh:
            for key in keys:
                key = bytes(key)
                if len(key) != KEY_LEN or key <= last:
                    raise ValueError(f"seen key {key!r} is not an {KEY_LEN}-byte key in order")
                fh.write(key)
                last = key
                n += 1
            fh.flush()
            os.fsync(fh.fileno())
        if not n:
            tmp.unlink()
            return 0
        _publish(tmp, path, self.directory)
        state.next_name, state.next_order = name + 1, order + 1
        level = 0
        while self.fanout ** (level + 1) * _FIRST_RUN <= n:
            level += 1
        state.runs.insert(0, Run(name, order, level, _map(path)))
        state.live += n
        return n

    # --- commits ---------------------------------------------------------------------------------

    def prepare(self, seq: int) -> bytes:
        """Freeze the memtable into the next run and answer the manifest the LMDB commit ``seq`` stores
        (rule 2: on the writer thread, with no other call meanwhile); :meth:`write_run` then makes the run
        durable, and :meth:`committed` ends the commit."""
        state = self._state
        # The memtable stays readable until the commit is durable (:meth:`committed` empties it).
        fresh = self._fresh(self._mem_sorted())
        merged = None
        if self._merging is not None and self._merging.done():
            merged = (self._merging.result(), self._merge_inputs)
            self._merging, self._merge_inputs = None, ()
        name, order = state.next_name, state.next_order
        if len(fresh):
            state.next_name += 1
            state.next_order += 1
        runs = [r for r in state.runs if merged is None or r not in merged[1]]
        runs += [merged[0]] if merged else []
        keep = _needed(state.releases, runs)
        live = state.live + len(fresh)
        listed = ([(r.name, r.order, r.level, r.seq) if r.seq is not None else (r.name, r.order, r.level)
                   for r in runs] + ([(name, order, 0, seq)] if len(fresh) else []))
        manifest = json.dumps({"runs": listed, "releases": {p.hex(): b for p, b in keep.items()},
                               "next_name": state.next_name, "next_order": state.next_order,
                               "live": live}).encode()
        self._prepared = _Prepared(fresh, name, order, merged, manifest, seq)
        return manifest

    def _fresh(self, keys: np.ndarray) -> np.ndarray:
        """The sorted ``keys`` that no run holds live (rule 5: a key lives in one run only)."""
        import numpy as np
        state = self._state
        for run in state.runs:
            if len(keys) and len(run):
                idx = np.minimum(np.searchsorted(run.keys, keys), len(run) - 1)
                found = run.keys[idx] == keys
                if found.any():  # keep those found released: seen again after their slice came back
                    again = [i for i in np.flatnonzero(found).tolist()
                             if _released(run, keys[i : i + 1].tobytes(), state.releases)]
                    found[again] = False
                    keys = keys[~found]
        return keys

    def write_run(self) -> None:
        """On the writer thread, before the LMDB commit: write the prepared run and fsync it (rule 2)."""
        prepared = self._prepared
        if prepared is not None and len(prepared.fresh):
            _write(run_path(self.directory, prepared.name), prepared.fresh, self.directory)

    def committed(self) -> None:
        """The LMDB commit listing the prepared run is durable: read the run from its file, forget merged
        inputs (deleting their files), start a merge if a level is full (rule 4)."""
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            return
        self._mem = set()
        state = self._state
        if len(prepared.fresh):
            state.runs.insert(0, Run(prepared.name, prepared.order, 0,
                                     _map(run_path(self.directory, prepared.name)), prepared.seq))
            state.live += len(prepared.fresh)
        if prepared.merged is not None:
            out, inputs = prepared.merged
            state.runs = sorted([r for r in state.runs if r not in inputs] + [out], key=lambda r: -r.order)
            for run in inputs:
                run_path(self.directory, run.name).unlink(missing_ok=True)
        state.releases = _needed(state.releases, state.runs)
        self._committed = SeenView(tuple(state.runs), dict(state.releases))
        self._maybe_merge()

    def _maybe_merge(self) -> None:
        if self._merging is not None:
            return
        state = self._state
        levels: dict[int, list[Run]] = {}
        for run in state.runs:
            levels.setdefault(run.level, []).append(run)
        for level in sorted(levels):
            group = levels[level]
            if len(group) >= self.fanout:
                inputs = tuple(sorted(group, key=lambda r: r.order)[: self.fanout])
                name = state.next_name
                state.next_name += 1
                self._merge_inputs = inputs
                self._merging = self._merger.submit(
                    _merge, self.directory, name, level + 1, inputs, dict(state.releases))
                return

    def abort(self) -> None:
        """The commit failed: nothing it prepared is listed (its run file is an orphan for the next open)."""
        self._prepared = None

    def close(self) -> None:
        """Drop the memtable and wait for a merge in flight (its file is an orphan unless listed)."""
        self._mem = set()
        self._merger.shutdown(wait=True)


def _map(path: Path) -> np.ndarray:
    import numpy as np
    size = path.stat().st_size
    if size % KEY_LEN:
        raise ValueError(f"seen run {path} is {size} bytes, not a multiple of {KEY_LEN}")
    if not size:  # a merge whose every input key was released (rule 4): mmap refuses an empty file
        return np.empty(0, dtype=_DTYPE)
    return np.memmap(path, dtype=_DTYPE, mode="r")


def _write(path: Path, keys: np.ndarray, directory: Path) -> None:
    """Write ``keys`` to ``path`` and make it durable, with its directory entry (rule 2)."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        fh.write(keys.tobytes())
        fh.flush()
        os.fsync(fh.fileno())
    _publish(tmp, path, directory)


def _publish(tmp: Path, path: Path, directory: Path) -> None:
    """Rename the durable ``tmp`` to ``path`` and make the rename durable."""
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _merge(directory: Path, name: int, level: int, inputs: tuple[Run, ...],
           releases: Mapping[bytes, int]) -> Run:
    """On the merge thread: one sorted run of the live keys of ``inputs`` (rule 4), durable. Streamed a
    bounded chunk of each input at a time, so memory does not grow with the runs."""
    import numpy as np
    spans = [(run.keys, lo, hi) for run in inputs for lo, hi in _live_spans(run, b"", releases)]
    path = run_path(directory, name)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        while spans:
            heads = [keys[lo : min(hi, lo + _MERGE_CHUNK)] for keys, lo, hi in spans]
            # Everything up to the smallest last key of a chunk that does not end its span is complete.
            bound = min((h[-1:].tobytes() for h, (_, lo, hi) in zip(heads, spans, strict=True)
                         if lo + len(h) < hi), default=None)
            taken = [len(h) if bound is None else int(np.searchsorted(h, bound, "right")) for h in heads]
            fh.write(np.sort(np.concatenate([h[:n] for h, n in zip(heads, taken, strict=True)])).tobytes())
            spans = [(keys, lo + n, hi) for (keys, lo, hi), n in zip(spans, taken, strict=True)
                     if lo + n < hi]
        fh.flush()
        os.fsync(fh.fileno())
    _publish(tmp, path, directory)
    seqs = [r.seq for r in inputs]
    seq = None if None in seqs else max(s for s in seqs if s is not None)
    return Run(name, max(r.order for r in inputs), level, _map(path), seq)
