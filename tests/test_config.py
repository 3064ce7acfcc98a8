"""``config.toml`` as every door reads it: a file it cannot take, and an executor it does not know,
are one clear error before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hang import HANG_S
from tether.config import PROVIDERS, load_config
from tether.errors import UsageError
from tether.shell import providers

TETHER = str(Path(sys.executable).parent / "tether")


def _door(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``tether ARGV`` on ``home``, with nothing on stdin (``tether mcp`` ends at once then)."""
    return subprocess.run(
        [TETHER, *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, "TETHER_HOME": str(home)},
        timeout=HANG_S,
    )


def test_a_file_that_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_bytes(b'\xff\xfe[shell]\nprovider = "bash"\n')  # UTF-16's mark
    with pytest.raises(UsageError) as info:
        load_config(tmp_path)
    assert "cannot be read" in info.value.message and "TOML is UTF-8 text" in info.value.message


def test_every_provider_the_configuration_allows_has_an_executor() -> None:
    assert sorted(PROVIDERS) == sorted(providers._PROVIDERS)


@pytest.mark.parametrize("door", [["mcp"], ["exec", "--", "echo", "ran"], ["shell", "list"]])
def test_an_unknown_provider_stops_every_door_before_it_runs(tmp_path: Path, door: list[str]) -> None:
    # A mistyped "sandbox": the MCP server ran its bash tool unconfined on it.
    (tmp_path / "config.toml").write_text('[shell]\nprovider = "sandbx"\n', encoding="utf-8")
    done = _door(tmp_path, *door)
    assert done.returncode == 2 and "ran" not in done.stdout, done
    assert (
        "[shell].provider = 'sandbx' is not available; choose one of: bash, pwsh, sandbox" in done.stderr
    ), done.stderr
    assert "Traceback" not in done.stderr


def test_a_relative_home_is_made_absolute_once_and_pinned_for_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.home import home_text, resolve_home

    monkeypatch.chdir(tmp_path)
    assert home_text({"TETHER_HOME": "~/x"}) == os.path.expanduser("~/x")
    assert home_text({"TETHER_HOME": "rel"}) == str(tmp_path / "rel")  # a mapping given: left alone
    monkeypatch.setenv("TETHER_HOME", " rel ")
    assert resolve_home() == tmp_path / "rel"
    assert os.environ["TETHER_HOME"] == str(tmp_path / "rel")  # what children and later reads see
    monkeypatch.chdir("/")
    assert resolve_home() == tmp_path / "rel"
    monkeypatch.setenv("TETHER_HOME", f"{tmp_path}/x/../rel/")  # one spelling, whatever was written
    assert resolve_home() == tmp_path / "rel" and os.environ["TETHER_HOME"] == str(tmp_path / "rel")


@pytest.mark.parametrize(
    "door", [["mcp"], ["exec", "--", "echo", "ran"], ["shell", "list"], ["serve", "--port", "0"]]
)
def test_a_home_that_cannot_be_a_directory_stops_every_door_with_one_clear_error(
    tmp_path: Path, door: list[str]
) -> None:
    (tmp_path / "file").write_text("not a directory\n", encoding="utf-8")
    for home, reason in ((tmp_path / "file", "File exists"), (tmp_path / "file" / "sub", "Not a directory")):
        done = _door(home, *door)
        assert done.returncode == 2 and "ran" not in done.stdout, done
        assert done.stderr == (
            f"tether: INVALID_ARGUMENT: TETHER_HOME {home} cannot hold tether's state ({reason}: {home}); "
            "set TETHER_HOME to a directory you can write (tether creates it if it is missing)\n"
        ), done.stderr


def test_a_read_only_home_is_one_clear_line_and_exec_still_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert _door(home, "exec", "--", "true").returncode == 0  # the home and its directories exist now
    subprocess.run(["mount", "--bind", str(home), str(home)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(home)], check=True)
        for door, written in (
            (["mcp"], "logs/mcp.log"),
            (["shell", "list"], "door"),
            (["serve", "--port", "0"], "logs/serve.log"),
        ):
            done = _door(home, *door)
            assert (done.returncode, done.stderr) == (
                2,
                f"tether: STORAGE_UNAVAILABLE: {home}/{written} could not be written (Read-only file "
                "system); free space there, or make it writable\n",
            ), door
        ran = _door(home, "exec", "--", "echo", "ran")
        assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran.stderr
    finally:
        subprocess.run(["umount", str(home)], check=False)


