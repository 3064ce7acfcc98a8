"""The real-client checks reuse the MCP tests' harness and README reader (tests/mcp)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))
