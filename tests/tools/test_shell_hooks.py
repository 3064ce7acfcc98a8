"""The seams issue 5 plugs into: before/after-write hooks, macro expansion, the locked state.

Driven through the tool handlers directly (the hooks are process-internal, not MCP-visible)."""

from __future__ import annotations

from pathlib import Path

from tether.config import load_config
from tether.errors import RefusedError
from tether.shells.safety.hooks import SessionHooks, WriteDecision, WriteIntent
from tether.tools.registry import CallContext
from tether.tools.shells import ShellTools


async def test_hooks_see_every_write_and_can_expand_or_refuse(tether_home: Path) -> None:
    tools = ShellTools(load_config(tether_home))
    ctx = CallContext(actor="hook-test")
    seen: list[tuple[str, str]] = []
    released: list[str] = []

    async def before(intent: WriteIntent) -> WriteDecision:
        seen.append((intent.kind, intent.text))
        if intent.text == "/greet":
            return WriteDecision(text="echo expanded-greeting", expanded=True)
        if intent.text == "forbidden":
            raise RefusedError("the guard said no")
        return WriteDecision(text=intent.text)

    async def after(intent: WriteIntent) -> None:
        released.append(intent.kind)

    try:
        opened = await tools.open({"tasks": [{"action": {"kind": "open"}}]}, ctx)
        shell = opened.structured["tasks"][0]["shell"]
        engine = tools.shells()
        engine.hooks = SessionHooks(
            before_write=before, after_write=after, is_locked=lambda s, _actor: s == shell
        )
        tgt = {"sessions": shell}
        # an expanded macro cannot carry exit markers: refused before sending when waiting for exit
        res = await tools.run(
            {
                "tasks": [
                    {"target": tgt, "action": {"kind": "run", "command": "/greet"}, "wait": {"kind": "exit"}}
                ]
            },
            ctx,
        )
        assert "cannot wait for exit: expanded" in res.text
        res = await tools.run(
            {
                "tasks": [
                    {
                        "target": tgt,
                        "action": {"kind": "run", "command": "/greet"},
                        "wait": {"kind": "match", "pattern": "expanded-greeting$"},
                    }
                ]
            },
            ctx,
        )
        assert res.structured["tasks"][0]["met"] is True
        res = await tools.run(
            {"tasks": [{"target": tgt, "action": {"kind": "run", "command": "forbidden"}}]}, ctx
        )
        assert "the guard said no" in res.text and res.is_error
        await tools.send(
            {"tasks": [{"target": tgt, "action": {"kind": "send", "text": "x", "keys": ["C-u"]}}]}, ctx
        )
        assert [k for k, _ in seen] == ["run", "run", "run", "send"]
        assert released == ["run", "run", "send"]  # released even when refused after before_write
        state = await tools.state({"state": "locked"}, ctx)
        assert [r["shell"] for r in state.structured["shells"]] == [shell]
    finally:
        await tools.aclose()
