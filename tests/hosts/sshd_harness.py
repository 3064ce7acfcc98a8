"""A real OpenSSH server on 127.0.0.1 for remote-host tests (and ``bench/sessions.py``).

Each server is Debian's ``/usr/sbin/sshd`` run in the foreground (``-D -e``) with its own config
file, a host key and an authorized user key generated in a temporary directory, on a free port of
9700-9799 (``TETHER_TEST_SSHD_PORTS=FIRST-LAST`` moves them): key logins only, for the user running
the tests, nothing of the machine's own ssh setup touched. ``stop`` ends the listener and every
connection it serves (the "host" vanishes from the network, its tmux server and shells stay);
``start`` brings it back on the same port.

``RemoteHosts`` writes the ``[hosts.NAME]`` entries into a tether home's ``config.toml``, each
host with its own remote ``tether_home`` (a separate directory: nothing is shared with the local
host although both are this machine), and at the end stops every server, ends the shared ssh
connections and the remote tmux servers, and collects what was handed to this process.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from hang import HANG_S
from tether.process.tree import reap_adopted

SSHD = "/usr/sbin/sshd"
_RANGE = os.environ.get("TETHER_TEST_SSHD_PORTS", "9700-9799").split("-")
PORTS = range(int(_RANGE[0]), int(_RANGE[-1]) + 1)


def _ports() -> range:
    """This process's share of the ports: a pytest-xdist worker ``gwN`` of ``count`` gets its own
    equal slice (a port found free by one worker could otherwise be taken by another before its
    sshd binds it). Every worker gets one, however narrow the range: a worker left the whole range
    (as when slices were a fixed 20 ports) raced the others for theirs."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    n = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else -1
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not 0 <= n < count:
        return PORTS
    width = len(PORTS) // count
    if width < 1:
        raise RuntimeError(
            f"TETHER_TEST_SSHD_PORTS holds {len(PORTS)} ports for {count} workers: give each one"
        )
    return range(PORTS.start + n * width, PORTS.start + (n + 1) * width)


def free_port(taken: set[int]) -> int:
    for port in _ports():
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_ports().start}-{_ports().stop - 1} for a test sshd")


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in _listdir(f"/proc/{parent}/task"):
            with contextlib.suppress(OSError):
                for child in map(int, Path(f"/proc/{parent}/task/{task}/children").read_text().split()):
                    found.append(child)
                    todo.append(child)
    return found


def process_running(marker: str) -> bool:
    """A process whose command line holds ``marker`` runs (the test's host is this machine)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def path_without(prefix: str, base: Path) -> str:
    """A PATH of every program of this machine's ``/usr/bin`` and ``/usr/sbin`` but those whose
    name starts with ``prefix`` (symbolic links in ``base``): a host without, say, ``python3``."""
    base.mkdir(parents=True, exist_ok=True)
    for directory in ("/usr/bin", "/usr/sbin"):
        for name in _listdir(directory):
            link = base / name
            if not name.startswith(prefix) and not link.exists():
                link.symlink_to(Path(directory) / name)
    return str(base)


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def end_processes(pids: list[int], deadline_s: float = 5.0) -> None:
    """SIGKILL, then wait for each to be gone (collecting those handed to this process)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + deadline_s
    for pid in pids:
        while time.monotonic() < deadline:
            reap_adopted(pid)  # a zombie of ours (handed to us, the subreaper): collect it
            if not Path(f"/proc/{pid}").exists() or _is_zombie_of_other(pid):
                break
            time.sleep(0.005)  # polling kernel state with a deadline: waitpid has no timeout


