"""A seeded generator of tool arguments, valid and malformed, for the fuzz tests of the doors.

Each case starts from a valid call of the tool (a shape docs/tools.md gives, aimed at shells and
jobs that exist, have ended or never were) and applies one to three mutations at random places:
a value replaced by one of another JSON type or an edge of its own type (0, -1, 2**63, 1e308, "",
NUL, a lone surrogate, control and right-to-left characters, 5,000 characters, unicode shell
names, deep nesting), a key removed, an unknown key added, a list repeated past its limit, or the
whole argument object replaced by a non-object. Everything comes from one ``random.Random``, so a
seed gives the same sequence of shapes (the shell and job ids in them are whatever the run made).

Waits are bounded: a ``timeoutMs``/``waitMs`` above ``MAX_WAIT_MS`` is lowered to it, so a case
never waits long for something that will not come; every other field takes any value.
"""

from __future__ import annotations

import copy
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

# A mutated wait is at most this long (ms): the fuzz looks for answers, not for deadlines.
MAX_WAIT_MS = 1500
_WAIT_KEYS = frozenset({"timeoutMs", "waitMs"})
# A stable code: what tether.errors' classes and the layers' errors carry. INTERNAL is a bug and
# TETHER_ERROR a TetherError raised without a code of its own.
CODE = re.compile(r"^[A-Z][A-Z_]+$")
NOT_CODES = frozenset({"INTERNAL", "TETHER_ERROR"})


def is_stable_code(code: object) -> bool:
    return isinstance(code, str) and CODE.fullmatch(code) is not None and code not in NOT_CODES


@dataclass
class Refs:
    """What the cases aim at: shells live and ended, jobs ended and running."""

    live: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    jobs_done: list[str] = field(default_factory=list)
    jobs_live: list[str] = field(default_factory=list)

    def shell(self, rnd: random.Random) -> str:
        pool = [*self.live * 3, *self.ended, "dsh-zzzzzz", "*", "mine", "日本語", "dsh-", "", "x" * 300]
        return rnd.choice(pool)

    def job(self, rnd: random.Random) -> str:
        return rnd.choice([*self.jobs_done * 2, *self.jobs_live, "job-zzzzzz", "", "*", "ジョブ"])


def _deep(levels: int) -> Any:
    value: Any = 1
    for i in range(levels):
        value = [value] if i % 2 else {"a": value}
    return value


def _other_values(rnd: random.Random, refs: Refs, *, nan: bool) -> list[Any]:
    values: list[Any] = [
        None, True, False, 0, -1, 1, 2**31, 2**63, 2**64, -(2**63), 10**30, 1.5, -0.0, 1e308, 3.0,
        "", " ", "\x00", "a\x00b", "\ud800", "x\udcffy", "\x1b[2J\x1b]0;t\x07", "\r\n", "\t", "\x7f\x08",
        "日本語", "🙂" * 50, "\u202e", "*", "mine", "../../etc/passwd", "$(echo pwned)", "{{vault.X}}",
        "%s%n", "1e3", "null", "idle", "exit", "run", [], [None], {}, {"a": 1}, ["x"] * 70,
        [1, "a", None], _deep(40), _deep(10), list(range(2000)), {"kind": "open"},
        refs.shell(rnd), refs.job(rnd), "x" * 5000,
    ]  # fmt: skip
    if nan:
        values += [math.nan, math.inf, -math.inf]
    return values


def _same_type(current: Any, rnd: random.Random, refs: Refs) -> Any:
    """A value of ``current``'s JSON type, at an edge."""
    if isinstance(current, bool):
        return not current
    if isinstance(current, int):
        return rnd.choice([
            0, -1, 1, 4, 5, 16, 17, 19, 20, 32, 33, 64, 65, 255, 256, 500, 501, 1000, 1001, 1440, 1441,
            2000, 2001, 10000, 100000, 100001, 2**31 - 1, 2**53, 2**63 - 1, 2**63, 10**40, -(2**63), 2.0,
        ])  # fmt: skip
    if isinstance(current, str):
        return rnd.choice([
            "", " ", "\x00", "a\x00b", "\x1b[31m", "\r", "\n\n", "日本語ラベル", "🙂", "x" * 33, "x" * 65,
            "-", "--help", "*", "mine", ",", " , ,", "dsh-zzzzzz,dsh-yyyyyy", refs.shell(rnd),
            refs.job(rnd), "~", "~nosuchuser/x", "/", "/proc/self/mem", "/dev/zero", "(?<x>a)\\k<x>",
            "(((", "a{99999}", "[", "\\", "'", '"', "$HOME", "{{vault.NOPE}}", "{{macro.m}}", "\ud83d",
        ])  # fmt: skip
    if isinstance(current, list):
        return rnd.choice(
            [
                [],
                current * 20,
                [current[0] if current else None] * 65,
                [{}],
                ["Enter"] * 70,
                ["NoSuchKey"],
                ["C-", "M-", "F99", "Enter\x00"],
                ["Enter", 1],
            ]
        )
    if isinstance(current, dict):
        return rnd.choice([{}, {"kind": None}, {**current, "kind": "nope"}])
    return None


