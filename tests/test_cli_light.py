"""The command line starts light: the parser and ``tether mcp``'s early front import no heavy library.

Start-up time is measured by ``bench/startup.py``; this pins what makes it short — which modules
are loaded before a command's own handler runs — so a stray top-level import cannot creep back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import ForwardRef

import pytest

from tether.audit import DEFAULT_EVERY, SOURCES
from tether.cli import COMMAND_MODULES, build_parser
from tether.cli.commands import audit, vault
from tether.cli.commands.exec import plain_arguments
from tether.store.vault import DEFAULT_GROUP

TETHER = str(Path(sys.executable).parent / "tether")
HEAVY = {
    "mcp", "mcp_types", "pydantic", "pydantic_core", "anyio", "asyncio", "sqlite3", "cryptography",
    "tree_sitter", "tree_sitter_bash", "psutil", "uvicorn", "starlette", "httpx", "tomllib",
}  # fmt: skip
# Before ``tether mcp`` answers ``initialize`` from its cache: ``dataclasses`` (with the ``inspect``,
# ``ast`` and ``dis`` it imports, and one generated ``__init__`` per class) took ~30 ms of the
# ~120 ms to that answer on a 2-core VM (2026-12-04); ``tether.config`` uses NamedTuples instead.
# ``_hashlib`` loads OpenSSL's libcrypto (~4 ms); the handshake key is hashed with ``_blake2``.
EARLY_HEAVY = HEAVY | {"dataclasses", "inspect", "_hashlib"}


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(set(m.split('.')[0] for m in sys.modules))))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_building_the_parser_imports_no_command_implementation() -> None:
    loaded = _loaded_after("import tether.cli\ntether.cli.build_parser()")
    assert not loaded & HEAVY, sorted(loaded & HEAVY)


def test_the_early_front_of_tether_mcp_imports_nothing_heavy() -> None:
    loaded = _loaded_after(
        "import tether.cli.commands.mcp, tether.config, tether.mcp.wire, tether.mcp.handshake, "
        "tether.mcp.ids, tether.mcp.logs, tether.process.seal"
    )
    assert not loaded & EARLY_HEAVY, sorted(loaded & EARLY_HEAVY)


def test_commands_that_act_through_the_tools_import_nothing_heavy() -> None:
    """``tether shell|audit|vault …`` ask the home's tools process (``tether.cli.door``): the
    command itself loads its parser, its action and the door's client, nothing of the tools."""
    loaded = _loaded_after(
        "import tether.cli\ntether.cli.build_parser()\n"
        "import tether.cli.actions.shell, tether.cli.actions.audit, tether.cli.actions.vault, tether.cli.door"
    )
    assert not loaded & EARLY_HEAVY, sorted(loaded & EARLY_HEAVY)


def test_tether_exec_starts_the_container_before_loading_dataclasses() -> None:
    """``tether exec`` begins starting PID 1 (``container.prepare``) once these are loaded; what
    they load delays PID 1, which the spawn then waits for. ``dataclasses`` (with ``inspect``,
    ``ast`` and ``dis``) comes with the executor, after it."""
    loaded = _loaded_after("import tether.config, tether.process.seal, tether.process.container")
    assert not loaded & {"dataclasses", "inspect", "asyncio", "argparse"}, sorted(loaded)


def test_the_settings_are_made_without_compiling_their_annotations() -> None:
    """Every command loads ``tether.config``: a ``NamedTuple`` whose annotations are strings (``from
    __future__ import annotations``) compiles each into a ``ForwardRef`` as the class is made."""
    import tether.config
    import tether.process.seal

    classes = [v for m in (tether.config, tether.process.seal) for v in vars(m).values()]
    settings = [c for c in classes if isinstance(c, type) and issubclass(c, tuple) and hasattr(c, "_fields")]
    assert len(settings) >= 11
    for cls in settings:
        assert not [a for a in cls.__annotations__.values() if isinstance(a, str | ForwardRef)], cls


# The modules that name the value types ``tether.shell.late_types`` defines, and those names.
_LATE_NAMES = {
    "tether.shell.types": [
        "ConfinedLaunch", "DroppedStream", "ShellProcessRead", "ShellSandboxDenial", "ShellSandboxInfo"
    ],
    "tether.shell.env_registry": ["ProfileContext", "ShellEnvContributor", "ShellEnvVariable"],
}  # fmt: skip
_LATE_PROBE = """
import importlib, sys, tether.cli.actions.exec, tether.shell
names = json.loads(sys.argv[1])
for module, own in names.items():
    created = set(own) & set(vars(importlib.import_module(module)))
    assert not created, created
assert "tether.shell.late_types" not in sys.modules, "loaded"
from tether.shell.types import ShellSandboxInfo
import tether.shell.late_types as late
assert ShellSandboxInfo is late.ShellSandboxInfo
for module, own in names.items():
    module = importlib.import_module(module)
    assert all(getattr(module, name) is getattr(late, name) for name in own), module
    shown = [name for name in own if name in tether.shell.__all__]
    assert all(getattr(tether.shell, name) is getattr(late, name) for name in shown)
    for face in (module, tether.shell):
        try:
            face.NoSuchName
        except AttributeError:
            pass
        else:
            raise AssertionError(face)
print("ok")
"""


