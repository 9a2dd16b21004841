"""Keep the C heap from holding on to the memory of big pages after they are gone.

glibc's malloc serves large blocks with mmap and returns them on free, but it raises that threshold to
the largest block freed so far (up to 32 MiB): after the first 10 MiB page, every later 10 MiB buffer
(a body, its decoded copy, lexbor's input) comes from the heap, whose free space is kept and fragments.
Measured on a crawl meeting three pages at the 10 MiB body cap (tests/test_page_memory.py): peak RSS
~+40 MiB over an ordinary crawl with the dynamic threshold, ~+23 MiB with it fixed at 1 MiB.

:func:`fix_mmap_threshold` fixes it (``mallopt(M_MMAP_THRESHOLD)``, which also stops the dynamic
adjustment). Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import functools

__all__ = ["MMAP_THRESHOLD", "fix_mmap_threshold"]

MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc malloc.h


@functools.cache
def fix_mmap_threshold() -> bool:
    """Serve blocks of :data:`MMAP_THRESHOLD` bytes or more with mmap, for good (once per process).
    Returns whether the C library took the setting."""
    try:
        # The process's own symbols, the C library's among them: ctypes.util.find_library("c") would
        # find the same library by running ldconfig (a subprocess) and import subprocess to do it.
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):  # not glibc (no mallopt), or no C library found
        return False
