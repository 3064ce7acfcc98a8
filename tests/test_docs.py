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


# ---- what the code offers, each named in the docs (and the configuration table, each in the code) ----

_REFERENCE = [page for page in PAGES if page.name != "development.md"]  # a probe's notes are no reference


def _reference_text() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in _REFERENCE)


def _without_parentheses(text: str) -> str:
    while True:
        shorter = re.sub(r"\([^()]*\)", "", text)
        if shorter == text:
            return text
        text = shorter


def _configuration_table() -> dict[str, set[str]]:
    """``[section]`` -> the keys its row of docs/configuration.md names (values, in parentheses, left out)."""
    rows: dict[str, set[str]] = {}
    for line in (REPO / "docs" / "configuration.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| \[`\[([a-z.A-Z]+)\]`\]\([^)]*\) \| [^|]* \| (.*) \|$", line)
        if m is None:
            continue
        section, keys = m.group(1), _without_parentheses(m.group(2))
        names = set(re.findall(r"`([a-z_]+)`", keys))
        names |= {k.rpartition(".")[2] for k in re.findall(r"`\[\[([a-z_.]+)\]\]`", keys)}
        rows[section] = names
    return rows


def _configuration_schema() -> dict[str, set[str]]:
    import dataclasses

    from tether import config
    from tether.shells.guard import config as guard_config
    from tether.store.vault.rules import VaultSettings

    schema = {name: set(cls._fields) for name, cls in config._TYPED.items()}
    schema["hosts.NAME"] = set(config._HOST_KEYS)
    schema["guard"] = set(guard_config._SECTION_KEYS)
    schema["sandbox"] = {f.name for f in dataclasses.fields(SandboxSettings)}
    schema["vault"] = set(VaultSettings.__annotations__)
    known = {*config._TYPED, *config._OWNED_ELSEWHERE, "hosts"}
    assert {name.partition(".")[0] for name in schema} == known, "a section the test does not know"
    return schema


def test_the_configuration_table_names_every_section_and_key_and_no_other() -> None:
    table, schema = _configuration_table(), _configuration_schema()
    assert set(table) == set(schema), f"sections: documented {sorted(table)}, in the code {sorted(schema)}"
    wrong = {
        section: {
            "undocumented": sorted(schema[section] - keys),
            "no such key": sorted(keys - schema[section]),
        }
        for section, keys in table.items()
        if keys != schema[section]
    }
    assert not wrong, f"docs/configuration.md's table and the configuration schema differ: {wrong}"


def _commands() -> list[tuple[str, list[str]]]:
    """Every leaf command of ``tether`` (``"vault group create"``) with its long options."""
    import argparse

    from tether.cli import build_parser

    found: list[tuple[str, list[str]]] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
            found.append((path, [o for o in options if o != "--help"]))
        for sub in subs:
            for name, child in sub.choices.items():
                walk(child, f"{path} {name}".strip())

    walk(build_parser(), "")
    return found


def test_every_command_and_option_of_the_command_line_is_documented() -> None:
    pages = {page: page.read_text(encoding="utf-8") for page in _REFERENCE}
    missing = []
    commands = _commands()
    assert {path for path, _ in commands} >= {"exec", "mcp", "serve", "shell lock", "vault group create"}
    for path, options in commands:
        mentioning = [text for text in pages.values() if f"tether {path}" in text]
        if not mentioning:
            missing.append(f"tether {path}")
            continue
        missing += [f"tether {path} {o}" for o in options if not any(o in text for text in mentioning)]
    assert not missing, f"not in the README or docs/*.md (outside development.md): {missing}"


# Codes that never reach a caller: the base class's default (every raise names its code), and the
# spawn layer's, which each executor turns into SHELL_SPAWN before it leaves.
_INTERNAL_CODES = {"TETHER_ERROR", "SPAWN_FAILED"}
_CODE = re.compile(r"""\bcode(?:: str)? ?= ?"([A-Z][A-Z_]+)"|\bcode="([A-Z][A-Z_]+)\"""")


def test_every_error_code_is_documented() -> None:
    codes = set()
    for source in (REPO / "src" / "tether").rglob("*.py"):
        codes |= {a or b for a, b in _CODE.findall(source.read_text(encoding="utf-8"))}
    assert {"INVALID_ARGUMENT", "STORAGE_UNAVAILABLE", "SHELL_SPAWN", "HASH_MISMATCH"} <= codes
    text = _reference_text()
    missing = sorted(c for c in codes - _INTERNAL_CODES if not re.search(rf"\b{c}\b", text))
    assert not missing, f"error codes in the code that no page names: {missing}"


