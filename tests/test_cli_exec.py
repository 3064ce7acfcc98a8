"""``tether exec`` as a user runs it: a real ``python -m tether`` process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hang import HANG_S
from proc_probe import alive_with, kill_all, unique_sleep_arg, wait_until
from tether.process.container import container


def tether(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        cwd=cwd,
        check=False,
    )


def test_streams_output_and_exits_with_the_command_status(tether_home: Path) -> None:
    done = tether("exec", "--", "echo out; echo err >&2; exit 3")
    assert done.returncode == 3
    assert done.stdout == "out\n"
    assert done.stderr == "err\n[exit code: 3]\n"


def test_words_after_double_dash_are_joined(tether_home: Path) -> None:
    done = tether("exec", "--", "printf", "%s-%s", "a", "b")
    assert (done.returncode, done.stdout, done.stderr) == (0, "a-b", "")


def test_timeout_exits_124_with_the_footer(tether_home: Path) -> None:
    token = unique_sleep_arg()
    done = tether("exec", "--timeout-ms", "300", "--", f"sleep {token} & wait")
    assert done.returncode == 124
    assert "[timed out after 300ms]" in done.stderr
    assert alive_with(token) == []


def test_cwd_and_bad_cwd(tether_home: Path, tmp_path: Path) -> None:
    done = tether("exec", "--cwd", str(tmp_path), "--", "pwd")
    assert done.stdout == f"{tmp_path}\n"
    bad = tether("exec", "--cwd", "/nonexistent/x", "--", "pwd")
    assert bad.returncode == 2
    assert "SHELL_BAD_CWD" in bad.stderr and "Traceback" not in bad.stderr


def test_missing_command_and_bad_timeout_are_clear_errors(tether_home: Path) -> None:
    for args in (("exec",), ("exec", "--"), ("exec", "--timeout-ms", "0", "--", "true")):
        done = tether(*args)
        assert done.returncode == 2
        assert done.stderr.startswith("tether: INVALID_ARGUMENT:") and "Traceback" not in done.stderr


def test_background_children_end_with_the_command_unless_background_ok(tether_home: Path) -> None:
    token = unique_sleep_arg()
    done = tether("exec", "--", f"sleep {token} > /dev/null 2>&1 &")
    assert done.returncode == 0 and alive_with(token) == []
    kept = unique_sleep_arg()
    done = tether("exec", "--background-ok", "--", f"sleep {kept} > /dev/null 2>&1 &")
    wait_until(lambda: len(alive_with(kept)) == 1)  # the child may not have exec'd sleep yet
    survivors = alive_with(kept)
    try:
        assert done.returncode == 0
        assert "[background processes left running]" in done.stderr
        assert len(survivors) == 1
    finally:
        kill_all(survivors)
    assert wait_until(lambda: not alive_with(kept))


def test_help_is_clear(tether_home: Path) -> None:
    top = tether("--help")
    assert top.returncode == 0 and "exec" in top.stdout
    sub = tether("exec", "--help")
    assert sub.returncode == 0
    for text in ("--timeout-ms", "--cwd", "--background-ok", "124", "Exit status"):
        assert text in sub.stdout
    assert os.environ.get("TETHER_HOME") == str(tether_home)


def test_interrupt_ends_the_tree_and_exits_130(tether_home: Path) -> None:
    token = unique_sleep_arg()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "exec", "--", f"sleep {token} & wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until(lambda: len(alive_with(token)) == 1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert "[killed by signal: SIGTERM]" in err
    assert alive_with(token) == []


def test_large_output_streams_completely_and_a_closed_pipe_ends_the_command(tether_home: Path) -> None:
    big = subprocess.run(
        f"{sys.executable} -m tether exec -- 'head -c 50000000 /dev/zero' | wc -c",
        shell=True,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert big.stdout.strip() == "50000000"
    assert big.stderr == ""  # nothing dropped, nothing truncated to report
    # Shown live, so no copy is kept: it left a 50 MB spill file nothing names or reads.
    spill = tether_home / "spill"
    assert not spill.exists() or list(spill.iterdir()) == []
    token = unique_sleep_arg()
    piped = subprocess.run(
        f"{sys.executable} -m tether exec -- 'while true; do echo y; done & sleep {token}' | head -1; "
        "echo status=${PIPESTATUS[0]}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert piped.stdout == "y\nstatus=141\n"
    assert "Traceback" not in piped.stderr
    assert alive_with(token) == []


def test_output_is_passed_on_byte_for_byte(tether_home: Path, tmp_path: Path) -> None:
    # Every byte value, invalid UTF-8 included: `tether exec -- cat f > copy` must copy. The
    # output was decoded with replacement (a corrupt copy, longer than the file), and a read
    # ending inside a character made the pump spin without yielding, so the command never ended.
    original = tmp_path / "bytes.bin"
    original.write_bytes(bytes(range(256)) * 400 + b"\xe2\x82")
    done = subprocess.run(
        [sys.executable, "-m", "tether", "exec", "--", f"cat {original}; cat {original} >&2"],
        capture_output=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-300:]
    assert done.stdout == original.read_bytes()
    assert done.stderr == original.read_bytes()


def test_a_character_split_between_two_writes_does_not_stall_the_command(tether_home: Path) -> None:
    # The first write ends inside the euro sign; the rest comes later. tether exec then spun on the
    # held-back byte and never read the rest: the call hung (and ignored Ctrl-C) until killed.
    done = tether("exec", "--", "printf 'euro: \\xe2\\x82'; sleep 0.3; printf '\\xac\\n'")
    assert (done.returncode, done.stdout, done.stderr) == (0, "euro: \u20ac\n", "")


def test_the_command_runs_in_the_container_from_any_working_directory(tether_home: Path) -> None:
    # From `/`, the container's PID 1 once found Debian's standard library instead of its own
    # interpreter's, died before answering, and the command ran without its container.
    if container() is None:
        pytest.skip("this machine cannot create PID namespaces (the README states the limit)")
    for where in (Path("/"), tether_home):
        done = tether("exec", "--", "cat /proc/1/comm", cwd=where)
        assert (done.returncode, done.stdout, done.stderr) == (0, "tether-init\n", ""), where


def test_a_removed_working_directory_is_a_named_error_not_a_traceback(
    tether_home: Path, tmp_path: Path
) -> None:
    # A terminal left in a directory deleted since (a removed worktree or build directory): getcwd()
    # fails there, and `tether exec` ended in a FileNotFoundError traceback, as did any command
    # with a relative TETHER_HOME (it is taken from that directory).
    gone = tmp_path / "gone"

    def in_a_removed_directory(*args: str, home: str) -> subprocess.CompletedProcess[str]:
        gone.mkdir()
        script = 'cd "$0" && rmdir "$0" && exec "$@"'
        return subprocess.run(
            ["bash", "-c", script, str(gone), sys.executable, "-m", "tether", *args],
            capture_output=True,
            text=True,
            timeout=HANG_S,
            env={**os.environ, "TETHER_HOME": home},
        )

    done = in_a_removed_directory("exec", "--", "pwd", home=str(tether_home))
    assert (done.returncode, done.stdout) == (2, ""), done
    assert done.stderr.startswith("tether: SHELL_BAD_CWD: the current working directory no longer exists")
    assert "--cwd DIR" in done.stderr
    # An absolute --cwd needs no current directory.
    done = in_a_removed_directory("exec", "--cwd", "/", "--", "pwd", home=str(tether_home))
    assert (done.returncode, done.stdout, done.stderr) == (0, "/\n", ""), done
    for args in (["shell", "list"], ["exec", "--cwd", "/", "--", "true"]):
        done = in_a_removed_directory(*args, home="relative-home")
        assert done.returncode == 2 and "Traceback" not in done.stderr, done
        assert "TETHER_HOME='relative-home' is a relative path and the current directory" in done.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="running tether without CAP_SYS_ADMIN needs root and setpriv",
)
def test_a_tether_without_a_command_container_keeps_the_commands_stderr_its_own(tether_home: Path) -> None:
    """As every user but root: no namespaces, so no command container. Its warning printed itself
    into the command's stderr at every run (Python's last-resort handler); it goes to the log."""
    done = subprocess.run(
        [
            "setpriv",
            "--bounding-set=-sys_admin",
            sys.executable,
            "-m",
            "tether",
            "exec",
            "--",
            "echo out; echo err >&2",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "out\n", "err\n")
    assert "commands run without a container" in (tether_home / "logs" / "exec.log").read_text()


@pytest.mark.skipif(
    os.geteuid() != 0, reason="running tether as a user other than root in a user namespace needs root"
)
def test_without_a_container_or_cgroup_what_clears_its_environment_still_ends_with_the_command(
    tether_home: Path,
) -> None:
    """As a user other than root: no command container and no writable cgroup, so the marker
    variable was the only trace of an orphan, and `env -i x &` (or `env -i nohup x &`) outlived its
    command and tether. The root's process group and session still say whose it is."""
    plain, forked = unique_sleep_arg(), unique_sleep_arg()
    no_userns = str(Path(__file__).resolve().parent / "no_userns.py")
    command = f"env -i sleep {plain} & (env -i sleep {forked} &); echo done"
    try:
        done = subprocess.run(
            [sys.executable, no_userns, sys.executable, "-m", "tether", "exec", "--", command],
            capture_output=True,
            text=True,
            timeout=HANG_S,
            check=False,
        )
        assert (done.returncode, done.stdout) == (0, "done\n"), done
        assert "commands run without a container" in (tether_home / "logs" / "exec.log").read_text()
        assert alive_with(plain) == [] and alive_with(forked) == []
    finally:
        kill_all(alive_with(plain) + alive_with(forked))
