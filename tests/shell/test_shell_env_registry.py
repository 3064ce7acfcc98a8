"""Shell-env registry: built-ins, contributor rules, merge order, explicit env wins."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hang import HANG_S
from tether.shell import (
    LocalBashExecutor,
    ProfileContext,
    ShellEnvContext,
    ShellEnvContributor,
    ShellEnvError,
    ShellEnvRegistry,
    ShellExecRequest,
)

CTX = ShellEnvContext(command="true", cwd="/")


def _contrib(
    name: str, variables: dict[str, str], values: dict[str, str] | None = None
) -> ShellEnvContributor:
    return ShellEnvContributor(name=name, variables=variables, resolve=lambda _ctx: values or {})


def test_builtins_follow_the_home_rule_and_publish_only_what_exists(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = ShellEnvRegistry()
    assert registry.collect(CTX) == {"TETHER_HOME": str(tether_home), "TETHER_SHELL": "1"}
    monkeypatch.delenv("TETHER_HOME")
    assert registry.collect(CTX)["TETHER_HOME"] == str(Path.home() / ".tether")
    with_session = registry.collect(ShellEnvContext(command="x", cwd="/", session_id="s-1"))
    assert with_session["TETHER_SESSION_ID"] == "s-1"
    registry.publish_profile(ProfileContext(name="dev", directory="/p/dev"))
    values = registry.collect(CTX)
    assert (values["TETHER_PROFILE"], values["TETHER_PROFILE_DIR"]) == ("dev", "/p/dev")
    registry.publish_profile(None)
    assert "TETHER_PROFILE" not in registry.collect(CTX)


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"TETHER_HOME": "mine"}, "reserved"),
        ({"TETHER_SESSION_ID": "mine"}, "reserved"),
        ({"MY_VAR": "d"}, "must start with TETHER_"),
        ({"TETHER_lower": "d"}, "must start with TETHER_"),
        ({"TETHER_X-Y": "d"}, "must start with TETHER_"),
        ({"TETHER_OK": "  "}, "non-empty description"),
        ({}, "declares no variables"),
    ],
)
def test_contributor_rules_are_enforced(variables: dict[str, str], message: str) -> None:
    with pytest.raises(ShellEnvError, match=message):
        ShellEnvRegistry().register(_contrib("c", variables))


def test_names_and_keys_are_globally_unique() -> None:
    registry = ShellEnvRegistry()
    registry.register(_contrib("a", {"TETHER_A": "first"}))
    with pytest.raises(ShellEnvError, match="already registered"):
        registry.register(_contrib("a", {"TETHER_B": "other"}))
    with pytest.raises(ShellEnvError, match="already declared by 'a'"):
        registry.register(_contrib("b", {"TETHER_A": "again"}))


def test_collect_merges_in_name_order_and_rejects_undeclared_keys() -> None:
    registry = ShellEnvRegistry(home=Path("/h"))
    registry.register(_contrib("zeta", {"TETHER_Z": "z"}, {"TETHER_Z": "from-zeta"}))
    registry.register(_contrib("alpha", {"TETHER_A": "a"}, {"TETHER_A": "from-alpha"}))
    assert list(registry.collect(CTX)) == ["TETHER_HOME", "TETHER_SHELL", "TETHER_A", "TETHER_Z"]
    bad = _contrib("bad", {"TETHER_BAD": "b"}, {"TETHER_OTHER": "x"})
    remove = registry.register(bad)
    with pytest.raises(ShellEnvError, match="undeclared keys TETHER_OTHER"):
        registry.collect(CTX)
    remove()
    assert "TETHER_BAD" not in [row.key for row in registry.list()]


def test_list_enumerates_declarations_in_key_order() -> None:
    registry = ShellEnvRegistry()
    registry.register(_contrib("c", {"TETHER_ZED": "z", "TETHER_ALPHA": "a"}))
    keys = [row.key for row in registry.list()]
    assert keys == sorted(keys)
    assert {"TETHER_HOME", "TETHER_SHELL", "TETHER_ZED", "TETHER_ALPHA"} <= set(keys)
    assert next(r for r in registry.list() if r.key == "TETHER_ZED").source == "c"


async def test_the_child_sees_registry_values_and_explicit_env_overrides_them(tether_home: Path) -> None:
    registry = ShellEnvRegistry()
    registry.register(
        _contrib("proj", {"TETHER_PROJECT": "project name"}, {"TETHER_PROJECT": "from-registry"})
    )
    executor = LocalBashExecutor(env_registry=registry)
    command = 'echo "$TETHER_SHELL $TETHER_HOME $TETHER_PROJECT $TETHER_SESSION_ID"'
    execution = await executor.execute(
        executor.resolve(ShellExecRequest(command, session_id="sess-9", env={"TETHER_PROJECT": "explicit"}))
    )
    result = await asyncio.wait_for(execution.result(), HANG_S)
    assert result.stdout.text == f"1 {tether_home} explicit sess-9\n"
