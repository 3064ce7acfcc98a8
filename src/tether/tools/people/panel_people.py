"""The people-only ``panel_people`` tool: who may use the panel, each with access of their own
(``tether.store.panel_people``), managed from the command line (``tether panel …``).

    panel_people  add (a person's name: their token, shown once) · list · revoke (at once)

Invariants: only a person at the command line manages access (a call from the panel is
``REFUSED``: whoever holds one person's access cannot make or end another's); the token is in the
result of ``add`` alone — the audit record names the action and the person (``audit_fields``),
never the token, and the store keeps only its hash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

import anyio
from pydantic import BaseModel, ConfigDict

from tether.config import Config
from tether.errors import RefusedError
from tether.store.db import Store
from tether.store.panel_people import NAME_RE, PanelPeople, PanelPerson
from tether.tools.arguments import parse_arguments
from tether.tools.registry import AuditFields, CallContext, ToolDef, ToolRegistry, ToolResult

PeopleAction = Literal["add", "list", "revoke"]


class PanelPeopleArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: PeopleAction
    name: str | None = None


def person_json(person: PanelPerson) -> dict[str, Any]:
    return {"name": person.name, "createdMs": person.created_ms, "revokedMs": person.revoked_ms}


class PeoplePanelTools:
    def __init__(self, config: Config) -> None:
        self.home = config.home
        self._opened: PanelPeople | None = None

    def _people(self) -> PanelPeople:
        if self._opened is None:  # opened at the first call: a server that never uses it opens nothing
            self._opened = PanelPeople(Store.open(self.home), self.home)
        return self._opened

    async def call(self, raw: Mapping[str, Any], ctx: CallContext) -> ToolResult:
        args = parse_arguments("panel_people", PanelPeopleArgs, raw)
        if ctx.source != "cli":
            raise RefusedError(
                "panel access is given and revoked at the command line (tether panel add / revoke), "
                "not from the panel"
            )
        people = await anyio.to_thread.run_sync(self._people)
        if args.action == "list":
            everyone = await anyio.to_thread.run_sync(people.all)
            active = sum(1 for p in everyone if p.active)
            return ToolResult(
                text=f"{active} person(s) with panel access, {len(everyone) - active} revoked",
                structured={"people": [person_json(p) for p in everyone]},
            )
        name = args.name or ""
        if args.action == "add":
            person, token = await anyio.to_thread.run_sync(lambda: people.add(name))
            return ToolResult(
                text=f"{person.name} may now use the panel; their token is shown this once",
                structured={"person": person_json(person), "token": token},
            )
        person = await anyio.to_thread.run_sync(lambda: people.revoke(name))
        return ToolResult(
            text=f"{person.name}'s panel access is revoked; their open pages lost it at once",
            structured={"person": person_json(person)},
        )


def _fields(arguments: Mapping[str, Any]) -> AuditFields:
    action = arguments.get("action")
    name = arguments.get("name")
    return AuditFields(
        action=action if isinstance(action, str) and action in get_args(PeopleAction) else "panel_people",
        # A name only as the store would take it: the record never holds what was refused as one.
        targets=(name,) if isinstance(name, str) and _valid(name) else (),
    )


def _valid(name: str) -> bool:
    return NAME_RE.match(name) is not None


def register_people_panel_tools(registry: ToolRegistry, *, config: Config) -> PeoplePanelTools:
    tools = PeoplePanelTools(config)
    registry.add(
        ToolDef(
            name="panel_people",
            title="Panel people",
            description="Panel access of one's own for each person: add (a token, shown once), list, revoke.",
            input_schema=PanelPeopleArgs.model_json_schema(),
            handler=tools.call,
            read_only=False,
            people_only=True,
            audit_fields=_fields,
        )
    )
    return tools
