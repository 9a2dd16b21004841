"""The native kernels: optional C extensions, each a faster twin of a pure-Python function.

Rules:

1. The pure-Python path is the specification and stays tested; a kernel gives identical results (its
   tests compare the two on generated input and on the benchmark corpora).
2. A kernel is optional: ``pip install`` builds it when a C compiler is there (setup.py) and succeeds
   without it; :func:`load` then answers ``None`` and the caller runs its Python path.
3. ``POLECAT_PURE_PYTHON=1`` makes :func:`load` answer ``None`` for every kernel, so both paths can be run
   and compared in one checkout. ``POLECAT_REQUIRE_NATIVE`` (set in CI) makes the test suite fail when a
   kernel in :data:`KERNELS` does not import.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

KERNELS = ("polecat.dedup._minhash", "polecat.parse._extract", "polecat.dedup._canon", "polecat.parse._guard",
           "polecat.store._warc", "polecat.dedup._bloom", "polecat.cluster._claims",
           "polecat.cluster._claimwire")
"""Module name of every native kernel that setup.py builds."""


def load(name: str) -> ModuleType | None:
    """The kernel module ``name`` (one of :data:`KERNELS`), or ``None`` when it was not built or
    ``POLECAT_PURE_PYTHON=1`` is set."""
    if name not in KERNELS:
        raise ValueError(f"{name!r} is not a native kernel (polecat.native.KERNELS)")
    if os.environ.get("POLECAT_PURE_PYTHON") == "1":
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
