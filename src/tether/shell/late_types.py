"""Value types of the one-shot seam that a plain run of an unconfined command never builds.

Invariant: each is named by the module it belongs to — ``tether.shell.types`` (the incremental
read, the sandbox's verdict, a confined launch) or ``tether.shell.env_registry`` (a published
profile, a contributor, a listed variable) — and by the ``tether.shell`` face, as the same class,
imported from any of them; they are frozen dataclasses like the rest. They live here so that a
process that only runs a command — ``tether exec``, whose start-up is its product — does not create
them: a frozen dataclass costs ~0.7 ms to create on Python 3.11, most of it compiling its generated
methods. Those modules import this one on first use of one of these names (PEP 562);
``tests/test_cli_light.py`` checks that ``tether exec`` does not load it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tether.shell.types import join_streams

if TYPE_CHECKING:
    from tether.process.bounds import Bounds
    from tether.shell.env_registry import ShellEnvContext


@dataclass(frozen=True, slots=True)
class DroppedStream:
    """A stream an incremental read lost bytes of: ``spill_path`` is the file holding all of it
    (None when there is none); ``spill_refused`` says why, when the file system refused it."""

    name: str
    spill_path: str | None
    spill_refused: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellSandboxDenial:
    """One operation a confining executor refused (``kind`` e.g. "write", "network")."""

    kind: str
    target: str
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellSandboxInfo:
    """What a confining executor reports once the process settled (None for local providers).

    ``permissions`` names the policy the command ran under; ``escalation_hint`` tells the model how
    to ask for wider permissions when something was denied.
    """

    provider: str
    permissions: str
    denials: tuple[ShellSandboxDenial, ...] = ()
    escalation_hint: str | None = None
    # What the command could take (``at most 1024 processes and 2048 MiB of memory``), or what was
    # not bounded here and why; None for an unconfined command.
    bounds: str | None = None

    @property
    def denied(self) -> bool:
        return bool(self.denials)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellProcessRead:
    """A consuming incremental read: what arrived since the previous ``read_output()``.

    ``lossy`` is true when bytes were dropped from memory before this reader consumed them;
    ``dropped`` then names each stream that lost some, with the spill file that still holds the
    whole stream (None when there is none: spilling disabled, refused, or over its cap).
    """

    stdout: str
    stderr: str
    lossy: bool
    dropped: tuple[DroppedStream, ...] = ()

    @property
    def text(self) -> str:
        """Both streams as one text (stdout, then stderr)."""
        return join_streams(self.stdout, self.stderr)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfinedLaunch:
    """A provider argv wrapped by a confinement (e.g. bubblewrap), and how to read its verdict.

    ``report(stderr_tail)`` is awaited once the process settled, before the result is available,
    and returns the sandbox info (denials, and whatever the confinement had to undo);
    ``cleanup()`` removes whatever ``wrap`` created. ``pass_fds`` reach the child with the same
    numbers (e.g. bubblewrap's ``--seccomp FD``); ``cleanup`` closes them. ``started(pid)`` is
    called once the wrapped process runs (what watches it from outside starts there).
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    report: Callable[[str], Awaitable[ShellSandboxInfo]] | None = None
    cleanup: Callable[[], None] | None = None
    pass_fds: tuple[int, ...] = ()
    started: Callable[[int], None] | None = None
    # The command is born in a group that holds it to these (``tether.process.bounds``).
    bounds: Bounds | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileContext:
    name: str
    directory: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellEnvContributor:
    """``{name, variables{key → description}, resolve(execution)}``."""

    name: str
    variables: Mapping[str, str]
    resolve: Callable[[ShellEnvContext], Mapping[str, str]] = field(repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellEnvVariable:
    key: str
    description: str
    source: str  # "built-in" or the contributor's name
