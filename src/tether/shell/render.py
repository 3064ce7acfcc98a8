"""``ShellResultText``: flattening a ``ShellRunResult`` into the one text a model (or a person) reads.

Invariant: the rules are fixed and applied in this order (spec 000 "结果如何渲染给模型"):

1. stdout;
2. when stderr is non-empty, a block headed ``[stderr]``;
3. when both are empty, ``(no output)``;
   a truncated stream ends with ``[output truncated; full output: PATH]`` (``(unavailable)`` when
   no spill file holds it, ``(unavailable: tether could not write PATH (REASON); …)`` when the
   file system refused it);
4. when the sandbox denied something, a deny marker and the escalation hint;
5. ``[timed out after Nms]`` on timeout; ``[stopped: REASON]`` when something external killed it;
6. the closing marker: ``[killed by signal: X]``, else ``[exit code: N]`` for a non-zero exit.

An incremental read that lost bytes from memory starts with ``dropped_marker``, which names the
spill file (or why there is none) in the truncation marker's words (``full_output``).

A non-zero exit stays in-band: it is text, never an exception. ``footer_lines`` is the part after
the streams (4–6 plus truncation notes), for front doors that already streamed the output live.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.shell.types import ShellCollectedOutput, ShellRunResult

if TYPE_CHECKING:
    from tether.shell.late_types import DroppedStream, ShellSandboxInfo


def full_output(spill_path: str | None, spill_refused: str | None) -> str:
    """Where a stream's whole output is: its spill file, else why there is none."""
    if spill_path is not None:
        return spill_path
    if spill_refused is not None:
        return f"(unavailable: {spill_refused}; free space there for later calls to keep theirs)"
    return "(unavailable)"


def truncation_marker(output: ShellCollectedOutput) -> str | None:
    if not output.truncated:
        return None
    return f"[output truncated; full output: {full_output(output.spill_path, output.spill_refused)}]"


def dropped_marker(dropped: Sequence[DroppedStream]) -> str | None:
    """The note before an incremental read (a promoted seed, ``job_output``) that memory cut short.

    Like the truncation marker it says where the whole stream is, so a reader who missed the start
    of a long job can still read all of it: ``[earlier output was dropped: …; full stdout: PATH]``.
    """
    if not dropped:
        return None
    where = "; ".join(
        f"full {stream.name}: {full_output(stream.spill_path, stream.spill_refused)}" for stream in dropped
    )
    return f"[earlier output was dropped: it exceeded the in-memory budget; {where}]"


def _stream_block(output: ShellCollectedOutput) -> str:
    text = output.text.removesuffix("\n")
    marker = truncation_marker(output)
    if marker is None:
        return text
    return f"{text}\n{marker}" if text else marker


def _has_content(output: ShellCollectedOutput) -> bool:
    return bool(output.text) or output.truncated


def sandbox_lines(sandbox: ShellSandboxInfo | None) -> list[str]:
    if sandbox is None or not sandbox.denied:
        return []
    # A bound the command met (its forks refused, a process killed for memory) is its own line:
    # no sandbox mode lifts it.
    limits = [f"[sandbox limit: {d.detail}]" for d in sandbox.denials if d.kind == "limit"]
    others = [d for d in sandbox.denials if d.kind != "limit"]
    if not others:
        return limits
    # A write at a relative path: the directory it was written from is not known (sandbox.denials).
    denied = ", ".join(
        f"{d.kind} {d.target}".strip()
        + (" (relative)" if d.kind == "write" and not d.target.startswith("/") else "")
        for d in others
    )
    lines = [f"[sandbox denied: {denied}]", *limits]
    if sandbox.escalation_hint:
        lines.append(f"[sandbox: {sandbox.escalation_hint}]")
    return lines


def closing_lines(result: ShellRunResult, *, stopped: str | None = None) -> list[str]:
    """Rules 4–6: sandbox, timeout / stop, signal or exit code."""
    lines = sandbox_lines(result.sandbox)
    if result.timed_out:
        lines.append(f"[timed out after {result.timeout_ms}ms]")
    if stopped:
        lines.append(f"[stopped: {stopped}]")
    if result.signal:
        lines.append(f"[killed by signal: {result.signal}]")
    elif result.exit_code not in (None, 0):
        lines.append(f"[exit code: {result.exit_code}]")
    return lines


def footer_lines(result: ShellRunResult, *, stopped: str | None = None) -> list[str]:
    """What follows output that was already shown live: truncation notes, then ``closing_lines``."""
    notes = [
        f"[{name} {marker[1:]}" if name == "stderr" else marker
        for name, output in (("stdout", result.stdout), ("stderr", result.stderr))
        if (marker := truncation_marker(output)) is not None
    ]
    return [*notes, *closing_lines(result, stopped=stopped)]


def render_shell_result(result: ShellRunResult, *, stopped: str | None = None) -> str:
    """The complete model-visible text of a settled command."""
    parts: list[str] = []
    if _has_content(result.stdout):
        parts.append(_stream_block(result.stdout))
    if _has_content(result.stderr):
        parts.append("[stderr]\n" + _stream_block(result.stderr))
    if not parts:
        parts.append("(no output)")
    parts.extend(closing_lines(result, stopped=stopped))
    return "\n".join(parts)
