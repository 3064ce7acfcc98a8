"""The guard across calls, through the MCP client: bypasses spread over several calls or keystrokes
(state defined earlier, input assembled from pieces, IFS, process substitution, stored hooks) are
refused and a protected directory survives every one; a heredoc typed line by line is not refused;
tether's own tmux socket is refused.

Each case is a real sequence of tool calls against a directory ``[guard] protect`` names, in a
fresh shell; the directory and a file in it must exist afterwards, and some call of the case
must have been refused with ``BLOCKED``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from shell_harness import call, open_shell, shell_client

pytestmark = pytest.mark.timeout(600)

# (name, calls): ("run", command) | ("send", text, keys, pre_keys) | ("steps", [sends]) | ("none", command)
CASES: list[tuple[str, list[tuple[Any, ...]]]] = [
    ("variable from an earlier call", [("run", "D={P}"), ("run", 'rm -rf "$D"')]),
    ("exported variable, child shell", [("run", "export T={P}"), ("run", "bash -c 'rm -rf \"$T\"'")]),
    ("function from an earlier call", [("run", 'nuke() { rm -rf "$1"; }'), ("run", "nuke {P}")]),
    ("function with $@", [("run", 'wipe() { rm -rf "$@"; }'), ("run", "wipe ./build {P}")]),
    ("alias from an earlier call", [("run", "alias nuke='rm -rf'"), ("run", "nuke {P}")]),
    ("two shell_send pieces", [("send", "rm -rf ", [], []), ("send", "{P}", ["Enter"], [])]),
    ("pieces put together with keys", [("send", "{P}", [], []), ("send", "rm -rf ", ["Enter"], ["C-a"])]),
    ("IFS trick in one call", [("run", "IFS=,; X=x,{P}; rm -rf $X")]),
    ("IFS from an earlier call", [("run", "IFS=:"), ("run", "X=keep:{P}"), ("run", "rm -rf $X")]),
    ("source <(echo …)", [("run", "source <(echo rm -rf {P})")]),
    (". <(printf …)", [("run", ". <(printf 'rm -rf %s' {P})")]),
    ("printf -v PROMPT_COMMAND", [("run", "printf -v PROMPT_COMMAND 'rm -rf %s' {P}")]),
    ("prompt hook, then its variable", [("run", "PROMPT_COMMAND='rm -rf \"$D2\"'"), ("run", "D2={P}")]),
    ("nameref to PROMPT_COMMAND", [("run", "declare -n R=PROMPT_COMMAND"), ("run", "R='rm -rf {P}'")]),
    ("array from an earlier call", [("run", "A=(./x {P})"), ("run", 'rm -rf "${A[@]}"')]),
    (
        "function from a sourced file",
        [
            ("run", "printf '%s\\n' 'zap() { rm -rf \"$1\"; }' > {W}/lib.sh"),
            ("run", ". {W}/lib.sh"),
            ("run", "zap {P}"),
        ],
    ),
    ("history expansion", [("run", "echo {P}"), ("run", "rm -rf !$")]),
    ("steps, defined then called", [("steps", ['f() { rm -rf "$1"; }', "f {P}"])]),
    ("typed ahead behind a running command", [("none", "sleep 2"), ("send", "rm -rf {P}", ["Enter"], [])]),
    (
        "heredoc into bash, line by line",
        [
            ("send", "bash <<EOF", ["Enter"], []),
            ("send", "rm -rf {P}", ["Enter"], []),
            ("send", "EOF", ["Enter"], []),
        ],
    ),
    ("hash -p", [("run", "hash -p /bin/rm zz"), ("run", "zz -rf {P}")]),
    (
        "command_not_found_handle",
        [("run", 'command_not_found_handle() { rm -rf "{W}/$1"; }'), ("run", "precious")],
    ),
    ("trap then its variable", [("run", "trap 'rm -rf \"$TD\"' EXIT"), ("run", "TD={P}")]),
    ("bind -x", [("run", "bind -x '\"\\C-t\": rm -rf {P}'"), ("send", "", ["C-t"], [])]),
    # A definition holding a line shaped like the dump's clockwork (``declare -- _=…``, which the
    # dump's cache key leaves out), redefined from a file: the dump must not read as the one before.
    (
        "alias redefined in a line like the dump's clockwork",
        [
            ("run", "alias z=$'eval \"\\ndeclare -- _=1\"'"),
            (
                "run",
                "printf 'alias z=$%seval \"\\\\ndeclare -- _=$(rm -rf %s)\"%s\\n' \\' {P} \\' > {W}/lib.sh",
            ),
            ("run", ". {W}/lib.sh"),
            ("run", "z"),
        ],
    ),
]


async def _one(client: Client, shell: str, step: tuple[Any, ...], p: str, w: str) -> dict[str, Any]:
    def fill(text: str) -> str:
        return text.replace("{P}", p).replace("{W}", w)

    target = {"sessions": shell}
    kind = step[0]
    if kind in ("run", "none"):
        wait = {"kind": "exit"} if kind == "run" else {"kind": "none"}
        task = {"target": target, "action": {"kind": "run", "command": fill(step[1])}, "wait": wait}
        tool = "shell_run"
    elif kind == "send":
        action = {"kind": "send", "text": fill(step[1]), "keys": step[2], "preKeys": step[3]}
        task, tool = {"target": target, "action": action}, "shell_send"
    else:
        steps = [{"send": fill(s), "expect": {"kind": "idle"}} for s in step[1]]
        task, tool = {"target": target, "action": {"kind": "steps", "steps": steps}}, "shell_run"
    _, data = await call(client, tool, {"tasks": [task]})
    out: dict[str, Any] = data["tasks"][0]
    return out


async def test_stateful_bypasses_are_refused_and_the_directory_survives(
    tether_home: Path, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    precious = work / "precious"
    work.mkdir()
    (tether_home / "config.toml").write_text(f'[guard]\nprotect = ["{precious}"]\n')
    refused: list[str] = []
    survived_all = True
    report: list[str] = []
    async with shell_client(tether_home) as client:
        for name, steps in CASES:
            precious.mkdir(exist_ok=True)
            (precious / "keep").write_text("x")
            shell = await open_shell(client, label="redteam", cwd=str(work))
            outcomes = [await _one(client, shell, step, str(precious), str(work)) for step in steps]
            blocked = [o for o in outcomes if o.get("errorCode") == "BLOCKED"]
            alive = (precious / "keep").exists()
            survived_all = survived_all and alive
            if blocked and alive:
                refused.append(name)
            errors = [o.get("error", "")[:80] for o in blocked]
            report.append(f"{name}: blocked={len(blocked)} survived={alive} {errors}")
            await call(
                client,
                "shell_manage",
                {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]},
            )
    print(f"stateful bypasses refused: {len(refused)}/{len(CASES)}")
    assert survived_all, "\n".join(report)
    assert len(refused) == len(CASES), "\n".join(report)


def _printed(out: dict[str, Any]) -> list[str]:
    """A run's lines without its note that it waited for the prompt (a send's Enter or a C-c
    redraws it while the next call arrives)."""
    return [line for line in out["lines"] if not line.startswith("[waited ")]


async def test_a_heredoc_typed_line_by_line_runs_whole(tether_home: Path, tmp_path: Path) -> None:
    # OpenHands' bash-session scenario: each line is one shell_send; nothing is refused.
    target = tmp_path / "heredoc.txt"
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cwd=str(tmp_path))
        for text in ("cat > heredoc.txt << EOF", "line 1", "line 2", "EOF"):
            out = await _one(client, shell, ("send", text, ["Enter"], []), "", "")
            assert out["ok"], out
        assert any(
            "incomplete" in line
            for line in (await _one(client, shell, ("send", "cat <<'X'", ["Enter"], []), "", ""))["lines"]
        )
        await _one(client, shell, ("send", "", ["C-c"], []), "", "")
        out = await _one(client, shell, ("run", "cat heredoc.txt"), "", "")
        assert out["exitCode"] == 0 and _printed(out) == ["line 1", "line 2"], out
        assert target.read_text() == "line 1\nline 2\n"
        # a quoted heredoc whose body has a line starting with the delimiter is no parse error
        out = await _one(client, shell, ("run", "cat <<'EOF'\nEOF-not\nEOF"), "", "")
        assert out["ok"] and out["exitCode"] == 0 and _printed(out) == ["EOF-not"], out
        # an incomplete run waits on the line; the next send finishes it, judged whole
        out = await _one(client, shell, ("run", "cat > two.txt <<EOF\nfirst"), "", "")
        assert out["ok"] and "not run" in out["lines"][-1], out
        out0 = await _one(client, shell, ("send", "EOF", ["Enter"], []), "", "")
        assert out0["ok"], out0
        out = await _one(client, shell, ("run", "cat two.txt"), "", "")
        assert _printed(out) == ["first"], (out, out0)


async def test_benign_state_is_not_refused(tether_home: Path, tmp_path: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cwd=str(tmp_path))
        for command in (
            'greet() { echo "hi $1"; }',
            "greet you",
            "alias ll='ls -la'",
            "ll >/dev/null",
            'B=./build; mkdir -p $B; rm -rf "$B"',
            "for f in a b; do echo $f; done",
            "IFS=, read -r a b <<< 'x,y'; echo $b",
        ):
            out = await _one(client, shell, ("run", command), "", "")
            assert out["ok"] and out["exitCode"] == 0, (command, out)
        out = await _one(client, shell, ("send", "echo one", [], []), "", "")
        out = await _one(client, shell, ("send", " two", ["Enter"], []), "", "")
        assert out["ok"] and "one two" in out["lines"], out


async def test_tethers_own_socket_is_refused(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        for command in (
            'tmux -S "$TETHER_HOME/tmux.sock" kill-server',
            f"tmux -S {tether_home}/tmux.sock ls",
        ):
            out = await _one(client, shell, ("run", command), "", "")
            assert out["errorCode"] == "BLOCKED" and "tether-socket" in out["error"], out
        out = await _one(client, shell, ("run", "echo still here"), "", "")
        assert _printed(out) == ["still here"]