def valid(tool: str, rnd: random.Random, refs: Refs) -> dict[str, Any]:
    """A valid call of ``tool`` (people-only tools included), before any mutation."""
    shell = refs.shell(rnd) if rnd.random() < 0.5 else (refs.live[0] if refs.live else "dsh-zzzzzz")
    target = {"sessions": shell}
    wait = {"kind": rnd.choice(["exit", "idle", "none"]), "timeoutMs": MAX_WAIT_MS}
    manage_kinds: list[dict[str, Any]] = [
        {"kind": "rename", "newName": rnd.choice(["n1", "日本", "a" * 32])},
        {"kind": "resize", "cols": 100, "rows": 30}, {"kind": "respawn"}, {"kind": "close"},
        {"kind": "idle", "idleMinutes": 5}, {"kind": "snapshot"}, {"kind": "doctor"},
    ]  # fmt: skip
    untargeted: list[dict[str, Any]] = [
        {"kind": "reap"}, {"kind": "snapshot-list"}, {"kind": "macro-set", "name": "m", "text": "echo m"},
        {"kind": "macro-rm", "name": "m"}, {"kind": "macro-list"}, {"kind": "vault-list"},
        {"kind": "macro-history", "name": "m"}, {"kind": "macro-restore", "name": "m", "at": 0},
        {"kind": "workspace-save", "name": "ws"}, {"kind": "workspace-list"},
        {"kind": "workspace-restore", "name": "ws"}, {"kind": "workspace-delete", "name": "ws"},
    ]  # fmt: skip
    calls: dict[str, Any] = {
        "bash": lambda: {
            "command": rnd.choice(["echo hi", "true", "exit 3", "printf 'a\\0b'"]),
            "description": "fuzz",
            **({"timeoutMs": rnd.choice([1, MAX_WAIT_MS])} if rnd.random() < 0.4 else {}),
            **(
                {"workdir": rnd.choice(["/tmp", "/nonexistent", "~", "relative"])}
                if rnd.random() < 0.2
                else {}
            ),
            **({"run_in_background": True} if rnd.random() < 0.2 else {}),
        },
        "job_list": dict,
        "job_output": lambda: {"jobId": refs.job(rnd), "timeoutMs": rnd.choice([0, 100])},
        "job_kill": lambda: {"jobId": refs.job(rnd), "reason": "fuzz"},
        "shell_open": lambda: {"tasks": [{"action": {"kind": "open", "label": rnd.choice(["w", "日本"])}}]},
        "shell_run": lambda: {
            "tasks": [
                {
                    "target": target,
                    "action": rnd.choice(
                        [
                            {"kind": "run", "command": rnd.choice(["echo hi", "true", "exit 2"])},
                            {
                                "kind": "steps",
                                "steps": [{"send": "echo a", "expect": "idle", "timeoutMs": 1000}],
                            },
                            {"kind": "retry", "mode": rnd.choice(["last", "last-failed"])},
                        ]
                    ),
                    "wait": wait,
                    "output": {
                        "lines": 5,
                        "showing": rnd.choice(["since", "tail", "screen", "diff", "summary"]),
                    },
                }
            ]
        },
        "shell_send": lambda: {
            "tasks": [{"target": target, "action": {"kind": "send", "text": "echo x", "keys": ["Enter"]}}]
        },
        "shell_read": lambda: {
            "tasks": [
                {
                    "target": target,
                    "action": rnd.choice(
                        [
                            {
                                "kind": "read",
                                "mode": rnd.choice(["tail", "screen", "history", "since", "diff", "summary"]),
                            },
                            {"kind": "read", "search": "hi", "context": 1},
                            {"kind": "subscribe"},
                            {"kind": "unsubscribe"},
                        ]
                    ),
                }
            ]
        },
        "shell_state": lambda: {"scope": rnd.choice(["mine", "*"]), "verbose": rnd.random() < 0.3},
        "shell_audit": lambda: {"tasks": [{"target": target, "action": {"kind": "audit"}}]},
        "shell_manage": lambda: {
            "tasks": [
                {"target": target, "action": rnd.choice(manage_kinds)}
                if rnd.random() < 0.5
                else {"action": rnd.choice(untargeted)}
            ]
        },
        "shell_lock": lambda: {"shell": shell, "action": rnd.choice(["lock", "unlock"]), "who": "fuzz"},
        "shell_records": dict,
        "shell_timeline": lambda: {"shell": shell, "limit": 10},
        "shell_output": lambda: {"shell": shell, "start": 0, "lines": 10},
        "shell_record": lambda: {"shell": shell},
        # No "set": a fuzzed short value would be masked in every later answer (shell ids included).
        "vault": lambda: rnd.choice(
            [
                {"action": "list"},
                {"action": "rm", "name": "K"},
                {"action": "lock", "group": "g"},
                {"action": "unlock", "group": "g", "passphrase": "fuzz-passphrase-1"},
                {"action": "group-create", "group": "g", "passphrase": "fuzz-passphrase-1"},
                {"action": "group-rm", "group": "g"},
            ]
        ),
        "audit_verify": dict,
        "audit_show": lambda: {"limit": 5},
        "audit_setup_keys": lambda: {"every": 32},
        "approvals": lambda: {"action": "list"},
    }
    made = calls.get(tool, dict)()
    assert isinstance(made, dict)
    return made


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:20]):
            found += _paths(item, (*path, i))
    return found


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def mutated(arguments: dict[str, Any], rnd: random.Random, refs: Refs, *, nan: bool = True) -> Any:
    """``arguments`` after one to three mutations (see the module docstring); ``nan``: NaN and the
    infinities among the values (JSON has none: only for an in-process door)."""
    args = copy.deepcopy(arguments)
    if rnd.random() < 0.04:
        return rnd.choice([None, [], "args", 5, True, [args], 1.5])
    for _ in range(rnd.choice([1, 1, 1, 2, 3])):
        paths = [p for p in _paths(args) if p]
        op = rnd.random()
        if not paths or op < 0.12:
            objects = [p for p in _paths(args) if isinstance(_at(args, p), dict)]
            key = rnd.choice(
                ["", "\x00", "\ud800", "__proto__", "kind", "tasks", "k" * 5000, "日本", "target"]
            )
            _at(args, rnd.choice(objects))[key] = rnd.choice(_other_values(rnd, refs, nan=nan))
            continue
        path = rnd.choice(paths)
        parent = _at(args, path[:-1])
        if op < 0.25:
            del parent[path[-1]]
        elif op < 0.32 and isinstance(parent, list):
            parent.extend(copy.deepcopy(parent) * rnd.choice([1, 2, 16]))
        elif op < 0.6:
            parent[path[-1]] = _same_type(parent[path[-1]], rnd, refs)
        else:
            parent[path[-1]] = rnd.choice(_other_values(rnd, refs, nan=nan))
    _bound_waits(args)
    return args


