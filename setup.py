"""setuptools hook: every build of tether (wheel, sdist-to-wheel, editable) carries the panel's assets.

The project's metadata is in pyproject.toml; this file only makes ``build_py`` fetch the browser
assets first (build_support/panel_assets.py), so ``python -m build`` from a clean clone and
``pip install -e .`` both give a ``tether serve`` with its panel.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, str(Path(__file__).resolve().parent / "build_support"))
import panel_assets  # a file of this tree, found through the path set just above


class BuildPyWithPanelAssets(build_py):
    def run(self) -> None:
        try:
            panel_assets.ensure()
        except panel_assets.AssetError as exc:
            raise SystemExit(f"error: cannot build tether: {exc}") from exc
        super().run()


setup(cmdclass={"build_py": BuildPyWithPanelAssets})
