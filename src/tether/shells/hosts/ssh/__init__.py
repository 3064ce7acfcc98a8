"""tether.shells.hosts.ssh — a host on another machine, reached with OpenSSH: tmux there keeps its shells.

Invariant: tether reaches the machine only through one shared OpenSSH connection per host, with
host keys checked and no prompt that could block a call (``conn``); the shells and their full logs
live there, and every read, search and wait here runs on a local mirror whose byte ``n`` is byte
``n`` of the host's log (``mirror``). A dropped connection loses nothing on the host: what was
following it ends with ``ConnectionLost`` and the next call reconnects. Each module states the
part it owns (``host``: the ``SshHost``; ``conn``: the connection and the errors; ``mirror``: the
logs' mirrors; ``channels``: every channel's login, handshake and the spare logged in ahead;
``sh``: the one command shell for small questions; ``questions``: what is asked
through it; ``procs``: the script that reads a pane's processes there, and its parsing).

The face::

    SshHost, remote_hosts(config)     one host per ``[hosts.NAME]``
    HostError ⊃ HostUnsuitable,       what a remote host raises (cannot connect; connected but
      ConnectionLost                  unsuitable; the connection dropped under a call)
"""

from tether.shells.hosts.ssh.conn import ConnectionLost, HostError, HostUnsuitable
from tether.shells.hosts.ssh.host import SshHost, remote_hosts

__all__ = ["ConnectionLost", "HostError", "HostUnsuitable", "SshHost", "remote_hosts"]
