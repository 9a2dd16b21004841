"""The house in figures: modules and lines, the largest files and classes, the longest functions, cycles
between packages and the imports that break ARCHITECTURE.md's floor plan (by the same check as
tests/test_architecture.py, loaded from there). ``python -m benchmarks.floorplan [ROOT]``: ROOT is a
checkout (default: this one); point it at an old tree to compare."""

from __future__ import annotations

import argparse
import ast
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent.parent
TOP = 5


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_architecture", HERE / "tests" / "test_architecture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package(module: str, root: Path) -> str:
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (root / "polecat" / parts[1]).is_dir()):
        return ".".join(parts[:2])
    return module


def _cycles(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted({(a, b) for a, deps in graph.items() for b in deps if a < b and a in graph.get(b, set())})


def report(root: Path) -> dict[str, Any]:
    """The figures of the tree at ``root`` (its ``polecat/`` package)."""
    check = _checker()
    files = sorted((root / "polecat").rglob("*.py"))
    sizes: list[tuple[int, str]] = []
    functions: list[tuple[int, str]] = []
    classes: list[tuple[int, str]] = []
    graph: dict[str, set[str]] = {}
    for path in files:
        rel = str(path.relative_to(root))
        text = path.read_text()
        sizes.append((text.count("\n"), rel))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                assert node.end_lineno is not None
                span = (node.end_lineno - node.lineno + 1, f"{rel}:{node.name}")
                (classes if isinstance(node, ast.ClassDef) else functions).append(span)
        module = check.module_name(path, root)
        pkg = _package(module, root)
        for target in check.imported(path, module, root):
            if _package(target, root) != pkg:
                graph.setdefault(pkg, set()).add(_package(target, root))
    upward = check.violations(root / "polecat") if (HERE / "ARCHITECTURE.md").exists() else []
    return {
        "modules": len(files), "lines": sum(n for n, _ in sizes),
        "largest files": sorted(sizes, reverse=True)[:TOP],
        "largest classes": sorted(classes, reverse=True)[:TOP],
        "longest functions": sorted(functions, reverse=True)[:TOP],
        "package cycles": _cycles(graph),
        "imports against the floor plan": upward,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", nargs="?", type=Path, default=HERE)
    args = parser.parse_args()
    for name, value in report(args.root.resolve()).items():
        if isinstance(value, list):
            print(f"{name} ({len(value)}):")
            for item in value:
                print("   ", " ".join(map(str, item)) if isinstance(item, tuple) else item)
        else:
            print(f"{name}: {value}")


if __name__ == "__main__":
    main()
