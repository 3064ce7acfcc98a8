"""The panel's vault view, live: groups and secret names, pushed to every open page when they change.

Invariants:

- A page is sent exactly what ``GET /panel/api/vault`` answers (``vault_listing``): group names,
  their lock state and until when, how many secrets each holds, secret names, and the unlock
  lengths a person may ask for (``[vault]`` of config.toml, for the form). No value ever
  crosses: the ``vault`` tool's listing holds none, and only these fields are passed on.
- A change made by any process of the home (``tether vault set`` at a terminal, an unlock, its
  expiry) reaches the page within ``INTERVAL_S``, the shell list's period: the listing is re-read
  (``vault list``, unaudited: filling a view is not an action) and sent only when it differs.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio

from tether.panel.calls import PanelCalls, PanelError
from tether.panel.shells import INTERVAL_S

_GROUP_FIELDS = ("name", "protected", "locked", "unlockedUntilMs", "items")
_ITEM_FIELDS = ("name", "group", "locked")


def vault_listing(structured: Mapping[str, Any]) -> dict[str, Any]:
    """The page's view of a ``vault list`` result: names and lock state, never a value."""
    groups = structured.get("groups")
    items = structured.get("items")
    return {
        "groups": [{k: g.get(k) for k in _GROUP_FIELDS} for g in groups if isinstance(g, Mapping)]
        if isinstance(groups, list)
        else [],
        "items": [{k: i.get(k) for k in _ITEM_FIELDS} for i in items if isinstance(i, Mapping)]
        if isinstance(items, list)
        else [],
        "unlockMinutes": structured.get("unlockMinutes"),
        "maxUnlockMinutes": structured.get("maxUnlockMinutes"),
    }


async def read_vault(calls: PanelCalls) -> dict[str, Any]:
    result = await calls.tool("vault", {"action": "list"}, audited=False)
    return vault_listing(result.structured)


async def vault_stream(calls: PanelCalls) -> AsyncIterator[str]:
    """JSON messages for one page: the vault's listing now, then whenever it changes."""
    last = ""
    while True:
        try:
            message = json.dumps({"type": "vault", **await read_vault(calls)}, sort_keys=True)
        except PanelError as exc:
            message = json.dumps({"type": "vault", "error": exc.code, "message": exc.message})
        if message != last:
            last = message
            yield message
        await anyio.sleep(INTERVAL_S)
