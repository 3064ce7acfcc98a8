"""Fixtures for the MCP front-door tests."""

from __future__ import annotations

import pytest
from mcp_harness import Probe


@pytest.fixture
def probe() -> Probe:
    return Probe()
