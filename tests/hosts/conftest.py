"""Fixtures of the remote-host tests: loopback OpenSSH servers as hosts of a test's tether home."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The tool tests' harnesses (the MCP client over stdio, the safety helpers) serve these tests too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
# ... and the panel's (the app served in-process, Debian's chromium).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "panel"))

from sshd_harness import RemoteHosts


@pytest.fixture
def remote(tether_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteHosts]:
    """``remote.add(name)`` starts an sshd and configures it as ``[hosts.NAME]``; everything it
    started ends with the test."""
    hosts = RemoteHosts(tether_home, tmp_path_factory.mktemp("rh", numbered=True))
    try:
        yield hosts
    finally:
        hosts.close()
