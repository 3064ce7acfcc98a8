"""Whether a person is typing into a shell right now (the ``user-busy`` state).

Invariant: this is the one definition of ``user-busy``, used by ``shell_state`` to show it and by
the safety hooks to refuse agent writes: the panel's ``@tether_user_input_at`` stamp on the pane, or
the last keystroke of an attached (non-control-mode) tmux client, lies within
``[sessions] user_busy_seconds`` of now.
"""

from __future__ import annotations

from tether.config import Config
from tether.shells.host import ShellHost
from tether.shells.tmux.commands import PaneInfo


async def client_activity(host: ShellHost) -> dict[str, float]:
    """Latest keystroke time (epoch s) per session among attached non-control clients."""
    return await host.client_activity()


def is_user_busy(config: Config, pane: PaneInfo, activity: float, now: float) -> bool:
    """``activity``: the shell's entry of ``client_activity``; ``now``: epoch seconds."""
    window = config.sessions.user_busy_seconds
    return now - pane.user_input_ms / 1000 < window or now - activity < window