def _bound_waits(value: Any) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _WAIT_KEYS and isinstance(item, int | float) and not isinstance(item, bool):
                if math.isfinite(item) and item > MAX_WAIT_MS:
                    value[key] = MAX_WAIT_MS
            else:
                _bound_waits(item)
    elif isinstance(value, list):
        for item in value:
            _bound_waits(item)


def case(tool: str, rnd: random.Random, refs: Refs, *, nan: bool = True) -> Any:
    """One case for ``tool``: mostly mutated, one in ten valid."""
    base = valid(tool, rnd, refs)
    return base if rnd.random() < 0.1 else mutated(base, rnd, refs, nan=nan)


def sendable(value: Any) -> bool:
    """Whether the official SDK client can send ``value`` as arguments (an object, every string
    UTF-8 and every number finite: its writer task dies on a lone surrogate, and it refuses a
    non-object before sending). The raw-line tests (tests/mcp/test_malformed_input.py) send those."""

    def ok(item: Any) -> bool:
        if isinstance(item, str):
            return item.isascii() or _utf8(item)
        if isinstance(item, float):
            return math.isfinite(item)
        if isinstance(item, dict):
            return all(ok(k) and ok(v) for k, v in item.items())
        if isinstance(item, list):
            return all(ok(v) for v in item)
        return True

    return isinstance(value, dict) and ok(value)


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
