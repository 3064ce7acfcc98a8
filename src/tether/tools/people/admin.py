"""People-only tools for the vault and the audit log: the panel's and the CLI's only door to them.

Invariant: a secret value or a passphrase arrives in the arguments, is used for that one call, and
never leaves it — the audit record names the action and the group or secret (``audit_fields``),
never an argument's value; results carry names, groups and lock state, never a value. Reading or
verifying the audit log is not itself an audited action (``audit_calls=False``: a person checking
the log would otherwise grow it); each vault action is audited once, as tool ``vault``.

    vault             list (groups: passphrase or plain, locked until when, how many secrets;
                      names) · set · rm · lock · unlock · group-create · group-rm
    audit_verify      walk the hash chain (and prove the seals with a verification key)
    audit_show        the newest matching records (or their raw JSONL lines)
    audit_setup_keys  start forward-secure sealing; answers the verification key once
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import Any, Literal, get_args

import anyio
from pydantic import BaseModel, ConfigDict, Field

from tether.audit import DEFAULT_EVERY, SOURCES, AuditLog, export, parse_verification_key, query, verify
from tether.config import Config
from tether.errors import UsageError
from tether.shells import Shells
from tether.store.conversations import Conversations
from tether.store.vault import DEFAULT_GROUP, Vault, VaultListing, vault_settings
from tether.tools.arguments import parse_arguments
from tether.tools.registry import AuditFields, CallContext, ToolDef, ToolRegistry, ToolResult

VaultAction = Literal["list", "set", "rm", "lock", "unlock", "group-create", "group-rm"]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class VaultArgs(_Args):
    action: VaultAction
    name: str | None = None
    group: str | None = None
    value: str | None = None
    passphrase: str | None = None
    minutes: int | None = Field(default=None, ge=1)


class VerifyArgs(_Args):
    key: str | None = None


class ShowArgs(_Args):
    actor: str | None = None
    source: str | None = None
    shell: str | None = None
    day: str | None = None
    # Ranges are the audit layer's own (its errors name them): not repeated here.
    days: int = 1
    limit: int = 50
    export: bool = False


class KeysArgs(_Args):
    every: int = Field(default=DEFAULT_EVERY, ge=1)


def listing_json(listing: VaultListing) -> dict[str, Any]:
    return {
        "groups": [
            {
                "name": g.name,
                "protected": g.protected,
                "locked": g.locked,
                "unlockedUntilMs": g.unlocked_until_ms,
                "items": g.items,
            }
            for g in listing.groups
        ],
        "items": [
            {"name": i.name, "group": i.group, "locked": i.locked, "updatedMs": i.updated_ms}
            for i in listing.items
        ],
        "unlockMinutes": listing.unlock_minutes,
        "maxUnlockMinutes": listing.max_unlock_minutes,
    }


def _required(value: str | None, what: str, action: str) -> str:
    if not value:
        raise UsageError(f"vault {action} needs {what}")
    return value


class PeopleAdminTools:
    def __init__(self, config: Config, shells: Callable[[], Shells]) -> None:
        self.config = config
        self.home: Path = config.home
        self._shells = shells

    def _vault(self) -> Vault:
        shells = self._shells()
        return Vault(shells.store, shells.home, settings=vault_settings(self.config))

    async def vault(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("vault", VaultArgs, raw)
        vault = self._vault()
        a = args.action
        if a == "list":
            listing = vault.list()
            text = f"{len(listing.groups)} group(s), {len(listing.items)} secret(s)"
            return ToolResult(text=text, structured=listing_json(listing))
        # scrypt (a passphrase) takes a noticeable fraction of a second: off the event loop.
        if a == "set":
            name = _required(args.name, "a name", a)
            if args.value is None:
                raise UsageError("vault set needs a value")
            value = args.value
            group = args.group or DEFAULT_GROUP
            item = await anyio.to_thread.run_sync(
                lambda: vault.set(name, value, group=group, passphrase=args.passphrase)
            )
            text = f"stored {item.name} in group {item.group}; use it as {{{{vault.{item.name}}}}}"
            return ToolResult(text=text, structured={"name": item.name, "group": item.group})
        if a == "rm":
            name = _required(args.name, "a name", a)
            group = vault.remove(name)
            return ToolResult(
                text=f"removed {name} from group {group}", structured={"name": name, "group": group}
            )
        group = _required(args.group, "a group", a)
        if a == "lock":
            was = vault.lock(group)
            text = f"group {group} locked" + ("" if was else " (it was not unlocked)")
            return ToolResult(text=text, structured={"group": group, "wasUnlocked": was})
        if a == "unlock":
            passphrase = _required(args.passphrase, "the group's passphrase", a)
            info = await anyio.to_thread.run_sync(lambda: vault.unlock(group, passphrase, args.minutes))
            return ToolResult(
                text=f"group {group} unlocked for every tether process using {self.home}",
                structured={"group": asdict(info)},
            )
        if a == "group-create":
            info = await anyio.to_thread.run_sync(lambda: vault.create_group(group, args.passphrase))
            kind = "passphrase group (locked until unlocked)" if info.protected else "plain group"
            return ToolResult(text=f"created {kind} {info.name}", structured={"group": asdict(info)})
        vault.delete_group(group)
        return ToolResult(text=f"deleted group {group}", structured={"group": group})

    async def audit_verify(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("audit_verify", VerifyArgs, raw)
        key = parse_verification_key(args.key) if args.key else None
        report = await anyio.to_thread.run_sync(lambda: verify(self.home, key=key))
        return ToolResult(
            text=report.summary(),
            structured={
                "ok": report.ok,
                "records": report.records,
                "summary": report.summary(),
                # Where and what, for a script: ``code`` is one of ``tether.audit.BREAK_CODES``.
                "break": None if report.first_break is None else report.first_break.to_json(),
            },
        )

    async def audit_show(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("audit_show", ShowArgs, raw)
        if args.source is not None and args.source not in SOURCES:
            raise UsageError(f"source {args.source!r} is not one of {', '.join(SOURCES)}")
        if args.day is not None:
            try:
                date.fromisoformat(args.day)
            except ValueError as exc:
                raise UsageError(f"day {args.day!r} is not a date; use YYYY-MM-DD") from exc
        filters: dict[str, Any] = {
            "actor": args.actor or None,
            "source": args.source or None,
            "shell": args.shell or None,
            "day": args.day or None,
            "days": args.days if args.day is None else max(args.days, 7),
            "limit": args.limit,
        }
        if args.export:
            lines = await anyio.to_thread.run_sync(lambda: export(self.home, **filters))
            return ToolResult(text="\n".join(lines), structured={"lines": lines})
        records = await anyio.to_thread.run_sync(lambda: query(self.home, **filters))
        clients = Conversations(self._shells().store).clients(r.actor for r in records)
        rows = []
        for r in records:
            row = r.to_dict()
            client = r.extra.get("client") if isinstance(r.extra.get("client"), str) else clients.get(r.actor)
            row["client"] = client
            rows.append(row)
        return ToolResult(text=f"{len(rows)} record(s)", structured={"records": rows})

    async def audit_setup_keys(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("audit_setup_keys", KeysArgs, raw)
        key = await anyio.to_thread.run_sync(lambda: AuditLog(self.home).setup_keys(every=args.every))
        return ToolResult(
            text=f"forward-secure sealing is on: every {key.every}th record is a seal",
            structured={"key": key.text(), "every": key.every, "firstSeq": key.index * key.every},
        )


def _vault_fields(arguments: Mapping[str, Any]) -> AuditFields:
    action = arguments.get("action")
    if action == "set":
        names = [arguments.get("name"), arguments.get("group") or DEFAULT_GROUP]
    elif action == "rm":
        names = [arguments.get("name")]
    elif action == "list":
        names = []
    else:
        names = [arguments.get("group")]
    return AuditFields(
        # Only an action the tool knows: the record of a call that named none (a blank, a typo,
        # a megabyte) says "vault", and its detail says what was refused.
        action=action if isinstance(action, str) and action in get_args(VaultAction) else "vault",
        targets=tuple(n for n in names if isinstance(n, str) and n),
    )


def register_people_admin_tools(
    registry: ToolRegistry, *, config: Config, shells: Callable[[], Shells]
) -> PeopleAdminTools:
    tools = PeopleAdminTools(config, shells)

    def add(
        name: str,
        description: str,
        handler: Callable[[Mapping[str, Any], CallContext], Any],
        model: type[BaseModel],
        *,
        fields: Callable[[Mapping[str, Any]], AuditFields] | None = None,
        audit_calls: bool = True,
        read_only: bool = True,
    ) -> None:
        registry.add(
            ToolDef(
                name=name,
                title=description.split(":")[0],
                description=description,
                input_schema=model.model_json_schema(),
                handler=handler,
                read_only=read_only,
                people_only=True,
                audit_calls=audit_calls,
                audit_fields=fields,
            )
        )

    add(
        "vault",
        "Vault actions: list (names and lock state, never values), set, rm, lock, unlock, group-create, "
        "group-rm",
        tools.vault,
        VaultArgs,
        fields=_vault_fields,
        read_only=False,
    )
    add("audit_verify", "Audit check: walk the hash chain", tools.audit_verify, VerifyArgs, audit_calls=False)
    add(
        "audit_show", "Audit records: the newest matching ones", tools.audit_show, ShowArgs, audit_calls=False
    )
    add(
        "audit_setup_keys",
        "Audit sealing: start forward-secure seals",
        tools.audit_setup_keys,
        KeysArgs,
        audit_calls=False,
        read_only=False,
    )
    return tools
