"""``{{vault.NAME}}`` references: find them, resolve them, and deliver the values without typing them.

Invariant: in ``env`` delivery the text typed into a pane never contains a secret value — each
reference becomes a shell parameter expansion of ``__TETHER_V_<NAME>`` written for the quoting
context the reference sits in, and the values travel in ``variables``: the shell integration's
loader sets them as unexported shell variables from the terminal's input (never a file, never the
command line, never the pane's output), and its prompt hook forgets them after the command.
``written`` — what display, dry runs and the audit see — keeps the references as written.

Quoting contexts (what a reference becomes, so the value arrives as one word, exactly as written):

    unquoted, $(…), `…`, ${…}      "${__TETHER_V_X}"
    "…", unquoted here-doc body     ${__TETHER_V_X}
    '…'                             '"${__TETHER_V_X}"'     (close, expand, reopen)
    $'…'                            '"${__TETHER_V_X}"$'
    quoted here-doc body (<<'EOF')  refused: nothing there expands; use <<EOF

Locked groups (the ``force`` flag of the ``safety`` block):

- ``force=False``: any reference into a locked group refuses the whole command (``RefusedError``
  naming the references, the group and how to unlock). Nothing is sent.
- ``force=True``: references into unlocked groups expand; references into a locked group are
  *still refused* — they are left exactly as written (``{{vault.X}}`` is inert text to a shell:
  brace expansion needs a comma or ``..``) and reported in ``blocked`` and ``notice``.

A reference to a name that does not exist is a ``NotFoundError`` either way; a malformed one
(``{{vault.}}``, ``{{vault.a b}}``) is a ``UsageError``.

How a caller delivers an ``env`` expansion to a shell at its prompt (``x = expand_references(…)``):
type ``x.command`` through the loader with ``x.variables`` in the same payload
(``integration.payload.run_payload``), then mask everything shown afterwards with ``x.masker``
(plus the values earlier runs delivered to the same shell: a value stays in whatever the command
kept).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from tether.errors import NotFoundError, RefusedError, UsageError
from tether.shells.vault.mask import SecretMasker
from tether.shells.vault.quoting import Context, reference_contexts
from tether.store.vault import NAME_RE, VaultLockedError

REFERENCE_RE = re.compile(r"\{\{[ \t]*vault\.([^{}\s]*)[ \t]*\}\}")
_OPENER_RE = re.compile(r"\{\{[ \t]*vault\.")
VAR_PREFIX = "__TETHER_V_"


class SecretSource(Protocol):
    """What expansion needs from the vault (``tether.store.vault.Vault`` is one)."""

    def resolve(self, name: str) -> str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class VaultReference:
    name: str
    start: int
    end: int
    context: Context


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockedReference:
    """A reference left unexpanded because its group is locked (only with ``force=True``)."""

    name: str
    group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpandedCommand:
    command: str  # what to type: values replaced by ${__TETHER_V_…} (env) or by the values (typed)
    written: str  # the command as written, references unexpanded: for display, dry run, audit
    variables: Mapping[str, str] = field(default_factory=dict)  # shell variable -> value (env delivery)
    expanded: tuple[str, ...] = ()  # names whose values were delivered
    blocked: tuple[BlockedReference, ...] = ()
    masker: SecretMasker = field(default_factory=lambda: SecretMasker({}))
    # name -> value as resolved for this command: what the caller remembers as delivered.
    values: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def notice(self) -> str | None:
        """The sentence a result must show when ``force`` left references unexpanded."""
        if not self.blocked:
            return None
        return _blocked_sentence(self.blocked, forced=True)


def _matches(text: str) -> list[re.Match[str]]:
    matches = list(REFERENCE_RE.finditer(text))
    for match in matches:
        if not NAME_RE.fullmatch(match.group(1)):
            raise UsageError(
                f"vault reference {match.group(0)!r} names no valid secret: write {{{{vault.NAME}}}} with "
                "NAME made of letters, digits, '_' or '-' (e.g. {{vault.GITHUB_TOKEN}})"
            )
    covered = {m.start() for m in matches}
    for opener in _OPENER_RE.finditer(text):
        if opener.start() not in covered:
            raise UsageError(
                f"unterminated vault reference at offset {opener.start()}: write {{{{vault.NAME}}}}"
            )
    return matches


def find_references(text: str) -> list[VaultReference]:
    """Every reference with its quoting context; a malformed one is a ``UsageError``."""
    matches = _matches(text)
    if not matches:
        return []
    contexts = reference_contexts(text, [(m.start(), m.end()) for m in matches])
    return [
        VaultReference(name=m.group(1), start=m.start(), end=m.end(), context=ctx)
        for m, ctx in zip(matches, contexts, strict=True)
    ]


def mentions_vault(text: str) -> bool:
    """Whether ``text`` holds a vault reference, or the start of one (``reference_names`` finds
    it, or refuses it as malformed): cheap, and never raises."""
    return "{{" in text and _OPENER_RE.search(text) is not None


def reference_names(text: str) -> tuple[str, ...]:
    """The distinct secret names ``text`` refers to, in order (for dry runs and audit)."""
    return tuple(dict.fromkeys(m.group(1) for m in _matches(text)))


def _blocked_sentence(blocked: tuple[BlockedReference, ...], *, forced: bool) -> str:
    by_group: dict[str, list[str]] = {}
    for ref in blocked:
        names = by_group.setdefault(ref.group, [])
        if ref.name not in names:
            names.append(ref.name)
    parts = []
    for group, names in by_group.items():
        refs = ", ".join(f"{{{{vault.{n}}}}}" for n in names)
        parts.append(f"{refs} (locked group {group!r}; unlock: `tether vault unlock {group}` or the panel)")
    if forced:
        return "force: these references were NOT expanded and were sent as written: " + "; ".join(parts)
    return (
        "refused: the command uses secrets from a locked vault group: "
        + "; ".join(parts)
        + ". Nothing was sent. A person must unlock the group; with `force: true` the other references "
        "expand and these stay unexpanded."
    )


def variable_names(names: list[str]) -> dict[str, str]:
    """A distinct shell variable per secret name (``-`` is not allowed in a shell name)."""
    used: set[str] = set()
    result: dict[str, str] = {}
    for name in names:
        if name in result:
            continue
        base = VAR_PREFIX + name.replace("-", "_")
        var, n = base, 2
        while var in used:
            var, n = f"{base}_{n}", n + 1
        used.add(var)
        result[name] = var
    return result


def _substitute(ref: VaultReference, var: str) -> str:
    match ref.context:
        case "plain":
            return f'"${{{var}}}"'
        case "double" | "heredoc":
            return f"${{{var}}}"
        case "single":
            return f"'\"${{{var}}}\"'"
        case "ansi":
            return f"'\"${{{var}}}\"$'"
        case "heredoc-quoted":
            raise UsageError(
                f"{{{{vault.{ref.name}}}}} sits in a quoted here-document (<<'EOF'), where nothing expands; "
                "the value could only arrive by typing it. Use an unquoted delimiter (<<EOF)"
            )


def expand_references(
    text: str, source: SecretSource, *, force: bool = False, delivery: Literal["env", "typed"] = "env"
) -> ExpandedCommand:
    """Resolve every reference in ``text`` (a ``shell_run`` command or ``shell_send`` text).

    ``delivery="env"``: for a shell at its prompt — values travel in ``variables``.
    ``delivery="typed"``: for a program's own prompt (``sudo``'s password, a REPL), where a shell
    variable means nothing — ``command`` holds the values; the caller must send it through a
    channel that is not logged or echoed (paste buffer) and never show or store it.
    """
    refs = find_references(text) if delivery == "env" else _typed_refs(text)
    values: dict[str, str] = {}
    blocked: list[BlockedReference] = []
    missing: list[str] = []
    for ref in refs:
        if ref.name in values or any(b.name == ref.name for b in blocked) or ref.name in missing:
            continue
        try:
            values[ref.name] = source.resolve(ref.name)
        except VaultLockedError as exc:
            blocked.append(BlockedReference(name=ref.name, group=exc.group))
        except NotFoundError:
            missing.append(ref.name)
    if missing:
        listed = ", ".join(f"{{{{vault.{n}}}}}" for n in missing)
        raise NotFoundError(
            f"no vault secret for {listed}; nothing was sent. See `tether vault list` (or shell_manage "
            "vault-list); a person adds one with `tether vault set NAME`"
        )
    if blocked and not force:
        raise RefusedError(_blocked_sentence(tuple(blocked), forced=False))
    masker = SecretMasker(values)
    variables = variable_names(list(values)) if delivery == "env" else {}
    out: list[str] = []
    pos = 0
    for ref in refs:
        out.append(text[pos : ref.start])
        if ref.name not in values:
            out.append(text[ref.start : ref.end])
        elif delivery == "env":
            out.append(_substitute(ref, variables[ref.name]))
        else:
            out.append(values[ref.name])
        pos = ref.end
    out.append(text[pos:])
    return ExpandedCommand(
        command="".join(out),
        written=_mask_outside(text, refs, masker),
        variables={variables[name]: value for name, value in values.items()} if variables else {},
        expanded=tuple(values),
        blocked=tuple(blocked),
        masker=masker,
        values=dict(values),
    )


def _mask_outside(text: str, refs: list[VaultReference], masker: SecretMasker) -> str:
    """Mask literal values in the text between references; the references stay exactly as written."""
    out: list[str] = []
    pos = 0
    for ref in refs:
        out.append(masker.mask(text[pos : ref.start]))
        out.append(text[ref.start : ref.end])
        pos = ref.end
    out.append(masker.mask(text[pos:]))
    return "".join(out)


def _typed_refs(text: str) -> list[VaultReference]:
    return [
        VaultReference(name=m.group(1), start=m.start(), end=m.end(), context="plain") for m in _matches(text)
    ]
