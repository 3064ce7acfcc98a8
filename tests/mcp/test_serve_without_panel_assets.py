"""``tether serve`` from a copy of tether installed without the panel's browser assets.

The copy is the package itself minus ``panel/static/vendor`` (what a build that skipped the asset
step would install), run as a real ``tether serve`` process. MCP must still be served; the panel
must say it is unavailable and why; "Ready." must come only once requests are answered, and the
panel's sign-in link never.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp_harness import http_client, text_of

import tether
from hang import HANG_S
from serve_banner import banner_field, read_banner
from tether.panel.app import VENDOR_FILES

VENDOR = VENDOR_FILES


@pytest.fixture
def copy_without_assets(tmp_path: Path) -> Path:
    source = Path(tether.__file__).resolve().parent
    shutil.copytree(source, tmp_path / "tether", ignore=shutil.ignore_patterns("__pycache__", "vendor"))
    assert not (tmp_path / "tether" / "panel" / "static" / "vendor").exists()
    return tmp_path


@pytest.fixture
def served(tether_home: Path, copy_without_assets: Path) -> Iterator[tuple[list[str], subprocess.Popen[str]]]:
    env = {**os.environ, "TETHER_HOME": str(tether_home), "PYTHONPATH": str(copy_without_assets)}
    argv = [sys.executable, "-c", "import sys; from tether.cli import main; sys.exit(main())", "serve"]
    process = subprocess.Popen(
        [*argv, "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = [line.rstrip("\n") for line in read_banner(process.stdout)]
        yield lines, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=HANG_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def test_serve_without_assets_serves_mcp_and_says_why_there_is_no_panel(
    served: tuple[list[str], subprocess.Popen[str]], copy_without_assets: Path
) -> None:
    lines, process = served
    assert lines[-1] == "Ready. Press Ctrl+C to stop.", lines
    (reason,) = [line for line in lines if line.startswith("Panel: unavailable: ")]
    vendor = copy_without_assets / "tether" / "panel" / "static" / "vendor"
    assert f"its browser assets are missing ({', '.join(VENDOR)} in {vendor})" in reason
    assert "python -m build" in reason and "make panel-assets" in reason
    url = banner_field(lines, "URL")
    token = banner_field(lines, "token")
    # "Ready." was printed, so it answers now: no retry, no wait.
    async with http_client(url, token=token) as client:
        result = await client.call_tool("bash", {"command": "echo still served", "description": "check"})
        assert text_of(result) == "still served"
    base = url.removesuffix("/mcp")
    async with httpx2.AsyncClient() as http:
        page = await http.get(f"{base}/panel/", headers={"Authorization": f"Bearer {token}"})
        assert (
            page.status_code == 503
            and "The panel is unavailable: its browser assets are missing" in page.text
        )
        asset = await http.get(f"{base}/panel/static/vendor/xterm.js")
        assert asset.status_code == 503
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=HANG_S) == 0
    assert process.stdout is not None and process.stderr is not None
    rest = process.stdout.read()
    assert "Panel (open this link once" not in rest and "/panel/login?token=" not in "\n".join(lines) + rest
    assert "Traceback" not in process.stderr.read()
