"""polecat ships its annotations (PEP 561): mypy --strict checks a program that embeds it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "polecat"

SCRIPT = """\
from polecat import Config, Crawler, config_from_mapping

cfg: Config = config_from_mapping({"scope": {"seeds": ["http://127.0.0.1:1/"]}})
crawler = Crawler(cfg)
limit: int = cfg.scope.max_pages
"""


@pytest.mark.slow
def test_mypy_strict_checks_a_program_that_embeds_polecat(tmp_path: Path) -> None:
    site, app = tmp_path / "site", tmp_path / "app"
    site.mkdir()
    app.mkdir()
    (site / "polecat").symlink_to(PACKAGE)  # found on the path as an installed package is
    (app / "embed.py").write_text(SCRIPT)
    run = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "embed.py"], cwd=app,
                         env={"PYTHONPATH": str(site)}, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_marker_and_stubs_are_package_data() -> None:
    """A wheel carries what package-data names: py.typed and the native kernels' stubs."""
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    data = project["tool"]["setuptools"]["package-data"]["polecat"]
    assert "py.typed" in data and (PACKAGE / "py.typed").is_file()
    stubs = {p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.pyi")}
    assert stubs and all(any(s.match(pattern) for pattern in data) for s in stubs), stubs
