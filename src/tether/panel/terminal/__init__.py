"""A person's terminal in the browser: xterm.js over a WebSocket to a real terminal client of the
shell, in a PTY the panel owns.

Invariant: the client (``client.PanelTerminal``) lives exactly as long as its socket
(``endpoint.TerminalEndpoint``), and a person's keystroke is stamped on the shell before it reaches
the pane, so an agent's write checked after it sees the person typing. ``app`` mounts the
endpoint; nothing else reaches into the modules.
"""

from __future__ import annotations

from tether.panel.terminal.client import PanelTerminal, clamp_size
from tether.panel.terminal.endpoint import TerminalEndpoint, heartbeats

__all__ = ["PanelTerminal", "TerminalEndpoint", "clamp_size", "heartbeats"]
