"""One OpenSSH connection per remote host, shared by every channel tether opens to it.

Invariant: tether reaches another machine only through ``ssh`` with connection sharing — one
master connection per host, its socket under ``$TETHER_HOME/ssh`` (0700), kept ``ControlPersist``
seconds after its last channel so the next tether process (a CLI call) reuses it — and with the
settings no host entry can weaken: host keys checked against ``known_hosts``
(``StrictHostKeyChecking=yes``: an unknown or changed key is an error that says how to add it, never
a key accepted silently), ``BatchMode=yes`` (no password or passphrase prompt can block a call) and
a connect timeout. The master is started first, with no command (``ssh -N``: no login shell, so
none of the account's start-up files); every channel (the tmux control client, a log stream, the
command shell) is ``ssh -T`` through it (``channels``).

``ensure`` probes the host (its tether home created 0700, tmux ≥ 3.2, what it can tell about its
processes, a ``python3`` that can run the shells' launcher) and returns its ``HostFacts``; a
failure is a ``HostError`` naming the host, what went wrong and the fix. ``ConnectionLost`` ends
what was following a host when its connection dropped.

    HostError (TetherError)        code HOST_UNREACHABLE: cannot connect (network, key, login)
    ├── HostUnsuitable             code HOST_UNSUITABLE: connected, but tmux or the state dir is wrong
    └── ConnectionLost             code CONNECTION_LOST: the connection dropped under a call
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tether.config import HostSection
from tether.errors import TetherError
from tether.process.adopt import OWN_PROCESS, launcher_check
from tether.process.tree import reap_adopted
from tether.shells.tmux import commands
from tether.shells.tmux.commands import sh_quote

CONTROL_PERSIST_S = 600
MIN_TMUX = (3, 2)
# sun_path holds 108 bytes; ssh adds a 17-character suffix while it binds the master's socket.
_MAX_SOCKET_PATH = 90
_REAP_S = 5.0  # a killed ssh call's exit and the end of its pipes
_MASTER_PID_RE = re.compile(r"pid=(\d+)")
# What ssh says when it logged in to be the master and found another one had bound the socket.
_BEATEN = b"already exists, disabling multiplexing"
_TMUX_VERSION_RE = re.compile(r"(\d+)\.(\d+)")
# What ssh says of a changed host key: the name it looked the key up by, and where it found it.
_KEY_NAME_RE = re.compile(r"Host key for (\S+) has changed")
_OFFENDING_RE = re.compile(r"Offending \S+ key in (.+):\d+\s*$", re.MULTILINE)


class HostError(TetherError):
    """A remote host cannot be used right now; the message names it and says how to fix it.
    ``shell``: the shell a ``shell_open`` had recorded there when it failed (the caller returns
    its id with the error)."""

    code = "HOST_UNREACHABLE"
    shell: str | None = None


class HostUnsuitable(HostError):
    code = "HOST_UNSUITABLE"


class ConnectionLost(HostError):
    code = "CONNECTION_LOST"


@dataclass(frozen=True, slots=True, kw_only=True)
class HostFacts:
    """What the probe learned of a host."""

    home: str  # its tether home, absolute (symbolic links resolved)
    tmux: str  # "3.3a"
    proc: bool  # /proc/PID/stat readable: process facts come from there
    clock_ticks: int  # CLK_TCK, the unit of CPU times in /proc
    system: str  # uname -sr
    # The absolute path of a python3 that can run ``process.adopt``'s launcher there (ctypes,
    # ``prctl``), or "": the shells' bash then runs unadopted.
    python: str = ""

    @property
    def socket(self) -> str:
        return f"{self.home}/tmux.sock"

    def log(self, shell_id: str) -> str:
        return f"{self.home}/logs/{shell_id}.log"

    def rc(self, shell_id: str) -> str:
        return f"{self.home}/rc/{shell_id}.bash"


def home_expression(home: str) -> str:
    """``tether_home`` as a POSIX shell word on the host (``~`` becomes that user's ``$HOME``)."""
    if home == "~":
        return '"$HOME"'
    if home.startswith("~/"):
        return '"$HOME"/' + sh_quote(home[2:])
    return sh_quote(home)


def remote_command(script: str) -> str:
    """What ssh asks the host's login shell to run: ``sh`` on ``script`` (so the script's syntax
    is POSIX whatever the account's shell is)."""
    return "exec sh -c " + sh_quote(script)


def _probe_script(home: str) -> str:
    tmux_v = " ".join(sh_quote(a) for a in commands.version_argv())
    # The first line break ends whatever a banner of the start-up files left unfinished.
    return (
        f"echo; umask 077; h={home_expression(home)}; "
        '{ [ -d "$h" ] || mkdir -p "$h"; } && mkdir -p "$h/logs" "$h/rc" && chmod 700 "$h/logs" "$h/rc" '
        '&& cd "$h" && [ -w . ] || { echo "state=$h"; exit 3; }; '
        'printf "home=%s\\n" "$(pwd -P)"; '
        f'printf "version=%s\\n" "$({tmux_v} 2>/dev/null)"; '
        "[ -r /proc/self/stat ] && echo proc=1; "
        'printf "ticks=%s\\n" "$(getconf CLK_TCK 2>/dev/null)"; '
        "command -v tail >/dev/null 2>&1 && echo tail=1; "
        'printf "system=%s\\n" "$(uname -sr 2>/dev/null)"; '
        # What runs a shell's bash as a subreaper (``hosts.ssh.host``): asked here, once per connection.
        # The interpreter names its own executable: a ``python3`` found on the login's PATH may be a
        # version manager's shim (pyenv's runs bash scripts first), which every open would pay.
        'p=$(command -v python3 2>/dev/null) && case "$p" in /*) '
        f'x=$("$p" -I -S -c {sh_quote(launcher_check())} 2>/dev/null) && '
        'printf "python=%s\\n" "${x:-$p}";; esac; :'
    )


async def _output(proc: asyncio.subprocess.Process, *, master: bool) -> tuple[bytes, bytes, bool]:
    """``proc.communicate()``; for the ``ssh -N`` that starts the master also whether another ssh
    became the master first (``_BEATEN``), in which case it is ended at once: it found the socket
    taken only after logging in, and goes on as a connection of its own, in the foreground, that
    never ends. A master runs then — another tether process's, or a channel's that logged in
    while the connection was down (``ControlMaster=auto``: the first ssh to log in becomes it) —
    and everything goes through it."""
    if not master:
        out, err = await proc.communicate()
        return out, err, False
    assert proc.stdout is not None and proc.stderr is not None
    stderr = proc.stderr
    said = bytearray()
    beaten = False

    async def watch() -> None:
        nonlocal beaten
        while chunk := await stderr.read(4096):
            said.extend(chunk)
            if not beaten and _BEATEN in said:
                beaten = True
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()

    out, _ = await asyncio.gather(proc.stdout.read(), watch())
    await proc.wait()
    return out, bytes(said), beaten


class SshConnection:
    """The ssh side of one host: argv for a channel, the probe, the master's life."""

    def __init__(self, section: HostSection, local_home: Path) -> None:
        self.section = section
        self.control_dir = local_home / "ssh"
        self.control_path = self.control_dir / section.name
        self._facts: HostFacts | None = None
        self._lock = asyncio.Lock()
        self.master_pid = 0

    @property
    def where(self) -> str:
        port = f" port {self.section.port}" if self.section.port else ""
        return f"host {self.section.name} ({self.section.ssh}{port})"

    @property
    def facts(self) -> HostFacts | None:
        return self._facts

    def argv(self, command: str, *, tty: bool = False, master: str = "auto") -> list[str]:
        """An ``ssh`` invocation running ``command`` on the host through the shared connection.
        tether's own settings come first: for each setting ssh keeps the first value it sees.

        ``master="no"``: only through the master; with none running, ssh fails at once (exit 255)
        rather than log in on its own (ssh falls back to a connection of its own when it finds no
        master, and ``auto`` makes that one the master). A channel is that: one that logged in
        while the connection was down raced the reconnect's ``ssh -N`` to become the master, and
        the loser went on as a connection of its own that no drop of the master ends."""
        s = self.section
        args = ["ssh", "-tt" if tty else "-T"]
        # The proxy is what the fallback would connect through: one that fails ends it.
        only_shared = ("ProxyCommand=false",) if master == "no" else ()
        for option in (
            f"ControlMaster={master}",
            f"ControlPath={self.control_path}",
            f"ControlPersist={CONTROL_PERSIST_S}",
            "BatchMode=yes",
            "StrictHostKeyChecking=yes",
            f"ConnectTimeout={s.connect_timeout}",
            *only_shared,
        ):
            args += ["-o", option]
        args += self._entry_args()
        # Defaults an entry may override (its options come first): notice a dead network in ~45 s.
        args += ["-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3"]
        return [*args, "--", s.ssh, command]

    def terminal_command(self) -> str:
        """The ``ssh`` a person runs in a terminal to reach the host as tether does: the entry's
        port, identity and options (a ``UserKnownHostsFile``, a ``ProxyJump`` …), none of
        tether's own settings (a person may answer a prompt), quoted for a POSIX shell."""
        return shlex.join(["ssh", *self._entry_args(), self.section.ssh])

    def _entry_args(self) -> list[str]:
        """What the ``[hosts.NAME]`` entry adds to ``ssh``: its port, identity and options."""
        s = self.section
        args: list[str] = []
        if s.port is not None:
            args += ["-p", str(s.port)]
        if s.identity is not None:
            args += ["-i", s.identity, "-o", "IdentitiesOnly=yes"]
        for option in s.options:
            args += ["-o", option]
        return args

    def forget(self) -> None:
        """The connection dropped: the next ``ensure`` probes (and so reconnects) again."""
        self._facts = None
        if self.master_pid:
            reap_adopted(self.master_pid)  # a master that daemonized under us ended: collect it

    @property
    def login_limit(self) -> int:
        """Seconds a command may take to start and answer: the connect timeout covers connecting
        and the key exchange; the login (the account's start-up files) and the command get as long
        again, and 5 s more."""
        return 2 * self.section.connect_timeout + 5

    async def ensure(self, *, connected: Callable[[], None] | None = None) -> HostFacts:
        """Connect (start the master if none runs) and probe; ``HostError`` when that fails.
        The master is started without a command (``-N``: no login shell, so none of the account's
        start-up files): ``connected`` is called once it is up, before the probe, so channels can
        log in alongside the probe rather than after it."""
        facts = self._facts
        if facts is not None:
            return facts
        async with self._lock:
            if self._facts is not None:
                return self._facts
            self._check_socket_dir()
            # With ControlPersist, ``ssh -N`` goes to the background once logged in (or, with a
            # master already running, asks it and ends): the exit status says which failed.
            _, err, status = await self._run("", extra=("-N", *self._loud_enough()))
            if status != 0:
                raise HostError(self._unreachable(err))
            self.master_pid = await self._master_pid()
            if connected is not None:
                connected()
            out, err, status = await self._run(remote_command(_probe_script(self.section.tether_home)))
            if status == 255:
                raise HostError(self._unreachable(err))
            facts = self._parse(out, status, err)
            self._facts = facts
            return facts

    def _loud_enough(self) -> tuple[str, ...]:
        """What makes the master's ``ssh -N`` say that another ssh became the master first
        (``_BEATEN``, an error): ``LogLevel=ERROR`` where the entry's options would silence it."""
        for option in self.section.options:
            name, _, value = option.replace("=", " ", 1).partition(" ")
            if name.lower() == "loglevel":
                return ("-o", "LogLevel=ERROR") if value.strip().upper() in ("QUIET", "FATAL") else ()
        return ()

    def _check_socket_dir(self) -> None:
        if len(str(self.control_path)) > _MAX_SOCKET_PATH:
            raise HostError(
                f"{self.where}: the connection socket {self.control_path} would be too long for a unix "
                "socket; use a shorter TETHER_HOME or host name"
            )
        self.control_dir.mkdir(mode=0o700, exist_ok=True)
        self.control_dir.chmod(0o700)

    async def _run(self, command: str, *, extra: tuple[str, ...] = ()) -> tuple[str, str, int]:
        """One ssh call with its own deadline (the connect timeout covers connecting and the key
        exchange; the probe itself gets as long again)."""
        argv = self.argv(command)
        if extra:
            argv = [argv[0], *extra, *argv[1:-2], argv[-2]]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                # The master outlives this call (``ControlPersist``): tether's own, even when this
                # process runs in a local shell, whose close spares it (``process.adopt``).
                env={**os.environ, OWN_PROCESS: "ssh-master"} if "-N" in extra else None,
            )
        except FileNotFoundError as exc:
            raise HostError(
                f"{self.where}: ssh is not installed; remote hosts need OpenSSH's client on this machine"
            ) from exc
        limit = self.login_limit
        try:
            out, err, beaten = await asyncio.wait_for(_output(proc, master="-N" in extra), limit)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            logged_in = False
            if not extra:
                # A command runs through the master, which was handed this call's pipes and keeps
                # them (and the command on the host) until the host ends it: ending the master
                # ends both. The next call connects afresh.
                logged_in = await self.master_alive()
                await self.exit_master()
            with contextlib.suppress(TimeoutError):  # collected, its pipes closed: nothing outlives
                await asyncio.wait_for(proc.wait(), _REAP_S)
            if logged_in:
                raise HostError(
                    f"{self.where}: logged in, but the command did not finish within {limit} s; check the "
                    "account's shell start-up files there (ssh runs ~/.bashrc even for a command: one that "
                    "waits or hangs stalls every call), or raise connect_timeout"
                ) from None
            raise HostError(
                f"{self.where}: no answer within {limit} s; check that the machine is up and reachable, "
                "or raise connect_timeout"
            ) from None
        finally:
            if proc.returncode is None:  # cancelled: the ssh call ends with it (asyncio's child
                # watcher collects it; no await here: a cancelled anyio scope cancels every await)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        status = 0 if beaten else proc.returncode or 0
        return out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), status

    async def _master_pid(self) -> int:
        _, err, status = await self._run("", extra=("-O", "check"))
        m = _MASTER_PID_RE.search(err)
        return int(m.group(1)) if status == 0 and m else 0

    async def master_alive(self) -> bool:
        """The shared connection still runs (asks the master over its socket; no network)."""
        try:
            _, _, status = await self._run("", extra=("-O", "check"))
        except HostError:
            return False
        return status == 0

    async def exit_master(self) -> None:
        """Ask the master to end (its channels end with it)."""
        with contextlib.suppress(HostError):
            await self._run("", extra=("-O", "exit"))
        self.forget()

    def _parse(self, out: str, status: int, err: str) -> HostFacts:
        values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        if "home" not in values and "state" not in values:
            # The probe never reached its first test: the login ran something else or ended first.
            said = " ".join(line.strip() for line in err.splitlines() if line.strip())[:300]
            raise HostUnsuitable(
                f"{self.where}: logged in, but the command tether sent never ran (exit {status}"
                f"{'; it said: ' + said if said else ''}); the account's shell start-up files there "
                "(~/.bashrc, ~/.profile) end the session or run something else first (an exit, an exec, "
                "a menu): make them do that only in an interactive shell, and check that sh is installed"
            )
        if status != 0 or "home" not in values:
            where = values.get("state", self.section.tether_home)
            raise HostUnsuitable(
                f"{self.where}: cannot create or write the state directory {where} there (exit {status}); "
                "set tether_home to a directory that user may write"
            )
        version = values.get("version", "")
        m = _TMUX_VERSION_RE.search(version)
        if m is None:
            raise HostUnsuitable(
                f"{self.where}: tmux is not installed there; install tmux ≥ 3.2 on that machine"
            )
        if (int(m.group(1)), int(m.group(2))) < MIN_TMUX:
            raise HostUnsuitable(f"{self.where}: {version} is installed there; tether needs tmux ≥ 3.2")
        if "tail" not in values:
            raise HostUnsuitable(
                f"{self.where}: no tail command there (POSIX tail is needed to read shell logs)"
            )
        home = values["home"]
        if len(home) + len("/tmux.sock") > 100:
            raise HostUnsuitable(
                f"{self.where}: the tmux socket under {home} would be too long; set a shorter tether_home"
            )
        ticks = values.get("ticks", "")
        return HostFacts(
            home=home,
            tmux=version.split()[-1],
            proc="proc" in values,
            clock_ticks=int(ticks) if ticks.isdigit() and int(ticks) > 0 else 100,
            system=values.get("system", "").strip(),
            python=python if (python := values.get("python", "")).startswith("/") else "",
        )

    def _forget_key_command(self, err: str) -> str:
        """The exact ``ssh-keygen -R`` that removes the changed key: the name ssh looked the key
        up by (``[host]:port`` off port 22) in the file that holds it, as ssh reported both; else
        built from the entry (its ``UserKnownHostsFile`` option, or ssh's default file)."""
        s = self.section
        named = _KEY_NAME_RE.search(err)
        if named is not None:
            name = named.group(1)
        else:
            host = s.ssh.rsplit("@", 1)[-1]
            name = f"[{host}]:{s.port}" if s.port not in (None, 22) else host
        files = list(dict.fromkeys(m.group(1) for m in _OFFENDING_RE.finditer(err)))
        if not files:
            option = next((o for o in s.options if o.lower().startswith("userknownhostsfile=")), None)
            files = [option.split("=", 1)[1].split()[0]] if option else ["~/.ssh/known_hosts"]
        # ssh's default file stays ~/ (the shell expands it); any other path is quoted as given.
        return "; ".join(
            f"ssh-keygen -f {f if f == '~/.ssh/known_hosts' else sh_quote(f)} -R {sh_quote(name)}"
            for f in files
        )

    def _unreachable(self, err: str) -> str:
        s = self.section
        text = " ".join(line.strip() for line in err.splitlines() if line.strip())
        host = s.ssh.rsplit("@", 1)[-1]
        port = f"-p {s.port} " if s.port else ""
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in err:
            return (
                f"{self.where}: its host key has CHANGED since it was recorded in known_hosts; tether "
                "refuses to connect. If the machine was really reinstalled, remove the old key "
                f"({self._forget_key_command(err)}) and add the new one after checking its fingerprint; "
                "otherwise someone may be intercepting the connection"
            )
        if "Host key verification failed" in err or "host key is known" in err:
            return (
                f"{self.where}: its host key is not in known_hosts, and tether never accepts a key by "
                "itself. Check the key's fingerprint with the machine's owner, then add it: ssh-keyscan "
                f"{port}{host} >> ~/.ssh/known_hosts (or run {self.terminal_command()} once in a terminal "
                "and answer yes; a UserKnownHostsFile in the host's options names another file)"
            )
        if "Permission denied" in err or "Too many authentication failures" in err:
            return (
                f"{self.where}: the login was refused ({text}); tether logs in with keys only (BatchMode): "
                "set identity to a key the account accepts, or load it into ssh-agent"
            )
        if "Connection refused" in err:
            return f"{self.where}: connection refused; is sshd running there and listening on that port?"
        if "timed out" in err.lower():
            return (
                f"{self.where}: connecting timed out after {s.connect_timeout} s; check that the machine is "
                "up and reachable (or raise connect_timeout)"
            )
        if "Could not resolve hostname" in err:
            return f"{self.where}: the name does not resolve ({text}); check ssh in the host's entry"
        return f"{self.where}: ssh failed: {text or 'no message'}"
