"""Fetch the panel's browser assets (xterm.js) from the npm registry into ``static/vendor``.

One path for every way tether is built: ``make panel-assets`` runs this file, and the wheel build
(``setup.py``'s ``build_py``) imports it, so a wheel built from a clean clone or from the sdist
carries the assets while the repository never does. Standard library only: it runs inside the
build backend's isolated environment, before tether itself is importable.

Invariant: ``static/vendor/.installed`` holds the sha256 of ``package-lock.json`` that the files
beside it were copied from; the files are fetched again (``npm ci``, exact versions and integrity
hashes from the lock) whenever that stamp is missing or stale, and never otherwise. A build that
cannot fetch them fails with the reason; it never produces a wheel without its panel.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

PANEL_DIR = Path(__file__).resolve().parents[1] / "src" / "tether" / "panel"
# (file inside node_modules, name in static/vendor): what static/index.html loads.
ASSETS = (
    ("@xterm/xterm/lib/xterm.js", "xterm.js"),
    ("@xterm/xterm/css/xterm.css", "xterm.css"),
    ("@xterm/addon-fit/lib/addon-fit.js", "addon-fit.js"),
    ("@xterm/addon-search/lib/addon-search.js", "addon-search.js"),
    ("@xterm/addon-web-links/lib/addon-web-links.js", "addon-web-links.js"),
)
STAMP = ".installed"


class AssetError(RuntimeError):
    """The assets could not be fetched; the message says why and what to install."""


def lock_digest(panel_dir: Path) -> str:
    return hashlib.sha256((panel_dir / "package-lock.json").read_bytes()).hexdigest()


def up_to_date(panel_dir: Path) -> bool:
    vendor = panel_dir / "static" / "vendor"
    stamp = vendor / STAMP
    if not stamp.is_file() or not all((vendor / name).is_file() for _, name in ASSETS):
        return False
    return stamp.read_text().strip() == lock_digest(panel_dir)


def ensure(panel_dir: Path = PANEL_DIR) -> bool:
    """Make ``static/vendor`` hold the assets of ``package-lock.json``; True when it fetched them."""
    if up_to_date(panel_dir):
        return False
    npm = shutil.which("npm")
    if npm is None:
        raise AssetError(
            "npm was not found: building tether needs npm (Node.js) to fetch the panel's browser "
            "assets (@xterm/xterm and its addons) from the npm registry; install Node.js and npm "
            "(Debian: apt-get install nodejs npm) and build again"
        )
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--silent"],
        cwd=panel_dir,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise AssetError(
            f"`npm ci` in {panel_dir} failed (exit {done.returncode}) while fetching the panel's "
            f"browser assets from the npm registry:\n{done.stderr.strip() or done.stdout.strip()}"
        )
    vendor = panel_dir / "static" / "vendor"
    vendor.mkdir(parents=True, exist_ok=True)
    for source, name in ASSETS:
        shutil.copyfile(panel_dir / "node_modules" / source, vendor / name)
    (vendor / STAMP).write_text(lock_digest(panel_dir) + "\n")
    return True


def main() -> int:
    try:
        fetched = ensure()
    except AssetError as exc:
        print(f"panel assets: {exc}", file=sys.stderr)
        return 1
    vendor = PANEL_DIR / "static" / "vendor"
    print(f"panel assets: {'fetched into' if fetched else 'up to date in'} {vendor}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
