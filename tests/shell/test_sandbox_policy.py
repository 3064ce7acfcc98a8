"""Unit tests of the sandbox's settings, escalation rules, denial parsing and hints (no processes)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tether.config import Config
from tether.errors import RefusedError, UsageError
from tether.shell.providers import executor_from_config
from tether.shell.sandbox import (
    SandboxBashExecutor,
    SandboxPwshExecutor,
    SandboxSettings,
    placeholders,
    sandbox_executor,
    with_sandbox,
)
from tether.shell.sandbox.bwrap import SandboxRun, sweep_stale_traces
from tether.shell.sandbox.denials import (
    denials_from_filter,
    denials_from_stderr,
    denials_from_trace,
    hint_for,
    needed_mode,
    sandbox_path,
)
from tether.shell.sandbox.policy import SandboxPolicy, build_policy, with_repositories
from tether.shell.sandbox.repos import RepositoryGuard
from tether.shell.sandbox.seccomp import build_filter
from tether.shell.sandbox.trace import MAX_LINES, TraceReader
from tether.shell.types import ShellSandboxDenial
from tether.tools.bash import make_executor


def _config(home: Path, table: dict[str, object]) -> Config:
    return Config(home=home, raw={"sandbox": table})


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"writable_root": ["/tmp"]}, "unknown key 'writable_root'"),
        ({"writable_roots": ["relative/dir"]}, "not an absolute path"),
        ({"writable_roots": ["/definitely/not/here"]}, "not an existing directory"),
        ({"writable_roots": "/tmp"}, "must be a list of non-empty strings"),
        ({"allow_escalations": ["allow_everything"]}, "allowed: allow_network, allow_host_write"),
        ({"allow_escalations": ["use_default"]}, "has 'use_default'"),
        ({"trace": "yes"}, "must be true or false"),
        ({"bwrap": ""}, "must be a non-empty string"),
        ({"tmpfs_size_mb": 0}, "tmpfs_size_mb must be a whole number of MiB, at least 1"),
        ({"tmpfs_size_mb": "1G"}, "(got '1G'; default 1024)"),
        ({"tmpfs_size_mb": True}, "tmpfs_size_mb must be a whole number"),
    ],
)
def test_a_bad_sandbox_table_is_refused_with_the_fix(table: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=r"config\.toml: \[sandbox\]") as caught:
        SandboxSettings.from_table(table)
    assert message in caught.value.message


def test_missing_bwrap_refuses_to_build_the_executor_and_the_flag(tether_home: Path) -> None:
    config = _config(tether_home, {"bwrap": "/nonexistent/bwrap"})
    with pytest.raises(UsageError, match="never falls back to running unconfined"):
        sandbox_executor(config)
    with pytest.raises(UsageError, match="apt-get install bubblewrap"):
        with_sandbox(config)


def test_an_absent_table_means_the_strict_defaults(tether_home: Path) -> None:
    executor = sandbox_executor(Config(home=tether_home))
    assert isinstance(executor, SandboxBashExecutor) and executor.confining
    assert executor.settings.allow_escalations == () and executor.settings.writable_roots == ()
    assert with_sandbox(Config(home=tether_home)).shell.provider == "sandbox"


def test_escalation_needs_a_justification_and_the_deployments_grant() -> None:
    settings = SandboxSettings(allow_escalations=("allow_network",))
    assert settings.check_escalation(None, None) == "use_default"
    assert settings.check_escalation("  ", None) == "use_default"
    for blank in (None, "", "   "):
        with pytest.raises(UsageError, match="needs a non-empty justification"):
            settings.check_escalation("allow_network", blank)
    assert settings.check_escalation("allow_network", "fetch the dependency index") == "allow_network"
    with pytest.raises(RefusedError, match="needs a person's approval") as refused:
        settings.check_escalation("require_escalated", "I want to")
    assert "granted without approval: allow_network" in refused.value.message
    with pytest.raises(UsageError, match="allowed: use_default, allow_network"):
        settings.check_escalation("root", "x")


def test_a_working_directory_inside_tether_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "th"
    (home / "inner").mkdir(parents=True)
    with pytest.raises(RefusedError, match="which the sandbox hides \\(TETHER_HOME\\)"):
        build_policy(SandboxSettings(), mode="use_default", cwd=str(home / "inner"), home=home)
    hidden = SandboxSettings(hidden_paths=(str(tmp_path),))
    with pytest.raises(RefusedError, match="hidden_paths"):
        build_policy(hidden, mode="use_default", cwd=str(tmp_path / "x"), home=home)
    wide = build_policy(SandboxSettings(), mode="allow_host_write", cwd="/", home=home)
    assert wide.host_write and wide.writable("/usr/x") and not wide.writable(str(home / "x"))


@pytest.mark.parametrize("cwd", ["/", "/proc", "/dev/shm"])
def test_system_directories_cannot_become_writable_roots(tmp_path: Path, cwd: str) -> None:
    with pytest.raises(RefusedError, match=r"cannot make .* writable"):
        build_policy(SandboxSettings(), mode="use_default", cwd=cwd, home=tmp_path / "th")


_SYSTEM = ("/etc", "/etc/cron.d", "/usr/local/lib", "/bin", "/lib", "/var", "/var/spool", "/run", "/opt")
_SYSTEM_CWDS = [d for d in (*_SYSTEM, "/srv", "/boot") if os.path.isdir(d)]


@pytest.mark.parametrize("cwd", _SYSTEM_CWDS)
def test_a_system_directory_is_never_a_writable_root(tmp_path: Path, cwd: str) -> None:
    # As root, a command in /etc/cron.d wrote a cron job that ran as root outside the sandbox.
    home = tmp_path / "th"
    with pytest.raises(RefusedError, match=r"cannot make .* writable") as caught:
        build_policy(SandboxSettings(), mode="use_default", cwd=cwd, home=home)
    message = caught.value.message
    assert "system directory" in message and "run as the user outside the sandbox" in message
    assert 'sandbox_permissions="allow_host_write", which a person approves' in message
    # The deployment's owner may grant one (a CI workspace under /var/lib, a project under /srv):
    # then it, and a working directory inside it, are writable roots.
    granted = build_policy(SandboxSettings(writable_roots=(cwd,)), mode="use_default", cwd=cwd, home=home)
    assert granted.writable_roots == (os.path.realpath(cwd),)
    # allow_host_write (a person's grant) makes the whole host writable anyway.
    assert build_policy(SandboxSettings(), mode="allow_host_write", cwd=cwd, home=home).host_write


def test_a_working_directory_inside_a_granted_system_root_is_writable(tmp_path: Path) -> None:
    """``writable_roots`` is the owner's decision: a directory under ``/var`` or ``/srv`` it names
    is writable, with every directory the model chooses inside it; its neighbours are not."""
    scratch = Path(tempfile.mkdtemp(prefix="sbx-", dir="/var/lib"))
    try:
        (scratch / "job").mkdir()
        settings = SandboxSettings.from_config(_config(tmp_path / "th", {"writable_roots": [str(scratch)]}))
        inside = build_policy(settings, mode="use_default", cwd=str(scratch / "job"), home=tmp_path / "th")
        assert inside.writable(str(scratch / "job" / "out")) and inside.writable(str(scratch / "x"))
        with pytest.raises(RefusedError, match="inside the system directory /var"):
            build_policy(settings, mode="use_default", cwd="/var/lib", home=tmp_path / "th")
    finally:
        (scratch / "job").rmdir()
        scratch.rmdir()


def test_a_merged_usr_link_is_judged_by_its_real_path(tmp_path: Path) -> None:
    link = tmp_path / "tools"
    link.symlink_to("/usr/local/lib")
    with pytest.raises(RefusedError, match="inside the system directory /usr"):
        build_policy(SandboxSettings(), mode="use_default", cwd=str(link), home=tmp_path / "th")


def test_var_tmp_and_project_directories_stay_writable_roots(tmp_path: Path) -> None:
    scratch = tempfile.mkdtemp(prefix="sbx-", dir="/var/tmp")
    try:
        policy = build_policy(SandboxSettings(), mode="use_default", cwd=scratch, home=tmp_path / "th")
        assert policy.writable_roots == (os.path.realpath(scratch),)
        assert build_policy(SandboxSettings(), mode="use_default", cwd="/var/tmp", home=tmp_path / "th")
    finally:
        os.rmdir(scratch)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("/", "the root directory"),
        ("/proc", "the system directory /proc"),
        ("/dev/shm", "inside the system directory /dev"),
        ("HOME/inner", "which the sandbox hides (TETHER_HOME)"),
        ("HIDDEN/inner", "which the sandbox hides ([sandbox].hidden_paths)"),
    ],
)
def test_a_writable_root_that_can_never_be_honoured_stops_the_configuration(
    tmp_path: Path, entry: str, why: str
) -> None:
    # Accepted until now, and then every single call was refused.
    home, hidden = tmp_path / "th", tmp_path / "secret"
    (home / "inner").mkdir(parents=True)
    (hidden / "inner").mkdir(parents=True)
    entry = entry.replace("HOME", str(home)).replace("HIDDEN", str(hidden))
    table = {"writable_roots": [entry], "hidden_paths": [str(hidden)]}
    with pytest.raises(UsageError, match=r"config\.toml: \[sandbox\]\.writable_roots entry") as caught:
        SandboxSettings.from_config(_config(home, table))
    assert repr(entry) in caught.value.message and why in caught.value.message
    assert "remove it" in caught.value.message
    # A project directory is accepted as before.
    (tmp_path / "project").mkdir()
    ok = {"writable_roots": [str(tmp_path / "project")], "hidden_paths": [str(hidden)]}
    assert SandboxSettings.from_config(_config(home, ok)).writable_roots == (str(tmp_path / "project"),)


def _policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, network: bool = False) -> SandboxPolicy:
    work = tmp_path / "work"
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / ".git" / "config").write_text("[core]\n")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    policy = build_policy(
        SandboxSettings(),
        mode="allow_network" if network else "use_default",
        cwd=str(work),
        home=tmp_path / "th",
    )
    # What the executor does before each command: the repositories' control files join the policy.
    return with_repositories(policy, RepositoryGuard().snapshot(policy))


def test_strace_lines_become_structured_denials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = _policy(tmp_path, monkeypatch)
    work = tmp_path / "work"
    dead = subprocess.Popen(["true"])
    dead.wait()
    trace = "\n".join(
        [
            '7 openat(AT_FDCWD</etc>, "x", O_WRONLY|O_CREAT|O_TRUNC, 0666) = -1 EROFS (x)',
            f'7 openat(AT_FDCWD<{work}>, ".git/hooks/pre-commit", O_WRONLY|O_CREAT, 0666) = -1 EROFS (x)',
            f'7 openat(AT_FDCWD<{work}>, "missing", O_RDONLY) = -1 ENOENT (No such file or directory)',
            f'7 openat(AT_FDCWD<{work}>, "mine", O_WRONLY|O_CREAT, 0666) = -1 EACCES (Permission denied)',
            f'8 renameat2(AT_FDCWD<{work}>, ".git", AT_FDCWD<{work}>, ".g", RENAME_NOREPLACE) = -1 EBUSY (x)',
            "9 connect(3<socket:[1]>, {sa_family=AF_INET, sin_port=htons(8080), "
            'sin_addr=inet_addr("127.0.0.1")}, 16) = -1 ECONNREFUSED (Connection refused)',
            "9 connect(3<socket:[2]>, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), "
            'inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, 28) = -1 ENETUNREACH (x)',
            '9 connect(3<socket:[3]>, {sa_family=AF_UNIX, sun_path="/run/x"}, 110) = -1 ENOENT (x)',
            f"10 kill({os.getpid()}, SIGTERM)               = -1 ESRCH (No such process)",
            f"10 kill({dead.pid}, SIGTERM)               = -1 ESRCH (No such process)",
            "10 kill(4243, 0)               = -1 ESRCH (No such process)",
            "11 unshare(CLONE_NEWNET)             = -1 EPERM (Operation not permitted)",
            "garbage line",
        ]
    )
    denials = denials_from_trace(trace, policy)
    assert [(d.kind, d.target) for d in denials] == [
        ("write", "/etc/x"),
        ("write", f"{work}/.git/hooks/pre-commit"),
        ("write", f"{work}/.git"),
        ("network", "127.0.0.1:8080"),
        ("network", "[::1]:443"),
        ("signal", f"pid {os.getpid()}"),  # a process outside; the dead one is not reported
        ("namespace", "CLONE_NEWNET"),
    ]
    assert denials[0].detail == "EROFS: outside the writable roots"
    assert denials[1].detail == "EROFS: protected path"
    # With the network allowed, a refused connect is the peer's answer, not a denial.
    open_policy = _policy(tmp_path / "b", monkeypatch, network=True)
    assert not [d for d in denials_from_trace(trace, open_policy) if d.kind == "network"]


def test_the_hint_names_the_narrowest_mode_and_whether_it_is_granted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = _policy(tmp_path, monkeypatch)
    net = (ShellSandboxDenial(kind="network", target="1.2.3.4:80"),)
    outside = (ShellSandboxDenial(kind="write", target="/etc/x", detail="EROFS: outside the writable roots"),)
    hooks = (ShellSandboxDenial(kind="write", target=str(tmp_path / "work/.git/hooks/x")),)
    assert needed_mode(net, policy) == "allow_network"
    assert needed_mode(outside, policy) == "allow_host_write"
    assert needed_mode(hooks, policy) == "require_escalated"
    assert needed_mode(net + outside, policy) == "require_escalated"
    granted = hint_for(net, policy, SandboxSettings(allow_escalations=("allow_network",)))
    assert granted is not None and 'sandbox_permissions="allow_network"' in granted
    assert "grants it without approval" in granted
    refused = hint_for(outside, policy, SandboxSettings())
    assert refused is not None and "refuses it without a person's approval" in refused
    assert hint_for((), policy, SandboxSettings()) is None


def test_without_strace_denials_come_from_the_errno_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = _policy(tmp_path, monkeypatch)
    stderr = (
        "bash: line 1: /etc/x: Read-only file system\n"
        "touch: cannot touch '/usr/y': Read-only file system\n"
        "OSError: [Errno 30] Read-only file system: '/opt/z'\n"
        "bash: /dev/tcp/127.0.0.1/9: Connection refused\n"
        "unshare: unshare failed: Operation not permitted\n"
    )
    denials = denials_from_stderr(stderr, policy, str(tmp_path / "work"))
    assert [(d.kind, d.target) for d in denials] == [
        ("write", "/etc/x"),
        ("write", "/usr/y"),
        ("write", "/opt/z"),
        ("network", "127.0.0.1:9"),
        ("namespace", "(unknown)"),
    ]


def test_mounts_narrow_in_order_and_placeholders_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / ".bashrc").write_text("original\n")
    monkeypatch.setenv("HOME", str(user))
    work = tmp_path / "work"
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / ".git" / "config").write_text("[core]\n")
    (work / "sub" / ".git").mkdir(parents=True)  # a nested repository, mid-creation
    settings = SandboxSettings(writable_roots=(str(tmp_path),))
    base = build_policy(settings, mode="use_default", cwd=str(work), home=tmp_path / "th")
    repos = RepositoryGuard().snapshot(base)
    assert set(repos.gitdirs) == {f"{work}/.git", f"{work}/sub/.git"}
    run = SandboxRun(with_repositories(base, repos), trace=False, repos=repos)
    args = list(run.argv("bwrap", None, ("true",)))
    joined = " ".join(args)

    def bind_fd(path: Path) -> str:
        index = args.index(str(path))
        assert args[index - 2] == "--bind-fd", f"{path} is not bound writable through a descriptor"
        assert os.readlink(f"/proc/self/fd/{args[index - 1]}") == str(path)
        return " ".join(args[index - 2 : index + 1])

    assert args[:4] == ["bwrap", "--ro-bind", "/", "/"]
    seccomp = args[args.index("--seccomp") + 1]
    assert seccomp in map(str, run.pass_fds) and os.read(int(seccomp), 4096) == build_filter()
    # /proc's kernel interfaces are read-only over the fresh /proc, before anything writable.
    root = bind_fd(tmp_path)
    assert joined.index("--proc /proc") < joined.index("--ro-bind /proc/sys /proc/sys") < joined.index(root)
    # Git directories and the directories between a root and a protected path are pinned.
    pins = [bind_fd(work / ".git"), bind_fd(user)]
    assert f"{work}/sub/.git {work}/sub/.git" not in joined  # nested: neutralised if replaced
    assert f"--ro-bind {user}/.bashrc {user}/.bashrc" in joined
    assert f"--ro-bind {work}/.git/hooks {work}/.git/hooks" in joined
    assert f"--ro-bind {work}/.git/config {work}/.git/config" in joined
    first_pin = min(joined.index(pin) for pin in pins)
    assert joined.index(root) < first_pin < joined.index(f"--ro-bind {user}/.bashrc")
    # Absent protected paths got placeholders so they cannot be created inside the sandbox:
    # files, directories, and the parents they need.
    assert (user / ".profile").is_file() and (user / ".ssh").is_dir()
    assert (user / ".config/systemd/user").is_dir()
    assert f"--ro-bind {user}/.profile {user}/.profile" in joined
    assert f"--ro-bind {user}/.config/git {user}/.config/git" in joined
    assert not (work / "sub/.git/hooks").exists()  # inside git directories: neutralised afterwards instead
    ledger = tmp_path / "th" / "sandbox" / f"placeholders.{os.getpid()}"
    assert f"{user}/.profile\n" in ledger.read_text()  # listed while in use, for the crash sweep
    fds = run.pass_fds
    run.cleanup()
    assert not ledger.exists()
    assert not any((user / name).exists() for name in (".profile", ".ssh", ".config"))
    assert (user / ".bashrc").read_text() == "original\n"
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_the_sweep_removes_what_a_dead_process_left_behind(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    empty, kept, hooks = tmp_path / ".bash_profile", tmp_path / ".zshrc", tmp_path / "repo/.git/hooks"
    empty.touch()
    kept.write_text("someone wrote this\n")
    hooks.mkdir(parents=True)
    state = tmp_path / "th" / "sandbox"
    state.mkdir(parents=True)
    (state / f"placeholders.{dead.pid}").write_text(f"{empty}\n{kept}\n{hooks}\n")
    (state / f"placeholders.{os.getpid()}").write_text(f"{empty}\n")  # a live holder: untouched
    assert placeholders.sweep_stale(str(tmp_path / "th")) == 1
    assert not empty.exists() and not hooks.exists() and kept.read_text() == "someone wrote this\n"
    assert sorted(p.name for p in state.iterdir()) == [f"placeholders.{os.getpid()}", "placeholders.lock"]
    (state / f"run-{dead.pid}-abc").mkdir()
    (state / f"run-{dead.pid}-abc" / "trace").write_text("7 kill(1, SIGTERM) = -1 EPERM (x)\n")
    (state / f"run-{os.getpid()}-def").mkdir()
    assert sweep_stale_traces(str(tmp_path / "th")) == 1
    assert sorted(p.name for p in state.iterdir()) == [
        f"placeholders.{os.getpid()}",
        "placeholders.lock",
        f"run-{os.getpid()}-def",
    ]


async def test_the_trace_reader_keeps_relevant_lines_and_a_bounded_number(tmp_path: Path) -> None:
    fifo = str(tmp_path / "trace")
    reader = TraceReader(fifo)
    noise = b'5 openat(AT_FDCWD</>, "x", O_RDONLY) = -1 ENOENT (No such file or directory)\n' * 5000
    denial = b'5 openat(AT_FDCWD</>, "/etc/y", O_WRONLY) = -1 EROFS (Read-only file system)\n'

    def write() -> None:
        with open(fifo, "wb") as handle:  # blocking: the event loop drains it meanwhile
            handle.write(noise + denial * (MAX_LINES + 10) + denial.rstrip(b"\n"))

    await asyncio.to_thread(write)
    text = reader.finish()
    lines = text.splitlines()
    assert len(lines) == MAX_LINES and all("EROFS" in line for line in lines)
    assert reader.finish() == text  # memoized


def test_both_shell_tools_are_confined_when_the_sandbox_is_configured(tether_home: Path) -> None:
    config = with_sandbox(Config(home=tether_home))
    for shell, cls in (("bash", SandboxBashExecutor), ("pwsh", SandboxPwshExecutor)):
        executor = make_executor(config, shell)  # type: ignore[arg-type]
        assert isinstance(executor, cls) and executor.confining
        assert executor.permission_modes == (
            "use_default",
            "allow_network",
            "allow_host_write",
            "require_escalated",
        )
    assert isinstance(executor_from_config(config), SandboxBashExecutor)


def test_paths_the_command_chose_never_make_the_reporter_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = _policy(tmp_path, monkeypatch)
    assert sandbox_path("/proc/1/root/etc/x", policy) == ("/etc/x", "through /proc/1/root/etc/x")
    assert sandbox_path("/proc/self/root", policy) == ("/", "through /proc/self/root")
    assert sandbox_path("/tmp/private/file", policy) == ("/tmp/private/file", "")  # the sandbox's own /tmp
    trace = "\n".join(
        [
            '7 openat(AT_FDCWD, "/proc/1/root/etc/x", O_WRONLY|O_CREAT|O_NOCTTY, 0666) = -1 EROFS (x)',
            '7 openat(AT_FDCWD, "/proc/1/cwd/y", O_WRONLY|O_CREAT, 0666) = -1 EROFS (x)',
            r'7 openat(AT_FDCWD, "/usr/cut\x", O_WRONLY|O_CREAT, 0666) = -1 EROFS (x)',  # a broken escape
            r'7 mkdir("/usr/a\\", 0777) = -1 EROFS (x)',
        ]
    )

    def refuse(path: str, *args: object, **kwargs: object) -> str:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os.path, "realpath", refuse)  # what readlink('/proc/1/root') does on the host
    found = denials_from_trace(trace, policy)
    assert ("write", "/etc/x") in [(d.kind, d.target) for d in found]
    assert ("write", "/usr/a\\") in [(d.kind, d.target) for d in found]
    assert sandbox_path("/usr/x", policy) == ("/usr/x", "")


def test_filter_refusals_are_recognised_from_what_programs_print() -> None:
    stderr = (
        "error connecting to /var/tmp/other/s (Operation not permitted)\n"
        "Error connecting to agent: Operation not permitted\n"
        '  File "/usr/lib/python3.11/socket.py", line 232, in __init__\n'
        "    _socket.socket.__init__(self, family, type, proto, fileno)\n"
        "PermissionError: [Errno 1] Operation not permitted\n"
        "2026/01/01 E socket(1, 1, 0): Operation not permitted\n"
        "chmod: changing permissions of 'x': Operation not permitted\n"  # not a filter refusal
    )
    assert [(d.kind, d.target) for d in denials_from_filter(stderr)] == [
        ("socket", "/var/tmp/other/s"),
        ("socket", "AF_UNIX"),
    ]


def test_a_relative_path_without_a_directory_stays_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = _policy(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)  # the server's own directory must never be used
    trace = "\n".join(
        [
            '7 mkdir("q", 0777) = -1 EROFS (Read-only file system)',
            '7 mkdir("mine", 0777) = -1 EACCES (Permission denied)',  # cannot be judged: dropped
            '7 rename("a", "/etc/b") = -1 EROFS (Read-only file system)',
            '7 openat(AT_FDCWD</etc>, "x", O_WRONLY|O_CREAT, 0666) = -1 EROFS (x)',
        ]
    )
    found = [(d.kind, d.target, d.detail) for d in denials_from_trace(trace, policy)]
    assert found == [
        ("write", "q", "EROFS: relative to the directory the call ran in, which the trace does not show"),
        ("write", "/etc/b", "EROFS: outside the writable roots"),
        ("write", "/etc/x", "EROFS: outside the writable roots"),
    ]
    assert sandbox_path("q", policy) == ("q", "")
    relative = denials_from_trace(trace.splitlines()[0], policy)
    assert needed_mode(relative, policy) is None
    hint = hint_for(relative, policy, SandboxSettings())
    assert hint is not None and "sandbox_permissions" not in hint and "cannot be judged" in hint


def test_a_root_below_a_protected_directory_is_refused_but_not_below_a_path_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below ``~/.config/fish`` (``conf.d`` runs at the next login) a root is refused; below a
    ``PATH`` directory it is not: only the directory's own entries are ever looked up."""
    user = tmp_path / "user"
    conf_d, tools = user / ".config" / "fish" / "conf.d", tmp_path / "tools" / "bin"
    for directory in (conf_d, tools / "sub"):
        directory.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    home = tmp_path / "th"
    with pytest.raises(
        RefusedError, match=r"lies inside .*/\.config/fish, which the sandbox keeps read-only"
    ):
        build_policy(SandboxSettings(), mode="use_default", cwd=str(conf_d), home=home)
    policy = build_policy(SandboxSettings(), mode="use_default", cwd=str(tools / "sub"), home=home)
    assert policy.writable_roots == (str(tools / "sub"),) and str(tools) in policy.protected
