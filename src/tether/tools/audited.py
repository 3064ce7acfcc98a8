"""The tool-call middleware: one audit record per call, and no secret in anything a caller sees.

Invariants:

- Every ``ToolRegistry.call`` (MCP, panel, any other door) appends exactly one audit record, after
  the call ends — also when it raised or was cancelled (the write is shielded): actor, source,
  tool, action kind(s), target shells, the command(s) as written (``{{vault.NAME}}`` unexpanded),
  outcome (``ok`` / ``error`` / ``refused`` / ``blocked`` / ``dry-run`` / ``cancelled``), detail,
  ``reason`` and flags (``bypass-guard``, ``dryrun``, ``force``). The vault's masker is the
  log's ``redact``, so a value written literally is stored masked. A tool without tasks (the
  people-only tools) names its action, targets and reason itself (``ToolDef.audit_fields``); its
  arguments are never written (a passphrase or a secret value passes through them). A tool whose
  ``audit_calls`` is False (reading or verifying the log itself) writes no record. A cancelled
  call's record names why it was cancelled (``tether.tools.ending``): ``extra.cause`` and the
  words of its ``detail``.
- The result's text and structured content, a ``TetherError``'s message, and every notification
  the call's notifier sends (also long after, for a subscription) pass through the masker of the
  vault's readable values plus the values delivered to shells (``SecretRedactor``). Resources read
  through ``MaskedResources`` likewise. Exit markers are detected on raw output below this layer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from tether.audit import COMMITTER, AuditLog
from tether.audit.record import AuditError, Outcome
from tether.errors import STORAGE_ERRNOS, RefusedError, TetherError
from tether.shells import CallNotes, GuardBlockedError, SecretMasker, SecretRedactor, collecting
from tether.tools.ending import Ending, ServerStop
from tether.tools.registry import (
    CallContext,
    Handler,
    Notifier,
    ResourceInfo,
    ResourceSource,
    ToolDef,
    ToolResult,
)

logger = logging.getLogger(__name__)

_ONE_SHOT = frozenset({"bash", "pwsh"})


def mask_value(value: Any, masker: SecretMasker) -> Any:
    """Every string inside a JSON-like value, masked (keys too)."""
    if not masker:
        return value
    if isinstance(value, str):
        return masker.mask(value)
    if isinstance(value, Mapping):
        return {mask_value(k, masker): mask_value(v, masker) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, str) for v in value):
            # Lines of output: mask them as one text, so a value split over two lines or printed
            # one character per line is caught; a masked span that covered several lines leaves
            # one line holding the label.
            joined = "\n".join(value)
            masked = masker.mask(joined)
            return list(value) if masked == joined else masked.split("\n")
        return [mask_value(v, masker) for v in value]
    return value


class MaskingNotifier:
    """A notifier whose log messages are masked with the masker current when each is sent."""

    def __init__(self, inner: Notifier, redactor: SecretRedactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def resource_updated(self, uri: str) -> None:
        await self._inner.resource_updated(uri)

    async def log(self, level: str, logger: str, data: Any) -> None:
        await self._inner.log(level, logger, mask_value(data, self._redactor.masker()))


class MaskedResources:
    """A ``ResourceSource`` whose read text is masked."""

    def __init__(self, inner: ResourceSource, redactor: SecretRedactor) -> None:
        self._inner = inner
        self._redactor = redactor
        self.template = inner.template

    def handles(self, uri: str) -> bool:
        return self._inner.handles(uri)

    async def list(self, ctx: CallContext) -> list[ResourceInfo]:
        return await self._inner.list(ctx)

    async def read(self, uri: str, ctx: CallContext) -> str:
        try:
            text = await self._inner.read(uri, ctx)
        except TetherError as exc:
            _mask_error(exc, self._redactor.masker())
            raise
        return self._redactor.masker().mask(text)


class AuditMiddleware:
    """``ToolRegistry.middleware`` entry: audit + masking (see the module docstring)."""

    def __init__(self, home: Path, redactor: SecretRedactor, stop: ServerStop | None = None) -> None:
        self.home = home
        self.redactor = redactor
        self.stop = stop if stop is not None else ServerStop()

    async def __call__(
        self, tool: ToolDef, arguments: Mapping[str, Any], ctx: CallContext, inner: Handler
    ) -> ToolResult:
        if ctx.notifier is not None and not isinstance(ctx.notifier, MaskingNotifier):
            ctx = replace(ctx, notifier=MaskingNotifier(ctx.notifier, self.redactor))
        outcome: Outcome = "error"
        detail = ""
        code: str | None = None  # an error's stable code, as the caller got it
        ending: Ending | None = None  # why a cancelled call was cancelled
        result: ToolResult | None = None
        masker: SecretMasker | None = None  # read once, after the handler: it may have delivered values
        with COMMITTER.opened(), collecting() as notes:
            try:
                # The vault must be readable before anything runs: a store that cannot open (a
                # full disk) or a missing vault key refuses the call here, where "call again" is
                # true, rather than after a command ran, whose result could not then be masked.
                self.redactor.masker()
                result = await inner(arguments, ctx)
                masker = self._masker_after_run(tool)
                result = _masked(result, masker)
                outcome, detail = _outcome_of(result, notes, arguments)
                return result
            except asyncio.CancelledError:
                ending = self.stop.why(ctx.ending)
                outcome, detail = "cancelled", ending.words()
                raise
            except GuardBlockedError as exc:
                masker = self._masker_or_none(exc)
                outcome, detail, code = "blocked", _mask_error(exc, masker), exc.code
                raise
            except RefusedError as exc:
                masker = self._masker_or_none(exc)
                outcome, detail, code = "refused", _mask_error(exc, masker), exc.code
                raise
            except TetherError as exc:
                masker = self._masker_or_none(exc)
                outcome, detail, code = "error", _mask_error(exc, masker), exc.code
                raise
            except Exception as exc:
                outcome, detail, code = "error", f"unexpected failure ({type(exc).__name__})", "INTERNAL"
                raise
            finally:
                if tool.audit_calls:
                    with anyio.CancelScope(shield=True):
                        if masker is None:
                            masker = self._masker_or_none(None)
                        await self._append(
                            tool, arguments, ctx, notes, result, outcome, detail, code, masker, ending
                        )

    def _masker_after_run(self, tool: ToolDef) -> SecretMasker:
        """The masker once the handler ran; when the vault can no longer be read, the result is
        withheld (it could not be masked) and the error says the call ran, so it is not repeated."""
        try:
            return self.redactor.masker()
        except TetherError as exc:
            exc.message = (
                f"{exc.message}; the {tool.name} call itself ran and ended, but its result could not "
                "be masked, so it is withheld; do not repeat it blindly: check what it did first"
            )
            exc.args = (exc.message,)
            raise

    def _masker_or_none(self, failed: TetherError | None) -> SecretMasker | None:
        """The masker, or None when the vault cannot be read: nothing a secret could be in is then
        shown or recorded (see ``_append``). ``failed``, the call's own error, keeps its text only
        when it is that very failure (tether's words, naming files); any other is withheld."""
        try:
            return self.redactor.masker()
        except TetherError as unread:
            if failed is not None and not failed.message.startswith(unread.message):
                failed.message = (
                    f"the text of this error is withheld: it could not be masked ({unread.message})"
                )
                failed.args = (failed.message,)
            return None

    async def _append(
        self,
        tool: ToolDef,
        arguments: Mapping[str, Any],
        ctx: CallContext,
        notes: CallNotes,
        result: ToolResult | None,
        outcome: Outcome,
        detail: str,
        code: str | None,
        masker: SecretMasker | None,
        ending: Ending | None,
    ) -> None:
        ran = result is not None
        if masker is None:
            # The vault could not be read, so nothing could be masked: the record keeps what holds
            # no secret (who, which tool and action, the shells, the outcome and tether's own error,
            # which names files) and leaves out the commands, the reasons and the result.
            notes, result = CallNotes(flags=notes.flags, hosts=notes.hosts), None
        tasks = _tasks(arguments)
        safety = [t.get("safety") for t in tasks if isinstance(t.get("safety"), Mapping)]
        flags = set(notes.flags)
        for s in safety:
            assert isinstance(s, Mapping)
            if s.get("bypassGuard") is True:
                flags.add("bypass-guard")
            if s.get("dryrun") is True:
                flags.add("dryrun")
            if s.get("force") is True:
                flags.add("force")
        given = [str(s["reason"]) for s in safety if isinstance(s, Mapping) and s.get("reason")]
        reasons = _distinct([*given, *notes.reasons])  # the caller's, then those a person authored
        commands = _commands(tool.name, arguments, tasks)
        action = _action(tool.name, arguments, tasks)
        targets = _targets(tasks, result)
        if tool.audit_fields is not None:
            fields = tool.audit_fields(arguments)
            action, targets = fields.action, sorted(set(fields.targets))
            reasons = [fields.reason] if fields.reason else []
        if masker is None:
            commands, reasons = [], []
        if not action.strip():
            action = tool.name  # the log refuses a blank action, and the call must still be recorded
        extra: dict[str, Any] = {}
        if code is not None:
            extra["code"] = code
        if ending is not None:
            extra["cause"] = ending.cause  # one of END_CAUSES: why the call ended before it answered
        if ctx.client:
            extra["client"] = ctx.client  # the MCP client's own name for itself (clientInfo)
        if notes.commands:
            extra["shown"] = notes.commands  # macro-expanded, each value as [vault:NAME]
        if notes.hosts:
            extra["hosts"] = dict(sorted(notes.hosts.items()))  # where each target shell lives
        if result is not None and isinstance(result.structured.get("tasks"), list):
            extra["tasks"] = [
                {"shell": t.get("shell"), "ok": t.get("ok"), "error": t.get("error")}
                | ({"errorCode": t["errorCode"]} if t.get("errorCode") else {})
                for t in result.structured["tasks"]
                if isinstance(t, Mapping)
            ][:32]
        if masker is None:
            extra["withheld"] = "the vault could not be read to mask the command and the result"
        log = AuditLog(self.home, redact=masker.mask if masker is not None else None)
        try:
            await COMMITTER.append(
                log,
                actor=ctx.audit_actor,
                source=ctx.source,
                tool=tool.name,
                action=action,
                targets=targets,
                command="\n".join(commands) if commands else None,
                outcome=outcome,
                detail=detail,
                reason="; ".join(reasons) or None,
                flags=sorted(flags),
                extra=extra or None,
            )
        except TetherError as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno in STORAGE_ERRNOS:
                # The machine's condition, said in full by the message: one line per call, not a
                # traceback of the append's frames per call while the disk stays full.
                logger.warning("could not audit a %s call by %s: %s", tool.name, ctx.actor, exc.message)
            else:
                logger.exception("could not audit a %s call by %s", tool.name, ctx.actor)
            if ran:
                # The agent gets this error instead of the result: without this it could not tell
                # that the command ran, and would run it again. A new error, not the one caught:
                # one failed append answers every call of its batch with the same object.
                raise AuditError(
                    f"{exc.message}; the {tool.name} call itself ran and ended (outcome {outcome}) but "
                    "is not in the audit log, so its result is withheld; do not repeat it blindly: "
                    "check what it did first"
                ) from exc
            raise


def _masked(result: ToolResult, masker: SecretMasker) -> ToolResult:
    if not masker:
        return result
    return replace(result, text=masker.mask(result.text), structured=mask_value(result.structured, masker))


def _mask_error(exc: TetherError, masker: SecretMasker | None) -> str:
    if masker:
        exc.message = masker.mask(exc.message)
        exc.args = (exc.message,)
    return exc.message


def _distinct(items: Any) -> list[str]:
    return list(dict.fromkeys(items))


def _tasks(arguments: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    tasks = arguments.get("tasks")
    if not isinstance(tasks, list):
        return []
    return [t for t in tasks if isinstance(t, Mapping)]


def _action_of(task: Mapping[str, Any]) -> Mapping[str, Any]:
    action = task.get("action")
    return action if isinstance(action, Mapping) else {}


def _action(name: str, arguments: Mapping[str, Any], tasks: Sequence[Mapping[str, Any]]) -> str:
    # The kinds as the caller wrote them, refused or not; a kind that is no text (a number, a
    # blank) names nothing and the record falls back to the tool's own action.
    kinds = _distinct(k for t in tasks if isinstance(k := _action_of(t).get("kind"), str) and k.strip())
    if kinds:
        return ",".join(kinds)
    if name in _ONE_SHOT:
        return "run-background" if arguments.get("run_in_background") is True else "run"
    return name.split("_", 1)[1] if "_" in name else "call"


def _commands(name: str, arguments: Mapping[str, Any], tasks: Sequence[Mapping[str, Any]]) -> list[str]:
    if name in _ONE_SHOT:
        command = arguments.get("command")
        return [command] if isinstance(command, str) else []
    found: list[str] = []
    for task in tasks:
        action = _action_of(task)
        for key in ("command", "text"):
            if isinstance(action.get(key), str):
                found.append(action[key])
        steps = action.get("steps")
        if isinstance(steps, list):
            sends = [s["send"] for s in steps if isinstance(s, Mapping) and isinstance(s.get("send"), str)]
            if sends:
                found.append("\n".join(sends))
    return _distinct(found)


def _targets(tasks: Sequence[Mapping[str, Any]], result: ToolResult | None) -> list[str]:
    shells: list[str] = []
    if result is not None and isinstance(result.structured.get("tasks"), list):
        shells.extend(
            t["shell"]
            for t in result.structured["tasks"]
            if isinstance(t, Mapping) and isinstance(t.get("shell"), str)
        )
    for task in tasks:
        target = task.get("target")
        sessions = target.get("sessions") if isinstance(target, Mapping) else None
        if isinstance(sessions, str) and sessions not in ("mine", "*"):
            shells.extend(s.strip() for s in sessions.split(",") if s.strip())
    return sorted(set(shells))


def _outcome_of(result: ToolResult, notes: CallNotes, arguments: Mapping[str, Any]) -> tuple[Outcome, str]:
    decided = [o for _shell, o, _d in notes.outcomes]
    details = [f"{shell}: {d}" for shell, _o, d in notes.outcomes if d]
    task_errors = []
    if isinstance(result.structured.get("tasks"), list):
        task_errors = [
            f"{t.get('shell') or 'tasks[' + str(t.get('index')) + ']'}: {t['error']}"
            for t in result.structured["tasks"]
            if isinstance(t, Mapping) and isinstance(t.get("error"), str)
        ]
    detail = "; ".join(_distinct([*details, *task_errors]))
    if "blocked" in decided:
        return "blocked", detail
    if "refused" in decided:
        return "refused", detail
    if decided and all(o == "dry-run" for o in decided) and not task_errors:
        return "dry-run", detail
    if result.is_error or task_errors:
        return "error", detail or _first_line(result.text)
    return "ok", detail


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0][:500]
