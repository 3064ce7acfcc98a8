"""The safety path every agent write to a persistent shell takes (spec 003 §4, ``safety`` block).

Invariant: ``SafetyPolicy.hooks_for(shells)`` is the ``SessionHooks`` of every ``Shells`` a tether
process runs tools on. Its ``before_write`` decides, in this order, and nothing is typed unless all
of it passes:

1. a manual lock (panel / ``tether shell lock``) refuses an agent at once, whatever ``safety.lock``
   says (the people's own actors, ``panel`` and ``cli``, are not refused by it);
2. a person typing (``sessions.user_busy``, the same test ``shell_state`` shows) refuses;
3. a ``/NAME args`` macro expands (``wait.kind=exit`` on one is refused with the spec's message);
4. the dangerous-command guard: the decision carries ``judge``, which ``shells.accept`` calls at
   the moment the shell would read the line (the lock held, the shell at its prompt), with what
   the shell reported it has defined — the line after macro expansion and before vault values;
   a dry run is judged here, on the shell's last reported state; ``bypassGuard`` needs a non-blank
   ``reason``; with ``[guard] ask = true`` an agent's blocked command is put to a person instead
   (``approvals``: the person at the client through elicitation, else the panel's queue) —
   approved, that one command goes through as a ``bypass-guard`` whose reason the person
   authored; denied or unanswered, it is blocked;
5. ``{{vault.NAME}}`` references resolve (``force`` semantics in ``vault_refs``); a dry run stops
   here and reports the text with each value as ``[vault:NAME]``;
6. ``safety.lock: require`` waits (no timeout, cancellable) for the cross-process write lock;
   ``ignore`` does not; after a wait the person-typing test runs again (a manual lock is
   re-checked by ``ShellLocks``); the lease is kept until ``after_write``, which runs on every path once
   ``before_write`` returned (``shell_write_tools.guarded``); a failure inside ``before_write``
   after acquiring releases it there;
7. only then are the values put into the decision: as ``variables`` the loader sets before the
   line runs (a shell in front), or into the text for the paste buffer (a program's own prompt).

Every refusal is noted for the call's audit record (``call_notes``) before it propagates.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from tether.approvals import Approvals, Question
from tether.config import Config
from tether.errors import RefusedError, UsageError
from tether.shells.domain import Shells
from tether.shells.guard import BYPASS_HOW, Guard, ShellState, Verdict, parse_dump, parse_section
from tether.shells.macros.expand import MacroExpander
from tether.shells.safety.call_notes import note_command, note_flag, note_outcome, note_reason
from tether.shells.safety.hooks import LineJudge, LineVerdict, SessionHooks, WriteDecision, WriteIntent
from tether.shells.safety.user_busy import is_user_busy
from tether.shells.tmux.commands import PaneInfo
from tether.shells.vault.redaction import SecretRedactor
from tether.shells.vault.refs import (
    REFERENCE_RE,
    ExpandedCommand,
    expand_references,
    mentions_vault,
    reference_names,
)
from tether.store.locks import ShellLocks, WriteLease
from tether.store.macros import MacroStore, MacroView
from tether.store.manual_locks import PERSON_ACTORS
from tether.store.vault import Vault, vault_settings

# A nested interactive shell in front (``bash`` typed into the pane) reads commands like the pane's own.
SHELL_NAMES = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
# Later steps of ``steps`` usually talk to a program the first step started (a REPL), whose input
# bash could not parse: only these verdicts are about text that is shell code at all.
_NOT_SHELL_RULES = frozenset({"unparseable", "dynamic-command"})
_TOOL_OF = {"run": "shell_run", "retry": "shell_run", "steps": "shell_run", "send": "shell_send"}


class GuardBlockedError(RefusedError):
    """The dangerous-command guard blocked the text (``verdict.message`` says rule, why, how)."""

    code = "BLOCKED"


@dataclass(slots=True, kw_only=True)
class SafetyPolicy:
    """Guard, vault, macros and locks of one ``TETHER_HOME``, shared by its engines' hooks."""

    config: Config
    guard: Guard
    ask: bool = False  # [guard] ask: a blocked agent command is put to a person
    redactor: SecretRedactor = field(init=False)
    approvals: Approvals = field(init=False)
    _vaults: dict[int, Vault] = field(default_factory=dict)
    # The vault ``_any_vault`` opened on a store of its own (no ``Shells`` existed yet): ``close``
    # closes that store; the others' stores are their ``Shells``'.
    _own: Vault | None = None

    @classmethod
    def from_config(cls, config: Config) -> SafetyPolicy:
        """Validates ``[guard]`` and ``[vault]`` now (a ``UsageError`` names the bad key)."""
        vault_settings(config)
        guard = Guard.from_config(config)
        return cls(config=config, guard=guard, ask=parse_section(config.section("guard")).ask)

    def __post_init__(self) -> None:
        self.redactor = SecretRedactor(self._any_vault)
        self.approvals = Approvals(self.config.home, timeout_s=self.config.approvals.timeout_s)

    def _any_vault(self) -> Vault:
        found = next(iter(self._vaults.values()), None)
        if found is None:  # a call before any ``Shells`` exists (bash, job_*): open our own
            found = self._own = Vault.open(self.config)
            self._vaults = {0: found}
        return found

    def close(self) -> None:
        """Close the store of the vault this policy opened itself: its connections are not left
        for the garbage collector (Python 3.13 warns of each one it closes)."""
        own, self._own = self._own, None
        if own is not None:
            self._vaults = {k: v for k, v in self._vaults.items() if v is not own}
            own.store.close()

    def vault_for(self, shells: Shells) -> Vault:
        vault = self._vaults.get(id(shells.store))
        if vault is None:
            vault = Vault(shells.store, shells.home, settings=vault_settings(self.config))
            self._vaults[id(shells.store)] = vault
        return vault

    def hooks_for(self, shells: Shells) -> SessionHooks:
        path = _WritePath(policy=self, shells=shells, vault=self.vault_for(shells))
        return SessionHooks(
            before_write=path.before_write,
            after_write=path.after_write,
            is_locked=path.is_locked,
            mask=self.redactor.mask,
            masking=self._masking,
        )

    def _masking(self) -> Callable[[str], str]:
        return self.redactor.masker().mask


