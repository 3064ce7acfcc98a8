"""Vault canaries through the MCP client: a secret printed in every encoding the masker knows, and
split across writes, never reaches the model (results in every read mode, search, errors,
resources, notifications), the audit log or the store in clear; the pane's echoed command line
shows only the variable the value travelled in."""

from __future__ import annotations

import json
import random
import string
import subprocess
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from safety_harness import audit_records, task, vault
from shell_harness import call, open_shell, shell_client, text_of

from hang import HANG_S
from tether.shells.vault.mask import secret_forms

CANARY = 'Cnry/+7"x y\\z&q=ÄÖ-9k2P'
MULTI = "line-one-AAAA\nline-two-BBBB\nline-three-CCCC"

COMMANDS = [
    "printf 'raw:%s\\n' {{vault.C}}",
    "printf '%s' {{vault.C}} | base64 -w0; echo",
    "printf 'x%s' {{vault.C}} | base64 -w0; echo",
    "printf 'xy%s' {{vault.C}} | base64 -w0; echo",
    "printf '%s' {{vault.C}} | base64 -w0 | tr '+/' '-_'; echo",
    "python3 -c 'import sys,urllib.parse as u; a=sys.argv[1]; print(u.quote(a, safe=\"\"), u.quote_plus(a))' "
    "{{vault.C}}",
    "python3 -c 'import sys,json; a=sys.argv[1]; print(json.dumps(a), json.dumps(a, ensure_ascii=False))' "
    "{{vault.C}}",
    "python3 -c 'import sys; b=sys.argv[1].encode(); print(b.hex(), b.hex().upper())' {{vault.C}}",
    "printf '%s\\n' {{vault.M}}",
    # split across writes: the two halves reach the log (and the subscription) at different times
    "v={{vault.C}}; printf 'split:%s' \"${v:0:6}\"; sleep 0.3; printf '%s\\n' \"${v:6}\"",
]


def _forms() -> list[str]:
    # Forms of 8+ characters: shorter base64 fragments could occur in unrelated text by chance.
    return [f for value in (CANARY, MULTI) for f in secret_forms(value) if len(f) >= 8]


def _assert_clean(where: str, text: str) -> None:
    for form in _forms():
        assert form not in text, f"{where} holds a secret form {form!r}"


async def test_vault_canaries_never_reach_the_model_the_audit_or_the_store(tether_home: Path) -> None:
    v = vault(tether_home)
    v.set("C", CANARY)
    v.set("M", MULTI)
    seen: list[str] = []
    done = anyio.Event()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        seen.append(json.dumps(params.data, ensure_ascii=False))
        if "canary-done" in seen[-1]:
            done.set()

    async with shell_client(tether_home, "conv-a", logging_callback=on_log) as client:
        shell = await open_shell(client)
        await task(client, "shell_read", shell, {"kind": "subscribe"})

        async def returned(tool: str, args: dict[str, Any]) -> str:
            result = await client.call_tool(tool, args)
            both = text_of(result) + json.dumps(result.structured_content or {}, ensure_ascii=False)
            seen.append(both)
            return both

        def on(action: dict[str, Any], **blocks: Any) -> dict[str, Any]:
            return {"tasks": [{"target": {"sessions": shell}, "action": action, **blocks}]}

        for command in COMMANDS:
            out = await returned("shell_run", on({"kind": "run", "command": command}, wait={"kind": "exit"}))
            assert '"exitCode": 0' in out, out
        for showing in ("tail", "screen", "diff", "summary"):
            await returned(
                "shell_run",
                on(
                    {"kind": "run", "command": "printf 'again:%s\\n' {{vault.C}}"},
                    output={"showing": showing},
                ),
            )
        for mode in ("since", "tail", "screen", "diff", "summary", "history"):
            await returned("shell_read", on({"kind": "read", "mode": mode}, output={"lines": 200}))
        await returned(
            "shell_read", on({"kind": "read", "search": "raw:|split:|line-"}, output={"lines": 200})
        )
        await returned("shell_read", on({"kind": "read", "search": "Cnry"}, output={"lines": 200}))
        # an error that quotes the caller's text (an invalid regex holding the literal value)
        await returned("shell_read", on({"kind": "read", "search": "(" + CANARY}))
        resource = await client.read_resource(f"tether://shell/{shell}")
        seen.append(str(resource.contents[0]))
        # typed delivery into a program's own prompt (python's input()), echoed by the program
        await returned("shell_send", on({"kind": "send", "text": "python3 -q", "keys": ["Enter"]}))
        await returned("shell_read", on({"kind": "read"}, wait={"kind": "foreground", "proc": "python3"}))
        await returned("shell_send", on({"kind": "send", "text": "s = input()", "keys": ["Enter"]}))
        await returned("shell_send", on({"kind": "send", "text": "{{vault.C}}", "keys": ["Enter"]}))
        out = await returned(
            "shell_send", on({"kind": "send", "text": "print('typed:' + s)", "keys": ["Enter"]})
        )
        await returned("shell_send", on({"kind": "send", "text": "", "keys": ["C-d"]}))
        await returned("shell_run", on({"kind": "run", "command": "echo canary-done"}, wait={"kind": "exit"}))
        with anyio.fail_after(HANG_S):
            await done.wait()
        await returned("shell_audit", {"tasks": [{"action": {"kind": "audit"}, "output": {"lines": 200}}]})
        await returned(
            "shell_audit",
            {"tasks": [{"action": {"kind": "audit", "export": True}, "output": {"lines": 200}}]},
        )
        pane = _capture(tether_home, shell)

    everything = "\n".join(seen)
    _assert_clean("the text returned to the model", everything)
    # the output was there, masked: every encoding command produced a [vault:…] label
    assert everything.count("[vault:C]") >= len(COMMANDS) and "[vault:M]" in everything
    assert "split:[vault:C]" in everything and "typed:[vault:C]" in everything
    notifications = [s for s in seen if '"lines"' in s and '"uri"' in s]
    assert any("split:[vault:C]" in n for n in notifications), notifications
    # the pane's echoed command lines carry the variable, never the value
    echoed = [line for line in pane.splitlines() if "printf" in line or "python3 -c" in line]
    assert echoed and all(CANARY not in line for line in echoed)
    assert any("__TETHER_V_C" in line for line in echoed)
    # nothing at rest in clear: the store (with its WAL) and the audit log
    _assert_nothing_at_rest(tether_home)
    records = audit_records(tether_home)
    assert any(r.get("command") == COMMANDS[0] for r in records)  # as written, reference unexpanded