async def test_every_tool_and_parameter_is_documented(tmp_path: Path) -> None:
    from tether.tools.catalog import build_catalog
    from tether.tools.shells.args.actions import KINDS
    from tether.tools.shells.args.blocks import (
        _COMMON_WAIT_FIELDS,
        _KIND_FIELDS,
        OUTPUT_FIELDS,
        SAFETY_FIELDS,
    )

    tools_page = (REPO / "docs" / "tools.md").read_text(encoding="utf-8")
    panel_page = (REPO / "docs" / "panel.md").read_text(encoding="utf-8")
    catalog = build_catalog(load_config(tmp_path))
    try:
        model = {t.name: set(t.input_schema.get("properties", {})) for t in catalog.registry.list()}
        people = [t.name for t in catalog.registry.list(people=True)]
    finally:
        await catalog.aclose()
    missing = [f"tool {name}" for name in model if f"`{name}`" not in tools_page]
    missing += [f"{name}.{p}" for name, params in model.items() for p in params if f"`{p}`" not in tools_page]
    for tool, kinds in KINDS.items():
        for kind, (fields, _) in kinds.items():
            missing += [f"{tool} kind {kind}"] if f"`{kind}`" not in tools_page else []
            missing += [f"{tool} {kind}.{f}" for f in fields if f"`{f}`" not in tools_page]
    blocks = {**_COMMON_WAIT_FIELDS, **OUTPUT_FIELDS, **SAFETY_FIELDS}
    fields_of = [f for fields in blocks.values() for f in fields]
    fields_of += [f for kinds in _KIND_FIELDS.values() for fields in kinds.values() for f in fields]
    missing += [f"block field {f}" for f in fields_of if f"`{f}`" not in tools_page]
    missing += [
        f"people-only tool {name} (docs/panel.md)" for name in people if f"`{name}`" not in panel_page
    ]
    assert not missing, f"offered by the code, named nowhere in docs/tools.md: {missing}"


def test_every_guard_rule_and_rule_key_is_documented() -> None:
    from tether.shells.guard import config as guard_config
    from tether.shells.guard.rules import DEFAULT_RULES

    safety = (REPO / "docs" / "safety.md").read_text(encoding="utf-8")
    missing = [f"rule {r.id}" for r in DEFAULT_RULES if f"| `{r.id}` |" not in safety]
    missing += [f"rules.{k}" for k in guard_config._RULE_KEYS if f"`rules.{k}`" not in safety]
    assert not missing, f"docs/safety.md does not name: {missing}"


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int) and value >= 1024 * 1024 and value % (1024 * 1024) == 0:
        return f"{value // (1024 * 1024)} MiB"
    return str(value)


def test_the_configuration_tables_defaults_are_the_codes() -> None:
    from tether import config

    wrong = []
    for line in (REPO / "docs" / "configuration.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| \[`\[([a-z]+)\]`\]", line)
        if m is None or m.group(1) not in config._TYPED:
            continue
        defaults = config._TYPED[m.group(1)]._field_defaults
        for key, given in re.findall(r"`([a-z_]+)` \(([^;:)]+)", line):
            if (
                key in defaults
                and "`" not in given
                and not given.startswith("at least")
                and given.strip() != _shown(defaults[key])
            ):
                wrong.append(
                    f"[{m.group(1)}] {key}: documented {given.strip()!r}, default {_shown(defaults[key])!r}"
                )
    assert not wrong, wrong


def test_the_settings_tables_defaults_are_the_codes() -> None:
    """``| `key` | `default` | …`` rows of a page's settings table against the section's defaults."""
    import dataclasses

    from tether import config

    def toml(value: object) -> str:
        if isinstance(value, tuple):
            return json.dumps(list(value))
        return json.dumps(value) if isinstance(value, bool | str) else str(value)

    sandbox = {f.name: f.default for f in dataclasses.fields(SandboxSettings)}
    tables: dict[str, tuple[dict[str, Any], Any]] = {
        "oneshot.md": (config.ShellSection._field_defaults, str),
        "sandbox.md": (sandbox, toml),
        "hosts.md": (config.HostSection._field_defaults, lambda v: v if isinstance(v, str) else toml(v)),
    }
    wrong = []
    for page, (defaults, shown) in tables.items():
        text = (REPO / "docs" / page).read_text(encoding="utf-8")
        for key, given in re.findall(r"^\| `([a-z_]+)` \| `([^`]+)` \|", text, re.M):
            if key in defaults and given != shown(defaults[key]):
                wrong.append(f"{page} {key}: documented {given!r}, default {shown(defaults[key])!r}")
    assert not wrong, wrong


