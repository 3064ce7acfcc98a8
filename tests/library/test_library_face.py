"""``import tether`` is the library's face: its ``__all__`` names resolve, ``dir`` shows them, the
package is typed (``py.typed``), and importing it loads nothing of the library until a name is used,
so the ``tether`` command starts as fast as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tether
from tether import errors, library

SRC = Path(__file__).resolve().parents[2] / "src"


def test_every_public_name_resolves_and_is_listed() -> None:
    assert set(tether.__all__) == {
        *library.__all__,
        "TetherError",
        "UsageError",
        "RefusedError",
        "NotFoundError",
        "StorageError",
        "__version__",
    }
    for name in tether.__all__:
        assert getattr(tether, name) is not None
        assert name in dir(tether)
    assert tether.UsageError is errors.UsageError and issubclass(tether.UsageError, tether.TetherError)
    assert (SRC / "tether" / "py.typed").is_file()


def test_dir_lists_the_names_and_importing_tether_loads_no_library_until_one_is_used() -> None:
    probe = (
        "import sys, tether; listed = set(tether.__all__) <= set(dir(tether)); "
        "before = 'tether.library' in sys.modules; tether.Tether; "
        "print(listed, before, 'tether.library' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "True False True\n"
