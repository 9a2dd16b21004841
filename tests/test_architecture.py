"""The floor plan in ARCHITECTURE.md holds: every import inside polecat points down a floor.

The ``layers`` block of ARCHITECTURE.md is the rule: one floor a line, top first, siblings on a floor
separated by ``|``. A module belongs to the longest component name that prefixes it. It may import its
own component and anything on a lower floor; a sibling or anything above is an error. Imports are read
from the source (top-level, in functions and under ``TYPE_CHECKING`` alike), so a lazy import cannot
hide an upward edge.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "polecat"


def floors() -> list[list[str]]:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "ARCHITECTURE.md has no ```layers block"
    return [[c.strip() for c in line.split("|")] for line in block.group(1).splitlines() if line.strip()]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path, module: str, root: Path = ROOT) -> set[str]:
    """The polecat modules (or packages) ``path`` imports, resolved to dotted names."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "polecat")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "polecat":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                where = root / sub.replace(".", "/")
                is_module = where.with_suffix(".py").exists() or where.is_dir()
                out.add(sub if is_module else target)
    out.discard(module)
    return out


def component(module: str, components: list[str]) -> str | None:
    best = None
    for c in components:
        # The root package (``polecat``, the public API) is a component of its own, not everyone's prefix.
        inside = module == c or ("." in c and module.startswith(c + "."))
        if inside and (best is None or len(c) > len(best)):
            best = c
    return best


def violations(package: Path = PACKAGE) -> list[str]:
    """Each import under ``package`` that breaks the plan, as ``module -> target: why``."""
    plan = floors()
    floor_of = {c: i for i, line in enumerate(plan) for c in line}
    out = []
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package.parent)
        own = component(module, list(floor_of))
        if own is None:
            out.append(f"{module}: on no floor of ARCHITECTURE.md")
            continue
        for target in sorted(imported(path, module, package.parent)):
            theirs = component(target, list(floor_of))
            if theirs is None:
                out.append(f"{module} -> {target}: the target is on no floor")
            elif theirs != own and floor_of[theirs] <= floor_of[own]:
                where = "a sibling on its floor" if floor_of[theirs] == floor_of[own] else "a floor above"
                out.append(f"{module} -> {target}: {theirs} is {where}")
    return out


def test_every_import_points_down_the_floor_plan() -> None:
    assert violations() == []


def test_the_plan_names_each_component_once() -> None:
    names = [c for line in floors() for c in line]
    assert len(names) == len(set(names))


def test_the_checker_sees_upward_and_sideways_imports(tmp_path: Path) -> None:
    # The rule must be able to fail: a base module reaching up to the node, a parse module reaching
    # sideways into fetch, a module on no floor; and a lazy import hides none of them.
    pkg = tmp_path / "polecat"
    for d in ("node", "parse", "fetch", "stray"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "node" / "crawler.py").write_text("from polecat.errors import PolecatError\n")
    (pkg / "fetch" / "http.py").write_text("")
    (pkg / "errors.py").write_text("def f():\n    from polecat.node.crawler import Crawler\n")
    (pkg / "parse" / "html.py").write_text("from polecat.fetch import http\nfrom . import robots\n")
    (pkg / "parse" / "robots.py").write_text("")
    found = violations(pkg)
    assert "polecat.errors -> polecat.node.crawler: polecat.node is a floor above" in found
    assert "polecat.parse.html -> polecat.fetch.http: polecat.fetch is a sibling on its floor" in found
    assert "polecat.stray: on no floor of ARCHITECTURE.md" in found
    assert not any(v.startswith("polecat.node.crawler") or "parse.robots" in v for v in found)
