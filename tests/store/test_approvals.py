"""The approval queue across processes: one answer per question (a decision and an expiry race,
exactly one wins), a decision after the deadline is refused, and a question asked in one process
is answered from another, the asker woken by inotify."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hang import HANG_S
from tether.approvals import Approvals, PersonReply, Question
from tether.audit import AuditLog, verify
from tether.errors import NotFoundError, StorageError
from tether.store.approvals import QUEUE_FILE, ApprovalQueue, Channel, now_ms
from tether.store.close_watch import CloseWatch
from tether.store.db import Store


@pytest.fixture
def queue(tether_home: Path) -> Iterator[ApprovalQueue]:
    store = Store.open(tether_home)
    yield ApprovalQueue(store, tether_home)
    store.close()


def _ask(queue: ApprovalQueue, timeout_ms: int, channel: Channel = "panel") -> str:
    row = queue.ask(
        kind="sandbox_escalation",
        tool="bash",
        subject="run `make`",
        mode="allow_network",
        justification="fetch",
        asker="conv-a",
        targets=("/w",),
        channel=channel,
        timeout_ms=timeout_ms,
    )
    return row.id


def _audit(home: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for day in sorted((home / "audit").glob("*.jsonl")):
        records.extend(json.loads(line) for line in day.read_text().splitlines())
    return [r for r in records if r.get("action") == "approval"]


def test_one_answer_per_question(queue: ApprovalQueue) -> None:
    decided = _ask(queue, 60_000)
    assert queue.decide(decided, approve=True, by="p")
    assert not queue.decide(decided, approve=False, by="q")  # the first answer stands
    assert not queue.close(decided, "expired")
    row = queue.get(decided)
    assert row is not None and row.status == "approved" and row.decided_by == "p"

    expired = _ask(queue, 60_000)
    assert queue.close(expired, "expired")
    assert not queue.decide(expired, approve=True, by="p")  # too late: it was refused
    late = _ask(queue, 0)  # past its deadline at once, before anyone closed it
    assert not queue.decide(late, approve=True, by="p")
    assert [r.id for r in queue.pending()] == []


def test_decide_refuses_what_is_not_pending(tether_home: Path, queue: ApprovalQueue) -> None:
    approvals = Approvals(tether_home, timeout_s=60)
    with pytest.raises(NotFoundError, match="apr-nothing is unknown"):
        approvals.decide("apr-nothing", approve=True, by="p")
    gone = _ask(queue, 0)
    with pytest.raises(NotFoundError, match="expired unanswered at"):
        approvals.decide(gone, approve=True, by="p")
    assert _audit(tether_home) == []  # nothing decided, nothing recorded


def test_the_loser_of_a_race_is_told_whose_answer_counted(
    tether_home: Path, queue: ApprovalQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pages answer at once and the other one's answer is taken first: the loser was told
    "answered or expired meanwhile", not which — it now hears what was decided, by whom, when, and
    their words; and the panel lists that decision (``decided``) for every page."""
    asked = _ask(queue, 60_000)
    real = ApprovalQueue.decide

    def rival_first(self: ApprovalQueue, row_id: str, **answer: Any) -> bool:
        assert real(self, row_id, approve=False, by="person B", reason="not now")
        return real(self, row_id, **answer)

    monkeypatch.setattr(ApprovalQueue, "decide", rival_first)
    approvals = Approvals(tether_home, timeout_s=60)
    said = r'already denied by person B at \d\d:\d\d:\d\d UTC \(their words: "not now"\); your answer did not'
    with pytest.raises(NotFoundError, match=said):
        approvals.decide(asked, approve=True, by="person A")
    assert [(r.id, r.status, r.decided_by) for r in approvals.decided(60_000)] == [
        (asked, "denied", "person B")
    ]


