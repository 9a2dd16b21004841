"""The native kernels' loader (polecat/native.py): every listed kernel loads when CI requires it, and
POLECAT_PURE_PYTHON=1 turns them all off."""

from __future__ import annotations

import importlib
import os

import pytest

from polecat import native


@pytest.mark.parametrize("name", native.KERNELS)
def test_kernel_loads_when_required(name: str) -> None:
    """In CI (.ci/run sets POLECAT_REQUIRE_NATIVE) a kernel that did not build fails here; elsewhere a
    missing compiler only means the pure-Python path runs."""
    try:
        importlib.import_module(name)
    except ImportError as exc:
        if os.environ.get("POLECAT_REQUIRE_NATIVE"):
            pytest.fail(f"POLECAT_REQUIRE_NATIVE is set but {name} did not load: {exc}")
        pytest.skip(f"{name} is not built (no C compiler at install?)")
    if os.environ.get("POLECAT_PURE_PYTHON") != "1":
        assert native.load(name) is not None


@pytest.mark.parametrize("name", native.KERNELS)
def test_pure_python_switch_turns_every_kernel_off(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLECAT_PURE_PYTHON", "1")
    assert native.load(name) is None


def test_unknown_kernel_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a native kernel"):
        native.load("polecat.dedup.minhash")
