"""Which pywb the replay tests use: ``POLECAT_PYWB`` names its ``bin`` directory (.ci/run sets it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PYWB = Path(os.environ["POLECAT_PYWB"]) if os.environ.get("POLECAT_PYWB") else None
NEEDS_PYWB = pytest.mark.skipif(PYWB is None and not os.environ.get("POLECAT_REQUIRE_PYWB"),
                                reason="pywb is not installed (POLECAT_PYWB names its bin directory)")
"""A replay test skips without pywb, except in CI (``POLECAT_REQUIRE_PYWB``)."""


def pywb_bin() -> Path:
    """The pywb a replay test runs (it fails where CI requires pywb and none is named)."""
    assert PYWB is not None, "POLECAT_REQUIRE_PYWB is set but POLECAT_PYWB names no pywb"
    return PYWB
