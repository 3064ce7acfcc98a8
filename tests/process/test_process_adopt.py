"""``adopting_command``: the program keeps what it orphans below it, and is otherwise the program
``exec`` would run (environment, signal dispositions); ``descendants`` spares tether's own."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from proc_probe import alive_with, kill_all, unique_sleep_arg, wait_until
from tether.process.adopt import OWN_PROCESS, adopting_command
from tether.process.tree import descendants


def _sh(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=60)


def _clean_env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], **extra}


def test_an_orphan_of_the_program_is_handed_to_it_not_to_pid_1() -> None:
    token = unique_sleep_arg()
    # The escapee clears its environment and leaves the session; its parent ends at once.
    # It is printed once it is the program's child (however long the machine takes to get there).
    script = f"(env -i /usr/bin/setsid /bin/sleep {token} > /dev/null 2>&1 &); "
    script += f"for i in $(seq 600); do pgrep -P $$ -f 'sleep {token}' && break; sleep 0.05; done"
    try:
        done = _sh(adopting_command(["bash", "-c", script]), _clean_env())
        assert done.returncode == 0, done.stderr
        [escapee] = alive_with(token)
        assert str(escapee) in done.stdout.split(), done.stdout  # the program's own child then
    finally:
        kill_all(alive_with(token))


def test_the_program_gets_the_panes_environment_and_default_signals() -> None:
    show = 'echo "ctype=${LC_CTYPE-unset} own=${TETHER_DAEMON-unset} other=${OTHER-unset}"; '
    show += "grep SigIgn /proc/$$/status"
    command = adopting_command(["bash", "-c", show], unset=(OWN_PROCESS,))
    # A C locale: Python's locale coercion sets LC_CTYPE in its own environment; bash must not get it.
    plain = _sh(command, _clean_env(LANG="C", **{OWN_PROCESS: "tmux"}, OTHER="x y"))
    assert plain.returncode == 0, plain.stderr
    assert "ctype=unset own=unset other=x y" in plain.stdout
    # A value the pane had is kept, whatever coercion did.
    kept = _sh(command, _clean_env(LC_CTYPE="C"))
    assert "ctype=C own=unset" in kept.stdout
    # Python ignores SIGPIPE and SIGXFSZ; an ignored signal would stay ignored for all bash runs.
    ignored = int(plain.stdout.split("SigIgn:")[1].split()[0], 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (sig - 1)), hex(ignored)
    # What a user sees: `yes` ends by SIGPIPE (141), not by a write error (1).
    yes = "yes | head -1 > /dev/null; echo ${PIPESTATUS[0]}"
    piped = _sh(adopting_command(["bash", "-c", yes]), _clean_env())
    assert piped.stdout.strip() == "141", piped


def test_a_program_that_cannot_be_run_says_so() -> None:
    done = _sh(adopting_command(["no-such-program-here", "x"]), _clean_env())
    assert done.returncode == 127
    assert done.stderr.strip() == "no-such-program-here: No such file or directory"
    assert "Traceback" not in done.stderr


def test_names_to_unset_must_be_names() -> None:
    with pytest.raises(ValueError):
        adopting_command(["bash"], unset=("A B",))
    with pytest.raises(ValueError):
        adopting_command([])


def test_descendants_spares_a_process_of_tethers_own_and_what_is_below_it() -> None:
    token = unique_sleep_arg()
    own_token = unique_sleep_arg()
    # root → sleep (found) ; root → sh carrying the mark → sleep (spared, with its parent).
    root = subprocess.Popen(
        [
            "/bin/sh",
            "-c",
            f"/bin/sleep {token} & env {OWN_PROCESS}=door /bin/sh -c '/bin/sleep {own_token}; :' & wait",
        ],
        env=_clean_env(),
    )
    try:
        assert wait_until(lambda: bool(alive_with(token)) and bool(alive_with(own_token)))
        [plain] = alive_with(token)
        [own_child] = alive_with(own_token)
        with open(f"/proc/{own_child}/stat") as stat:
            own_parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        everything = descendants({root.pid})
        assert {plain, own_parent, own_child} <= everything
        spared = descendants({root.pid}, spare=lambda pid: _marked(pid))
        assert plain in spared and own_parent not in spared and own_child not in spared
        # A seed is never spared, mark or not.
        assert own_parent in descendants({own_parent}, spare=lambda pid: True)
    finally:
        kill_all([*alive_with(token), *alive_with(own_token)])
        root.kill()
        root.wait()


def _marked(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return f"{OWN_PROCESS}=".encode() in handle.read()
    except OSError:
        return False


def test_without_a_named_interpreter_the_program_runs_unadopted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.executable", "")
    command = adopting_command(
        ["bash", "-c", 'echo "own=${TETHER_DAEMON-unset} $0"', "x y"], unset=(OWN_PROCESS,)
    )
    done = _sh(command, _clean_env(**{OWN_PROCESS: "tmux"}))
    assert done.returncode == 0 and done.stdout.strip() == "own=unset x y", done


def test_the_launcher_is_one_line_tmux_reads_as_it_is() -> None:
    command = adopting_command(["bash", "--rcfile", "/x/rc", "-i"], unset=(OWN_PROCESS,))
    assert not set(command) & {"\n", "\r", "#", "%"}, command