@pytest.mark.parametrize("door", [["mcp"], ["serve", "--port", "0"], ["shell", "list"]])
def test_a_job_table_with_no_room_stops_every_door_clearly(tmp_path: Path, door: list[str]) -> None:
    # [jobs] max_live = 0 passed the check for a non-negative integer, then the job table refused it
    # with a bare ValueError: a traceback on stderr and exit 1, and a stdio client saw only EOF.
    (tmp_path / "config.toml").write_text("[jobs]\nmax_live = 0\n", encoding="utf-8")
    done = _door(tmp_path, *door)
    assert done.returncode == 2, done
    assert "config.toml: [jobs].max_live = 0 is too small" in done.stderr and "at least 1" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("key", ["timeout_ms", "max_timeout_ms"])
def test_a_one_shot_deadline_of_zero_is_refused_not_a_timeout_of_every_command(
    tmp_path: Path, key: str
) -> None:
    # Spec 000: TimeoutMs is the default deadline, MaxTimeoutMs the cap of a call's own. 0 passed
    # the check for a non-negative integer, and then every command "timed out after 0ms" before
    # it started (`tether exec -- echo hi` exited 124 with nothing run).
    (tmp_path / "config.toml").write_text(f"[shell]\n{key} = 0\n", encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_config(tmp_path)
    assert info.value.message.startswith(f"config.toml: [shell].{key} = 0 is too small; ")
    assert "at least 1" in info.value.message
    done = _door(tmp_path, "exec", "--", "echo", "ran")
    assert done.returncode == 2 and "ran" not in done.stdout, done
    assert f"[shell].{key} = 0 is too small" in done.stderr and "Traceback" not in done.stderr
    (tmp_path / "config.toml").write_text(f"[shell]\n{key} = 1\n", encoding="utf-8")
    assert getattr(load_config(tmp_path).shell, key) == 1


_EVERY_DOOR = [["mcp"], ["serve", "--port", "0"], ["exec", "--", "echo", "ran"], ["shell", "list"]]


@pytest.mark.parametrize("door", _EVERY_DOOR)
def test_a_fifo_for_config_toml_is_refused_not_waited_on(tmp_path: Path, door: list[str]) -> None:
    # Reading it (and hashing it for the build key) waited for a writer for ever: every door hung.
    os.mkfifo(tmp_path / "config.toml", 0o600)
    done = _door(tmp_path, *door)
    assert done.returncode == 2 and "ran" not in done.stdout, done
    assert f"config.toml at {tmp_path / 'config.toml'} cannot be read" in done.stderr, done.stderr
    assert "not a regular file" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("door", "log"), [(["mcp"], "mcp"), (["serve", "--port", "0"], "serve"), (["shell", "list"], "door")]
)
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_log_file_that_is_no_file_is_refused_not_waited_on(
    tmp_path: Path, door: list[str], log: str, kind: str
) -> None:
    # Opening a FIFO to append waited for a reader for ever; a directory was a traceback.
    path = tmp_path / "logs" / f"{log}.log"
    path.parent.mkdir(mode=0o700)
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    else:
        path.mkdir()
    done = _door(tmp_path, *door)
    assert done.returncode == 2, done
    assert f"tether: INVALID_ARGUMENT: {path} is not a regular file" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
