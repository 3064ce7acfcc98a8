"""A write to a shell as the engine's tests make one: actor ``t``, the default output, the wait
(and, when it matters, the safety) each test names; ``until`` for the common wait of a kind
bounded only by ``HANG_MS`` (see ``hang``)."""

from __future__ import annotations

from hang import HANG_MS
from tether.shells import Write
from tether.shells.requests import Output, Safety, Wait, WaitKind


def until(kind: WaitKind) -> Wait:
    return Wait(kind=kind, timeout_ms=HANG_MS)


def write(shell_id: str, wait: Wait, safety: Safety | None = None) -> Write:
    return Write(
        shell_id=shell_id,
        actor="t",
        wait=wait,
        output=Output(),
        safety=safety if safety is not None else Safety(),
    )
