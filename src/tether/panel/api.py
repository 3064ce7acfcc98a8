"""The panel's JSON API (``/panel/api/…``): one request, one action, one answer.

Invariant: every handler is a thin translation — read the JSON body, make one call through
``PanelCalls`` (a tool, as actor ``panel``) or one lower-layer call (audit, vault), answer JSON. A
failure is ``{"error": CODE, "message": …}`` with a 4xx/5xx status, never a traceback.

Vault answers carry names, groups and lock state only; a passphrase is read from the body, used,
and never logged, stored or echoed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from datetime import date
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tether.audit import query as audit_query
from tether.audit import verify as audit_verify
from tether.config import Config
from tether.errors import TetherError, UsageError
from tether.panel.calls import PanelCalls, PanelError, error_from, task_rows, task_summary
from tether.panel.shells import ShellFeed
from tether.shells import check_shell_id
from tether.store.vault import Vault, VaultListing

Endpoint = Callable[[Request], Awaitable[Response]]
AUDIT_PAGE = 300
MAX_BODY = 64 * 1024


def _json_endpoint(fn: Callable[[Request], Awaitable[Any]]) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        try:
            return JSONResponse(await fn(request))
        except PanelError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        except TetherError as exc:
            err = error_from(exc)
            return JSONResponse(err.body(), status_code=err.status)

    return endpoint


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise PanelError(code="INVALID_ARGUMENT", message=f"request body over {MAX_BODY} bytes", status=413)
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise PanelError(code="INVALID_ARGUMENT", message=f"request body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise PanelError(code="INVALID_ARGUMENT", message="request body must be a JSON object")
    return data


def _text(body: Mapping[str, Any], key: str) -> str:
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PanelError(code="INVALID_ARGUMENT", message=f"{key} must be a string")
    return value.strip()


def _shell(request: Request) -> str:
    return check_shell_id(str(request.path_params["shell"]))


def api_routes(*, calls: PanelCalls, feed: ShellFeed, config: Config) -> list[BaseRoute]:
    home = config.home

    async def manage(shell: str | None, action: dict[str, Any]) -> dict[str, Any]:
        task: dict[str, Any] = {"action": action}
        if shell is not None:
            task["target"] = {"sessions": shell}
        result = await calls.tool("shell_manage", {"tasks": [task]})
        feed.poke()
        return {"message": task_summary(result.structured, result.text), "result": result.structured}

    # -- shells --------------------------------------------------------------------------------

    async def list_shells(request: Request) -> Any:
        return {"shells": [row.to_json() for row in await feed.rows()]}

    async def open_shell(request: Request) -> Any:
        body = await _body(request)
        action: dict[str, Any] = {"kind": "open"}
        for key in ("label", "cwd"):
            if value := _text(body, key):
                action[key] = value
        result = await calls.tool("shell_open", {"tasks": [{"action": action}]})
        feed.poke()
        ids = opened_ids(result.structured)
        return {
            "id": ids[0] if ids else None,
            "ids": ids,
            "message": task_summary(result.structured, result.text),
        }

    async def rename(request: Request) -> Any:
        name = _text(await _body(request), "name")
        return await manage(_shell(request), {"kind": "rename", "newName": name})

    async def close(request: Request) -> Any:
        return await manage(_shell(request), {"kind": "close"})

    async def snapshot(request: Request) -> Any:
        return await manage(_shell(request), {"kind": "snapshot"})

    async def lock(request: Request) -> Any:
        shell = _shell(request)
        why = _text(await _body(request), "reason")

        async def run() -> Any:
            calls.known_shell(shell)
            held, created = calls.manual_locks().lock(shell, who="panel", why=why, source="panel")
            feed.poke()
            if created:
                return {"message": f"{shell} locked: agents are refused until you unlock it"}
            return {"message": f"{shell} was already locked by {held.who}"}

        return await calls.audited(tool="shell", action="lock", targets=[shell], run=run, reason=why or None)

    async def unlock(request: Request) -> Any:
        shell = _shell(request)

        async def run() -> Any:
            was = calls.manual_locks().unlock(shell)
            feed.poke()
            return {"message": f"{shell} unlocked" if was else f"{shell} was not locked"}

        return await calls.audited(tool="shell", action="unlock", targets=[shell], run=run)

    # -- workspaces ----------------------------------------------------------------------------

    async def list_workspaces(request: Request) -> Any:
        # Filling the page's picker is not an action someone took: not an audit record.
        result = await calls.tool(
            "shell_manage", {"tasks": [{"action": {"kind": "workspace-list"}}]}, audited=False
        )
        return {"workspaces": workspace_names(result.structured)}

    async def restore_workspace(request: Request) -> Any:
        name = str(request.path_params["name"]).strip()
        return await manage(None, {"kind": "workspace-restore", "name": name})

    # -- audit ---------------------------------------------------------------------------------

    async def read_audit(request: Request) -> Any:
        q = request.query_params
        day = q.get("day") or None
        if day is not None:
            try:
                date.fromisoformat(day)
            except ValueError as exc:
                raise UsageError(f"day {day!r} is not a date; use YYYY-MM-DD") from exc

        def run() -> list[dict[str, Any]]:
            records = audit_query(
                home,
                actor=q.get("actor") or None,
                source=q.get("source") or None,
                shell=q.get("shell") or None,
                day=day,
                days=7,
                limit=AUDIT_PAGE,
            )
            return [r.to_dict() for r in records]

        return {"records": await anyio.to_thread.run_sync(run)}

    async def verify_audit(request: Request) -> Any:
        report = await anyio.to_thread.run_sync(audit_verify, home)
        return {"ok": report.ok, "records": report.records, "summary": report.summary()}

    # -- vault ---------------------------------------------------------------------------------

    def vault() -> Vault:
        return Vault.open(config)

    async def list_vault(request: Request) -> Any:
        return vault_json(await anyio.to_thread.run_sync(lambda: vault().list()))

    async def unlock_group(request: Request) -> Any:
        group = str(request.path_params["group"])
        body = await _body(request)
        passphrase = body.get("passphrase")
        minutes = body.get("minutes")
        if not isinstance(passphrase, str) or not passphrase:
            raise PanelError(code="INVALID_ARGUMENT", message="passphrase is required to unlock a group")
        if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, int)):
            raise PanelError(code="INVALID_ARGUMENT", message="minutes must be a whole number")

        async def run() -> Any:
            # scrypt takes a noticeable fraction of a second: off the event loop.
            info = await anyio.to_thread.run_sync(lambda: vault().unlock(group, passphrase, minutes))
            return {"message": f"group {group} unlocked", "group": asdict(info)}

        return await calls.audited(tool="vault", action="unlock", targets=[group], run=run)

    async def lock_group(request: Request) -> Any:
        group = str(request.path_params["group"])

        async def run() -> Any:
            was = await anyio.to_thread.run_sync(lambda: vault().lock(group))
            return {"message": f"group {group} locked" + ("" if was else " (it was not unlocked)")}

        return await calls.audited(tool="vault", action="lock", targets=[group], run=run)

    post = ["POST"]
    return [
        Route("/shells", _json_endpoint(list_shells), methods=["GET"]),
        Route("/shells", _json_endpoint(open_shell), methods=post),
        Route("/shells/{shell}/rename", _json_endpoint(rename), methods=post),
        Route("/shells/{shell}/close", _json_endpoint(close), methods=post),
        Route("/shells/{shell}/snapshot", _json_endpoint(snapshot), methods=post),
        Route("/shells/{shell}/lock", _json_endpoint(lock), methods=post),
        Route("/shells/{shell}/unlock", _json_endpoint(unlock), methods=post),
        Route("/workspaces", _json_endpoint(list_workspaces), methods=["GET"]),
        Route("/workspaces/{name}/restore", _json_endpoint(restore_workspace), methods=post),
        Route("/audit", _json_endpoint(read_audit), methods=["GET"]),
        Route("/audit/verify", _json_endpoint(verify_audit), methods=post),
        Route("/vault", _json_endpoint(list_vault), methods=["GET"]),
        Route("/vault/{group}/unlock", _json_endpoint(unlock_group), methods=post),
        Route("/vault/{group}/lock", _json_endpoint(lock_group), methods=post),
    ]


def vault_json(listing: VaultListing) -> dict[str, Any]:
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
        "items": [{"name": i.name, "group": i.group, "locked": i.locked} for i in listing.items],
    }


def opened_ids(structured: Mapping[str, Any]) -> list[str]:
    """Shell ids a ``shell_open`` result reports (one task entry per opened shell)."""
    return [
        t["shell"] for t in task_rows(structured) if isinstance(t.get("shell"), str) and t.get("ok", True)
    ]


def workspace_names(structured: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Saved workspaces from a ``shell_manage workspace-list`` result (its ``data.workspaces``)."""
    found: list[dict[str, Any]] = []
    for task in task_rows(structured):
        data = task.get("data")
        spaces = data.get("workspaces") if isinstance(data, Mapping) else None
        for w in spaces if isinstance(spaces, list) else []:
            if isinstance(w, Mapping) and isinstance(w.get("name"), str):
                shells = w.get("shells")
                found.append({"name": w["name"], "shells": len(shells) if isinstance(shells, list) else 0})
    return found