@dataclass(slots=True, kw_only=True)
class _WritePath:
    policy: SafetyPolicy
    shells: Shells
    vault: Vault
    locks: ShellLocks = field(init=False)
    macros: MacroExpander = field(init=False)
    _leases: dict[int, WriteLease] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.locks = ShellLocks(self.shells.home, self.shells.store)
        self.macros = MacroExpander(MacroStore(self.shells.store))

    def is_locked(self, shell_id: str, actor: str) -> bool:
        return self.locks.is_locked(shell_id, actor=actor)

    async def before_write(self, intent: WriteIntent) -> WriteDecision:
        try:
            return await self._decide(intent)
        except GuardBlockedError as exc:
            note_outcome(intent.shell_id, "blocked", exc.message)
            raise
        except RefusedError as exc:
            note_outcome(intent.shell_id, "refused", exc.message)
            raise

    async def after_write(self, intent: WriteIntent) -> None:
        lease = self._leases.pop(id(intent), None)
        if lease is not None:
            lease.release()

    async def _check_person(self, shell_id: str, *, recent: bool = True) -> PaneInfo:
        """The pane, read fresh (``host.pane`` may answer from a cache, and the person-typing
        stamp must be read now); ``RefusedError`` while a person types there. ``recent``: a
        listing this call asked moments ago is fresh enough."""
        pane, activity = await self.shells.host_of(shell_id).person_view(shell_id, recent=recent)
        if is_user_busy(self.shells.config, pane, activity, time.time()):
            window = self.shells.config.sessions.user_busy_seconds
            raise RefusedError(
                f"a person is typing in shell {shell_id} (input within the last {window:g} s); nothing was "
                "sent. Retry in a few seconds, or ask the user whether you may type there"
            )
        return pane

    async def _decide(self, intent: WriteIntent) -> WriteDecision:
        shell_id = intent.shell_id
        self.locks.check_manual(shell_id, actor=intent.actor)
        pane = await self._check_person(shell_id)
        text, expanded, submit = intent.text, False, True
        if intent.kind != "steps":
            view = MacroView(conversation=intent.actor, shell=shell_id)
            self.macros.check_exit_wait(text, view, intent.wait_kind)
            expansion = self.macros.expand(text, view)
            text, expanded, submit = expansion.text, expansion.expanded, expansion.submit
            if expanded:
                note_command(text)  # the audit shows what the macro became (references as written)
        notes: list[str] = []
        judge = self._line_judge(intent)
        # What is in front decides only how vault values travel and whether a dry run is judged
        # as the shell's line: read for those writes alone (a remote host's answer is a round trip).
        shell_in_front = False
        if intent.dryrun or mentions_vault(text):
            fg = await self.shells.host_of(shell_id).foreground(pane)
            shell_in_front = fg.shell_in_front or fg.command in SHELL_NAMES
        if shell_in_front and intent.dryrun:
            notes.extend(await self._judge_now(intent, text, judge))
        refs = reference_names(text)
        if refs and intent.kind == "steps":
            raise UsageError(
                "vault references are not delivered in steps; send the secret with shell_run kind=run or "
                "shell_send"
            )
        delivery: Literal["env", "typed"] = "env" if shell_in_front else "typed"
        x = expand_references(text, self.vault, force=intent.force, delivery=delivery) if refs else None
        shown = _shown(text, x)
        if x is not None and x.notice:
            notes.append(f"[vault] {x.notice}")
        if intent.dryrun:
            note_outcome(shell_id, "dry-run")
            return WriteDecision(
                text=shown, expanded=expanded, shown=shown, notes=tuple(notes), submit=submit, judged=text
            )
        lease = await self.locks.acquire(shell_id, actor=intent.actor, mode=intent.lock)
        self._leases[id(intent)] = lease
        try:
            if lease.waited_ms > 0:
                # A person may have started typing while we waited.
                await self._check_person(shell_id, recent=False)
            decision = self._deliver(intent, text, x, shown, notes, expanded=expanded, submit=submit)
            return replace(decision, judge=judge, judged=text)
        except BaseException:
            self._leases.pop(id(intent), None)
            lease.release()
            raise

    async def _judge_now(self, intent: WriteIntent, text: str, judge: LineJudge) -> list[str]:
        """A dry run: judged on the shell's last reported state (nothing will be typed)."""
        data = self.shells.host_of(intent.shell_id).read_state(intent.shell_id)
        state = parse_dump(data) if data is not None else None
        pieces = text.split("\n") if intent.kind == "steps" else [text]
        notes: list[str] = []
        for n, piece in enumerate(pieces):
            if piece.strip():
                # From the second step on, text bash cannot parse is taken to be a program's input.
                notes.extend((await judge(piece, state, lenient=n > 0, final=True)).notes)
        return notes

    def _line_judge(self, intent: WriteIntent) -> LineJudge:
        guard = self.policy.guard

        async def judge(
            line: str,
            state: ShellState | None,
            *,
            lenient: bool = False,
            pending: bool = False,
            final: bool = False,
        ) -> LineVerdict:
            verdict = _pending(guard, line) if pending else guard.check(line, state)
            if verdict.allowed:
                held = verdict.incomplete and not intent.bypass_guard
                return LineVerdict(incomplete=verdict.why if held else None)
            if lenient and verdict.rule in _NOT_SHELL_RULES:
                return LineVerdict()
            if verdict.needs and not final:
                return LineVerdict(needs=verdict.needs)
            try:
                return LineVerdict(notes=(await self._blocked(intent, verdict, line),))
            except GuardBlockedError as exc:
                note_outcome(intent.shell_id, "blocked", exc.message)
                raise
            except RefusedError as exc:
                note_outcome(intent.shell_id, "refused", exc.message)
                raise

        return judge

    async def _blocked(self, intent: WriteIntent, verdict: Verdict, piece: str) -> str:
        if not intent.bypass_guard:
            if self.policy.ask and not intent.dryrun and intent.actor not in PERSON_ACTORS:
                return await self._ask(intent, verdict, piece)
            raise GuardBlockedError(verdict.message)
        if intent.reason is None or not intent.reason.strip():
            raise RefusedError(
                "safety.bypassGuard needs a non-empty safety.reason quoting the user's request; "
                f"the command is blocked by rule {verdict.rule}"
            )
        note_flag("bypass-guard")
        return f"[guard bypassed: rule {verdict.rule} ({verdict.why}); reason: {intent.reason.strip()}]"

    async def _ask(self, intent: WriteIntent, verdict: Verdict, piece: str) -> str:
        """``[guard] ask``: a person lets this one command through, or it stays blocked."""
        question = Question(
            kind="bypass-guard",
            tool=_TOOL_OF[intent.kind],
            subject=piece.strip(),
            mode=verdict.rule,
            justification=(intent.reason or "").strip(),
            asker=intent.actor,
            targets=(intent.shell_id,),
        )
        answer = await self.policy.approvals.ask(question, person=intent.person)
        if not answer.approved:
            raise GuardBlockedError(
                f"{verdict.message}\nA person was asked to let it through: {answer.refusal('it')}"
            )
        note_flag("bypass-guard")
        said = f": {answer.reason}" if answer.reason else ""
        note_reason(f"approved by {answer.by}{said}")  # the run's own record names the person too
        return f"[guard bypassed: rule {verdict.rule} ({verdict.why}); approved by {answer.by}{said}]"

    def _deliver(
        self,
        intent: WriteIntent,
        text: str,
        x: ExpandedCommand | None,
        shown: str,
        notes: list[str],
        *,
        expanded: bool,
        submit: bool,
    ) -> WriteDecision:
        if x is None or not x.expanded:
            typed = x.command if x is not None else text
            return WriteDecision(
                text=typed, expanded=expanded, shown=shown, notes=tuple(notes), submit=submit
            )
        # The values this command carries, as resolved for it (not read again: an item rotated or
        # a group locked meanwhile must not change what is masked). Kept in memory and in the
        # vault, so every process masks them for as long as the shell lives (``vault.delivered``).
        self.policy.redactor.remember(intent.shell_id, x.values)
        self.vault.delivered.remember(intent.shell_id, x.values)
        if not x.variables:  # typed delivery: a program's own prompt reads the value
            return WriteDecision(
                text=x.command,
                expanded=expanded,
                shown=shown,
                notes=tuple(notes),
                typed_secret=True,
                submit=submit,
            )
        if intent.kind == "send" and not intent.submit:
            raise UsageError(
                "vault references typed at a shell prompt are delivered when the line runs: end "
                "shell_send keys with 'Enter' (or use shell_run)"
            )
        return WriteDecision(
            text=x.command,
            expanded=expanded,
            shown=shown,
            notes=tuple(notes),
            variables=dict(x.variables),
            submit=submit,
        )


def _pending(guard: Guard, line: str) -> Verdict:
    rule = next((r for r in guard.rules if r.id == "unparseable"), None)
    if rule is None:
        return Verdict(allowed=True)
    return Verdict(
        allowed=False,
        rule=rule.id,
        command=line[:300],
        why="the shell holds earlier lines of this command (it shows a PS2 prompt) that the guard never "
        "saw, so it cannot tell what the whole command would run",
        how="Cancel the unfinished command with shell_send keys ['C-c'] and send it whole (a line the "
        f"guard sees incomplete waits on the prompt until it is complete). {BYPASS_HOW}",
    )


def _shown(text: str, x: ExpandedCommand | None) -> str:
    """``text`` with every delivered reference as ``[vault:NAME]``; unexpanded ones as written."""
    if x is None:
        return text
    done = set(x.expanded)
    return REFERENCE_RE.sub(lambda m: f"[vault:{m[1]}]" if m[1] in done else m[0], x.written)


__all__ = ["SHELL_NAMES", "GuardBlockedError", "SafetyPolicy"]
