"""tether.shells.hosts — where a shell lives: this machine (``local``) or one reached with OpenSSH (``ssh``).

Invariant: every host implements the whole ``ShellHost`` seam (``tether.shells.host``), so an
operation takes any host alike; what a caller decides by host is only which one to build
(``LocalHost``, ``remote_hosts(config)``). Only the local host confines: a shell's confinement is
decided once, when it opens, and carried by its record (``Confinement``), so a confined shell
never reopens unconfined, and a host that cannot confine refuses to start one. Each module states
the part it owns (``local``: tmux on this machine; ``confined``: a confined pane's sandbox, start-up
file and reports; ``procinfo``: process facts from ``/proc``); the remote host is the sub-package
``ssh``, with its own face.

The face::

    LocalHost                          tmux on this machine, under ``TETHER_HOME``
    sessions_running(config)           its sessions, asked without starting a tmux server
    SshHost, remote_hosts(config)      one host per ``[hosts.NAME]`` (from ``ssh``)
    HostError ⊃ HostUnsuitable,        what a remote host raises (cannot connect; connected but
      ConnectionLost                   unsuitable; the connection dropped under a call)
    Confinement, default_confinement   a shell's sandbox as its record carries it; the default one
                                       for a deployment's ``[sandbox]`` settings
    rc_text(nonce, confinement)        a shell's start-up file (a confined one also marks the end
                                       of each command for its tracer)
"""

from tether.shells.hosts.confined import Confinement, default_confinement, rc_text
from tether.shells.hosts.local import LocalHost, sessions_running
from tether.shells.hosts.ssh import ConnectionLost, HostError, HostUnsuitable, SshHost, remote_hosts

__all__ = [
    "Confinement",
    "ConnectionLost",
    "HostError",
    "HostUnsuitable",
    "LocalHost",
    "SshHost",
    "default_confinement",
    "rc_text",
    "remote_hosts",
    "sessions_running",
]