def test_the_actions_table_is_the_validators_kinds_and_fields() -> None:
    """docs/tools.md's Actions table: each tool's kinds, and each kind's fields, exactly."""
    from tether.tools.shells.args.actions import KINDS

    text = (REPO / "docs" / "tools.md").read_text(encoding="utf-8")
    table = text[text.index("### Actions") : text.index("tmux types a key name")]
    documented: dict[str, dict[str, set[str]]] = {}
    tool = ""
    for line in table.splitlines():
        m = re.match(r"^\| (`[a-z_]+`)? ?\| (.+?) \| (.*) \|$", line)
        if m is None or m.group(2) == "kind":
            continue
        tool = m.group(1).strip("`") if m.group(1) else tool
        described = _without_parentheses(m.group(3)).split(". ")[0]
        fields = set(re.findall(r"(?<!: )(?<!\\\| )`([A-Za-z_]+)`", described))
        for kind in re.findall(r"`([a-z-]+)`", m.group(2)):
            documented.setdefault(tool, {})[kind] = fields
    code = {t: {k: set(fields) for k, (fields, _) in kinds.items()} for t, kinds in KINDS.items()}
    assert documented == code


def _table_fields(heading: str) -> set[str]:
    """The first column's names of the first table under ``heading`` in docs/tools.md."""
    text = (REPO / "docs" / "tools.md").read_text(encoding="utf-8")
    section = text[text.index(heading) + len(heading) :]
    section = section[: section.index("\n### ")]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([A-Za-z_]+)`", line.split(" | ")[0]))
    return names


def test_the_output_safety_and_shell_state_tables_are_the_validators_fields() -> None:
    from tether.tools.shells.args.blocks import OUTPUT_FIELDS, SAFETY_FIELDS
    from tether.tools.shells.args.parse import STATE_FIELDS

    assert _table_fields("### `output`") == {f for fields in OUTPUT_FIELDS.values() for f in fields}
    assert _table_fields("### `safety`") == {f for fields in SAFETY_FIELDS.values() for f in fields}
    assert _table_fields("### `shell_state`") == set(STATE_FIELDS)


async def test_every_section_of_the_servers_instructions_is_named(tmp_path: Path) -> None:
    from tether.tools.catalog import build_catalog

    catalog = build_catalog(load_config(tmp_path))
    try:
        sections = set(catalog.hints)
    finally:
        await catalog.aclose()
    assert {"tool:bash", "tool:shell"} <= sections
    tools_page = (REPO / "docs" / "tools.md").read_text(encoding="utf-8")
    missing = sorted(s for s in sections | {"tool:pwsh"} if f"`{s}`" not in tools_page)
    assert not missing, f"MCP instructions sections docs/tools.md does not name: {missing}"


def test_the_non_interactive_defaults_table_is_the_codes() -> None:
    from tether.process.env import NONINTERACTIVE_DEFAULTS

    text = (REPO / "docs" / "oneshot.md").read_text(encoding="utf-8")
    text = text[text.index("| variable | value | why |") :].split("\n\n")[0]
    documented = {}
    for names, value in re.findall(r"^\| ((?:`\w+`(?:, )?)+) \| `([^`]*)` \|", text, re.M):
        documented |= dict.fromkeys(re.findall(r"`(\w+)`", names), value)
    assert documented == dict(NONINTERACTIVE_DEFAULTS)


def test_the_scrubbed_names_are_the_codes() -> None:
    from tether.config import DEFAULT_SCRUB_PATTERNS

    text = (REPO / "docs" / "oneshot.md").read_text(encoding="utf-8")
    paragraph = text[text.index("**Scrubbed**") : text.index("plus any variable, whatever its name")]
    paragraph = _without_parentheses(paragraph)
    assert re.findall(r"`([A-Z_*]+)`", paragraph) == list(DEFAULT_SCRUB_PATTERNS)


def test_the_audit_verify_outputs_shown_have_the_codes_shape() -> None:
    """What ``VerifyReport.summary`` prints: ``BROKEN at FILE line N[ (record seq N)] [CODE]: …``."""
    from tether.audit import BREAK_CODES

    text = (REPO / "docs" / "audit.md").read_text(encoding="utf-8")
    shown = re.findall(r"^audit log (?:BROKEN|intact).*$", text, re.M)
    assert len(shown) >= 4
    broken = re.compile(r"audit log BROKEN at \S+\.jsonl line \d+(?: \(record seq \d+\))? \[([A-Z_]+)\]: \S")
    intact = re.compile(r"audit log intact: \d+ records in \d+ day files; head [0-9a-f]{16}…$")
    wrong = [
        line
        for line in shown
        if not (intact.match(line) or ((m := broken.match(line)) and m[1] in BREAK_CODES))
    ]
    assert not wrong, wrong


def test_the_cancel_causes_table_is_the_codes() -> None:
    # docs/audit.md's table of `extra.cause`: every cause of tether.tools.ending and its words.
    from tether.tools.ending import END_CAUSES

    text = (REPO / "docs" / "audit.md").read_text()
    section = text.split("### Why a call was cancelled", 1)[1].split("\n#", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| `")][1:]  # no header
    documented = {row[0].strip("| `"): row[2].strip(" |`") for row in rows}
    assert set(documented) == set(END_CAUSES)
    for cause, words in END_CAUSES.items():
        assert documented[cause].startswith(words), (cause, documented[cause])
