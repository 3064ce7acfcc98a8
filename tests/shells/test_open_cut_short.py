"""A local ``shell_open`` whose control client ends after tmux made the session and before its
answer came: the create is never sent twice (tmux would answer "duplicate session" and the open
would draw another id, leaving the first session running with no record), and the session it may
have made is removed with the record, so no shell runs that nobody can see or close."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tether.config import load_config
from tether.shells import Shells
from tether.shells import open_shell as open_in_process
from tether.shells.tmux.control import ControlClient, SessionError
from tmux_probe import shell_sessions


async def test_a_create_whose_answer_is_lost_leaves_no_session_and_no_record(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shells = Shells.get(load_config(tether_home))
    made: list[str] = []
    real_flush = ControlClient._flush

    def flush(self: ControlClient) -> None:
        data = b"".join(self._out)
        found = re.search(rb"'new-session' '-d' '-s' '(dsh-[a-z0-9]{6})'", data)
        if found is None or made:
            real_flush(self)
            return
        # tmux runs the create, and this client ends before the answer reaches it.
        made.append(found.group(1).decode())
        subprocess.run(
            ["tmux", "-S", str(self.socket), "new-session", "-d", "-s", made[0], "sleep 60"], check=True
        )
        self._out, self._out_proc = [], None
        assert self._proc is not None
        self._proc.kill()

    monkeypatch.setattr(ControlClient, "_flush", flush)
    try:
        with pytest.raises(SessionError):
            await open_in_process(
                shells, owner="t", label="", cwd=None, cols=80, rows=24, idle_minutes=None, host_name="local"
            )
        assert made, "the create never reached the client"
        assert shell_sessions(tether_home) == set(), "a session nobody recorded is left running"
        assert shells.records.any_shell(made[0]) is None
    finally:
        await shells.close()