def test_the_late_value_types_are_the_same_classes_from_every_module_that_names_them() -> None:
    """``tether exec``'s executor does not create them (``tether.cli.actions.exec`` imports what the
    command imports); a module that names one gets the one class."""
    probe = "import json\n" + _LATE_PROBE
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(_LATE_NAMES)], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize(
    "argv", [["--version"], ["--help"], *[[m.split(".")[-1], "--help"] for m in COMMAND_MODULES]]
)
def test_version_and_help_work(argv: list[str]) -> None:
    done = subprocess.run([TETHER, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_constants_the_light_modules_repeat_are_the_real_ones() -> None:
    assert audit.SOURCES == SOURCES
    assert vault.DEFAULT_GROUP == DEFAULT_GROUP
    assert audit.DEFAULT_EVERY == DEFAULT_EVERY


def test_a_command_line_builds_only_its_own_commands_parser() -> None:
    probe = (
        "import sys, tether.cli\ntether.cli.build_parser('exec')\n"
        "print(sorted(m for m in sys.modules if m.startswith('tether.cli.commands.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "['tether.cli.commands.exec']"


def _imported_by(argv: list[str], home: Path) -> set[str]:
    """The modules a real ``tether`` process imported (``-X importtime`` prints one line each: the
    process ends without the interpreter's teardown, so it cannot be asked at its end)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tether", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TETHER_HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr
    # A failed import (``ssl``, stubbed out) prints a line too, with a few microseconds.
    return {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
        and line.split("|")[1].strip() not in ("", "cumulative")
        and int(line.split("|")[1]) > 50
    }


def test_tether_exec_loads_the_executor_it_runs_and_nothing_else(tmp_path: Path) -> None:
    loaded = _imported_by(["exec", "--", "true"], tmp_path)
    assert "tether.shell.local" in loaded and "asyncio" in loaded  # the probe sees the executor
    others = {m for m in COMMAND_MODULES if not m.endswith(".exec")}
    # ``_hashlib``: OpenSSL's libcrypto, loaded by ``secrets`` (hmac) for the spawn marker alone.
    unneeded = {"tether.shell.sandbox", "tether.approvals", "tether.audit", "sqlite3", "_ssl", "_hashlib"}
    # argparse and what its help formatter loads: `exec [OPTIONS] -- COMMAND` is read without it.
    unneeded |= {"argparse", "gettext"}
    # shutil, with bz2, lzma and zlib: the shell is looked up on PATH by `tether.shell.local.on_path`.
    unneeded |= {"shutil", "bz2", "lzma"}
    # Value types of incremental reads and confinement, ~0.7 ms each to create on 3.11.
    unneeded |= {"tether.shell.late_types"}
    unneeded |= {"mcp", *others}
    assert not loaded & unneeded, sorted(loaded & unneeded)


def test_tether_exec_loads_the_sandbox_when_it_is_the_provider(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[shell]\nprovider = "sandbox"\n', encoding="utf-8")
    assert "tether.shell.sandbox.executor" in _imported_by(["exec", "--", "true"], tmp_path)


# Command lines after `tether exec`: the usual shapes, which are read without argparse, and others
# (help, abbreviations, values argparse reads its own way, errors), which argparse reads.
_EXEC_PLAIN = [
    ["--", "true"],
    ["--", "ls", "-la"],
    ["--", "--", "x"],
    ["--"],
    ["--", "--cwd", "x"],
    ["--cwd", "/tmp", "--", "pwd"],
    ["--cwd=/tmp", "--", "pwd"],
    ["--cwd=", "--", "pwd"],
    ["--cwd=a=b", "--", "pwd"],
    ["--timeout-ms", "5", "--", "sleep", "1"],
    ["--timeout-ms=5", "--background-ok", "--", "x"],
    ["--timeout-ms", " 7 ", "--", "x"],
    ["--timeout-ms", "0", "--", "x"],
    ["--timeout-ms", "1", "--timeout-ms", "2", "--cwd", "a", "--cwd", "b", "--", "x"],
    ["--background-ok", "--background-ok", "--", "x"],
]
_EXEC_OTHER = [
    ["--timeout-ms", "-5", "--", "x"],
    ["--timeout-ms", "x", "--", "x"],
    ["--timeout-ms=", "--", "x"],
    ["--timeout-ms"],
    ["--cwd", "--", "x"],
    ["--cwd", "-", "--", "x"],
    ["--time", "5", "--", "x"],
    ["--background-ok=1", "--", "x"],
    ["-h", "--", "x"],
    ["--help"],
    ["ls", "-la"],
    ["ls", "--", "x"],
    ["--bogus", "--", "x"],
    [],
]


@pytest.mark.parametrize("words", _EXEC_PLAIN + _EXEC_OTHER, ids=" ".join)
def test_tether_exec_reads_its_usual_command_lines_as_its_parser_does(words: list[str]) -> None:
    plain = plain_arguments(words)
    try:
        args = build_parser("exec").parse_args(["exec", *words])
    except SystemExit:  # help, or a usage error: argparse's to say
        assert plain is None
        return
    if plain is not None:
        assert plain == (args.command, args.timeout_ms, args.cwd, args.background_ok)
    if words in _EXEC_PLAIN:
        assert plain is not None  # the usual shapes do not wait for argparse
