"""Fixtures of the tools-layer tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.config import load_config
from tether.tools.catalog import ToolCatalog, build_catalog


@pytest.fixture
async def catalog(tether_home: Path) -> AsyncIterator[ToolCatalog]:
    """The tools of ``tether_home`` in process (no jobs), on the test's loop, closed afterwards."""
    built = build_catalog(load_config(tether_home), with_jobs=False)
    try:
        yield built
    finally:
        await built.aclose()
