"""The user's persistence paths: files and directories whose content a later, unconfined program runs.

Invariant: ``persistence_paths`` names every place of the user's account where a confined command
could leave code that runs later outside the sandbox — shell start-up files and
``~/.bash_aliases``; ``~/.ssh`` (``authorized_keys``, ``rc``, ``config``, ``environment``); git's
global configuration (``~/.gitconfig``, ``$XDG_CONFIG_HOME/git``) and the hooks directory an absolute
``core.hooksPath`` there (or in ``/etc/gitconfig``) names; ``~/.local/bin``, ``~/bin`` and
every absolute directory on ``PATH``; autostart entries; systemd user units and environment
generators; the user's crontab spool; tmux's configuration. The sandbox keeps each of them
read-only when a writable root contains it, and an absent one cannot be created (an empty
read-only placeholder stands in while the command runs).

Relative ``PATH`` entries (``.``, empty) are not protected: they name the working directory of
whoever runs the lookup, and making the working directory read-only would defeat the sandbox's
purpose (README, Limits).

``PathResolver`` is ``realpath`` for all of them at once: each path component costs one
``readlink`` however many paths share it (they all start with the home directory), and every
symlink it followed is remembered (``sandbox.links`` puts back one a command replaced).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Final, Literal

from tether.process.planted import read_regular

# Read by bash, sh, zsh, fish, ksh, csh, readline, X sessions, PAM and tmux when they start.
STARTUP_FILES: Final = (
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".bash_aliases",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".kshrc",
    ".mkshrc",
    ".cshrc",
    ".tcshrc",
    ".login",
    ".inputrc",
    ".xprofile",
    ".xsession",
    ".xsessionrc",
    ".xinitrc",
    ".pam_environment",
    ".tmux.conf",
    ".gitconfig",
)
HOME_DIRECTORIES: Final = (".ssh", ".local/bin", "bin", ".local/share/systemd/user", ".config/tmux")
# Relative to $XDG_CONFIG_HOME (default ~/.config).
CONFIG_DIRECTORIES: Final = ("git", "autostart", "systemd/user", "environment.d", "fish")
SYSTEM_DIRECTORIES: Final = ("/var/spool/cron",)
_MAX_HOPS: Final = 40  # the kernel's own limit on symlinks in one lookup


@dataclass(frozen=True, slots=True, kw_only=True)
class PersistencePath:
    """One protected location; ``kind`` says what stands in for it while it does not exist."""

    path: str
    kind: Literal["file", "dir"]
    placeholder: bool  # create a stand-in when absent (only inside the user's home)


def persistence_paths(
    *, user_home: str, path_env: str, xdg_config_home: str | None
) -> tuple[PersistencePath, ...]:
    """The persistence paths of the user whose home is ``user_home`` (a real path)."""
    config = xdg_config_home if xdg_config_home and os.path.isabs(xdg_config_home) else None
    config_dirs = {os.path.join(user_home, ".config"), *([config] if config else [])}
    found: list[PersistencePath] = [
        PersistencePath(path=os.path.join(user_home, name), kind="file", placeholder=True)
        for name in STARTUP_FILES
    ]
    found += [
        PersistencePath(path=os.path.join(user_home, name), kind="dir", placeholder=True)
        for name in HOME_DIRECTORIES
    ]
    found += [
        PersistencePath(path=os.path.join(base, name), kind="dir", placeholder=True)
        for base in sorted(config_dirs)
        for name in CONFIG_DIRECTORIES
    ]
    found += [PersistencePath(path=path, kind="dir", placeholder=False) for path in SYSTEM_DIRECTORIES]
    # A hooks directory the global configuration names runs in every repository (``~/.githooks``).
    git_configs = [os.path.join(user_home, ".gitconfig"), "/etc/gitconfig"]
    git_configs += [os.path.join(base, "git", "config") for base in sorted(config_dirs)]
    for config_file in git_configs:
        value = hooks_path_setting(config_file)
        if value is not None and (value.startswith("~/") or os.path.isabs(value)):
            hooks = os.path.normpath(os.path.join(user_home, value[2:]) if value.startswith("~/") else value)
            found.append(PersistencePath(path=hooks, kind="dir", placeholder=_inside(hooks, user_home)))
    for entry in path_env.split(os.pathsep):
        if os.path.isabs(entry):
            normal = os.path.normpath(entry)
            found.append(PersistencePath(path=normal, kind="dir", placeholder=_inside(normal, user_home)))
    unique: dict[str, PersistencePath] = {}
    for item in found:
        unique.setdefault(item.path, item)
    return tuple(unique.values())


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


_HOOKS_PATH_LINE: Final = re.compile(r"\s*hookspath\s*=\s*(.*?)\s*$", re.IGNORECASE)
_CONFIG_MAX: Final = 1 << 20


def hooks_path_setting(config_file: str) -> str | None:
    """The ``core.hooksPath`` a git configuration file sets, as written (``None``: unset, or no such
    file). Read here, not by ``git config``: this runs for every git directory that changed, before
    and after each command. What an ``include`` pulls in is not followed."""
    data = read_regular(config_file, _CONFIG_MAX)
    if not data:
        return None
    section = ""
    value: str | None = None
    for raw in data.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if line.startswith("[") and "]" in line:
            section = line[1 : line.find("]")].strip().lower()
            line = line[line.find("]") + 1 :].strip()
        if section == "core" and (found := _HOOKS_PATH_LINE.match(line)) is not None:
            value = found.group(1).split(" #")[0].split(" ;")[0].strip().strip('"')
    return value or None


def hooks_directory(gitdir: str) -> str | None:
    """The real path of the existing directory the ``core.hooksPath`` of ``gitdir``'s own
    ``config`` names (a relative one is taken from the work tree, where git runs hooks)."""
    value = hooks_path_setting(os.path.join(gitdir, "config"))
    if not value:
        return None
    work_tree = os.path.dirname(gitdir) if os.path.basename(gitdir) == ".git" else gitdir
    path = os.path.realpath(os.path.join(work_tree, os.path.expanduser(value)))
    return path if os.path.isdir(path) else None


class PathResolver:
    """``realpath`` for many paths at once, remembering every symlink it followed."""

    def __init__(self) -> None:
        self._targets: dict[str, str | None] = {}
        self.links: dict[str, str] = {}

    def _readlink(self, path: str) -> str | None:
        if path not in self._targets:
            try:
                self._targets[path] = os.readlink(path)
            except (OSError, ValueError):
                self._targets[path] = None  # not a link, or absent: taken as written
        return self._targets[path]

    def resolve(self, path: str) -> str:
        pending = [part for part in path.split("/") if part]
        current, hops = "/", 0
        while pending:
            part = pending.pop(0)
            if part == ".":
                continue
            if part == "..":
                current = os.path.dirname(current)
                continue
            candidate = os.path.join(current, part)
            target = self._readlink(candidate)
            if target is None or hops >= _MAX_HOPS:
                current = candidate
                continue
            hops += 1
            self.links.setdefault(candidate, target)
            if target.startswith("/"):
                current = "/"
            pending = [p for p in target.split("/") if p] + pending
        return current
