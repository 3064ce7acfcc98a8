"""The smoke subset runs against an installed tether (``make smoke``: a wheel in a fresh venv).

It reuses the panel tests' browser helper (tests/panel/browser.py), which pytest puts on the path
only for tests in that folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "panel"))
