"""A listing asked for a call on its way (``expect_listing``): written to tmux before it returns,
taken by the next lean listing once and only while it is fresh, never by a full one.

Each query the control client writes is recorded (``_flush``), so what is observed is how many
listings tmux was asked for and when, not a duration."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tether.config import load_config
from tether.shells import Shells, open_shell, run
from tether.shells import host as host_module
from tether.shells.tmux import control
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext
from writes import until, write

pytestmark = pytest.mark.timeout(60)


def _listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pane listings written to tmux, in order: ``lean`` or ``full``."""
    written: list[str] = []
    real_flush = control.ControlClient._flush

    def flush(self: control.ControlClient) -> None:
        for line in b"".join(self._out).decode("utf-8", "replace").splitlines():
            if line.startswith("'list-panes'"):
                written.append("full" if "pane_current_path" in line else "lean")
        real_flush(self)

    monkeypatch.setattr(control.ControlClient, "_flush", flush)
    return written


async def test_the_expected_listing_is_written_at_once_and_taken_by_the_next_lean_listing(
    home_shells: Shells, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shell, _ = await open_shell(
        home_shells, owner="t", label="x", cwd=str(tmp_path), cols=80, rows=24, idle_minutes=0
    )
    written = _listings(monkeypatch)
    home_shells.expect_listing()
    assert written == ["lean"]  # before anything awaited
    home_shells.expect_listing()  # a second call on its way meanwhile shares it
    assert written == ["lean"]
    assert list(await home_shells.live(lean=True)) == [shell.id]
    assert written == ["lean"]  # taken, not asked again
    await home_shells.live(lean=True)
    assert written == ["lean", "lean"]  # taken once only
    home_shells.expect_listing()
    await home_shells.live()  # a full listing does not take a lean one
    assert written == ["lean", "lean", "lean", "full"]


async def test_an_expected_listing_left_too_long_is_not_taken(
    home_shells: Shells, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = home_shells.local
    await host.panes(lean=True)
    written = _listings(monkeypatch)
    clock = [1000.0]
    monkeypatch.setattr(host_module, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    home_shells.expect_listing()
    clock[0] += host_module._FRESH_S + 0.001  # older than a listing that counts as "now"
    await home_shells.live(lean=True)
    assert written == ["lean", "lean"]  # asked afresh


async def test_nothing_is_asked_before_the_control_client_is_up(
    home_shells: Shells, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = _listings(monkeypatch)
    home_shells.expect_listing()  # no client yet: the call asks for itself
    assert written == []
    assert await home_shells.live(lean=True) == {}
    assert written == ["lean"]


async def test_an_unchanged_line_is_not_parsed_again_unless_its_pane_was_read_since(
    home_shells: Shells, tmp_path: Path
) -> None:
    """Every call lists every shell: an idle shell's unchanged line keeps the pane parsed from it.
    A lean line takes the known pane's cwd, so once ``pane_now`` has read a newer cwd the same
    line must be parsed again, not answered with the pane that still holds the older one."""
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    shell, _ = await open_shell(
        home_shells, owner="t", label="x", cwd=str(before), cols=80, rows=24, idle_minutes=0
    )
    w = write(shell.id, until("exit"))
    host = home_shells.local
    first = (await host.panes())[shell.id]
    assert first.cwd == str(before)
    lean = (await host.panes(lean=True))[shell.id]
    assert lean.cwd == str(before)
    assert (await host.panes(lean=True))[shell.id] is lean  # the same line: the same pane
    await run(home_shells, w, f"cd {after}")
    assert (await host.pane_now(shell.id)).cwd == str(after)
    assert (await host.panes(lean=True))[shell.id].cwd == str(after)


def _written(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every tmux command the control clients write, in order."""
    written: list[str] = []
    real_flush = control.ControlClient._flush

    def flush(self: control.ControlClient) -> None:
        written.extend(b"".join(self._out).decode("utf-8", "replace").splitlines())
        real_flush(self)

    monkeypatch.setattr(control.ControlClient, "_flush", flush)
    return written


async def test_a_call_that_names_its_shell_asks_tmux_of_no_other_shell(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, every shell_run, shell_send and shell_read began with ``list-panes -a``: a line of
    tmux's formatting per shell of the home, so a call cost more the more shells were open
    (15.4 ms for an ``echo`` with 200 idle shells against 5.0 ms with one, fourth stop). A call
    whose tasks name their shells now asks tmux of those alone, from the announcement on."""
    catalog = build_catalog(load_config(tether_home), with_jobs=False)
    registry, ctx = catalog.registry, CallContext(actor="conv-named")
    try:
        opened = await registry.call("shell_open", {"tasks": [{"action": {"kind": "open", "count": 3}}]}, ctx)
        mine, *others = [t["shell"] for t in opened.structured["tasks"]]
        target = {"sessions": mine}
        calls: list[tuple[str, dict[str, Any]]] = [
            (
                "shell_run",
                {
                    "tasks": [
                        {
                            "target": target,
                            "action": {"kind": "run", "command": "echo hi"},
                            "wait": {"kind": "exit"},
                        }
                    ]
                },
            ),
            (
                "shell_send",
                {
                    "tasks": [
                        {"target": target, "action": {"kind": "send", "text": "echo sent", "keys": ["Enter"]}}
                    ]
                },
            ),
            ("shell_read", {"tasks": [{"target": target, "action": {"kind": "read", "mode": "tail"}}]}),
        ]
        for name, args in calls:
            written = _written(monkeypatch)
            registry.expect(name, args)  # as the stdio door announces a call it reads
            result = await registry.call(name, args, ctx)
            assert result.structured["tasks"][0]["ok"], result.text
            assert not [line for line in written if line.startswith("'list-panes'")], (name, written)
            assert not [line for line in written if any(other in line for other in others)], (name, written)
            assert any(mine in line for line in written), (name, written)
            monkeypatch.undo()
        # A shell that is not live is still told apart from one that never was (nothing listed).
        gone = {"tasks": [{"target": {"sessions": "dsh-zzzzzz"}, "action": {"kind": "read"}}]}
        read = await registry.call("shell_read", gone, ctx)
        assert "no live shell dsh-zzzzzz" in read.structured["tasks"][0]["error"], read.text
        # An open counts the live shells (one lean listing: how many, not where they are) and
        # checks its new id by name and by its record (before: two full listings, where every
        # pane's foreground costs tmux a read of /proc, and every id of the home's history).
        written = _written(monkeypatch)
        opened = await registry.call("shell_open", {"tasks": [{"action": {"kind": "open"}}]}, ctx)
        assert opened.structured["tasks"][0]["ok"], opened.text
        listings = [line for line in written if line.startswith("'list-panes'")]
        assert len(listings) == 1 and "pane_current_path" not in listings[0], listings
        monkeypatch.undo()
        # shell_state of this conversation's shells (its default) asks of those alone.
        other = CallContext(actor="conv-other")
        opened = await registry.call("shell_open", {"tasks": [{"action": {"kind": "open"}}]}, other)
        own = opened.structured["tasks"][0]["shell"]
        written = _written(monkeypatch)
        state = await registry.call("shell_state", {}, other)
        assert [r["shell"] for r in state.structured["shells"]] == [own], state.text
        assert not [line for line in written if line.startswith("'list-panes'")], written
        assert not [line for line in written if mine in line or any(o in line for o in others)], written
        monkeypatch.undo()
        # ``mine`` still needs the whole listing, and gets it.
        written = _written(monkeypatch)
        mine_read = {"tasks": [{"target": {"sessions": "mine"}, "action": {"kind": "read"}}]}
        result = await registry.call("shell_read", mine_read, CallContext(actor="conv-third"))
        assert "no live shell" in result.structured["tasks"][0]["error"], result.text
        assert [line for line in written if line.startswith("'list-panes'")]
    finally:
        await catalog.aclose()
