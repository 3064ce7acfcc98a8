"""Sign-in and same-origin rules of the panel, on a real server (no browser needed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx2
import pytest
import websockets
from panel_harness import TOKEN, browserless, serving, serving_tools

from tether.audit import query as audit_query
from tether.panel.app import STATIC_DIR
from tether.panel.auth import COOKIE_NAME, session_cookie_value

FOREIGN = "http://evil.example"


async def test_login_link_sets_a_strict_httponly_cookie_and_strips_the_token(tether_home: Path) -> None:
    async with serving(tether_home) as served, httpx2.AsyncClient(base_url=served.base) as client:
        wrong = await client.get("/panel/login", params={"token": "nope"})
        assert wrong.status_code == 401
        assert "not this server" in wrong.text

        answer = await client.get("/panel/login", params={"token": TOKEN})
        assert answer.status_code == 303
        assert answer.headers["location"] == "/panel/"  # the token is gone from the address
        assert answer.headers["referrer-policy"] == "no-referrer"
        cookie = answer.headers["set-cookie"]
        assert f"{COOKIE_NAME}={session_cookie_value(TOKEN)}" in cookie
        assert TOKEN not in cookie
        lowered = cookie.lower()
        assert "httponly" in lowered and "samesite=strict" in lowered and "path=/panel" in lowered

        page = await client.get("/panel/", headers={"Cookie": served.cookie_header()})
        assert page.status_code == 200
        assert 'id="grid"' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]

        # The sign-in page lets its form say where it comes from (a no-referrer page would post
        # with Origin: null, which is refused): same-origin referrers only.
        async with httpx2.AsyncClient(base_url=served.base) as fresh:
            signin = await fresh.get("/panel/login")
        assert signin.status_code == 200 and signin.headers["referrer-policy"] == "same-origin"
        form = await client.post("/panel/login", data={"token": TOKEN}, headers={"Origin": served.origin})
        assert form.status_code == 303 and COOKIE_NAME in form.headers["set-cookie"]

    logins = [r for r in audit_query(tether_home, source="panel") if r.action == "login"]
    assert len(logins) == 2 and all(r.actor == "panel" for r in logins)


async def test_requests_without_the_cookie_are_refused(tether_home: Path) -> None:
    async with serving(tether_home) as served, browserless(served, signed_in=False) as client:
        page = await client.get("/panel/")
        assert page.status_code == 303 and page.headers["location"] == "/panel/login"
        api = await client.get("/panel/api/shells")
        assert api.status_code == 401 and api.json()["error"] == "refused"
        forged = await client.get("/panel/api/shells", headers={"Cookie": f"{COOKIE_NAME}={TOKEN}"})
        assert forged.status_code == 401  # the raw token is not a session
        assets = await client.get("/panel/static/js/app.js")
        assert assets.status_code == 200  # public: the login page needs its stylesheet
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(f"{served.ws_base}/panel/ws/events", origin=served.origin):  # type: ignore[arg-type]
                pass
        assert refused.value.response.status_code == 403


async def test_foreign_origin_and_cross_site_writes_are_refused(tether_home: Path) -> None:
    async with serving_tools(tether_home) as served, browserless(served) as client:
        ok = await client.get("/panel/api/vault")
        assert ok.status_code == 200, ok.text

        foreign = await client.post("/panel/api/shells", json={}, headers={"Origin": FOREIGN})
        assert foreign.status_code == 403

        bare = httpx2.AsyncClient(base_url=served.base, headers={"Cookie": served.cookie_header()})
        async with bare:
            no_origin = await bare.post("/panel/api/vault/g/lock", json={})
            assert no_origin.status_code == 403 and "own page" in no_origin.text
            cross = await bare.post(
                "/panel/api/vault/g/lock", json={}, headers={"Sec-Fetch-Site": "cross-site"}
            )
            assert cross.status_code == 403
            # An opaque origin (a no-referrer page's form, a sandboxed frame) proves nothing.
            opaque = {"Origin": "null", "Sec-Fetch-Site": "same-origin"}
            assert (await bare.post("/panel/api/vault/g/lock", json={}, headers=opaque)).status_code == 403

        as_form = await client.post(
            "/panel/api/vault/g/lock", content=b"x=1", headers={"Content-Type": "text/plain"}
        )
        assert as_form.status_code == 415

        rebinding = await client.get("/panel/api/vault", headers={"Host": "attacker.example:80"})
        assert rebinding.status_code == 421

        for origin in (FOREIGN, None):
            with pytest.raises(websockets.InvalidStatus) as refused:
                async with websockets.connect(
                    f"{served.ws_base}/panel/ws/events",
                    origin=origin,  # type: ignore[arg-type]
                    additional_headers={"Cookie": served.cookie_header()},
                ):
                    pass
            assert refused.value.response.status_code == 403

        async with websockets.connect(
            f"{served.ws_base}/panel/ws/events",
            origin=served.origin,  # type: ignore[arg-type]
            additional_headers={"Cookie": served.cookie_header()},
        ) as ws:
            first = json.loads(await ws.recv())
            while first["type"] in ("approvals", "vault", "ping"):  # those have their own messages
                first = json.loads(await ws.recv())
            # No shell tools in this bare registry: the page is told, not left hanging.
            assert first["type"] in ("shells", "error")


async def test_the_panel_serves_the_page_and_assets_of_the_build_it_runs(
    tether_home: Path, tmp_path: Path
) -> None:
    # An upgrade (pip install -U) under a running `tether serve` replaced the files in its
    # static directory: a reloaded page got the later build's page and scripts, which then spoke to
    # this server's API (and a script this build never had was served too).
    static = tmp_path / "static"
    shutil.copytree(STATIC_DIR, static)
    async with serving(tether_home, static_dir=static) as served, browserless(served) as client:
        page = await client.get("/panel/")
        script = await client.get("/panel/static/js/app.js")
        assert page.status_code == 200 and script.status_code == 200
        assert script.headers["content-type"].split(";")[0] in ("text/javascript", "application/javascript")
        assert page.headers["cache-control"] == "no-store"

        (static / "index.html").write_text("<p>a later build's page</p>")
        (static / "js" / "app.js").write_text("// a later build's script\n")
        (static / "js" / "later.js").write_text("// a script this build never had\n")

        assert (await client.get("/panel/")).text == page.text
        again = await client.get("/panel/static/js/app.js")
        assert again.content == script.content
        assert (await client.get("/panel/static/js/later.js")).status_code == 404
        kept = await client.get("/panel/static/js/app.js", headers={"If-None-Match": script.headers["etag"]})
        assert kept.status_code == 304
        assert (await client.get("/panel/static/vendor/xterm.js")).status_code == 200
        assert (await client.get("/panel/static/../app.py")).status_code == 404
