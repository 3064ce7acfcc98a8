"""The client configuration blocks of README.md, as a reader copies them.

Each block follows a marker line ``<!-- client: KEY -->`` and is the next fenced code block.
``tests/mcp/test_client_configs.py`` checks they are what ``tether serve`` prints;
``tests/clients`` (``make test-clients``) runs them through the real clients.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"<!-- client: ([a-z-]+) -->\n+```(\w+)\n(.*?)\n```", re.DOTALL)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadmeBlock:
    key: str
    lang: str
    text: str


def readme_blocks(readme: Path = README) -> dict[str, ReadmeBlock]:
    found: dict[str, ReadmeBlock] = {}
    for key, lang, text in _BLOCK.findall(readme.read_text(encoding="utf-8")):
        assert key not in found, f"README has two blocks marked client: {key}"
        found[key] = ReadmeBlock(key=key, lang=lang, text=text)
    return found