@pytest.mark.parametrize("rival", ["another page denies", "the asker withdraws"])
def test_only_the_decision_that_counts_is_audited(
    tether_home: Path, queue: ApprovalQueue, monkeypatch: pytest.MonkeyPatch, rival: str
) -> None:
    """Two pages answering one question at once, or an answer racing the asking call giving up:
    every decision was audited once its row looked pending, and then only one of them won the
    row. The loser's record stayed ("denied by person B") though nothing acted on it. The check,
    the record and the answer now hold the queue's write lock together: a rival reaching the row
    while a decision is being recorded is held off, and only the answer that counts is in the log.
    """
    asked = _ask(queue, 60_000)
    status = "denied" if rival == "another page denies" else "cancelled"
    real_append = AuditLog.append
    raced: list[str] = []

    def a_rival_first(self: AuditLog, **fields: Any) -> Any:
        # Another process (a second panel, the asking call) reaches the row at this very moment;
        # it does what ``decide``/``close`` do, but gives up at once where they would wait.
        other = sqlite3.connect(tether_home / "tether.db", timeout=0, isolation_level=None)
        with contextlib.closing(other):
            try:
                other.execute(
                    "UPDATE approvals SET status = ?, decided_by = 'person B' "
                    "WHERE id = ? AND status = 'pending'",
                    (status, asked),
                )
                raced.append("rival won")
            except sqlite3.OperationalError as exc:
                assert "locked" in str(exc)
                raced.append("rival held off")
        return real_append(self, **fields)

    monkeypatch.setattr(AuditLog, "append", a_rival_first)
    with contextlib.suppress(NotFoundError):
        Approvals(tether_home, timeout_s=60).decide(asked, approve=True, by="person A")
    monkeypatch.undo()
    row = queue.get(asked)
    assert row is not None
    answers = [r["extra"]["answer"] for r in _audit(tether_home)]
    assert (raced, row.status, answers) == (["rival held off"], "approved", ["approved"])
    # The rival, coming after, finds it answered.
    assert not queue.decide(asked, approve=False, by="person B")
    assert not queue.close(asked, "cancelled")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs of its own (needs root)")
def test_an_answer_the_database_refused_after_its_record_is_voided_in_the_log(tmp_path: Path) -> None:
    """A full disk: the answer's record still fitted in the audit file's last page, the database's
    write of the answer did not. The person was told STORAGE_UNAVAILABLE and the question stayed
    pending, but the log said "approved by person A" as if it had counted. A second record now
    says that answer did not take effect."""
    home = tmp_path / "small"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(home)], check=True)
    try:
        store = Store.open(home)
        asked = _ask(ApprovalQueue(store, home), 600_000)
        log = AuditLog(home)
        day = home / "audit"
        # Room for two records in the audit file's last page (tmpfs gives a file whole pages).
        while True:
            log.append(actor="conv-a", source="tool", tool="bash", action="run", command="true")
            [path] = list(day.glob("*.jsonl"))
            if 0 < path.stat().st_size % 4096 <= 2000:
                break
        with contextlib.suppress(OSError), (home / "filler").open("wb", buffering=0) as filler:
            while True:
                filler.write(b"x" * 65536)
        with pytest.raises(StorageError):
            Approvals(home, timeout_s=600).decide(asked, approve=True, by="person A")
        row = ApprovalQueue(store, home).get(asked)
        assert row is not None and row.status == "pending"
        taken, voided = [r for r in _audit(home) if r["extra"]["approval"] == asked]
        assert taken["extra"]["answer"] == "approved"
        assert voided["extra"] == {"approval": asked, "answer": "not-taken", "voids": taken["seq"]}
        assert voided["outcome"] == "error" and "did not take effect" in voided["detail"]
        (home / "filler").unlink()
        assert Approvals(home, timeout_s=600).decide(asked, approve=True, by="person A").status == "approved"
        assert verify(home).ok
        store.close()
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)


