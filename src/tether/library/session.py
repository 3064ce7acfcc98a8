"""``Tether``: tether's tools for a Python program on asyncio, one conversation per object.

Invariant: a ``Tether`` is a front door that translates only, like the MCP server: every call is
one ``ToolRegistry.call`` of the catalog ``build_catalog`` assembles for its home, with the source
``tool`` — checked, masked and audited exactly as an agent's call, and allowed exactly what an
agent is (the people-only tools stay the panel's and the command line's). What it raises is a
``TetherError`` with a stable code: a tool's own refusal as the tool raises it, anything else
that escapes the tools as ``INTERNAL`` (logged with its traceback), never a bare exception of the
layers below.

It belongs to the asyncio event loop that first uses it: the tmux control clients and waits of a
home are bound to one loop, so a call from another loop (another thread's, a second
``asyncio.run``) is refused with a ``UsageError`` instead of hanging on a loop that no longer runs.
Closing it kills its background jobs (as a stdio server's end does); its persistent shells stay
in the home's tmux server, as an MCP conversation's do, until closed or reaped when idle. The
program's process is left as it was found: no orphan of the program's own children is adopted
(``PR_SET_CHILD_SUBREAPER``) while a ``Tether`` is open or after (``pause_adoption``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio

from tether.config import load_config
from tether.errors import TetherError, UsageError
from tether.home import ensure_home, resolve_home
from tether.mcp.ids import conversation_id
from tether.process.tree import pause_adoption
from tether.tools.bash import ToolAborted
from tether.tools.catalog import build_catalog
from tether.tools.registry import CallContext, ToolResult

logger = logging.getLogger(__name__)

# What the store notes as this conversation's client (``shell_state``, the panel, the audit log).
CLIENT = "tether-python"


def home_path(home: str | os.PathLike[str] | None) -> Path:
    """The state directory a program names (absolute, normalized), else ``$TETHER_HOME``'s rule."""
    if home is None:
        return resolve_home()
    try:
        text: str | bytes = os.fspath(home)
    except TypeError:
        text = b""  # refused below, named as given
    if not isinstance(text, str) or not text.strip():
        raise UsageError(
            f"home={home!r} is not a directory path; give a path such as '/tmp/agent-home', or None"
        )
    return Path(os.path.abspath(os.path.expanduser(text)))


class Tether:
    """tether's tools for one asyncio program: ``await tether.call("bash", {...})``.

    ``home``: the state directory (default ``$TETHER_HOME``, else ``~/.tether``); ``conversation``:
    the id that owns the shells and jobs this object starts (default a new ``conv-…``; give the
    same one again to keep owning shells across runs). Use it as ``async with Tether() as t:``, or
    ``await t.aclose()`` when done.
    """

    def __init__(
        self, *, home: str | os.PathLike[str] | None = None, conversation: str | None = None
    ) -> None:
        self._closed = True  # until the catalog exists: ``__del__`` of a half-made object says nothing
        self.home = ensure_home(home_path(home))
        self.conversation = conversation_id(conversation or "", name="conversation")
        self._catalog = build_catalog(load_config(self.home))
        self._context = CallContext(actor=self.conversation, source="tool", client=CLIENT)
        self._loop: asyncio.AbstractEventLoop | None = None
        # The program's process is not tether's: while this is open it takes no orphans, and
        # afterwards only if it did before (a subreaper's orphans are its own to reap, and those
        # of the program's own children would end as zombies that nothing reaps).
        self._adopt_again = pause_adoption(as_before=True)
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Tether {state} home={str(self.home)!r} conversation={self.conversation!r}>"

    def tools(self) -> list[str]:
        """The names of the tools this deployment offers (``bash``, ``shell_run``, …)."""
        return sorted(tool.name for tool in self._catalog.registry.list())

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """Call ``tool`` with ``arguments`` (as docs/tools.md gives them) and return its result:
        ``text`` (what a model reads), ``structured`` (the documented fields) and ``is_error``.

        A command that fails, times out or is killed is a result; bad arguments, a refusal or an
        unknown tool raise a ``TetherError`` whose ``code`` names what happened.
        """
        self._enter_loop("call")
        try:
            return await self._catalog.registry.call(
                tool, {} if arguments is None else arguments, self._context
            )
        except ToolAborted as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this call itself was cancelled: a cancellation, as asyncio means it
            raise TetherError(exc.message, code=exc.code) from None
        except TetherError:
            raise
        except Exception as exc:
            logger.exception("tool %s failed unexpectedly for %s", tool, self.conversation)
            raise TetherError(
                f"tool {tool} failed unexpectedly ({type(exc).__name__}: {exc}); this is a bug in tether, "
                "please report it with this message",
                code="INTERNAL",
            ) from exc

    async def aclose(self) -> None:
        """Kill this object's background jobs and release its connections; idempotent. The
        shells it opened stay (close them with ``shell_manage``, kind ``close``)."""
        if self._closed:
            return
        if self._loop is not None and self._loop.is_closed():
            self._loop = None  # what was bound to that loop ended with it; close the rest here
        self._enter_loop("aclose")
        self._closed = True
        try:
            with anyio.CancelScope(shield=True):  # a Ctrl-C or a cancelled task still ends the jobs
                await self._catalog.aclose()
        finally:
            self._adopt_again()

    async def __aenter__(self) -> Tether:
        self._enter_loop("async with")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __del__(self) -> None:
        if not self._closed:
            warnings.warn(
                f"{self!r} was never closed: use 'async with Tether() as t:' or 'await t.aclose()'; "
                "its background jobs end only with this process",
                ResourceWarning,
                stacklevel=1,
                source=self,
            )

    def _enter_loop(self, what: str) -> None:
        """Bind this object to the running loop, or refuse: closed, no loop, or another loop."""
        if self._closed:
            raise UsageError(f"{what}: {self!r} is closed; create a new Tether")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError(
                f"{what}: Tether runs on asyncio and no asyncio event loop is running here; "
                "await it inside asyncio.run(...), or use BlockingTether from synchronous code"
            ) from None
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            if self._loop.is_closed():
                raise UsageError(
                    f"{what}: {self!r} was used on an event loop that has ended (an earlier "
                    "asyncio.run); create the Tether inside the asyncio.run that uses it"
                )
            raise UsageError(
                f"{what}: {self!r} belongs to the event loop that first used it, not this one (another "
                "thread's, or another asyncio.run); create one Tether per event loop, or use "
                "BlockingTether, which any thread may call"
            )
