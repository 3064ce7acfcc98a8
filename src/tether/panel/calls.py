"""How the panel acts: through the same tool handlers the MCP server runs, as actor ``panel``.

Invariants:

- Every panel action is a call of a registry tool with ``CallContext(actor="panel",
  source="panel")``: the tools an agent could also call (open, rename, close, snapshot, workspaces,
  state, read) and the people-only tools no agent can (manual locks, the vault, the audit log,
  timelines, outputs, recordings). The panel holds no second implementation of any behaviour and
  no second path to the store.
- Every panel action leaves exactly one audit record with source ``panel``, written by the
  registry's middleware; what the panel itself notes (signing in, a terminal attaching and
  detaching: keystrokes are never logged) is appended here. Refreshing a view (the shell list's
  ``shell_state``, a timeline, the vault listing) is not an action and is not logged.
- A person signed in with access of their own (``auth``) acts by name: ``ACTING`` holds their
  name for the request (or socket) the guard let through, so each tool call's context carries it
  (``CallContext.who``) and each record is the actor ``panel:NAME``; ``panel`` stays the owner of
  the shells and locks the panel makes. ``None`` is whoever holds the serve token.
- Errors are data for the browser: ``PanelError`` carries a stable code, an HTTP status and the
  lower layer's human-actionable message; nothing else crosses to the page.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from tether.audit.log import AuditLog
from tether.audit.record import Outcome
from tether.config import Config
from tether.errors import NotFoundError, RefusedError, TetherError, UsageError
from tether.shells import Shells
from tether.tools.registry import CallContext, ToolRegistry, ToolResult

logger = logging.getLogger(__name__)

PANEL_ACTOR = "panel"
PANEL_CONTEXT = CallContext(actor=PANEL_ACTOR, source="panel")
# The person the current request or socket acts for (set by ``auth.PanelGuard``); None: the
# serve token's person.
ACTING: ContextVar[str | None] = ContextVar("tether_panel_acting", default=None)


def acting_context() -> CallContext:
    who = ACTING.get()
    return replace(PANEL_CONTEXT, who=who) if who else PANEL_CONTEXT


# The codes of a policy's no (a 403 for the page): a lock, a person typing and a locked vault group
# (REFUSED), the guard (BLOCKED), the shell limit (MAX_SESSIONS).
POLICY_CODES = frozenset({"REFUSED", "BLOCKED", "MAX_SESSIONS"})


@dataclass(frozen=True, slots=True, kw_only=True)
class PanelError(Exception):
    """What the browser is told when an action fails."""

    code: str
    message: str
    status: int = 400

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message}


def error_from(exc: TetherError) -> PanelError:
    status = 400
    if isinstance(exc, RefusedError):
        status = 403
    elif isinstance(exc, NotFoundError):
        status = 404
    elif not isinstance(exc, UsageError):
        status = 503
    return PanelError(code=exc.code, message=exc.message, status=status)


@dataclass(slots=True, kw_only=True)
class PanelCalls:
    """The panel's door to the tools of one ``TETHER_HOME`` (and to its own audit notes)."""

    registry: ToolRegistry
    config: Config
    audit_log: AuditLog = field(init=False)

    def __post_init__(self) -> None:
        self.audit_log = AuditLog(self.config.home)

    async def tool(self, name: str, arguments: Mapping[str, Any], *, audited: bool = True) -> ToolResult:
        """Run tool ``name`` as the panel; a tool error result becomes ``PanelError``.

        ``audited=False`` only for the shell list's background refresh (not a person's action)."""
        tool = self.registry.get(name, people=True)
        if tool is None:
            raise PanelError(
                code="UNAVAILABLE",
                message=f"this server has no {name} tool, so the panel cannot do that here",
                status=503,
            )
        try:
            result = await self.registry.call(name, arguments, acting_context(), audited=audited)
        except TetherError as exc:
            raise error_from(exc) from exc
        if result.is_error:
            rows = task_rows(result.structured)
            errors = [e for e in (t.get("error") for t in rows) if isinstance(e, str)]
            codes = [c for c in (t.get("errorCode") for t in rows) if isinstance(c, str)]
            refused = any(c in POLICY_CODES for c in codes)
            # The same status the page gets when the error is raised rather than reported per task.
            missing = bool(codes) and all(c == "NOT_FOUND" for c in codes)
            raise PanelError(
                code=codes[0] if codes else "TOOL_ERROR",
                message="; ".join(errors) or result.text,
                status=403 if refused else 404 if missing else 400,
            )
        return result

    def engine(self) -> Shells:
        """The home's shells on this loop: only for a person's terminal (``shells`` people face)."""
        return Shells.get(self.config)

    async def audit(
        self,
        *,
        action: str,
        tool: str = "panel",
        targets: Sequence[str] = (),
        outcome: Outcome = "ok",
        detail: str = "",
        reason: str | None = None,
        extra: Mapping[str, Any] | None = None,
        who: str | None = None,
    ) -> None:
        """Append one ``panel`` record of the panel's own (fsync: off the loop), as ``who`` (a
        person signing in) or the person of this request."""
        actor = replace(PANEL_CONTEXT, who=who or ACTING.get()).audit_actor

        def write() -> None:
            self.audit_log.append(
                actor=actor,
                source="panel",
                tool=tool,
                action=action,
                targets=targets,
                outcome=outcome,
                detail=detail,
                reason=reason,
                extra=extra,
            )

        try:
            await anyio.to_thread.run_sync(write)
        except TetherError as exc:
            raise error_from(exc) from exc


def task_rows(structured: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The per-task entries of a ``{ tasks: [...] }`` tool's structured result."""
    tasks = structured.get("tasks")
    return [t for t in tasks if isinstance(t, Mapping)] if isinstance(tasks, list) else []


def task_summary(structured: Mapping[str, Any], fallback: str) -> str:
    """What the page shows after a successful tool call: the tasks' own lines, not the whole render."""
    lines = [str(line) for t in task_rows(structured) for line in (t.get("lines") or [])]
    return "\n".join(lines) or fallback.strip()
