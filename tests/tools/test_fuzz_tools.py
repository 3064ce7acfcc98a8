"""Every tool, with arguments a careless or hostile caller sends, answers with a result or an error
carrying a stable code — never an exception of the layers below, never ``INTERNAL`` — and the
tools go on serving. The fuzz (``fuzz_args``) runs in process through ``ToolRegistry.call``, the
one door every front door uses: the model's tools as a conversation (source ``tool``), the
people-only ones as the command line (source ``cli``). The first tests pin the defects it found.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fuzz_args import Refs, case, is_stable_code

from tether.config import load_config
from tether.errors import NotFoundError, TetherError, UsageError
from tether.shells import Shells
from tether.tools.catalog import ToolCatalog, build_catalog
from tether.tools.registry import CallContext
from tether.tools.shells.args import parse_send
from tether.tools.shells.exec import run_units
from tether.tools.shells.render import TaskOutcome

pytestmark = pytest.mark.timeout(300)

AGENT = CallContext(actor="conv-fuzz", source="tool")
PERSON = CallContext(actor="cli", source="cli")


class _Errors(logging.Handler):
    """Every record at ERROR or above, or with a traceback, that tether's loggers write."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.seen.append(record)


@pytest.fixture
async def catalog(tether_home: Path) -> AsyncIterator[ToolCatalog]:
    """Every tool of ``tether_home``, the job tools included (the shared fixture has none)."""
    built = build_catalog(load_config(tether_home))
    try:
        yield built
    finally:
        await built.aclose()


@pytest.fixture
def logged_errors() -> Iterator[_Errors]:
    handler = _Errors()
    root = logging.getLogger("tether")
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def _audit_records(home: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for day in sorted((home / "audit").glob("*.jsonl"))
        for line in day.read_text().splitlines()
    ]


async def _open(catalog: ToolCatalog) -> str:
    opened = await catalog.registry.call("shell_open", {"tasks": [{"action": {"kind": "open"}}]}, AGENT)
    shell = opened.structured["tasks"][0]["shell"]
    assert isinstance(shell, str)
    return shell


# ---- the defects ---------------------------------------------------------------------------------


async def test_a_blank_action_kind_is_refused_for_itself_and_audited(
    catalog: ToolCatalog, tether_home: Path, logged_errors: _Errors
) -> None:
    # The audit record named its action after the kind as given; a blank one made the log refuse
    # the record, so the caller was told "audit action must be a non-empty string" (not what was
    # wrong with its call) and the call went unaudited, with a traceback in the server's log.
    task = {"target": {"sessions": "dsh-zzzzzz"}, "action": {"kind": " ", "text": "x"}}
    with pytest.raises(UsageError) as refused:
        await catalog.registry.call("shell_send", {"tasks": [task]}, AGENT)
    assert "audit" not in refused.value.message
    assert "kind" in refused.value.message, refused.value.message
    record = _audit_records(tether_home)[-1]
    assert (record["tool"], record["action"], record["outcome"]) == ("shell_send", "send", "error")
    assert not logged_errors.seen


async def test_a_vault_call_with_no_known_action_is_refused_for_itself_and_audited(
    catalog: ToolCatalog, tether_home: Path, logged_errors: _Errors
) -> None:
    with pytest.raises(UsageError) as refused:
        await catalog.registry.call("vault", {"action": "\r\n", "group": "g"}, PERSON)
    assert "field 'action'" in refused.value.message, refused.value.message
    record = _audit_records(tether_home)[-1]
    assert (record["tool"], record["action"], record["outcome"]) == ("vault", "vault", "error")
    assert not logged_errors.seen


async def test_arguments_none_are_an_empty_object(catalog: ToolCatalog) -> None:
    # argument_problem takes None as {}; the handlers then got None itself (AttributeError).
    listed = await catalog.registry.call("job_list", None, AGENT)
    assert listed.structured == {"jobs": []}
    with pytest.raises(UsageError, match="tasks: required"):
        await catalog.registry.call("shell_read", None, AGENT)


