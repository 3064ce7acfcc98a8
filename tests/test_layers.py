"""Imports point downward only (docs/development.md, "Layout"): parse every module and check its imports."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"

# Higher number = higher layer. A module may import its own layer or any lower one.
RANK = {
    "errors": 0,
    "config": 1,
    "home": 1,
    "inotify": 1,
    "stamp": 1,
    "ondisk": 0,
    "store": 2,
    "audit": 2,
    "process": 3,
    "approvals": 3,
    "shell": 4,
    "jobs": 5,
    "shells": 5,
    "tools": 6,
    "mcp": 7,
    "panel": 7,
    "library": 7,
    "cli": 8,
    "__main__": 8,
}
# Siblings in one rank that must not import each other.
FORBIDDEN_SIBLINGS = {
    ("jobs", "shells"),
    ("shells", "jobs"),
    ("mcp", "panel"),
    ("mcp", "library"),
    ("panel", "library"),
    ("library", "panel"),
    ("store", "audit"),
    ("approvals", "process"),
    ("process", "approvals"),
}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "tether" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path, src: Path = SRC) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    package = ".".join(("tether", *path.relative_to(src).with_suffix("").parts))
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


# ---- faces: nothing above a package reaches past its __init__ ------------------------------------

# Packages whose face is their only door from outside: ``tether.shells`` (and its sub-packages),
# ``tether.shell.sandbox``, ``tether.shells.hosts``, ``tether.shells.hosts.ssh``,
# ``tether.shells.guard``, ``tether.shells.guard.rules``, ``tether.tools.shells``,
# ``tether.tools.shells.args``, ``tether.tools.bash``, ``tether.tools.people``, ``tether.store.vault``,
# ``tether.panel.terminal``.
FACED = (
    "shells",
    "shell.sandbox",
    "shells.hosts",
    "shells.hosts.ssh",
    "shells.guard",
    "shells.guard.rules",
    "tools.shells",
    "tools.shells.args",
    "tools.bash",
    "tools.people",
    "store.vault",
    "panel.terminal",
)


def face_violations(src: Path) -> list[str]:
    found = []
    for path in src.rglob("*.py"):
        rel = path.relative_to(src)
        for imported in _imports(path, src):
            parts = imported.split(".")
            for face in FACED:
                inner = face.split(".")
                past_face = parts[0] == "tether" and parts[1:-1][: len(inner)] == inner
                own = [part.removesuffix(".py") for part in rel.parts[: len(inner)]]
                if past_face and own != inner:
                    found.append(f"{rel} imports {imported} (use the face: from tether.{face} import …)")
    return found


def test_nothing_outside_a_faced_package_imports_past_its_face() -> None:
    violations = face_violations(SRC)
    assert not violations, "imports past a package's face:\n" + "\n".join(violations)


def test_face_checker_sees_a_planted_violation(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "bad.py").write_text("from tether.shells.runs import run\n", encoding="utf-8")
    (tmp_path / "tools" / "good.py").write_text("from tether.shells import run\n", encoding="utf-8")
    assert face_violations(tmp_path) == [
        "tools/bad.py imports tether.shells.runs (use the face: from tether.shells import …)"
    ]


def test_face_checker_sees_a_planted_violation_of_a_nested_face(tmp_path: Path) -> None:
    (tmp_path / "shell" / "sandbox").mkdir(parents=True)
    planted = {
        "shell/bad.py": "from tether.shell.sandbox.policy import X\n",
        "shell/good.py": "from tether.shell.sandbox import X\n",
        "shell/sandbox/inner.py": "from tether.shell.sandbox.policy import X\n",
    }
    for name, text in planted.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert face_violations(tmp_path) == [
        "shell/bad.py imports tether.shell.sandbox.policy (use the face: from tether.shell.sandbox import …)"
    ]


# ---- one place builds tmux commands ---------------------------------------------------------------

TMUX_WORDS = frozenset(
    {
        "attach-session",
        "capture-pane",
        "display-message",
        "has-session",
        "if-shell",
        "kill-server",
        "kill-session",
        "list-clients",
        "list-panes",
        "list-sessions",
        "load-buffer",
        "new-session",
        "paste-buffer",
        "pipe-pane",
        "resize-window",
        "respawn-pane",
        "run-shell",
        "save-buffer",
        "send-keys",
        "set-buffer",
        "set-hook",
        "set-option",
        "show-options",
        "wait-for",
    }
)
TMUX_MODULE = Path("shells") / "tmux" / "commands.py"


def tmux_command_sites(src: Path) -> list[str]:
    """String constants that spell a tmux command (or run ``tmux`` itself) outside the one module."""
    found = []
    for path in src.rglob("*.py"):
        rel = path.relative_to(src)
        if rel == TMUX_MODULE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                words = node.value.split()
                if node.value == "tmux" or (words and words[0] in TMUX_WORDS):
                    found.append(f"{rel}:{node.lineno}: {node.value[:40]!r}")
    return found


def test_no_tmux_command_is_built_outside_the_tmux_module() -> None:
    sites = tmux_command_sites(SRC)
    assert not sites, "tmux commands built outside shells/tmux/commands.py:\n" + "\n".join(sites)


def test_tmux_checker_sees_a_planted_command(tmp_path: Path) -> None:
    (tmp_path / "panel").mkdir()
    (tmp_path / "panel" / "bad.py").write_text('ARGS = ("send-keys", "-t", "x")\n', encoding="utf-8")
    assert tmux_command_sites(tmp_path) == ["panel/bad.py:1: 'send-keys'"]
