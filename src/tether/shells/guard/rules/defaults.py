"""The default rule set: what the guard blocks when ``config.toml`` says nothing.

Invariant: every default has a stable id (``config.toml`` disables rules by id), a summary that
docs/safety.md repeats, and advice that names a safer way to do the job. The order is
the order rules are tried on each event; the first that fires names the verdict.
"""

from __future__ import annotations

from tether.shells.guard.rules import files, system
from tether.shells.guard.rules.rule import CommandMatch, Rule

DEFAULT_RULES: tuple[Rule, ...] = (
    Rule(
        id="recursive-delete",
        summary="rm -r (any spelling, with or without -f) of /, /*, ~, $HOME, a system directory, "
        "or a ..-climb out of the working directory; rsync --delete onto one of those",
        advice="Delete the specific directory you mean by its own path (e.g. rm -rf ./build).",
        judge=files.recursive_delete,
    ),
    Rule(
        id="find-delete",
        summary="find starting at / , ~ or a system directory with -delete or -exec rm",
        advice="Start find in the specific directory you mean (e.g. find ./build -name '*.o' -delete).",
        judge=files.find_delete,
    ),
    Rule(
        id="mkfs",
        summary="mkfs, mkfs.*, mke2fs, mkdosfs, mkntfs: creating a filesystem erases the old one",
        advice="Formatting erases the device; ask the user to run it themselves.",
        judge=CommandMatch(
            commands=("mkfs*", "mke2fs", "mkdosfs", "mkntfs"),
            why="creating a filesystem erases everything on the target",
        ),
    ),
    Rule(
        id="dd-device",
        summary="dd of=/dev/… (any device but /dev/null, /dev/zero, ttys and the like)",
        advice="Write to an image file (of=disk.img) instead of a device.",
        judge=files.dd_device,
    ),
    Rule(
        id="block-device-write",
        summary="> /dev/sdX, tee/cp/shred/wipefs/mkswap onto a disk, partition or /dev/mem",
        advice="Write to a regular file instead of a disk device.",
        judge=files.block_device_write,
    ),
    Rule(
        id="fork-bomb",
        summary=":(){ :|:& };: and any function that starts itself in a pipe or in the background",
        advice="Use a bounded loop instead of a function that spawns itself.",
        judge=system.fork_bomb,
    ),
    Rule(
        id="chmod-chown-system",
        summary="chmod/chown/chgrp -R on / or a system directory; any chmod/chown of / itself",
        advice="Change the permissions of the specific files you mean, inside your project.",
        judge=files.chmod_chown,
    ),
    Rule(
        id="fetch-exec",
        summary="curl/wget … | sh (or bash, zsh, python, perl, node, …), sh <(curl …), "
        'bash -c "$(curl …)", eval "$(wget -O- …)"',
        advice="Download to a file, read it, then run the file (curl -fsSLo install.sh URL; "
        "cat install.sh; sh install.sh).",
        judge=system.code_from("fetch", "a network download"),
    ),
    Rule(
        id="decode-exec",
        summary="base64 -d | sh, xxd -r | bash, … (decoded text run as code)",
        advice="Decode to a file and read it before running it.",
        judge=system.code_from("decode", "decoded text"),
    ),
    Rule(
        id="git-force-push",
        summary="git push --force / -f / --force-with-lease / --mirror / +refspec",
        advice="Push without force (git push origin BRANCH), or push to a new branch.",
        judge=system.git_force_push,
    ),
    Rule(
        id="power-off",
        summary="shutdown, reboot, poweroff, halt, init 0|6, systemctl poweroff|reboot|halt|kexec, "
        "> /proc/sysrq-trigger",
        advice="Ask the user to shut down or restart the machine themselves.",
        judge=system.power_off,
    ),
    Rule(
        id="kill-all",
        summary="kill -9 -1 (any signal to pid -1), killall5",
        advice="Kill the specific process ids you mean (e.g. kill 1234).",
        judge=system.kill_all,
    ),
    Rule(
        id="truncate-system-file",
        summary=": > /etc/passwd and other truncating redirects (or truncate) of files under /etc, /boot, "
        "/bin, /sbin, /lib, /lib64, /usr",
        advice="Read the file first, then append (>>) or edit it with a tool that keeps a backup.",
        judge=files.truncate_system_file,
    ),
    Rule(
        id="tether-socket",
        summary="a command naming tether's own tmux socket ($TETHER_HOME/tmux.sock, tmux -S …): it reaches "
        "every shell tether runs",
        advice="Use your own tmux server (plain tmux, or tmux -L NAME); tether's shells are managed with "
        "the shell_* tools.",
        judge=system.tether_socket,
    ),
    Rule(
        id="unparseable",
        summary="text bash cannot parse (unclosed quote, bracket or heredoc), or code nested too deep",
        advice="Fix the quoting so bash can parse the command (close every quote, bracket and heredoc).",
        judge=system.unparseable,
    ),
    Rule(
        id="dynamic-command",
        summary='a command name only known at run time: $X -rf /, $(which rm) …, eval "$(…)"',
        advice="Run the command by its literal name: print what the $VAR or $(…) expands to first, "
        "then run that text.",
        judge=system.dynamic_command,
    ),
)

DEFAULT_IDS = frozenset(rule.id for rule in DEFAULT_RULES)