def _is_zombie_of_other(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[0] == b"Z" and int(fields[1]) != os.getpid()


@dataclass
class LoopbackSshd:
    """One sshd on 127.0.0.1:``port`` accepting ``user_key`` for the current user."""

    base: Path
    port: int
    user_key: Path
    proc: subprocess.Popen[bytes] | None = None
    log: list[str] = field(default_factory=list)
    _drain: threading.Thread | None = None
    # The sessions' HOME: this process's, as local shells get it (sshd would set the account's,
    # whose ~/.bashrc the tests must not run; see tests/conftest.py).
    home: str = field(default_factory=lambda: os.environ["HOME"])
    # The sessions' PATH, when not sshd's own (``path_without``: a host lacking a program).
    path: str | None = None

    def __post_init__(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.host_key = self.base / "host_key"
        if not self.host_key.exists():
            keygen(self.host_key)
        self.config = self.base / "sshd_config"
        self.config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.host_key}",
                    "PidFile none",
                    f"AuthorizedKeysFile {self.user_key}.pub",
                    "AuthenticationMethods publickey",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    f"AllowUsers {getpass.getuser()}",
                    "UsePAM no",
                    # The keys live under /tmp (world-writable): their directories cannot pass
                    # StrictModes, and nothing else relies on them.
                    "StrictModes no",
                    "PrintMotd no",
                    "PrintLastLog no",
                    "X11Forwarding no",
                    "AllowTcpForwarding no",
                    "AllowAgentForwarding no",
                    "PermitTunnel no",
                    "MaxSessions 64",
                    "MaxStartups 64",
                    f"SetEnv HOME={self.home}" + (f" PATH={self.path}" if self.path else ""),
                    "",
                ]
            )
        )

    def known_hosts_line(self) -> str:
        kind, key = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {key}"

    def start(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.proc = proc
        listening = threading.Event()

        def drain() -> None:
            assert proc.stderr is not None
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip()
                self.log.append(line)
                if "Server listening" in line:
                    listening.set()
            listening.set()

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        if not listening.wait(HANG_S) or proc.poll() is not None:
            self.stop()
            raise RuntimeError("sshd did not start:\n" + "\n".join(self.log[-20:]))

    def stop(self) -> None:
        """The listener and every connection it serves end (as when the machine drops off)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        doomed = [proc.pid, *_descendants(proc.pid)]
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(10)
        end_processes(doomed[1:])
        if self._drain is not None:  # the log's reader ends at the pipe's end: then it is closed
            self._drain.join(HANG_S)
        if proc.stderr is not None:
            proc.stderr.close()


@dataclass
class Box:
    name: str
    sshd: LoopbackSshd
    home: Path  # the host's tether_home


class RemoteHosts:
    """Loopback hosts for one local tether home (see the module docstring)."""

    def __init__(self, local_home: Path, base: Path) -> None:
        self.local_home = local_home
        self.base = base
        self.user_key = base / "user_key"
        keygen(self.user_key)
        self.known_hosts = base / "known_hosts"
        self.known_hosts.write_text("")
        self.boxes: dict[str, Box] = {}
        self._entries: dict[str, str] = {}
        self.extra_config = ""

    def add(
        self,
        name: str,
        *,
        known: bool = True,
        timeout: int = 5,
        start: bool = True,
        path: str | None = None,
        options: tuple[str, ...] = (),
    ) -> Box:
        taken = {b.sshd.port for b in self.boxes.values()}
        sshd = LoopbackSshd(self.base / f"sshd-{name}", free_port(taken), self.user_key, path=path)
        home = self.base / f"rh-{name}"
        box = Box(name=name, sshd=sshd, home=home)
        self.boxes[name] = box
        if known:
            with self.known_hosts.open("a") as fh:
                fh.write(sshd.known_hosts_line() + "\n")
        self.set_entry(name, timeout=timeout, options=options)
        if start:
            sshd.start()
        return box

    def set_entry(
        self, name: str, *, timeout: int = 5, port: int | None = None, options: tuple[str, ...] = ()
    ) -> None:
        """``options``: more ``-o`` settings of the entry, after the known-hosts files."""
        box = self.boxes[name]
        options = (f"UserKnownHostsFile={self.known_hosts}", "GlobalKnownHostsFile=/dev/null", *options)
        self._entries[name] = "\n".join(
            [
                f"[hosts.{name}]",
                f'ssh = "{getpass.getuser()}@127.0.0.1"',
                f"port = {port or box.sshd.port}",
                f'identity = "{self.user_key}"',
                f'tether_home = "{box.home}"',
                f"connect_timeout = {timeout}",
                "options = [" + ", ".join(f'"{o}"' for o in options) + "]",
                "",
            ]
        )
        self.write_config()

    def write_config(self) -> None:
        text = self.extra_config + "\n" + "\n".join(self._entries.values())
        (self.local_home / "config.toml").write_text(text)

    def ssh_check(self, name: str) -> int | None:
        """The pid of the shared connection's master for ``name``, if one runs."""
        path = self.local_home / "ssh" / name
        done = subprocess.run(
            ["ssh", "-o", f"ControlPath={path}", "-O", "check", "x"],
            capture_output=True,
            text=True,
            check=False,
        )
        digits = done.stderr.split("pid=")[-1].split(")")[0]
        return int(digits) if done.returncode == 0 and digits.isdigit() else None

    def close(self) -> None:
        masters = [pid for name in self.boxes if (pid := self.ssh_check(name)) is not None]
        for box in self.boxes.values():
            box.sshd.stop()
        end_processes(masters)
        for box in self.boxes.values():
            sock = box.home / "tmux.sock"
            if not sock.exists():
                continue
            out = subprocess.run(
                ["tmux", "-S", str(sock), "display-message", "-p", "#{pid}"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.split()
            server = [int(p) for p in out if p.isdigit()]
            doomed = [*server, *(d for s in server for d in _descendants(s))]
            subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False)
            end_processes(doomed)
