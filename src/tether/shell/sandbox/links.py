"""Symlinks on the way to a persistence path: resolved once, and put back if a command replaced one.

Invariant: when ``~/.bashrc`` (or ``~/.config``) is a symlink — dotfiles managers make them — the
sandbox binds the real target read-only, because a mount cannot sit on a symlink (``mount``
follows it). The link itself is then only an entry of a writable directory: ``rm ~/.bashrc`` and
a fresh regular ``~/.bashrc`` would work. So every symlink met while resolving a persistence path
is recorded with its target when the policy is built, and after the command ``restore_links`` puts back
each one under a writable root that no longer points where it did: what the command left at that
name is renamed to ``NAME.disabled-by-tether`` and the link recreated, before the result returns,
each reported as a ``write`` denial.

The links come from ``sandbox.persistence.PathResolver``, which resolves the persistence paths.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from tether.shell.sandbox.git import directory_fd, move_aside
from tether.shell.types import ShellSandboxDenial


def restore_links(
    links: Iterable[tuple[str, str]], *, inside: Callable[[str], bool]
) -> list[ShellSandboxDenial]:
    """Recreate each recorded link ``inside`` the writable area that no longer points where it did."""
    denials: list[ShellSandboxDenial] = []
    for path, target in links:
        if not inside(path):
            continue
        try:
            if os.readlink(path) == target:
                continue
        except OSError:
            pass  # gone, or no longer a link
        parent, name = os.path.split(path)
        try:
            with directory_fd(parent) as fd:
                try:
                    moved: str | None = move_aside(fd, name)
                except FileNotFoundError:
                    moved = None
                os.symlink(target, name, dir_fd=fd)
        except OSError as exc:
            detail = f"the link to {target} was replaced and could not be restored ({exc.strerror or exc})"
        else:
            left = f"; what the command left there is {moved}" if moved else ""
            detail = f"the link to {target} was replaced: restored{left}"
        denials.append(ShellSandboxDenial(kind="write", target=path, detail=detail))
    return denials
