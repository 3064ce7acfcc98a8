"""Granting a wider sandbox mode: the deployment's configuration, else a person; audited either way.

Invariant: a mode wider than ``use_default`` is granted only with a non-blank justification and
either ``[sandbox].allow_escalations`` listing it or a person approving it (``tether.approvals``:
MCP elicitation, else the panel's queue, refused at the timeout) — for one-shot commands (the
``bash`` / ``pwsh`` tools) and persistent shells (``shell_open``) alike. Every request, granted or
refused, is one ``sandbox_escalation`` audit record (source ``tool``, the justification as
``reason``, the mode in ``extra.sandbox_permissions``, who granted it in ``extra.granted_by``)
written before anything runs; a person's answer has its own ``approval`` record. If the audit log
cannot be written, the escalation is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tether.approvals import Approvals, PersonChannel, Question
from tether.audit.log import AuditLog
from tether.errors import RefusedError, UsageError
from tether.shell.sandbox.policy import DEFAULT_MODE, PermissionMode, SandboxSettings

logger = logging.getLogger(__name__)

CONFIGURATION = "configuration"


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    """The mode something runs under and who granted it ("" for the default mode)."""

    mode: PermissionMode
    granted_by: str = ""


def record_escalation(
    audit: AuditLog | None,
    *,
    actor: str,
    tool: str,
    targets: Sequence[str],
    command: str,
    mode: str,
    justification: str | None,
    outcome: Literal["ok", "refused"],
    detail: str,
    granted_by: str = "",
) -> None:
    logger.warning(
        "sandbox escalation %s: tool=%s sandbox_permissions=%s justification=%r targets=%s command=%r",
        "granted" if outcome == "ok" else "refused",
        tool,
        mode,
        justification,
        list(targets),
        command[:200],
    )
    if audit is not None:
        audit.append(
            actor=actor,
            source="tool",
            tool=tool,
            action="sandbox_escalation",
            targets=list(targets),
            command=command,
            outcome=outcome,
            detail=detail,
            reason=justification,
            flags=[f"sandbox:{mode}"],
            extra={"sandbox_permissions": mode, **({"granted_by": granted_by} if granted_by else {})},
        )


class EscalationGate:
    """Decides ``sandbox_permissions`` requests for one deployment (see the module docstring)."""

    def __init__(
        self, settings: SandboxSettings, *, audit: AuditLog | None, approvals: Approvals | None
    ) -> None:
        self.settings = settings
        self.audit = audit
        self.approvals = approvals

    async def grant(
        self,
        *,
        mode: str | None,
        justification: str | None,
        tool: str,
        subject: str,
        command: str,
        asker: str,
        targets: Sequence[str],
        person: PersonChannel | None,
    ) -> Grant:
        """The granted mode, or ``UsageError`` (bad request) / ``RefusedError`` (not granted).

        ``subject`` says what is asked in words a person reads ("run `make`", "open a persistent
        shell in /repo"); ``command`` is what the audit record names.
        """
        wanted = (mode or "").strip() or DEFAULT_MODE
        reason = (justification or "").strip() or None

        def record(outcome: Literal["ok", "refused"], detail: str, granted_by: str = "") -> None:
            record_escalation(
                self.audit,
                actor=asker,
                tool=tool,
                targets=targets,
                command=command,
                mode=wanted,
                justification=reason,
                outcome=outcome,
                detail=detail,
                granted_by=granted_by,
            )

        try:
            granted = self.settings.check_escalation(wanted, reason)
        except UsageError as exc:
            if wanted != DEFAULT_MODE:
                record("refused", exc.message)
            raise
        except RefusedError as exc:
            if self.approvals is None:
                record("refused", exc.message)
                raise
            approvals = self.approvals
        else:
            if granted != DEFAULT_MODE:
                record("ok", "granted without approval ([sandbox].allow_escalations)", CONFIGURATION)
            return Grant(mode=granted, granted_by=CONFIGURATION if granted != DEFAULT_MODE else "")
        question = Question(
            kind="sandbox_escalation",
            tool=tool,
            subject=subject,
            mode=wanted,
            justification=reason or "",
            asker=asker,
            targets=tuple(targets),
        )
        answer = await approvals.ask(question, person=person)
        if answer.approved:
            record("ok", f"approved by {answer.by} ({answer.channel})", answer.by)
            return Grant(mode=_mode(wanted), granted_by=answer.by)
        refusal = answer.refusal(f"sandbox_permissions {wanted!r}")
        record("refused", refusal)
        raise RefusedError(
            f"{refusal}; nothing was run. Work within the default sandbox, or ask the user to allow it "
            "(or to list it in [sandbox].allow_escalations)"
        )


def _mode(name: str) -> PermissionMode:
    for mode in ("use_default", "allow_network", "allow_host_write", "require_escalated"):
        if mode == name:
            return mode
    raise UsageError(f"unknown sandbox mode {name!r}")
