"""Shared fixtures: every test gets its own ``TETHER_HOME`` (and so its own tmux server)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def tether_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh state directory, exported as ``TETHER_HOME``; its tmux server is killed afterwards.

    tmux socket paths must stay short (sun_path is 108 bytes), so the home lives under a short
    temporary directory rather than pytest's deep per-test path.
    """
    home = tmp_path_factory.mktemp("th", numbered=True)
    monkeypatch.setenv("TETHER_HOME", str(home))
    monkeypatch.delenv("TETHER_CONVERSATION", raising=False)
    yield home
    socket = home / "tmux.sock"
    if socket.exists():
        subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, check=False)


@pytest.fixture(autouse=True)
def _no_inherited_tether_home(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's own TETHER_HOME must never be touched by a test.
    if "TETHER_HOME" in os.environ:
        monkeypatch.delenv("TETHER_HOME")
