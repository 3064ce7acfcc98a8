"""The panel's JSON API (``/panel/api/…``): one request, one tool call, one answer.

Invariant: every handler is a thin translation — read the JSON body or query, make one call
through ``PanelCalls`` (a tool, as actor ``panel``: model-visible or people-only), answer JSON. A
failure is ``{"error": CODE, "message": …}`` with a 4xx/5xx status, never a traceback. Anything a
person does is a POST (audited by the tool layer); a GET only fills a view and writes nothing.

Vault answers carry names, groups and lock state only; a passphrase is read from the body, passed
to the ``vault`` tool, and never logged, stored or echoed.

Routes are grouped by the view they serve (shells, timeline and history, workspaces, audit,
vault — its listing shaped by ``panel.vault`` — and the approvals queue: ``panel.approvals``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tether.errors import TetherError
from tether.panel.approvals import approval_routes
from tether.panel.calls import ACTING, PanelCalls, PanelError, error_from, task_rows, task_summary
from tether.panel.shells import ShellFeed
from tether.panel.vault import read_vault
from tether.shells import check_shell_id

Endpoint = Callable[[Request], Awaitable[Response]]
AUDIT_PAGE = 300
MAX_BODY = 64 * 1024
SEARCH_PAGE = 200
_HIT = re.compile(r"^(\d+)([:-]) (.*)$", re.S)
_SEARCH_HEAD = re.compile(r"^(\d+) matches, (\d+) on this page, from (\d+)(?:; next: matchOffset=(\d+))?")


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
    except RecursionError as exc:  # nesting deeper than the parser's recursion: a bad body, not a crash
        raise PanelError(code="INVALID_ARGUMENT", message="request body is nested too deeply") from exc
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


def _int(body: Mapping[str, Any], key: str, default: int | None = None) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise PanelError(code="INVALID_ARGUMENT", message=f"{key} must be a whole number")
    return value


def _shell(request: Request) -> str:
    return check_shell_id(str(request.path_params["shell"]))


def api_routes(*, calls: PanelCalls, feed: ShellFeed) -> list[BaseRoute]:
    async def manage(shell: str | None, action: dict[str, Any]) -> dict[str, Any]:
        task: dict[str, Any] = {"action": action}
        if shell is not None:
            task["target"] = {"sessions": shell}
        result = await calls.tool("shell_manage", {"tasks": [task]})
        feed.poke()
        return {"message": task_summary(result.structured, result.text), "result": result.structured}

    async def me(request: Request) -> Any:
        # Who this page is signed in as (the header says it): a name, or null for the serve token.
        return {"who": ACTING.get()}

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
        reason = _text(await _body(request), "reason")
        result = await calls.tool("shell_lock", {"shell": shell, "action": "lock", "reason": reason})
        feed.poke()
        return {"message": result.text, "lock": result.structured.get("lock")}

    async def unlock(request: Request) -> Any:
        result = await calls.tool("shell_lock", {"shell": _shell(request), "action": "unlock"})
        feed.poke()
        return {"message": result.text}

    # -- timeline, history, copy, recordings ---------------------------------------------------

    async def timeline(request: Request) -> Any:
        # Filling the timeline view (it refreshes as the shell runs): not an action.
        result = await calls.tool("shell_timeline", {"shell": _shell(request)}, audited=False)
        return {"commands": result.structured.get("commands", [])}

    async def output(request: Request) -> Any:
        body = await _body(request)
        args: dict[str, Any] = {"shell": _shell(request), "start": _int(body, "start", 0)}
        if (end := _int(body, "end")) is not None:
            args["end"] = end
        result = await calls.tool("shell_output", args)
        data = result.structured
        return {
            "text": "\n".join(data.get("lines", [])),
            "total": data.get("total"),
            "dropped": data.get("dropped"),
        }

    async def search(request: Request) -> Any:
        body = await _body(request)
        pattern = _text(body, "pattern")
        if not pattern:
            raise PanelError(code="INVALID_ARGUMENT", message="type something to search for")
        regex = pattern if body.get("regex") is True else re.escape(pattern)
        action = {
            "kind": "read",
            "search": regex,
            "context": _int(body, "context", 1),
            "matchOffset": _int(body, "offset", 0),
        }
        shell = _shell(request)
        task = {"target": {"sessions": shell}, "action": action, "output": {"lines": SEARCH_PAGE}}
        try:
            result = await calls.tool("shell_read", {"tasks": [task]})
        except PanelError as exc:
            if exc.code != "NOT_FOUND":
                raise
            # shell_read answers an agent (its task's field, shell_state); a person is told what
            # happened in the panel's words, and where an ended shell's output still is.
            raise PanelError(code=exc.code, message=not_running_search(shell), status=exc.status) from exc
        rows = task_rows(result.structured)
        lines = [str(line) for line in (rows[0].get("lines") or [])] if rows else []
        return search_page(lines)

    async def recording(request: Request) -> Any:
        result = await calls.tool("shell_record", {"shell": _shell(request)})
        data = result.structured
        return {
            "cast": data.get("cast", ""),
            "events": data.get("events"),
            "durationS": data.get("durationS"),
        }

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
        args: dict[str, Any] = {"limit": AUDIT_PAGE, "days": 7}
        for key in ("actor", "source", "shell", "day"):
            if q.get(key):
                args[key] = q[key]
        result = await calls.tool("audit_show", args)
        return {"records": result.structured.get("records", [])}

    async def verify_audit(request: Request) -> Any:
        result = await calls.tool("audit_verify", {})
        data = result.structured
        return {"ok": data.get("ok"), "records": data.get("records"), "summary": data.get("summary")}

    # -- vault ---------------------------------------------------------------------------------

    async def list_vault(request: Request) -> Any:
        # Filling the vault view: not an action. (Open pages also get it pushed: panel.vault.)
        return await read_vault(calls)

    async def unlock_group(request: Request) -> Any:
        group = str(request.path_params["group"])
        body = await _body(request)
        passphrase = body.get("passphrase")
        if not isinstance(passphrase, str) or not passphrase:
            raise PanelError(code="INVALID_ARGUMENT", message="passphrase is required to unlock a group")
        args: dict[str, Any] = {"action": "unlock", "group": group, "passphrase": passphrase}
        if (minutes := _int(body, "minutes")) is not None:
            args["minutes"] = minutes
        result = await calls.tool("vault", args)
        return {"message": result.text, "group": result.structured.get("group")}

    async def lock_group(request: Request) -> Any:
        result = await calls.tool("vault", {"action": "lock", "group": str(request.path_params["group"])})
        return {"message": result.text}

    post = ["POST"]
    # {shell:path}: an id holding "/" (the page sends it encoded; no shell has one) still reaches
    # check_shell_id and is refused as INVALID_ARGUMENT, never a bare routing 404.
    return [
        Route("/me", _json_endpoint(me), methods=["GET"]),
        Route("/shells", _json_endpoint(list_shells), methods=["GET"]),
        Route("/shells", _json_endpoint(open_shell), methods=post),
        Route("/shells/{shell:path}/rename", _json_endpoint(rename), methods=post),
        Route("/shells/{shell:path}/close", _json_endpoint(close), methods=post),
        Route("/shells/{shell:path}/snapshot", _json_endpoint(snapshot), methods=post),
        Route("/shells/{shell:path}/lock", _json_endpoint(lock), methods=post),
        Route("/shells/{shell:path}/unlock", _json_endpoint(unlock), methods=post),
        Route("/shells/{shell:path}/timeline", _json_endpoint(timeline), methods=["GET"]),
        Route("/shells/{shell:path}/output", _json_endpoint(output), methods=post),
        Route("/shells/{shell:path}/search", _json_endpoint(search), methods=post),
        Route("/shells/{shell:path}/recording", _json_endpoint(recording), methods=post),
        Route("/workspaces", _json_endpoint(list_workspaces), methods=["GET"]),
        Route("/workspaces/{name}/restore", _json_endpoint(restore_workspace), methods=post),
        Route("/audit", _json_endpoint(read_audit), methods=["GET"]),
        Route("/audit/verify", _json_endpoint(verify_audit), methods=post),
        Route("/vault", _json_endpoint(list_vault), methods=["GET"]),
        Route("/vault/{group}/unlock", _json_endpoint(unlock_group), methods=post),
        Route("/vault/{group}/lock", _json_endpoint(lock_group), methods=post),
        *approval_routes(calls, _body, _json_endpoint),
    ]


def not_running_search(shell: str) -> str:
    return (
        f"shell {shell} is not running (closed, or never opened): only a running shell's history "
        "can be searched. A closed shell's commands and their output are still in its Timeline, "
        "and Recording exports all of its output"
    )


def search_page(lines: list[str]) -> dict[str, Any]:
    """``shell_read`` search lines as hits with context: after ``12: hit``, ``13- …`` lines are its
    after-context until ``--`` (or the next hit); after ``--`` they are the next hit's before."""
    head = _SEARCH_HEAD.match(lines[0]) if lines else None
    if head is None:
        return {"total": 0, "offset": 0, "next": None, "hits": []}
    hits: list[dict[str, Any]] = []
    before: list[dict[str, Any]] = []
    after = False
    for line in lines[1:]:
        m = _HIT.match(line)
        if m is None:
            before, after = [], False
            continue
        entry = {"line": int(m.group(1)), "text": m.group(3)}
        if m.group(2) == ":":
            hits.append({**entry, "before": before, "after": []})
            before, after = [], True
        elif after and hits:
            hits[-1]["after"].append(entry)
        else:
            before.append(entry)
    return {
        "total": int(head.group(1)),
        "offset": int(head.group(3)),
        "next": int(head.group(4)) if head.group(4) else None,
        "hits": hits,
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
