"""``shell_open`` escalations and person approvals through the official MCP client over stdio.

A wider mode is granted by ``[sandbox].allow_escalations`` or by a person: here the person is the
SDK client's elicitation callback, which accepts, declines, or never answers (refused at
``[approvals] timeout_s``). A granted shell can do what it was granted and nothing more; every
request and every answer is in the audit log. ``[guard] ask`` puts a blocked command to the same
person, audited as ``bypass-guard`` with the person as the reason's author.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from sandbox_mcp_harness import params, text_of

from hang import HANG_S

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "tools" / "bin").mkdir(parents=True)
    return home


def _audit(home: Path, action: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for day in sorted((home / "audit").glob("*.jsonl")):
        records.extend(json.loads(line) for line in day.read_text().splitlines())
    return [r for r in records if r.get("action") == action]


@contextlib.contextmanager
def _listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        sock.settimeout(HANG_S)
        yield sock
    finally:
        sock.close()


def _accept(listener: socket.socket) -> bytes:
    conn, _ = listener.accept()
    with conn:
        return conn.recv(100)


def _exists(path: Path) -> bool:
    return path.exists()


class Person:
    """The person at the client: answers every elicitation the same way, and remembers the questions."""

    def __init__(self, answer: str, reason: str = "") -> None:
        self.answer = answer
        self.reason = reason
        self.questions: list[str] = []

    async def __call__(self, context: Any, request: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(getattr(request, "message", ""))
        if self.answer == "silent":
            await anyio.sleep_forever()
        if self.answer == "accept":
            return types.ElicitResult(action="accept", content={"approve": True, "reason": self.reason})
        if self.answer == "dismiss":  # closed the dialog without choosing
            return types.ElicitResult(action="cancel")
        return types.ElicitResult(action="decline")


async def _open(client: Client, **action: Any) -> types.CallToolResult:
    return await client.call_tool("shell_open", {"tasks": [{"action": {"kind": "open", **action}}]})


async def _run(client: Client, shell: str, command: str) -> dict[str, Any]:
    task = {
        "target": {"sessions": shell},
        "action": {"kind": "run", "command": command},
        "wait": {"kind": "exit"},
    }
    result = await client.call_tool("shell_run", {"tasks": [task]})
    out: dict[str, Any] = (result.structured_content or {})["tasks"][0]
    return out


async def test_a_configured_escalation_grants_its_mode_and_nothing_more(
    tether_home: Path, home: Path
) -> None:
    (tether_home / "config.toml").write_text('[sandbox]\nallow_escalations = ["allow_network"]\n')
    target = Path("/var/tmp") / f"tether-not-granted-{secrets.token_hex(4)}"
    async with Client(params(tether_home, home, "--sandbox")) as client:
        blank = await _open(client, sandbox_permissions="allow_network", justification="  ")
        assert blank.is_error and "justification" in text_of(blank), text_of(blank)
        opened = await _open(
            client, sandbox_permissions="allow_network", justification="fetch the test fixture"
        )
        assert not opened.is_error, text_of(opened)
        shell = (opened.structured_content or {})["tasks"][0]["shell"]
        with _listener() as listener:
            port = listener.getsockname()[1]
            received = anyio.to_thread.run_sync(_accept, listener)
            async with anyio.create_task_group() as tg:
                got: list[bytes] = []

                async def accept() -> None:
                    got.append(await received)

                tg.start_soon(accept)
                out = await _run(
                    client, shell, f"echo hello > /dev/tcp/127.0.0.1/{port}; echo x > {target}; true"
                )
        assert got == [b"hello\n"]  # the grant: the network
        assert out["sandbox"]["permissions"] == "allow_network"
        assert [(d["kind"], d["target"]) for d in out["sandbox"]["denials"]] == [("write", str(target))]
    assert not _exists(target)  # nothing more: writes outside the roots stay denied
    [refused, granted] = _audit(tether_home, "sandbox_escalation")
    assert refused["outcome"] == "refused" and granted["outcome"] == "ok"
    assert granted["tool"] == "shell_open" and granted["reason"] == "fetch the test fixture"
    assert granted["extra"] == {"sandbox_permissions": "allow_network", "granted_by": "configuration"}


@pytest.mark.parametrize("answer", ["accept", "decline", "silent"])
async def test_a_person_at_the_client_decides_a_shell_escalation(
    tether_home: Path, home: Path, answer: str
) -> None:
    timeout = HANG_S if answer != "silent" else 1
    (tether_home / "config.toml").write_text(f"[approvals]\ntimeout_s = {timeout}\n")
    person = Person(answer, reason="ok for this task")
    outside = Path("/var/tmp") / f"tether-approved-{secrets.token_hex(4)}"
    try:
        async with Client(params(tether_home, home, "--sandbox"), elicitation_callback=person) as client:
            opened = await _open(
                client, sandbox_permissions="allow_host_write", justification="update /var/tmp cache"
            )
            text = text_of(opened)
            if answer == "accept":
                assert not opened.is_error, text
                shell = (opened.structured_content or {})["tasks"][0]["shell"]
                out = await _run(client, shell, f"echo granted > {outside}")
                assert out["sandbox"]["permissions"] == "allow_host_write" and out["exitCode"] == 0
                assert outside.read_text() == "granted\n"
            else:
                assert opened.is_error
                assert ("denied" if answer == "decline" else "nobody answered") in text, text
                state = await client.call_tool("shell_state", {"scope": "*"})
                assert (state.structured_content or {}).get("shells") == []  # nothing was opened
    finally:
        outside.unlink(missing_ok=True)
    [question] = person.questions
    assert "open a persistent shell" in question and "allow_host_write" in question
    assert "update /var/tmp cache" in question
    [record] = _audit(tether_home, "approval")
    expected = {"accept": "approved", "decline": "denied", "silent": "timeout"}[answer]
    assert record["extra"]["answer"] == expected and record["extra"]["channel"] == "elicitation"
    assert record["tool"] == "shell_open" and record["extra"]["justification"] == "update /var/tmp cache"
    if answer == "silent":
        assert record["outcome"] == "timeout" and record["actor"] == "red-team"
    else:
        assert record["actor"].startswith("person at ")


@pytest.mark.parametrize("answer", ["accept", "decline", "dismiss"])
async def test_guard_ask_lets_one_blocked_command_through_a_person(
    tether_home: Path, home: Path, answer: str
) -> None:
    (tether_home / "config.toml").write_text(f"[guard]\nask = true\n[approvals]\ntimeout_s = {HANG_S}\n")
    person = Person(answer, reason="no repository here, harmless")
    async with Client(params(tether_home, home), elicitation_callback=person) as client:
        opened = await _open(client)
        shell = (opened.structured_content or {})["tasks"][0]["shell"]
        out = await _run(client, shell, "git push --force origin main; echo pushed=$?")
    [question] = person.questions
    assert "git push --force origin main" in question and "git-force-push" in question
    if answer == "accept":
        assert out["ok"], out
        assert any("approved by person at " in line for line in out["lines"]), out["lines"]
        assert "pushed=128" in out["lines"]  # it ran (and failed harmlessly: no repository)
    else:
        assert not out["ok"] and out["errorCode"] == "BLOCKED", out
    if answer == "dismiss":
        # The person closed the dialog: the model and the log said "withdrawn before anyone
        # answered", the asking conversation as the actor, as if nobody had seen it.
        assert "dismissed the question about it without allowing it" in out["error"], out
    [record] = _audit(tether_home, "approval")
    assert record["flags"] == ["bypass-guard"] and record["actor"].startswith("person at ")
    answers = {"accept": "approved", "decline": "denied", "dismiss": "cancelled"}
    assert record["extra"]["answer"] == answers[answer]
    if answer == "dismiss":
        assert record["detail"].startswith("dismissed by person at ")
    if answer == "accept":  # the person's words are the reason, the person its author
        assert record["reason"] == "no repository here, harmless"
    runs = [
        r
        for r in _audit(tether_home, "run")
        if r.get("command") == "git push --force origin main; echo pushed=$?"
    ]
    if answer == "accept":  # the run's own record: bypass-guard, the person as the reason's author
        assert runs and "bypass-guard" in runs[-1]["flags"]
        assert runs[-1]["reason"].startswith("approved by person at ")
        assert runs[-1]["reason"].endswith(": no repository here, harmless")


async def test_a_persons_words_are_bounded_whichever_way_they_came(tether_home: Path, home: Path) -> None:
    """The panel's reason field holds 500 characters, but an elicitation form's reason had no bound:
    a page pasted into it went whole into the agent's result (crowding the command's own output
    out of the result's budget) and into the audit record's reason."""
    (tether_home / "config.toml").write_text(f"[guard]\nask = true\n[approvals]\ntimeout_s = {HANG_S}\n")
    person = Person("accept", reason="pasted " * 20_000)
    async with Client(params(tether_home, home), elicitation_callback=person) as client:
        opened = await _open(client)
        shell = (opened.structured_content or {})["tasks"][0]["shell"]
        out = await _run(client, shell, "git push --force origin main; echo pushed=$?")
    assert out["ok"] and "pushed=128" in out["lines"], out
    assert not any("result cut" in line for line in out["lines"]), out["lines"][:3]
    [bypassed] = [line for line in out["lines"] if "approved by person at " in line]
    assert len(bypassed) < 1000
    [record] = _audit(tether_home, "approval")
    assert len(record["reason"]) <= 500 and record["reason"].startswith("pasted pasted")


def _open_action_schema(tools: types.ListToolsResult) -> dict[str, Any]:
    [tool] = [t for t in tools.tools if t.name == "shell_open"]
    [action] = tool.input_schema["properties"]["tasks"]["items"]["properties"]["action"]["oneOf"]
    return dict(action["properties"])


async def test_shell_open_offers_sandbox_fields_only_where_the_deployment_confines(
    tether_home: Path, home: Path
) -> None:
    async with Client(params(tether_home, home)) as client:
        plain = _open_action_schema(await client.list_tools())
        sent = await _open(client, sandbox_permissions="allow_network", justification="x")
        assert sent.is_error and "unknown field 'sandbox_permissions'" in text_of(sent)
    assert "sandbox_permissions" not in plain and "justification" not in plain
    async with Client(params(tether_home, home, "--sandbox")) as client:
        confined = _open_action_schema(await client.list_tools())
    assert confined["sandbox_permissions"]["enum"] == [
        "use_default",
        "allow_network",
        "allow_host_write",
        "require_escalated",
    ]
    assert confined["justification"]["type"] == "string"


async def test_a_confining_deployment_opens_no_shell_on_a_remote_host(tether_home: Path, home: Path) -> None:
    # The host is never dialled: the refusal comes before any connection (port 9 on loopback would
    # refuse one anyway, and that error would name the connection instead).
    (tether_home / "config.toml").write_text('[hosts.box]\nssh = "127.0.0.1"\nport = 9\n')
    async with Client(params(tether_home, home, "--sandbox")) as client:
        refused = await _open(client, host="box")
        assert refused.is_error
        task = (refused.structured_content or {})["tasks"][0]
        assert task["errorCode"] == "REFUSED", task
        assert "'box' cannot confine its shells" in task["error"] and "local host" in task["error"]
        local = await _open(client)
        assert not local.is_error, text_of(local)