@pytest.mark.parametrize(
    ("section", "key"), [("sessions", "user_busy_seconds"), ("cli", "door_idle_seconds")]
)
def test_a_number_of_seconds_must_be_finite(tmp_path: Path, section: str, key: str, value: str) -> None:
    # TOML has nan and inf, and both passed "non-negative": user_busy_seconds = inf refused every
    # shell_run for good ("a person is typing … within the last inf s"), nan never saw a person
    # typing, and door_idle_seconds = inf kept the command line's tools process for ever.
    (tmp_path / "config.toml").write_text(f"[{section}]\n{key} = {value}\n", encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_config(tmp_path)
    assert info.value.message == (
        f"config.toml: [{section}].{key} must be a non-negative number (a finite one; nan and inf "
        f"are not allowed); got {value if value != '1e400' else 'inf'}"
    )
    done = _door(tmp_path, "mcp")
    assert done.returncode == 2 and info.value.message in done.stderr, done
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("door", _EVERY_DOOR)
def test_a_home_other_users_may_write_is_refused_by_every_door(tmp_path: Path, door: list[str]) -> None:
    # A home left 0777 (or 0775 in a shared group): another user put a token of their own in it,
    # private to them, and `tether serve` adopted it, so they knew the key to a shell running as
    # this user. Every door now refuses such a home, as ssh refuses such a ~/.ssh.
    home = tmp_path / "shared"
    home.mkdir(mode=0o700)
    home.chmod(0o777)
    planted = "planted-by-someone-else-" + "x" * 20
    (home / "token").write_text(planted + "\n", encoding="utf-8")
    (home / "token").chmod(0o600)
    if os.geteuid() == 0:
        os.chown(home / "token", 65534, 65534)  # nobody's, as the other user would leave it
    done = _door(home, *door)
    assert done.returncode == 2 and "ran" not in done.stdout, done
    assert planted not in done.stdout + done.stderr
    assert (
        f"TETHER_HOME {home} may be written by other users (mode 777, owner uid {os.geteuid()})"
        in done.stderr
    )
    assert f"chmod 700 {home}" in done.stderr and "Traceback" not in done.stderr
    home.chmod(0o700)
    ran = _door(home, "exec", "--", "echo", "ran")
    assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran.stderr


@pytest.mark.parametrize(
    ("key", "value", "bound", "said"),
    [
        ("log_max_bytes", 0, 1024 * 1024, "too small; "),
        ("result_max_bytes", 5, 1024, "too small; "),
        ("default_cols", 0, 20, "too small; "),
        ("default_rows", 2, 5, "too small; "),
        ("default_cols", 1001, 1000, "too large; it is at most 1000"),
        ("default_rows", 501, 500, "too large; it is at most 500"),
    ],
)
def test_a_persistent_shell_setting_outside_what_works_is_refused(
    tmp_path: Path, key: str, value: int, bound: int, said: str
) -> None:
    # Taken silently before: a log capped at 0 bytes was emptied as the shell printed (a wait saw
    # nothing), a result budget of 5 bytes was raised to 1024 without a word, a shell reopened
    # with 0 columns, and every shell opened without a size got a terminal no call could ask for
    # (shell_open's cols are 20-1000, rows 5-500).
    (tmp_path / "config.toml").write_text(f"[sessions]\n{key} = {value}\n", encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_config(tmp_path)
    assert info.value.message.startswith(f"config.toml: [sessions].{key} = {value} is {said}")
    assert said.startswith("too large") or f"at least {bound}" in info.value.message
    (tmp_path / "config.toml").write_text(f"[sessions]\n{key} = {bound}\n", encoding="utf-8")
    assert getattr(load_config(tmp_path).sessions, key) == bound


@pytest.mark.parametrize("shell", ["zsh", "/usr/bin/fish", "sh"])
def test_a_sessions_shell_that_is_not_bash_is_refused_at_start(tmp_path: Path, shell: str) -> None:
    # It was taken at start and refused at every shell_open instead: a server configured with zsh
    # served, and then could open no persistent shell at all.
    (tmp_path / "config.toml").write_text(f'[sessions]\nshell = "{shell}"\n', encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_config(tmp_path)
    assert info.value.message.startswith(
        f"config.toml: [sessions].shell = {shell!r}; persistent shells run bash"
    )
    done = _door(tmp_path, "mcp")
    assert done.returncode == 2 and info.value.message in done.stderr, done
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("shell", ["bash", "/bin/bash", "/opt/bash-5.2/bin/bash5"])
def test_a_sessions_shell_that_is_a_bash_is_taken(tmp_path: Path, shell: str) -> None:
    (tmp_path / "config.toml").write_text(f'[sessions]\nshell = "{shell}"\n', encoding="utf-8")
    assert load_config(tmp_path).sessions.shell == shell
