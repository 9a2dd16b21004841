"""How glibc's C heap is set for a crawl: big pages' memory given back, every page's kept for the next.

1. Big pages. glibc's malloc serves large blocks with mmap and returns them on free, but it raises that
   threshold to the largest block freed so far (up to 32 MiB): after the first 10 MiB page, every later
   10 MiB buffer (a body, its decoded copy, lexbor's input) comes from the heap, whose free space is kept
   and fragments. Measured on a crawl meeting three pages at the 10 MiB body cap
   (tests/test_page_memory.py): peak RSS ~+40 MiB over an ordinary crawl with the dynamic threshold,
   ~+23 MiB with it fixed at 1 MiB. :func:`fix_mmap_threshold` fixes it (``mallopt(M_MMAP_THRESHOLD)``,
   which also stops the dynamic adjustment), for any process that runs a :class:`polecat.Crawler`.
2. Ordinary pages. Fixing that threshold also fixes glibc's trim threshold at its default: once 128 KiB
   at the top of the heap is free, it is given back to the kernel. A page's transient blocks (its body,
   decoded text, parse tree, compression workspace) come and go every page, so the heap shrank and
   regrew and the kernel zeroed and mapped the same memory again: 2-32 page faults a page in a
   10,000-page crawl, by run. :func:`keep_freed_heap` keeps up to :data:`TRIM_THRESHOLD` free at the
   top as well: every such crawl then takes 1.2-1.3 faults a page (benchmarks/README.md, "Issue 17,
   ninth pass"). The processes polecat owns set it (polecat/runloop.py rule 5); a program embedding the
   crawler keeps its own, and an operator's ``MALLOC_*_`` environment settings win.

Elsewhere than glibc both do nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "fix_mmap_threshold", "keep_freed_heap"]

MMAP_THRESHOLD = 1 << 20
"""Blocks from this size up get their own ``mmap``: bodies of a MiB and more, not pages' usual working
memory."""
TRIM_THRESHOLD = 32 << 20
"""Free bytes at the top of the heap kept for reuse before any is given back (rule 2)."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc malloc.h
_MALLOC_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def _mallopt(param: int, value: int) -> bool:
    """``mallopt(param, value)``; False where the C library has none or refuses it."""
    try:
        # The process's own symbols, the C library's among them: ctypes.util.find_library("c") would
        # find the same library by running ldconfig (a subprocess) and import subprocess to do it.
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (no mallopt), or no C library found
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(param, value))


@functools.cache
def fix_mmap_threshold() -> bool:
    """Rule 1: serve blocks of :data:`MMAP_THRESHOLD` bytes or more with mmap, for good (once per
    process). Returns whether the C library took the setting."""
    return _mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def keep_freed_heap() -> bool:
    """Rule 2, with rule 1 (the trim threshold alone would fix the mmap one at its 128 KiB default);
    False where the heap was left as it is (another C library, or ``MALLOC_*_`` settings in the
    environment)."""
    if sys.platform != "linux" or any(map(os.environ.get, _MALLOC_ENV)):
        return False
    if "CS_GNU_LIBC_VERSION" not in os.confstr_names or not os.confstr("CS_GNU_LIBC_VERSION"):
        return False  # musl and the like: their own allocators
    return _mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) and fix_mmap_threshold()
