"""Several people at the panel, each with access of their own (``tether panel add``): signed in by
name, acting by name, revoked at once — on a real server with the real tools (no browser needed),
and tried as an attacker would."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import websockets
from panel_harness import TOKEN, Served, serving_tools

from hang import HANG_S
from tether.audit import query as audit_query
from tether.panel.auth import COOKIE_NAME
from tether.panel.calls import PanelError
from tether.store.db import Store
from tether.store.panel_people import MAX_TOKEN_CHARS, PanelPeople

pytestmark = pytest.mark.timeout(120)


def _people(home: Path) -> PanelPeople:
    """The people of ``home`` as ``tether panel`` (another process) changes them: a store of its own."""
    return PanelPeople(Store.open(home), home)


def _files_holding(home: Path, text: str) -> list[Path]:
    return [p for p in home.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


async def _sign_in(served: Served, token: str) -> str:
    async with httpx2.AsyncClient(base_url=served.base) as client:
        answer = await client.get("/panel/login", params={"token": token})
    assert answer.status_code == 303, answer.text
    cookie = answer.headers["set-cookie"]
    assert token not in cookie
    return cookie.split(";", 1)[0].split("=", 1)[1]


@asynccontextmanager
async def _as(served: Served, cookie: str) -> AsyncIterator[httpx2.AsyncClient]:
    headers = {"Origin": served.origin, "Cookie": f"{COOKIE_NAME}={cookie}"}
    async with httpx2.AsyncClient(base_url=served.base, headers=headers) as client:
        yield client


def _ws(served: Served, path: str, cookie: str) -> websockets.connect:
    return websockets.connect(
        f"{served.ws_base}/panel/{path}",
        origin=served.origin,  # type: ignore[arg-type]
        additional_headers={"Cookie": f"{COOKIE_NAME}={cookie}"},
    )


async def test_a_person_signs_in_by_name_and_every_action_names_them(tether_home: Path) -> None:
    alice, token = _people(tether_home).add("alice")
    async with serving_tools(tether_home) as served:
        cookie = await _sign_in(served, token)
        owner = await _sign_in(served, TOKEN)  # the serve token works as it did
        async with _as(served, cookie) as client, _as(served, owner) as shared:
            assert (await client.get("/panel/api/me")).json() == {"who": "alice"}
            assert (await shared.get("/panel/api/me")).json() == {"who": None}
            opened = await client.post("/panel/api/shells", json={"label": "alices"})
            shell = opened.json()["id"]
            locked = await client.post(f"/panel/api/shells/{shell}/lock", json={"reason": "mine now"})
            assert locked.status_code == 200 and locked.json()["lock"]["who"] == "alice"
            rows = (await shared.get("/panel/api/shells")).json()["shells"]
            assert [r["lockedBy"] for r in rows if r["id"] == shell] == ["alice"]
            assert rows[0]["owner"] == "panel"  # the panel still owns what its people open
            unlocked = await shared.post(f"/panel/api/shells/{shell}/unlock", json={})
            assert unlocked.status_code == 200
            closed = await client.post(f"/panel/api/shells/{shell}/close", json={})
            assert closed.status_code == 200, closed.text
    records = [r for r in audit_query(tether_home, source="panel", days=1, limit=100)]
    by_action = {(r.tool, r.action): r.actor for r in records}
    assert by_action[("panel", "login")] in ("panel:alice", "panel")
    assert sorted(r.actor for r in records if r.action == "login") == ["panel", "panel:alice"]
    assert by_action[("shell_open", "open")] == "panel:alice"
    assert by_action[("shell_lock", "lock")] == "panel:alice"
    assert by_action[("shell_lock", "unlock")] == "panel"
    assert by_action[("shell_manage", "close")] == "panel:alice"
    # The token is nowhere in the home: not in the log, the server's logs or the database.
    assert _files_holding(tether_home, token) == []
    assert alice.name == "alice"


async def test_every_bad_token_and_every_forged_cookie_gets_the_same_answer(tether_home: Path) -> None:
    people = _people(tether_home)
    alice, token = people.add("alice")
    _bob, bobs = people.add("bob")
    people.revoke("bob")
    async with serving_tools(tether_home) as served, httpx2.AsyncClient(base_url=served.base) as client:
        bad = [
            "nope",
            bobs,  # revoked
            "",  # empty
            "   ",
            token + "x" * MAX_TOKEN_CHARS,  # overlong, with a valid token inside
            alice.token_sha256,  # what reading tether.db gives
            "tpp_\u00e9" + token[5:],  # not ASCII
        ]
        answers = [await client.get("/panel/login", params={"token": t}) for t in bad]
        answers.append(
            await client.post("/panel/login", data={"token": ""}, headers={"Origin": served.origin})
        )
        answers.append(
            await client.post("/panel/login", data={"token": bobs}, headers={"Origin": served.origin})
        )
        for answer in answers:
            assert answer.status_code == 401 and "set-cookie" not in answer.headers
            assert "That token does not sign in here" in answer.text
        assert len({a.text for a in answers}) == 1  # one answer, whichever it was

        good = await _sign_in(served, token)
        hexname, _, mac = good.removeprefix("p.").partition(".")
        # A cookie made from what tether.db holds, without the serve token: refused.
        message = b"tether-panel-person-v1\0alice\0" + alice.token_sha256.encode()
        forged = [
            f"p.{hexname}.{hmac.new(alice.token_sha256.encode(), message, hashlib.sha256).hexdigest()}",
            f"p.{b'bob'.hex()}.{mac}",  # alice's proof under another name
            f"p.{hexname}.{mac[:-1]}{'1' if mac.endswith('0') else '0'}",
            f"p.zz.{mac}",
            "p." + "41" * 5000,
            f"p.{hexname}",
        ]
        for cookie in forged:
            async with _as(served, cookie) as attacker:
                refused = await attacker.get("/panel/api/me")
            assert refused.status_code == 401, cookie
            assert "not signed in" in refused.json()["message"]
        async with _as(served, good) as client_alice:
            assert (await client_alice.get("/panel/api/me")).json() == {"who": "alice"}
        # New access for the name voids the cookie of the old.
        people.revoke("alice")
        people.add("alice")
        async with _as(served, good) as stale:
            assert (await stale.get("/panel/api/me")).status_code == 401
    people.store.close()


async def test_revoking_a_person_closes_their_sockets_at_once_and_the_others_keep_working(
    tether_home: Path,
) -> None:
    people = _people(tether_home)
    _, alices = people.add("alice")
    _, bobs = people.add("bob")
    async with serving_tools(tether_home) as served:
        alice, bob = await _sign_in(served, alices), await _sign_in(served, bobs)
        async with _as(served, bob) as bob_http:
            shell = (await bob_http.post("/panel/api/shells", json={})).json()["id"]
        async with (
            _ws(served, "ws/events", alice) as alice_events,
            _ws(served, f"ws/term/{shell}?cols=80&rows=24", alice) as alice_term,
            _ws(served, "ws/events", bob) as bob_events,
        ):
            await alice_events.recv()
            await alice_term.recv()
            await bob_events.recv()
            await anyio.to_thread.run_sync(lambda: people.revoke("alice"))  # `tether panel revoke alice`
            with anyio.fail_after(HANG_S):
                for ws in (alice_events, alice_term):
                    with pytest.raises(websockets.ConnectionClosed):
                        while True:
                            await ws.recv()
                    assert ws.close_code == 1008 and "revoked" in (ws.close_reason or "")
            # Bob's socket lives on and hears a change at once.
            async with _as(served, bob) as bob_http:
                await bob_http.post(f"/panel/api/shells/{shell}/rename", json={"name": "renamed-by-bob"})
                with anyio.fail_after(HANG_S):
                    while True:
                        msg = json.loads(await bob_events.recv())
                        if msg["type"] == "shells" and any(
                            s["label"] == "renamed-by-bob" for s in msg["shells"]
                        ):
                            break
        async with _as(served, alice) as alice_http:
            refused = await alice_http.get("/panel/api/shells")
            assert (
                refused.status_code == 401
                and "panel access of alice was revoked" in refused.json()["message"]
            )
            signin = await alice_http.get("/panel/login")
            assert signin.status_code == 200 and "panel access of alice was revoked" in signin.text
        with pytest.raises(websockets.InvalidStatus):
            async with _ws(served, "ws/events", alice):
                pass
        # Only a person at the command line gives or ends access: not one at the panel.
        with pytest.raises(PanelError) as from_panel:
            await served.panel.calls.tool("panel_people", {"action": "add", "name": "mallory"})
        assert from_panel.value.code == "REFUSED"
    people.store.close()
    detaches = [r for r in audit_query(tether_home, source="panel", days=1) if r.action == "terminal-detach"]
    assert [r.actor for r in detaches] == ["panel:alice"]


async def test_the_timeline_names_who_pressed_enter_on_a_line_typed_at_the_panel(tether_home: Path) -> None:
    """Two people and the serve token's holder type into one shell through their own terminals: each
    command names who pressed Enter. A line typed where tether does not see (a plain ``tmux
    send-keys``, as a person's own ``tmux attach``) names nobody — not the last person the panel saw
    press Enter, in a program before it nor at an earlier prompt."""
    people = _people(tether_home)
    _, alices = people.add("alice")
    _, bobs = people.add("bob")
    async with serving_tools(tether_home) as served:
        alice, bob = await _sign_in(served, alices), await _sign_in(served, bobs)
        owner = await _sign_in(served, TOKEN)
        async with _as(served, bob) as bob_http:
            shell = (await bob_http.post("/panel/api/shells", json={})).json()["id"]
            engine = served.panel.calls.engine()

            async def ran(text: str) -> dict[str, Any]:
                """The timeline's entry of ``text`` once it ended, the shell back at its prompt."""
                with anyio.fail_after(HANG_S):
                    while True:
                        commands = (await bob_http.get(f"/panel/api/shells/{shell}/timeline")).json()[
                            "commands"
                        ]
                        done = [c for c in commands if c["text"] == text and c["endedMs"] is not None]
                        activity = engine.activity(shell)
                        if done and activity is not None and activity.phase == "prompt":
                            return dict(done[-1])
                        await anyio.sleep(0.05)

            def typed(data: str) -> str:
                return json.dumps({"type": "input", "data": data, "binary": False, "typed": True})

            def tmux(*keys: str) -> None:
                subprocess.run(
                    ["tmux", "-S", str(tether_home / "tmux.sock"), "send-keys", "-t", shell, *keys],
                    check=True,
                )

            async with (
                _ws(served, f"ws/term/{shell}?cols=80&rows=24", alice) as alice_term,
                _ws(served, f"ws/term/{shell}?cols=80&rows=24", bob) as bob_term,
                _ws(served, f"ws/term/{shell}?cols=80&rows=24", owner) as owner_term,
            ):
                with anyio.fail_after(HANG_S):  # the first prompt is drawn
                    while (activity := engine.activity(shell)) is None or activity.phase != "prompt":
                        await anyio.sleep(0.05)
                await alice_term.send(typed("echo by-alice\r"))
                assert (await ran("echo by-alice"))["typist"] == "panel:alice"
                await bob_term.send(typed("echo by-bob\r"))
                assert (await ran("echo by-bob"))["typist"] == "panel:bob"
                await owner_term.send(typed("echo by-owner\r"))
                assert (await ran("echo by-owner"))["typist"] == "panel"
                # Typed where tether does not see it: nobody, though bob's Enter came last.
                tmux("echo by-someone", "Enter")
                assert (await ran("echo by-someone"))["typist"] is None
                # Alice runs `cat`, presses Enter inside it and ends it; then someone types a line.
                await alice_term.send(typed("cat\r"))
                with anyio.fail_after(HANG_S):
                    while (activity := engine.activity(shell)) is None or activity.phase != "running":
                        await anyio.sleep(0.05)
                await alice_term.send(typed("inside cat\r"))
                await alice_term.send(typed("\x04"))
                assert (await ran("cat"))["typist"] == "panel:alice"
                tmux("echo after-cat", "Enter")
                assert (await ran("echo after-cat"))["typist"] is None
                # Noted: the Enters at a prompt, not the one a program in front (`cat`) read.
                noted = [actor for _, actor in engine.records.enters(shell)]
                assert noted == ["panel:alice", "panel:bob", "panel", "panel:alice"], noted
        timeline = await served.panel.calls.tool("shell_timeline", {"shell": shell}, audited=False)
        assert "by person (panel:alice): echo by-alice" in timeline.text, timeline.text
        someones = [c for c in timeline.structured["commands"] if c["text"] == "echo by-someone"]
        assert [c["typist"] for c in someones] == [None]
    people.store.close()
    # The audit log has each Enter at a prompt, by whom, and never the keys.
    records = audit_query(tether_home, source="panel", shell=shell)
    enters = [r for r in records if r.action == "terminal-enter"]
    assert [r.actor for r in enters] == ["panel:alice", "panel:bob", "panel", "panel:alice"]
    assert not any("by-" in (r.detail or "") or "cat" in (r.detail or "") for r in enters), enters