def test_the_panel_cannot_answer_a_question_put_to_the_person_at_the_client(
    tether_home: Path, queue: ApprovalQueue
) -> None:
    """A question asked through MCP elicitation is not in the panel's list, but its id answered in
    the panel was taken: the log then held the panel's answer, which nothing acted on, beside the
    client's, which the asker did act on."""
    asked = _ask(queue, 60_000, channel="elicitation")
    with pytest.raises(NotFoundError, match="asked of the person at the MCP client"):
        Approvals(tether_home, timeout_s=60).decide(asked, approve=True, by="person at the panel")
    assert not queue.decide(asked, approve=True, by="person at the panel", channel="panel")
    row = queue.get(asked)
    assert row is not None and row.status == "pending"
    assert _audit(tether_home) == []
    assert queue.decide(asked, approve=False, by="person at the client")  # the client's answer


class _LatePerson:
    """A person at an MCP client whose answer reaches the asker just past the row's deadline (a
    busy loop hands the form's reply over late)."""

    who = "person at the client"

    def __init__(self, queue: ApprovalQueue) -> None:
        self.queue = queue

    async def confirm(self, message: str, *, timeout_s: float) -> PersonReply:
        [row] = self.queue.unanswered()
        while now_ms() <= row.expires_ms:  # a condition, not a pause: the wall clock passing it
            await asyncio.sleep(0.001)
        return PersonReply(outcome="approved", reason="fine")


async def test_an_elicitation_answer_handed_over_late_closes_its_question(
    tether_home: Path, queue: ApprovalQueue
) -> None:
    """The form's reply came a moment past the row's ``expires_ms``: the answer was acted on and
    audited as approved, but the row's ``decide`` was refused by the deadline and it stayed
    pending — so a later panel listing, once the asker had ended, withdrew it and audited a
    "cancelled" for a question that had been approved."""
    approvals = Approvals(tether_home, timeout_s=0.001)
    question = Question(
        kind="bypass-guard", tool="shell_run", subject="git push --force", mode="git-force-push",
        justification="", asker="conv-a",
    )  # fmt: skip
    answer = await approvals.ask(question, person=_LatePerson(queue))
    assert answer.approved
    row = queue.get(answer.approval_id)
    assert row is not None and row.status == "approved" and row.decided_by == "person at the client"
    assert [r["extra"]["answer"] for r in _audit(tether_home)] == ["approved"]


_ASKER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from tether.approvals import Approvals, Question

    async def main():
        approvals = Approvals(Path(sys.argv[1]), timeout_s=float(sys.argv[2]))
        question = Question(kind="sandbox_escalation", tool="shell_open", subject="open a shell in /w",
                            mode="allow_host_write", justification="cache", asker="conv-child")
        answer = await approvals.ask(question, person=None)
        print(answer.outcome, answer.by, answer.reason, sep="|", flush=True)

    asyncio.run(main())
    """
)


async def _pending_row(queue: ApprovalQueue) -> str:
    """The one pending question, waiting on the queue's wake-up file (never on a period)."""
    queue.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    event = CloseWatch.register(queue.dir, QUEUE_FILE)
    assert event is not None
    try:
        while not queue.pending():
            event.clear()
            if queue.pending():
                break
            await asyncio.wait_for(event.wait(), HANG_S)
    finally:
        CloseWatch.unregister(queue.dir, QUEUE_FILE, event)
    [row] = queue.pending()
    return row.id


