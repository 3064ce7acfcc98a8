"""Hosts a shell can live on: this machine (``local``) and machines reached with OpenSSH (``ssh``).

The face: ``LocalHost``, ``SshHost`` and ``remote_hosts(config)`` (one ``SshHost`` per
``[hosts.NAME]``), and the errors a remote host raises (``HostError`` ⊃ ``HostUnsuitable``,
``ConnectionLost``).
"""

from tether.shells.hosts.ssh import SshHost, remote_hosts
from tether.shells.hosts.ssh_conn import ConnectionLost, HostError, HostUnsuitable

__all__ = ["ConnectionLost", "HostError", "HostUnsuitable", "SshHost", "remote_hosts"]
