"""The release has one place, polecat/version.py: the package metadata, the command, the changelog and
the data dir's meta all say the same."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from polecat.version import __version__

ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_reads_the_version_from_polecat_version() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "polecat.version.__version__"}
    # setuptools reads the attribute without importing the package when it is a literal assignment.
    tree = ast.parse((ROOT / "polecat" / "version.py").read_text())
    literal = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
               and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__version__"]]
    assert literal == [__version__]


def test_semantic_version_with_a_changelog_entry() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert releases[0] == __version__  # the newest entry is this release


def test_polecat_version_flag() -> None:
    run = subprocess.run([sys.executable, "-m", "polecat", "--version"], capture_output=True, text=True,
                         timeout=60, check=True)
    assert run.stdout.strip() == f"polecat {__version__}"