async def test_a_shell_closed_under_a_task_is_not_found_rather_than_tmux_words(
    catalog: ToolCatalog, tether_home: Path
) -> None:
    # A close racing a send, run or respawn of the same shell: the task had found the shell live,
    # then tmux refused the keys with "can't find pane: %12" (SESSION_ERROR), which says nothing a
    # caller can act on. The unit here closes the shell from outside, as the racing call does,
    # between finding the pane and typing into it.
    shell = await _open(catalog)
    shells = Shells.get(load_config(tether_home))
    host, pane = await shells.pane(shell)
    call = parse_send({"tasks": [{"target": {"sessions": shell}, "action": {"kind": "send", "text": "x"}}]})

    async def work(_unit: Any) -> TaskOutcome:
        kill = await asyncio.create_subprocess_exec(
            "tmux", "-S", str(tether_home / "tmux.sock"), "kill-session", "-t", f"={shell}"
        )
        assert await kill.wait() == 0
        await host.type_keys_then_text(pane, b"", "echo typed")
        raise AssertionError("tmux took keys for a pane that is gone")

    [outcome] = await run_units(shells, call, AGENT.actor, write=True, work=work)
    assert outcome.error_code == NotFoundError.code, outcome
    assert outcome.error is not None and "was closed while this task worked on it" in outcome.error
    assert "shell_state" in outcome.error


# ---- the fuzz ------------------------------------------------------------------------------------


async def test_every_tool_answers_malformed_arguments_with_a_coded_error(
    catalog: ToolCatalog, logged_errors: _Errors
) -> None:
    registry = catalog.registry
    model = sorted(t.name for t in registry.list())
    people = sorted(t.name for t in registry.list(people=True))
    schemas = {t.name: t.output_schema for t in [*registry.list(), *registry.list(people=True)]}
    refs = Refs()
    refs.live += [await _open(catalog), await _open(catalog)]
    ended = await _open(catalog)
    await registry.call(
        "shell_manage", {"tasks": [{"target": {"sessions": ended}, "action": {"kind": "close"}}]}, AGENT
    )
    refs.ended.append(ended)
    for command, into in (("true", refs.jobs_done), ("sleep 600", refs.jobs_live)):
        job = await registry.call(
            "bash", {"command": command, "description": "f", "run_in_background": True}, AGENT
        )
        into.append(job.structured["jobId"])

    rnd = random.Random(20261207)
    answered: dict[str, int] = {}
    for number in range(300):
        tool = rnd.choice([*model, *people])
        arguments = case(tool, rnd, refs)
        where = f"case {number}: {tool} {str(arguments)[:300]}"
        try:
            result = await registry.call(tool, arguments, PERSON if tool in people else AGENT)
        except TetherError as exc:
            assert is_stable_code(exc.code), f"{where}: {exc.code}: {exc.message}"
            assert exc.message.strip() and "Traceback" not in exc.message, where
            answered[exc.code] = answered.get(exc.code, 0) + 1
            continue
        assert "Traceback" not in result.text, where
        schema = schemas[tool]
        if not result.is_error and schema is not None:
            jsonschema.validate(result.structured, schema)
        tasks = result.structured.get("tasks")
        for task in tasks if isinstance(tasks, list) else []:
            if task.get("error") is not None:
                assert is_stable_code(task.get("errorCode")), f"{where}: {task}"
        answered["error" if result.is_error else "ok"] = (
            answered.get("error" if result.is_error else "ok", 0) + 1
        )
        if tool == "shell_open" and not result.is_error:
            refs.live += [t["shell"] for t in result.structured["tasks"] if t.get("shell")]
        if number % 25 == 24:
            await _still_serving(catalog, refs)
    assert not logged_errors.seen, [r.getMessage() for r in logged_errors.seen]
    await _still_serving(catalog, refs)
    assert answered.get("ok", 0) > 10 and answered.get("INVALID_ARGUMENT", 0) > 100, answered


async def _still_serving(catalog: ToolCatalog, refs: Refs) -> None:
    """One plain call answers; shells beyond three are closed (a fuzzed open may start many)."""
    echoed = await catalog.registry.call("bash", {"command": "echo serving", "description": "f"}, AGENT)
    assert echoed.text.strip() == "serving"
    state = await catalog.registry.call("shell_state", {"scope": "*"}, AGENT)
    live = [row["shell"] for row in state.structured["shells"]]
    refs.ended += [s for s in refs.live if s not in live]
    refs.live[:] = [s for s in refs.live if s in live]
    for shell in live[3:]:
        await catalog.registry.call("shell_lock", {"shell": shell, "action": "unlock"}, PERSON)
        close = {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "close"}}]}
        await catalog.registry.call("shell_manage", close, AGENT)
    if not refs.live:
        refs.live.append(await _open(catalog))
