"""The first answers of ``tether mcp``, given before the SDK and the tools are loaded.

Importing the MCP SDK and building the tools takes about a second; a client that starts its first
turn meanwhile would begin without tether's tools. So a ``tether mcp`` process answers
``initialize``, ``ping`` and ``tools/list`` from the answers a previous process of the same build
and configuration recorded (``HandshakeCache``), while the SDK loads in the main thread, and then
hands the conversation over to the SDK (``EarlyFront.take_backlog``, once the reader thread has
stopped and before the event loop reads on). ``server/discover`` (which SDK clients in ``auto``
mode send first) is refused here at once, exactly as the front door refuses it.

Invariants this module owns (standard library only):

- Nothing the client sent is lost or reordered: every message that is not answered here is kept
  and handed to the SDK, in arrival order, followed by everything that arrives later. The
  ``initialize`` request answered here is handed over too, so the SDK records the client's
  capabilities and protocol version exactly as if it had answered; its own answer is then dropped
  (``stdio`` does that), so the client gets exactly one.
- An answer is given here only from a cache entry whose key (``tether.stamp.build_key``) matches
  this build (tether's version, the mtime and size of every module of the package, the MCP SDK's
  files, the interpreter), ``config.toml`` byte for byte, the command-line flags and ``PATH``.
  Without one, everything waits for the SDK, as before.
- The tool list given here is checked against the real one as soon as the SDK is up: if they
  differ, the client gets ``notifications/tools/list_changed`` and the cache is rewritten.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Final

from tether.home import open_regular, replace_file
from tether.mcp.wire import Eof, Item, Message, StdioWire, error_response

logger = logging.getLogger(__name__)

CACHE_FORMAT: Final = 1
# The 2026-07-28 era's opening request; tether serves only the handshake era, so SDK clients in
# ``auto`` mode fall back to ``initialize`` when it is refused (see ``tether.mcp.server``).
DISCOVER_METHOD: Final = "server/discover"
DISCOVER_REFUSAL: Final = "server/discover is not served: tether speaks the initialize handshake"
METHOD_NOT_FOUND: Final = -32601
_KEEP_ENTRIES: Final = 8


class Handshake:
    """What the SDK answered to ``initialize`` and ``tools/list`` for one key.

    (A plain class, like everything on this early path: ``dataclasses`` imports ``inspect``.)
    """

    __slots__ = ("initialize", "latest", "tools", "versions")

    def __init__(
        self, *, initialize: Message, tools: Message, versions: tuple[str, ...], latest: str
    ) -> None:
        self.initialize = initialize  # the InitializeResult, as sent
        self.tools = tools  # the ListToolsResult, as sent
        self.versions = versions  # handshake protocol versions the SDK accepts
        self.latest = latest  # what it answers to any other requested version

    def initialize_for(self, requested: Any) -> Message:
        """The result for a client asking ``requested`` (the SDK's negotiation rule)."""
        result = dict(self.initialize)
        result["protocolVersion"] = requested if requested in self.versions else self.latest
        return result


class HandshakeCache:
    """``$TETHER_HOME/cache/mcp-<key>.json`` files (0600, directory 0700), newest few kept."""

    def __init__(self, home: Path, key: str) -> None:
        self.dir = home / "cache"
        self.key = key
        self.path = self.dir / f"mcp-{key[:32]}.json"

    def load(self) -> Handshake | None:
        try:
            with os.fdopen(open_regular(self.path, os.O_RDONLY), "rb") as cached:  # never a FIFO's wait
                data = json.loads(cached.read())
            if data.get("format") != CACHE_FORMAT or data.get("key") != self.key:
                return None
            versions = tuple(str(v) for v in data["versions"])
            entry = Handshake(
                initialize=dict(data["initialize"]),
                tools=dict(data["tools"]),
                versions=versions,
                latest=str(data["latest"]),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning("ignoring an unreadable handshake cache %s: %s", self.path, exc)
            return None
        if not isinstance(entry.tools.get("tools"), list) or not entry.versions:
            return None
        return entry

    def save(self, entry: Handshake) -> None:
        """Write atomically; a failure only costs the next start its early answers."""
        data = {
            "format": CACHE_FORMAT,
            "key": self.key,
            "written": int(time.time()),
            "initialize": entry.initialize,
            "tools": entry.tools,
            "versions": list(entry.versions),
            "latest": entry.latest,
        }
        try:
            self.dir.mkdir(mode=0o700, exist_ok=True)
            replace_file(
                self.path, json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            )
            self._prune()
        except OSError as exc:
            logger.warning("could not write the handshake cache %s: %s", self.path, exc)

    def _prune(self) -> None:
        entries = sorted(self.dir.glob("mcp-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in entries[_KEEP_ENTRIES:]:
            with contextlib.suppress(OSError):
                stale.unlink()


class EarlyFront:
    """Answers what it can from a ``Handshake`` until the SDK attaches; keeps the rest in order."""

    def __init__(self, wire: StdioWire, handshake: Handshake | None) -> None:
        self._wire = wire
        self._handshake = handshake
        self._lock = threading.Lock()
        self._backlog: list[Item] = []
        self.answered_initialize: Any = None  # the id of the initialize request answered here
        self.served_tools: Message | None = None  # the tools/list result given here, if any

    def offer(self, item: Item) -> None:
        """Called by the reader thread for every message, then once with ``EOF``."""
        with self._lock:
            if isinstance(item, Eof) or not self._answered_here(item):
                self._backlog.append(item)

    def take_backlog(self) -> list[Item]:
        """What arrived and was not answered here, in order (once the reader thread has stopped).

        The caller must process it before anything read after it."""
        with self._lock:
            backlog, self._backlog = self._backlog, []
            return backlog

    def _answered_here(self, message: Message) -> bool:
        """Answer ``message`` now if we can; ``initialize`` is still kept for the SDK (returns False)."""
        method = message.get("method")
        if "id" not in message or not isinstance(method, str):
            return False
        if method == "ping":
            self._reply(message, {})
            return True
        if method == DISCOVER_METHOD:
            self._wire.send(error_response(message["id"], METHOD_NOT_FOUND, DISCOVER_REFUSAL))
            return True
        handshake = self._handshake
        if handshake is None:
            return False
        params = message.get("params") or {}
        if method == "initialize" and self.answered_initialize is None:
            requested = params.get("protocolVersion")
            if isinstance(requested, str) and _valid_initialize(params):
                self.answered_initialize = message["id"]
                self._reply(message, handshake.initialize_for(requested))
            return False  # the SDK must see it too
        if method == "tools/list" and self.answered_initialize is not None and not params.get("cursor"):
            self.served_tools = handshake.tools
            self._reply(message, handshake.tools)
            return True
        return False

    def _reply(self, message: Message, result: Message) -> None:
        self._wire.send({"jsonrpc": "2.0", "id": message["id"], "result": result})


def _valid_initialize(params: Message) -> bool:
    """The fields the SDK requires of ``initialize``: only then may it be answered before the SDK
    sees it (otherwise the SDK's error must be the one answer)."""
    info = params.get("clientInfo")
    return (
        isinstance(params.get("capabilities"), dict)
        and isinstance(info, dict)
        and isinstance(info.get("name"), str)
        and isinstance(info.get("version"), str)
    )
