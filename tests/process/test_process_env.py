"""Child environment: credential scrubbing, non-interactive defaults, explicit entries last."""

from __future__ import annotations

import pytest

from env_canaries import BENIGN, CANARIES
from tether.config import EnvSection
from tether.process.env import NONINTERACTIVE_DEFAULTS, build_child_env, is_scrubbed, scrub_environment


def _text(env: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in env.items()}


def test_default_patterns_drop_credentials_case_insensitively() -> None:
    env = {
        "OPENAI_API_KEY": "x",
        "github_token": "x",
        "My_Secret_Thing": "x",
        "DB_PASSWORD": "x",
        "AWS_REGION": "x",
        "GH_PAT": "x",
        "BASH_ENV": "/tmp/evil",
        "ENV": "/tmp/evil",
        "BASH_FUNC_foo%%": "() { :; }",
        "LD_PRELOAD": "/tmp/x.so",
        "PROMPT_COMMAND": "x",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "GOOGLE_APPLICATION_CREDENTIALS": "/k.json",
        "DATABASE_URL": "postgres://user:hunter2@db/x",
        "REDIS": "redis://:pw@host:6379",
        "HOME": "/root",
        "PATH": "/usr/bin",
        "HOMEPAGE_URL": "https://example.com/x",
        "KEYBOARD": "us",  # contains KEY: scrubbed too (the pattern is deliberately broad)
    }
    kept = scrub_environment(env, EnvSection())
    assert kept == {"HOME": "/root", "PATH": "/usr/bin", "HOMEPAGE_URL": "https://example.com/x"}


def test_keep_and_extra_patterns_are_configurable() -> None:
    section = EnvSection(extra_scrub_patterns=("corp_*",), keep=("ssh_auth_sock",))
    kept = scrub_environment({"CORP_THING": "1", "SSH_AUTH_SOCK": "/s", "X": "1"}, section)
    assert kept == {"SSH_AUTH_SOCK": "/s", "X": "1"}
    assert is_scrubbed("aws_profile", "dev", ("AWS_*",))
    assert not is_scrubbed("LANG", "C", ("AWS_*",))


def test_noninteractive_defaults_then_explicit_entries_win() -> None:
    env = _text(
        build_child_env(
            {"PAGER": "less", "API_TOKEN": "t"}, EnvSection(), {"API_TOKEN": "given", "LANG": "C"}
        )
    )
    assert env["PAGER"] == "cat"  # the default beats an inherited pager
    assert env["API_TOKEN"] == "given"  # explicit entries are merged after scrubbing
    assert env["LANG"] == "C"
    for key, value in NONINTERACTIVE_DEFAULTS.items():
        assert env[key] == value
    assert _text(build_child_env({}, EnvSection(), {"PAGER": "more"}))["PAGER"] == "more"


def test_this_process_environment_is_scrubbed_and_changes_are_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_TEST_SECRET_X", "s")
    assert "TETHER_TEST_SECRET_X" not in _text(build_child_env(None, EnvSection()))
    monkeypatch.setenv("TETHER_TEST_VISIBLE_X", "v")  # the cached scrub notices the change
    assert _text(build_child_env(None, EnvSection()))["TETHER_TEST_VISIBLE_X"] == "v"


def test_planted_credentials_are_scrubbed_and_ordinary_variables_are_kept() -> None:
    kept = scrub_environment({**CANARIES, **BENIGN}, EnvSection())
    caught = [name for name in CANARIES if name not in kept]
    assert caught == list(CANARIES), f"passed the scrub: {sorted(set(CANARIES) - set(caught))}"
    assert kept == BENIGN, f"benign variables scrubbed: {sorted(set(BENIGN) - set(kept))}"
    print(f"scrub: {len(caught)} / {len(CANARIES)} canaries caught, 0 / {len(BENIGN)} benign scrubbed")
