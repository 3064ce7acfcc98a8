"""Snapshots: records and files, latest/list order, the three caps, redaction, orphan sweep."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.errors import StorageError, UsageError
from tether.store.db import Store
from tether.store.snapshots import Snapshot, SnapshotReason, SnapshotStore, on_disk

A = "dsh-snap0a"
B = "dsh-snap0b"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> float:
        return self.ms / 1000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path)
    yield s
    s.close()


def _take(
    snaps: SnapshotStore, shell: str = A, text: str = "out\n", reason: SnapshotReason = "manual"
) -> Snapshot:
    return snaps.take(
        shell_id=shell,
        label="build",
        cwd="/repo",
        cols=100,
        rows=30,
        reason=reason,
        text=text,
        actor="c1",
    )


def test_take_latest_list(store: Store, tmp_path: Path) -> None:
    clock = Clock()
    snaps = SnapshotStore(store, tmp_path, clock=clock)
    assert snaps.latest(A) is None and snaps.list(A) == []
    first = snaps.take(
        shell_id=A,
        label="build",
        cwd="/repo",
        cols=100,
        rows=30,
        reason="resize",
        text="héllo\nworld\n",
        actor="c1",
    )
    second = snaps.take(shell_id=A, label="b2", cwd="/x", cols=80, rows=24, reason="close", text="bye")
    assert second.taken_ms == first.taken_ms + 1  # same millisecond: still unique
    assert first.path == tmp_path / "snapshots" / A / f"{first.taken_ms}.txt"
    assert snaps.read_text(first) == "héllo\nworld\n"
    assert (first.label, first.cwd, first.cols, first.rows, first.reason, first.actor) == (
        "build",
        "/repo",
        100,
        30,
        "resize",
        "c1",
    )
    assert snaps.latest(A) == second
    assert snaps.list(A) == [second, first]
    assert snaps.list(B) == []


def test_snapshot_directories_are_private_at_every_level(store: Store, tmp_path: Path) -> None:
    # ``mkdir(parents=True)`` gave ``snapshots/`` itself the default 0755 (only the shell's own
    # directory got 0700): its listing named every shell the home ever had.
    snap = _take(SnapshotStore(store, tmp_path))
    for directory in (tmp_path / "snapshots", snap.path.parent):
        assert directory.stat().st_mode & 0o777 == 0o700, directory
    assert snap.path.stat().st_mode & 0o777 == 0o600


def test_text_cap_keeps_the_newest_lines(store: Store, tmp_path: Path) -> None:
    snaps = SnapshotStore(store, tmp_path, max_bytes=100)
    text = "".join(f"line {i:03d}\n" for i in range(50))  # 450 bytes
    snap = snaps.take(shell_id=A, label="", cwd="/", cols=80, rows=24, reason="manual", text=text)
    saved = snaps.read_text(snap)
    assert len(saved.encode()) <= 100 and saved.endswith("line 049\n") and saved.startswith("line ")
    assert snap.dropped_bytes == 450 - len(saved.encode()) and snap.size == len(saved.encode())
    # One long line of multibyte characters: cut on a character boundary, never mid-sequence.
    snap = snaps.take(shell_id=A, label="", cwd="/", cols=80, rows=24, reason="manual", text="é" * 200)
    assert snaps.read_text(snap) == "é" * 50


def test_per_shell_and_total_caps(store: Store, tmp_path: Path) -> None:
    snaps = SnapshotStore(store, tmp_path, keep_per_shell=3, max_total_bytes=8 * 4096)
    taken = [_take(snaps, A, text=f"{i}\n") for i in range(5)]
    kept = snaps.list(A)
    assert [s.id for s in kept] == [s.id for s in taken[:1:-1]]
    assert sorted(p.name for p in (tmp_path / "snapshots" / A).iterdir()) == sorted(s.path.name for s in kept)
    # Total cap (in whole 4 KiB blocks): big snapshots of B (3 blocks each) push out the oldest
    # snapshots of any shell; the new one stays.
    big = "x" * 12000 + "\n"
    _take(snaps, B, text=big)
    _take(snaps, B, text=big)
    newest = _take(snaps, B, text=big)
    total = sum(on_disk(s.size) for s in snaps.list(A) + snaps.list(B))
    assert total <= 8 * 4096
    assert snaps.latest(B) == newest
    assert len(snaps.list(B)) == 2
    assert snaps.list(A) == [] and not (tmp_path / "snapshots" / A).exists()
    files = {p.name for p in (tmp_path / "snapshots" / B).iterdir()}
    assert files == {s.path.name for s in snaps.list(B)}


def test_the_total_cap_counts_the_disk_small_snapshots_take(store: Store, tmp_path: Path) -> None:
    """A close snapshot of a shell that printed little is a few hundred bytes of text but a 4 KiB
    block and a directory: counted by their text, 256 MiB of them took about 5 GiB of disk."""
    snaps = SnapshotStore(store, tmp_path, max_total_bytes=10 * 4096)
    shells = [f"dsh-tiny{i:02d}" for i in range(30)]
    for shell in shells:
        _take(snaps, shell, text="$ echo hi\nhi\n")
    files = list((tmp_path / "snapshots").rglob("*.txt"))
    assert len(files) <= 10
    assert sum(-(-max(f.stat().st_size, 1) // 4096) * 4096 for f in files) <= 10 * 4096
    # Nor does a shell whose snapshots all went keep an empty directory.
    assert len(list((tmp_path / "snapshots").iterdir())) == len(files)
    assert snaps.latest(shells[-1]) is not None  # the newest are the ones kept


def test_redaction_before_disk(store: Store, tmp_path: Path) -> None:
    snaps = SnapshotStore(store, tmp_path, redact=lambda s: s.replace("hunter2", "****"))
    snap = snaps.take(
        shell_id=A, label="hunter2", cwd="/home/hunter2", cols=80, rows=24, reason="idle", text="pw=hunter2\n"
    )
    assert snaps.read_text(snap) == "pw=****\n" and snap.label == "****" and snap.cwd == "/home/****"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert b"hunter2" not in path.read_bytes(), path


def test_orphan_files_are_swept(store: Store, tmp_path: Path) -> None:
    snaps = SnapshotStore(store, tmp_path)
    _take(snaps)
    orphan = tmp_path / "snapshots" / A / "123.txt"
    orphan.write_text("left by a crash")
    _take(snaps)
    assert not orphan.exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reason": "boom"}, "manual, close, idle, resize, rename"),
        ({"shell_id": "x/../y"}, "dsh-ab12cd"),
        ({"cols": 0}, "positive"),
    ],
)
def test_bad_input(store: Store, tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "shell_id": A,
        "label": "",
        "cwd": "/",
        "cols": 80,
        "rows": 24,
        "reason": "manual",
        "text": "",
    }
    with pytest.raises(UsageError, match=message):
        SnapshotStore(store, tmp_path).take(**{**args, **kwargs})  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink"])
def test_a_scrollback_file_that_is_no_file_is_a_storage_error_never_waited_on(
    store: Store, tmp_path: Path, kind: str
) -> None:
    # A FIFO in its place hung the whole server at `shell_open from` (its read waited for a writer
    # for ever); a directory was an IsADirectoryError traceback.
    snaps = SnapshotStore(store, tmp_path)
    snap = _take(snaps)
    snap.path.unlink()
    if kind == "fifo":
        os.mkfifo(snap.path, 0o600)
    elif kind == "directory":
        snap.path.mkdir()
    else:
        (tmp_path / "elsewhere").write_text("someone else's\n", encoding="utf-8")
        snap.path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StorageError) as info:
        snaps.read_text(snap)
    assert info.value.code == "STORAGE_UNAVAILABLE"
    assert info.value.message.startswith(
        f"{snap.path}, the scrollback of snapshot {snap.id}, is not a regular file"
    )
    assert info.value.message.endswith(
        f"remove it (rm -r {snap.path}) and the snapshot revives without its scrollback"
    )
    snap.path.unlink() if kind != "directory" else snap.path.rmdir()
    assert snaps.read_text(snap) == ""  # removed: the documented way back


@pytest.mark.parametrize("where", ["snapshots", "shell"])
def test_a_file_where_the_snapshots_directory_goes_is_a_storage_error(
    store: Store, tmp_path: Path, where: str
) -> None:
    # It was a FileExistsError traceback, and every close failed with it as INTERNAL.
    snaps = SnapshotStore(store, tmp_path)
    level = tmp_path / "snapshots" if where == "snapshots" else tmp_path / "snapshots" / A
    level.parent.mkdir(mode=0o700, exist_ok=True)
    level.write_text("x", encoding="utf-8")
    with pytest.raises(StorageError) as info:
        _take(snaps)
    assert info.value.message.startswith(f"{level} is not a directory, so no snapshot can be kept there")
    assert info.value.message.endswith(f"remove it (rm {level}) and tether makes the directory again")
    assert store.query("SELECT * FROM snapshots") == []
    level.unlink()
    assert snaps.read_text(_take(snaps)) == "out\n"
