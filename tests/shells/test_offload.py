"""Large renders run in a worker process, come back exactly, and never outlive their server.

The jobs are functions a worker can import by name (``os.getpid`` says where a job ran, ``int``
fails on demand, ``time.sleep`` keeps a worker busy) and the real renderer on a real log; the last
test SIGKILLs a server process in the middle of a job and looks for its worker."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from hang import HANG_S
from tether.shells import offload
from tether.shells.offload import INLINE_BYTES, Unfinished, bounded, rendered
from tether.shells.reading import log_lines
from tether.shells.vault.mask import SecretMasker
from tether.shells.waits import WaitSpec, _fed, _Scan


def _workers(of: int) -> set[int]:
    found = set()
    for child in psutil.Process(of).children():
        try:
            if "serve_jobs" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.add(child.pid)
        except psutil.Error:
            continue
    return found


def _wait(predicate: object, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


async def test_a_large_job_runs_in_another_process_and_a_small_one_here() -> None:
    where = await rendered(INLINE_BYTES, os.getpid)
    assert where != os.getpid() and where in _workers(os.getpid())
    assert await rendered(INLINE_BYTES - 1, os.getpid) == os.getpid()
    assert await rendered(INLINE_BYTES, os.getpid) == where  # the worker is kept for the next job


async def test_a_jobs_own_error_reaches_the_caller() -> None:
    with pytest.raises(ValueError, match="invalid literal"):
        await rendered(INLINE_BYTES, int, "not a number")


async def test_a_job_that_cannot_be_pickled_runs_here() -> None:
    lock = threading.Lock()  # cannot be pickled: run where it is, same object
    assert await rendered(INLINE_BYTES, id, lock) == id(lock)


async def test_a_worker_that_dies_mid_job_costs_isolation_not_the_result() -> None:
    worker = await rendered(INLINE_BYTES, os.getpid)  # an idle worker, taken by the next job
    task = asyncio.ensure_future(rendered(INLINE_BYTES, time.sleep, 3.0))
    await asyncio.sleep(0.5)  # the job is in the worker (if not yet, it meets a dead one: the same)
    os.kill(worker, signal.SIGKILL)
    started = time.monotonic()
    assert await task is None  # run again, on the waiting thread
    assert time.monotonic() - started >= 2.0  # the whole sleep, here: not a worker's answer
    assert await rendered(INLINE_BYTES, os.getpid) not in (worker, os.getpid())  # a new worker


async def test_the_real_renderer_gives_the_same_lines_in_a_worker(tmp_path: Path) -> None:
    log = tmp_path / "dsh-abcdef.log"
    log.write_bytes(b"".join(b"line %d \x1b[1mbold\x1b[0m\r\n" % n for n in range(40000)))
    size = log.stat().st_size
    assert size >= INLINE_BYTES
    here = log_lines(log, 0, size, 2000, max_bytes=65536)
    assert here.total == 40000
    assert await rendered(size, log_lines, log, 0, size, 2000, max_bytes=65536) == here


def test_a_killed_server_leaves_no_worker() -> None:
    server = (
        "import asyncio, time\n"
        "from tether.shells import offload\n"
        "asyncio.run(offload.rendered(offload.INLINE_BYTES, time.sleep, 600))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", server])
    try:
        _wait(lambda: _workers(proc.pid), "the server never started its worker")
        (worker,) = _workers(proc.pid)
        proc.kill()  # SIGKILL: the server closes nothing
        proc.wait()
        _wait(lambda: not psutil.pid_exists(worker) or _zombie(worker), "the worker outlived its server", 10)
    finally:
        proc.kill()
        proc.wait()


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


async def test_a_match_wait_over_a_flood_matches_masked_text_after_the_hand_over(tmp_path: Path) -> None:
    # A wait that finds hundreds of KB new at once renders them in a worker, with the mask as it
    # was handed over: the pattern sees the masked line, never the raw one.
    log = tmp_path / "dsh-abcdef.log"
    log.write_bytes(b"y" * 600_000 + b"\r" + b"the needle is here\r\n" + b"z" * 10)
    masker = SecretMasker({"K": "needle"})
    for pattern, found in (("needle", None), (r"the \[vault:K\] is", "the [vault:K] is")):
        spec = WaitSpec(kind="match", regex=re.compile(pattern), masking=lambda: masker.mask)
        scan = _Scan(path=log, pos=0, spec=spec, events=None, last_output=0.0)
        assert await _fed(scan, time.monotonic() + HANG_S) == []
        assert scan.matched == found and scan.pos == log.stat().st_size
        assert scan._text == "z" * 10  # the unfinished line, carried into the next piece


async def test_a_bounded_job_over_its_time_is_ended_with_its_worker() -> None:
    worker = await bounded(HANG_S, os.getpid)  # the idle worker the next job takes
    with pytest.raises(Unfinished, match=r"did not finish within 0\.5 s"):
        await bounded(0.5, time.sleep, 600)
    _wait(lambda: not psutil.pid_exists(worker) or _zombie(worker), "the overrun worker lives on", 10)
    assert await bounded(HANG_S, os.getpid) not in (worker, os.getpid())  # the next one: a new worker


async def test_a_bounded_job_never_runs_here() -> None:
    lock = threading.Lock()  # cannot be pickled: a rendering would run here, a bounded job does not
    with pytest.raises(Unfinished, match="cannot go to a worker process"):
        await bounded(HANG_S, id, lock)


async def test_a_job_the_lean_worker_cannot_import_runs_here() -> None:
    # The worker holds the renderer, not the shells' face: a module that needs the face
    # (tools.audited imports from tether.shells) is unavailable there, and the job runs here.
    from tether.tools.audited import _distinct

    assert await rendered(INLINE_BYTES, _distinct, ["b", "a", "b"]) == ["b", "a"]


async def test_a_worker_idle_too_long_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    first = await rendered(INLINE_BYTES, os.getpid)
    monkeypatch.setattr(offload, "_IDLE_REUSE_S", 0.0)  # every idle worker is too old to take
    second = await rendered(INLINE_BYTES, os.getpid)
    assert second != first
    _wait(lambda: first not in _workers(os.getpid()), "the replaced worker was not ended", 10)


async def test_a_package_of_another_build_on_disk_starts_no_worker_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The package on disk is not the one this process started from (an upgrade under a server):
    # the first worker says so and ends; from then on a render runs here and a bounded job is
    # refused with the fix, without starting another worker each time.
    monkeypatch.setattr(offload, "_PROCESSES", offload._Processes())
    monkeypatch.setattr(offload, "_BUILD", "a build this process never had")
    started = []
    real = offload._Worker.__init__

    def counted(worker: offload._Worker) -> None:
        real(worker)
        started.append(worker.proc.pid)

    monkeypatch.setattr(offload._Worker, "__init__", counted)
    assert await rendered(INLINE_BYTES, os.getpid) == os.getpid()
    with pytest.raises(offload.Upgraded, match=r"changed since this server .* started: tether was upgraded"):
        await bounded(HANG_S, os.getpid)
    assert await rendered(INLINE_BYTES, os.getpid) == os.getpid()
    assert len(started) == 1 and started[0] not in _workers(os.getpid())


async def test_what_a_job_prints_never_corrupts_its_reply() -> None:
    # print writes to the worker's stdout: the reply travels on a descriptor of its own.
    assert await rendered(INLINE_BYTES, print, "noise from a job") is None
    assert await rendered(INLINE_BYTES, os.getpid) != os.getpid()  # the same worker still answers


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace")


async def test_a_worker_imports_only_what_its_renders_use(tmp_path: Path) -> None:
    """Every module a worker imports is memory each one holds (``logging`` alone ~1.3 MiB of the
    ~14 MiB a worker holds after a 10 MB render, where the budget is 16 MiB in all)."""
    offload.close_workers()
    log = tmp_path / "dsh-m0dules.log"
    log.write_bytes(b"a line of a build's output\n" * (INLINE_BYTES // 27 + 1))
    size = log.stat().st_size
    assert (await rendered(size, log_lines, log, 0, size, 10)).total > 0
    held = set(await rendered(INLINE_BYTES, eval, "list(__import__('sys').modules)"))
    assert "tether.shells.reading" in held  # the render ran there
    assert not held & {"logging", "difflib", "asyncio", "tether.stamp", "tether.shells.tmux"}, held


async def test_a_worker_holds_the_renderer_not_the_event_loop_nor_its_last_render(tmp_path: Path) -> None:
    offload.close_workers()  # a fresh worker: what it holds is what this test gave it
    worker = await rendered(INLINE_BYTES, os.getpid)
    idle = psutil.Process(worker).memory_info().rss
    log = tmp_path / "dsh-m3m0ry.log"
    with log.open("wb") as out:  # 10 MB of printable 100-character lines, like a build's log
        for _ in range(100):
            text = base64.b64encode(os.urandom(75_000))
            out.write(b"".join(text[i : i + 100] + b"\n" for i in range(0, len(text), 100)))
    size = log.stat().st_size
    lines = await rendered(size, log_lines, log, 0, size, 2000, max_bytes=200_000)
    assert lines.total == 100_000 and _workers(os.getpid()) == {worker}  # the render ran there
    # The render's peak (tens of MiB) goes back to the system once the reply is out (the worker
    # trims after it answers, so a busy machine may show the peak for a moment); before the worker
    # gave it back it kept ~18 MiB more than when idle, for good.
    deadline = time.monotonic() + 30.0
    while (kept := psutil.Process(worker).memory_info().rss - idle) >= 6 * 2**20:
        assert time.monotonic() < deadline, f"the worker kept {kept / 2**20:.1f} MiB of its render"
        await asyncio.sleep(0.05)
    # Neither the event loop nor OpenSSL (which asyncio maps) is loaded there: ~8 MiB a worker.
    assert not re.search(r"_asyncio|_ssl|libssl|libcrypto", _maps(worker)), "the worker loaded asyncio"
