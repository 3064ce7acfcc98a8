"""Imports point downward only (docs/development.md, "Layout"): parse every module and check its imports."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"

# Higher number = higher layer. A module may import its own layer or any lower one.
RANK = {
    "errors": 0,
    "config": 1,
    "store": 2,
    "audit": 2,
    "process": 3,
    "shell": 4,
    "jobs": 5,
    "shells": 5,
    "tools": 6,
    "mcp": 7,
    "panel": 7,
    "cli": 8,
    "__main__": 8,
}
# Siblings in one rank that must not import each other.
FORBIDDEN_SIBLINGS = {("jobs", "shells"), ("shells", "jobs"), ("mcp", "panel"), ("store", "audit")}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "tether" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    package = ".".join(("tether", *path.relative_to(SRC).with_suffix("").parts))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: -node.level]
                found.append(".".join([*base, *(node.module or "").split(".")]).rstrip("."))
            elif node.module:
                found.append(node.module)
    return found


def test_every_module_belongs_to_a_layer() -> None:
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.name == "__init__.py" and len(rel.parts) == 1:
            continue
        top = rel.parts[0].removesuffix(".py")
        assert top in RANK, f"{rel}: not in a known layer; add it to RANK in tests/test_layers.py"


def test_imports_point_downward() -> None:
    violations = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        own = rel.parts[0].removesuffix(".py")
        if own not in RANK:
            continue
        for imported in _imports(path):
            layer = _layer(imported)
            if layer is None or layer == own or layer not in RANK:
                continue
            if RANK[layer] > RANK[own] or (own, layer) in FORBIDDEN_SIBLINGS:
                violations.append(f"{rel} imports {imported}")
    assert not violations, "upward or sideways imports:\n" + "\n".join(violations)


def test_checker_sees_a_planted_violation(tmp_path: Path) -> None:
    planted = tmp_path / "bad.py"
    planted.write_text("from tether.tools.registry import ToolRegistry\n", encoding="utf-8")
    assert "tether.tools.registry" in _imports_for(planted)


def _imports_for(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