@pytest.mark.parametrize("answer", ["approve", "deny", "nobody"])
async def test_a_question_asked_in_one_process_is_answered_from_another(
    tether_home: Path, queue: ApprovalQueue, answer: str
) -> None:
    timeout = "1" if answer == "nobody" else str(HANG_S)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _ASKER, str(tether_home), timeout, stdout=subprocess.PIPE, env=dict(os.environ)
    )
    try:
        assert child.stdout is not None
        row_id = await _pending_row(queue)
        if answer != "nobody":
            Approvals(tether_home, timeout_s=60).decide(
                row_id, approve=answer == "approve", by="person at the panel", reason="ok"
            )
        line = await asyncio.wait_for(child.stdout.readline(), HANG_S)
    finally:
        if child.returncode is None:
            await asyncio.wait_for(child.wait(), HANG_S)
    expected = {
        "approve": "approved|person at the panel|ok",
        "deny": "denied|person at the panel|ok",
        "nobody": "timeout||",
    }[answer]
    assert line.decode().strip() == expected
    [record] = _audit(tether_home)
    assert record["extra"]["answer"] == {"approve": "approved", "deny": "denied", "nobody": "timeout"}[answer]
    assert record["source"] == ("tool" if answer == "nobody" else "panel")
    row = queue.get(row_id)
    assert (
        row is not None
        and row.status == {"approve": "approved", "deny": "denied", "nobody": "expired"}[answer]
    )


async def test_a_question_whose_asker_was_killed_is_withdrawn_not_answered(
    tether_home: Path, queue: ApprovalQueue
) -> None:
    """The asking process SIGKILLed (a crash): its question stayed pending, the panel listed it,
    and approving it audited an approval nobody waited for. It is withdrawn instead: not listed,
    audited once as cancelled, and a decision on it says why."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _ASKER, str(tether_home), str(HANG_S), stdout=subprocess.PIPE,
        env=dict(os.environ),
    )  # fmt: skip
    try:
        row_id = await _pending_row(queue)
        approvals = Approvals(tether_home, timeout_s=60)
        assert [row.id for row in approvals.pending()] == [row_id]  # alive: listed
    finally:
        child.kill()
        await asyncio.wait_for(child.wait(), HANG_S)
    with pytest.raises(NotFoundError, match="withdrawn: the process that asked has ended"):
        approvals.decide(row_id, approve=True, by="person at the panel")
    assert approvals.pending() == []
    row = queue.get(row_id)
    assert row is not None and row.status == "cancelled"
    [record] = _audit(tether_home)
    assert record["extra"]["answer"] == "cancelled" and record["source"] == "panel"
    # Listing alone withdraws too: a question of a process long gone, and one of a pid reused
    # by another process since (its start time differs), never decided on; this process's stays.
    mine = _ask(queue, 60_000)
    here = os.readlink("/proc/self/ns/pid")
    for ghost in (f"999999999:1@{here}", f"{os.getpid()}:1@{here}"):
        orphan = _ask(queue, 60_000)
        queue.store.execute("UPDATE approvals SET asker_process = ? WHERE id = ?", (ghost, orphan))
        assert [row.id for row in approvals.pending()] == [mine]
        withdrawn = queue.get(orphan)
        assert withdrawn is not None and withdrawn.status == "cancelled"
    assert len(_audit(tether_home)) == 3
    # A question put to an MCP client, or past its deadline, by a process since killed (nothing
    # listed it, so it stayed pending for good, with no record of how it ended): withdrawn too.
    for channel, timeout_ms in (("elicitation", 60_000), ("panel", 0)):
        orphan = _ask(queue, timeout_ms, channel=channel)
        queue.store.execute(
            "UPDATE approvals SET asker_process = ? WHERE id = ?", (f"999999999:1@{here}", orphan)
        )
        assert [row.id for row in approvals.pending()] == [mine]
        withdrawn = queue.get(orphan)
        assert withdrawn is not None and withdrawn.status == "cancelled"
        assert _audit(tether_home)[-1]["extra"]["channel"] == channel
    assert len(_audit(tether_home)) == 5
    # An asker in another PID namespace (a container sharing the home) cannot be judged: kept.
    elsewhere = _ask(queue, 60_000)
    queue.store.execute(
        "UPDATE approvals SET asker_process = ? WHERE id = ?", ("999999999:1@pid:[1]", elsewhere)
    )
    assert [row.id for row in approvals.pending()] == [mine, elsewhere]
