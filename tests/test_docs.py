"""The README and docs/*.md stay true: links resolve, cited files exist, examples are valid.

Every relative link (and its ``#anchor``) must reach a file and a heading that exist; every
repository path written in backticks must exist; every ``config.toml`` example must load and
validate as tether itself validates a configuration (``shell_manage`` doctor's check); every tool
call written as ``{"name": …, "arguments": …}`` must pass the tool's own argument validation.
Behaviour the pages describe is pinned by the tests of each layer (see the pages' sections).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tether.config import load_config
from tether.errors import TetherError
from tether.shell.sandbox import SandboxSettings
from tether.shells.guard import parse_section
from tether.store.vault import vault_settings
from tether.tools.shells.args import TOOLS, parse_call, parse_state

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_REPO_PATH = re.compile(r"`((?:src|tests|bench|build_support|docs)/[^`\s]*)`")
# Made by `make panel-assets` / a build, never committed: cited, but not in a clean clone.
_GENERATED = ("src/tether/panel/static/vendor",)


def _prose(text: str) -> str:
    return _FENCE.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", _prose(page.read_text()), re.MULTILINE)}


def _blocks(lang: str) -> list[tuple[Path, str]]:
    return [
        (page, body)
        for page in PAGES
        for found_lang, body in _FENCE.findall(page.read_text(encoding="utf-8"))
        if found_lang == lang
    ]


def test_the_reference_pages_exist_and_the_readme_links_each() -> None:
    names = {"tools", "mcp", "oneshot", "shells", "hosts", "safety", "sandbox", "vault", "audit"}
    names |= {"panel", "configuration", "development", "library"}
    readme = (REPO / "README.md").read_text()
    for name in sorted(names):
        assert (REPO / "docs" / f"{name}.md").is_file(), name
        assert f"(docs/{name}.md)" in readme, f"README does not link docs/{name}.md"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_and_anchors_resolve(page: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not ours to check offline
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, f"{page.name}:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_cited_repository_files_exist(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    missing = [
        cited
        for cited in _REPO_PATH.findall(text)
        if not cited.startswith(_GENERATED) and not (REPO / cited.rstrip("/")).exists()
    ]
    assert not missing, f"{page.name} cites files that do not exist: {missing}"
    # The design document lives outside this repository: a page must not send readers to it.
    assert "DESIGN.md" not in text


def test_the_link_checker_catches_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n[a](missing.md) [b](#nowhere) [c](#title)\n")
    found = [t for t in _LINK.findall(page.read_text()) if t != "#title"]
    assert (
        found == ["missing.md", "#nowhere"] and "nowhere" not in _anchors(page) and "title" in _anchors(page)
    )


def _config_examples() -> list[tuple[Path, str]]:
    # Client files (Codex's config.toml) are checked in tests/mcp/test_client_configs.py.
    return [(page, body) for page, body in _blocks("toml") if "mcp_servers" not in body]


def test_every_config_example_loads_and_validates(tmp_path: Path) -> None:
    examples = _config_examples()
    assert len(examples) >= 4  # [server]/[tools]/[jobs]/[shell], [shell], [guard], [sandbox], …
    for n, (page, body) in enumerate(examples):
        home = tmp_path / f"home{n}"
        home.mkdir()
        (home / "config.toml").write_text(body)
        try:
            config = load_config(home)
            parse_section(config.section("guard"))
            vault_settings(config)
            SandboxSettings.from_config(config)
        except TetherError as exc:
            pytest.fail(f"{page.name}: config example does not load: {exc.message}\n{body}")


def _tool_calls() -> list[tuple[Path, dict[str, Any]]]:
    calls = []
    decoder = json.JSONDecoder()
    for page, body in _blocks("json"):
        if '{"name": "' not in body:
            continue  # a schematic ({...} placeholders) or a client file, not a tool call
        text = body.strip()
        while text:
            value, end = decoder.raw_decode(text)
            if isinstance(value, dict) and set(value) == {"name", "arguments"}:
                calls.append((page, value))
            text = text[end:].strip()
    return calls


def test_every_tool_call_example_passes_the_tools_validation() -> None:
    calls = _tool_calls()
    assert {call["name"] for _, call in calls} >= {
        "bash",
        "shell_open",
        "shell_run",
        "shell_read",
        "shell_state",
    }
    for page, call in calls:
        name, arguments = call["name"], call["arguments"]
        try:
            if name == "shell_state":
                parse_state(arguments)
            elif name in TOOLS:
                parse_call(name, arguments)
            else:
                assert name == "bash", f"{page.name}: no validator here for {name}"
                assert set(arguments) <= {"command", "description", "timeoutMs", "workdir"}
                assert arguments["command"] and arguments["description"]
        except TetherError as exc:
            pytest.fail(f"{page.name}: example call of {name} is refused: {exc.message}\n{arguments}")
