"""The native kernel a test compares with its Python specification."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def kernel(name: str) -> ModuleType:
    """The built kernel module ``name``; skips the test when it is not built, except in CI
    (POLECAT_REQUIRE_NATIVE), where the ImportError propagates and fails it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("POLECAT_REQUIRE_NATIVE"):
            raise
        pytest.skip(f"{name} is not built")