def _assert_nothing_at_rest(home: Path) -> None:
    at_rest = [*home.glob("tether.db*"), *(home / "audit").glob("*.jsonl")]
    assert len(at_rest) >= 2
    for path in at_rest:
        data = path.read_bytes()
        for form in _forms():
            assert form.encode("utf-8") not in data, f"{path.name} holds {form!r}"


def _capture(home: Path, shell: str) -> str:
    return subprocess.run(
        ["tmux", "-S", str(home / "tmux.sock"), "capture-pane", "-p", "-J", "-S", "-", "-t", f"={shell}:"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


async def test_dryrun_and_errors_never_show_a_value(tether_home: Path) -> None:
    vault(tether_home).set("C", CANARY)
    async with shell_client(tether_home, "conv-b") as client:
        shell = await open_shell(client)
        text, data = await call(
            client,
            "shell_run",
            {
                "tasks": [
                    {
                        "target": {"sessions": shell},
                        "action": {"kind": "run", "command": f"echo {{{{vault.C}}}} '{CANARY}'"},
                        "safety": {"dryrun": True},
                    }
                ]
            },
        )
        _assert_clean("a dry run", text + json.dumps(data, ensure_ascii=False))
        assert "echo [vault:C] '[vault:C]'" in text
        _, out = await task(client, "shell_run", shell, {"kind": "run", "command": "echo {{vault.NOPE}}"})
        assert "no vault secret for {{vault.NOPE}}" in out["error"]


async def test_vault_variables_live_only_until_the_next_prompt(tether_home: Path) -> None:
    vault(tether_home).set("C", CANARY)
    count = "compgen -v __TETHER_V_ | wc -l"
    async with shell_client(tether_home, "conv-a") as client:
        shell = await open_shell(client)

        async def counted(command: str) -> list[str]:
            _, out = await task(
                client, "shell_run", shell, {"kind": "run", "command": command}, wait={"kind": "exit"}
            )
            return [line.strip() for line in out["lines"]]

        assert await counted("printf '%s' {{vault.C}} >/dev/null; " + count) == ["1"]
        assert await counted(count) == ["0"]  # cleared at the prompt


async def test_a_private_key_in_the_vault_is_masked_and_breaks_no_call(tether_home: Path) -> None:
    """A ~1.7 KB PEM key: the masker of such a value used to fail to build (``RecursionError``),
    which failed every tool call of every conversation sharing the home."""
    rng = random.Random(5)
    body = "".join(rng.choice(string.ascii_letters + string.digits + "+/") for _ in range(1600))
    key = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(body[i : i + 64] for i in range(0, 1600, 64))
    key += "\n-----END PRIVATE KEY-----"
    vault(tether_home).set("KEY", key)
    flat = key.replace("\n", "")
    async with shell_client(tether_home, "conv-k") as client:
        shell = await open_shell(client)
        command = 'k={{vault.KEY}}; printf \'%s\\n\' "$k"; printf \'cut:%s\\n\' "${k:0:1000}" "${k: -1000}"'
        action = {"kind": "run", "command": command}
        text, out = await task(client, "shell_run", shell, action, wait={"kind": "exit"})
        assert out["exitCode"] == 0, out
        shown = text + json.dumps(out, ensure_ascii=False)
        for piece in (body[:64], flat[:1000], flat[-1000:], body[-64:]):
            assert piece not in shown
        assert "[vault:KEY]" in shown
