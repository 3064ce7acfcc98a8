"""The keeper of a one-shot confined command: its mounts kept while it runs on.

Invariant: a confined one-shot command that is still running ``KEEP_AFTER_S`` after it started has
a keeper (``sandbox.keeper``, run as ``launch.py --keep``) until it ends; any protected or hidden
path the host replaced since bubblewrap's mounts were planned — or a hidden path that appeared — is
covered again by that keeper at its start, and every later change within about a millisecond; a
path that cannot be covered again ends the command, and its report says so (``mount``).

Why late: a keeper is a Python process (~15 ms of CPU to start), and most commands end well within
``KEEP_AFTER_S``; the identities of the paths as planned let the late keeper find what changed
before it watched. A command shorter than that has none: the host's change and the command's use of
it would have to fall in the same few tens of milliseconds (docs/sandbox.md, Limits).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Final

from tether.shell.sandbox import launch

logger = logging.getLogger(__name__)

KEEP_AFTER_S: Final = 0.05
_EXIT_WAIT_S: Final = 2.0  # the keeper ends with bubblewrap: this bounds a stuck one


def _identity(path: str) -> list[int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


class CommandKeeper:
    """Starts a command's keeper once the command has run ``KEEP_AFTER_S``; ``stop`` says whether
    it had to end the sandbox."""

    def __init__(self, kept: Sequence[tuple[str, str]]) -> None:
        # What bubblewrap is about to mount over: the keeper compares against these.
        self._spec = {
            "keep": [[path, kind] for path, kind in kept],
            "covered": {os.path.normpath(path): _identity(path) for path, kind in kept if kind != "hide"},
        }
        self._timer: asyncio.TimerHandle | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._unstarted = False

    def started(self, pid: int) -> None:
        """Called with bubblewrap's pid once it runs."""
        self._timer = asyncio.get_running_loop().call_later(KEEP_AFTER_S, self._start, pid)

    def _start(self, pid: int) -> None:
        self._timer = None
        # On its standard input, not its command line: the hidden paths' names are nobody else's.
        spec = json.dumps({**self._spec, "pid": pid}).encode()
        argv = [sys.executable, "-I", os.path.abspath(launch.__file__), "--keep"]
        try:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,  # no terminal's signals
            )
            assert self._process.stdin is not None
            with self._process.stdin:  # a few kilobytes: within the pipe's buffer
                self._process.stdin.write(spec)
        except OSError as exc:
            # Out of processes or memory: the command cannot be kept, so it does not go on.
            logger.error("sandbox: the command's keeper could not start (%s); ending the command", exc)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self.kill()
            self._unstarted = True

    async def stop(self) -> bool:
        """Once the command settled: wait for the keeper to end (it ends with bubblewrap);
        ``False`` when it ended the sandbox (or could not start)."""
        self.cancel()
        process, self._process = self._process, None
        if process is None:
            return not self._unstarted
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _EXIT_WAIT_S
        pause = 0.001
        while process.poll() is None and loop.time() < deadline:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)
        if process.returncode is None:
            process.kill()
            await asyncio.to_thread(process.wait)
        said = process.stderr.read().decode(errors="replace").strip() if process.stderr else ""
        if process.stderr is not None:
            process.stderr.close()
        if process.returncode not in (0, -signal.SIGKILL):
            logger.error("sandbox: the command's keeper ended with %s: %s", process.returncode, said)
        return process.returncode != launch.KEEPER_ENDED_IT

    def cancel(self) -> None:
        """The command ended (or never ran): no keeper is started any more."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def kill(self) -> None:
        """Clean-up without ``stop``: end and reap a keeper still running."""
        self.cancel()
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()
            if process.stderr is not None:
                process.stderr.close()
