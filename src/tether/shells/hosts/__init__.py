"""Hosts a shell can live on: this machine (``local``) and machines reached with OpenSSH (``ssh``).

The face: ``SshHost`` and ``remote_hosts(config)`` (one ``SshHost`` per ``[hosts.NAME]``), and the
errors a remote host raises (``HostError`` ⊃ ``HostUnsuitable``, ``ConnectionLost``), all from the
sub-package ``ssh``. ``LocalHost`` is ``hosts.local``; a confined shell's sandbox, ``hosts.confined``.
"""

from tether.shells.hosts.ssh import ConnectionLost, HostError, HostUnsuitable, SshHost, remote_hosts

__all__ = ["ConnectionLost", "HostError", "HostUnsuitable", "SshHost", "remote_hosts"]
