"""The live shell list: ``shell_state`` (as the panel) turned into rows, pushed to every open page.

Invariants:

- The list is exactly what ``shell_state scope=*`` reports — the same states, owners (who opened
  each shell, and that conversation's client), hosts, foreground commands, working directories,
  last commands and manual locks an agent sees; this module only reshapes it for the page.
- One ``shell_state`` call serves every open page: a snapshot younger than ``CACHE_S`` is reused,
  and concurrent askers wait for the one call in flight.
- A page hears about a change within ``INTERVAL_S``, or at once after a panel action (``poke``).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from tether.panel.calls import PanelCalls, PanelError

INTERVAL_S = 1.0
CACHE_S = 0.4
OWNER_KINDS = ("conversation", "panel", "cli", "unknown")


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellRow:
    id: str
    label: str
    owner: str  # one of OWNER_KINDS
    owner_id: str  # the conversation id for "conversation", else the same as owner
    client: str | None  # the MCP client of that conversation, as it named itself
    host: str
    states: tuple[str, ...]
    fg: str
    cwd: str
    idle_ms: int | None
    last_activity_ms: int | None
    locked_by: str | None
    lock_reason: str | None = None
    last_command: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "label": self.label,
            "owner": self.owner,
            "ownerId": self.owner_id,
            "client": self.client,
            "host": self.host,
            "states": list(self.states),
            "fg": self.fg,
            "cwd": self.cwd,
            "idleMs": self.idle_ms,
            "lastActivityMs": self.last_activity_ms,
            "lockedBy": self.locked_by,
            "lockReason": self.lock_reason,
            "lastCommand": dict(self.last_command) if self.last_command is not None else None,
        }


def owner_kind(owner_id: str | None) -> str:
    """``conversation`` / ``panel`` / ``cli`` / ``unknown`` from a shell record's owner."""
    if owner_id in ("panel", "cli"):
        return owner_id
    if not owner_id:
        return "unknown"
    return "conversation"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def row_from_state(item: Mapping[str, Any]) -> ShellRow:
    """One row of ``shell_state``'s structured content (its published output schema).

    ``shell_state`` names owners relative to the caller (``mine`` = the panel's own shells);
    ``openedBy`` says who actually opened the shell."""
    shell_id = _str(item.get("shell"))
    relative = _str(item.get("owner"))
    opened = item.get("openedBy")
    owner_id = opened if isinstance(opened, str) and opened else ("panel" if relative == "mine" else "")
    states = item.get("states")
    lock = item.get("manualLock")
    lock = lock if isinstance(lock, Mapping) else None
    last = item.get("lastCommand")
    client = item.get("client")
    return ShellRow(
        id=shell_id,
        label=_str(item.get("label")),
        owner=owner_kind(owner_id or None) if relative != "unknown" else "unknown",
        owner_id=owner_id or "unknown",
        client=client if isinstance(client, str) else None,
        host=_str(item.get("host")) or "local",
        states=tuple(s for s in states if isinstance(s, str)) if isinstance(states, list) else (),
        fg=_str(item.get("fg")),
        cwd=_str(item.get("cwd")),
        idle_ms=None,
        last_activity_ms=_opt_int(item.get("lastActivityMs")),
        locked_by=_str(lock.get("who")) if lock is not None else None,
        lock_reason=_str(lock.get("reason")) if lock is not None else None,
        last_command=last if isinstance(last, Mapping) else None,
    )


def rows_from_state(structured: Mapping[str, Any]) -> list[ShellRow]:
    shells = structured.get("shells")
    if not isinstance(shells, Sequence):
        return []
    return [row_from_state(item) for item in shells if isinstance(item, Mapping) and item.get("shell")]


@dataclass(slots=True, kw_only=True)
class ShellFeed:
    calls: PanelCalls
    _rows: list[ShellRow] = field(default_factory=list)
    _at: float = float("-inf")
    _lock: anyio.Lock = field(default_factory=anyio.Lock)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def rows(self) -> list[ShellRow]:
        async with self._lock:
            if time.monotonic() - self._at >= CACHE_S:
                result = await self.calls.tool("shell_state", {"scope": "*"}, audited=False)
                self._rows = rows_from_state(result.structured)
                self._at = time.monotonic()
            return list(self._rows)

    def poke(self) -> None:
        """Something changed (a panel action): refresh now and wake every page's stream."""
        self._at = float("-inf")
        self._changed.set()
        self._changed = anyio.Event()

    async def stream(self) -> AsyncIterator[str]:
        """JSON messages for one page: the list now, then whenever it changes."""
        last = ""
        while True:
            try:
                rows = [r.to_json() for r in await self.rows()]
            except PanelError as exc:
                body = json.dumps({"type": "error", "error": exc.code, "message": exc.message})
                message = body
            else:
                body = json.dumps(rows, sort_keys=True)
                message = json.dumps({"type": "shells", "now": int(time.time() * 1000), "shells": rows})
            if body != last:
                last = body
                yield message
            changed = self._changed
            with anyio.move_on_after(INTERVAL_S):
                await changed.wait()
