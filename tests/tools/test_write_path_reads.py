"""What the safety path reads before a write's keys leave, and that what it no longer reads was
never needed: the foreground decides how vault values travel and whether a dry run is judged as
the shell's line, so it is read for those writes alone (a remote host's answer is a round trip).

Driven through the tool handlers and the hooks directly (the reads are process-internal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from safety_harness import vault

from tether.config import load_config
from tether.errors import UsageError
from tether.shells.safety.hooks import WriteDecision, WriteIntent
from tether.shells.safety.policy import GuardBlockedError, SafetyPolicy
from tether.shells.tmux.commands import PaneInfo
from tether.tools.registry import CallContext
from tether.tools.shells import ShellTools

SECRET = "s3cr3t-value-Q7"


def _task(shell: str, action: dict[str, Any], **blocks: Any) -> dict[str, Any]:
    return {"tasks": [{"target": {"sessions": shell}, "action": action, **blocks}]}


async def test_the_foreground_is_read_only_for_vault_values_and_dry_runs(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault(tether_home).set("K", SECRET)
    config = load_config(tether_home)
    policy = SafetyPolicy.from_config(config)
    tools = ShellTools(config, hooks_for=policy.hooks_for)
    ctx = CallContext(actor="conv-reads")
    try:
        opened = await tools.open({"tasks": [{"action": {"kind": "open"}}]}, ctx)
        shell = opened.structured["tasks"][0]["shell"]
        engine = tools.shells()
        host = engine.host_of(shell)
        reads: list[str] = []
        real = host.foreground

        async def counted(pane: PaneInfo) -> Any:
            reads.append(pane.shell_id)
            return await real(pane)

        monkeypatch.setattr(host, "foreground", counted)

        async def decide(text: str, kind: Any = "run", **more: Any) -> WriteDecision:
            intent = WriteIntent(shell_id=shell, actor=ctx.actor, kind=kind, text=text, **more)
            try:
                return await engine.hooks.before_write(intent)
            finally:
                await engine.hooks.after_write(intent)

        # A plain line: nothing in it depends on what is in front.
        plain = await decide("echo plain")
        assert plain.text == "echo plain" and not plain.variables and reads == []
        braces = await decide("echo '{{x}}'")
        assert braces.text == "echo '{{x}}'" and reads == []

        # A vault value for the shell at its prompt: in a variable the loader sets, never typed.
        at_prompt = await decide("printf '%s' {{vault.K}}")
        assert reads == [shell]
        assert at_prompt.variables and SECRET in at_prompt.variables.values()
        assert SECRET not in at_prompt.text and not at_prompt.typed_secret

        # A dry run with the shell in front is judged as the shell's line, now: before a malformed
        # reference is refused, as ever.
        with pytest.raises(GuardBlockedError):
            await decide("rm -rf /", dryrun=True)
        with pytest.raises(GuardBlockedError):
            await decide("rm -rf / {{vault.K", dryrun=True)
        assert reads == [shell, shell, shell]
        with pytest.raises(UsageError, match="unterminated vault reference"):
            await decide("echo {{vault.K")
        assert reads == [shell, shell, shell, shell]

        # A program in front (cat reads its terminal): the value is typed for it.
        res = await tools.run(_task(shell, {"kind": "run", "command": "cat"}, wait={"kind": "none"}), ctx)
        assert not res.is_error, res.text
        res = await tools.read(
            _task(shell, {"kind": "read"}, wait={"kind": "foreground", "proc": "cat"}), ctx
        )
        assert res.structured["tasks"][0]["met"] is True, res.text
        del reads[:]
        for_cat = await decide("{{vault.K}}", kind="send", submit=False)
        assert reads == [shell]
        assert for_cat.typed_secret and for_cat.text == SECRET and not for_cat.variables
        await tools.send(_task(shell, {"kind": "send", "text": "", "keys": ["C-c"]}), ctx)
    finally:
        await tools.aclose()
        policy.close()
