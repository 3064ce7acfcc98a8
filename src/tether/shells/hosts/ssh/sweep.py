"""Ending what a closed remote shell left running on its host, as the local host does.

Invariant: on a Linux host a shell's processes are everything below its bash and everything whose
environment holds its ``TETHER_SHELL=<id>`` (tether's own channels on the host never carry it),
with what is below those. Where the host has a ``python3`` the bash is a child subreaper
(``process.adopt``, ``host``): what its processes orphan — ``env -i setsid x &``, a daemon's double
fork — is handed to it, so the tree below it is the whole of what it started while it lives. That
tree is therefore read before tmux ends the pane (``collect``: once the bash is gone its orphans
belong to PID 1), each process by pid and start time, so a pid the kernel hands to another
process meanwhile is never taken for it. A close ends them all (``SIGTERM`` and ``SIGCONT``,
``SIGKILL`` after the grace) and answers once they have exited; a respawn ends those found before
the new shell (same marker) existed. Spared, as on the local host: a process below them that
carries ``OWN_PROCESS`` (tether's own, started from the shell) with what is below it, and the
command shell running the script with its ancestors.

Everything runs as scripts on the host's one command shell (``sh``), which answers one question at
a time: shells closed together are swept by one script, so no sweep waits behind another's grace.
Hosts without ``/proc`` or a ``grep`` that takes ``-z`` keep tmux's hang-up alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tether.process.adopt import OWN_PROCESS
from tether.process.strays import Survivor, command_text
from tether.shells.host import Leftovers
from tether.shells.hosts.ssh.conn import HostError
from tether.shells.hosts.ssh.sh import RemoteShell
from tether.shells.tmux.commands import sh_quote

logger = logging.getLogger(__name__)

_STUCK_S = 5  # SIGKILL again for so long at most (a process in uninterruptible sleep is left)
_SLACK_S = 20.0  # beyond the grace: SIGKILL, the last look, the round trip


# What the scripts need besides ``/proc``: a ``grep`` that takes ``-z`` (GNU, BusyBox) and ``awk``.
_GREP_Z = "printf 'x\\0' | grep -qzx x 2>/dev/null && command -v awk >/dev/null || exit 2; "
_ALL = "/proc/[0-9]*/environ"


@dataclass(frozen=True, slots=True)
class Marked:
    """A shell to sweep: its id, the processes already found (``pid:start``, or a bare pid for a
    live pane's bash) and whether every process carrying its marker is looked for (a close) or
    only those (a respawn: the new shell carries the same marker)."""

    shell_id: str
    known: tuple[str, ...] = ()
    everywhere: bool = True


# Reads ``pid:comm-and-stat`` lines (``grep '' /proc/*/stat``: the pid from the file's name, the
# parent and start time after the last ``)`` of the last line, whatever the name holds). Prints on
# one line ``pid:start`` of each live process of ``K`` (``pid:start`` whose start time still
# matches, or a bare pid) and ``M`` (``/proc/PID/environ`` names) and of each process below them,
# but for those in ``SP`` (``PID/environ`` names) and below, and never the script's own shell
# ``ME`` or its ancestors; on a second line the pids found below them. Each comes from the
# environment (a list of names holds line breaks, which ``awk -v`` may refuse). Zombies are passed
# through, not printed: nothing is left to signal.
_TREE_AWK = (
    '{ i = index($0, ":"); f = substr($0, 1, i - 1); l = substr($0, i + 1); '
    'sub(/^\\/proc\\//, "", f); sub(/\\/stat$/, "", f); '
    'j = match(l, /\\)[^)]*$/); if (!j) next; n = split(substr(l, j + 1), a, " "); '
    'if (n < 20 || a[2] !~ /^[0-9]+$/) next; pp[f] = a[2]; st[f] = a[20]; zz[f] = (a[1] == "Z") } '
    'END { me = ENVIRON["ME"]; k = ENVIRON["K"]; m = ENVIRON["M"]; sp = ENVIRON["SP"]; '
    "for (p = me; (p in pp) && !(p in no); p = pp[p]) no[p] = 1; "
    'gsub(/\\/environ/, "", sp); n = split(sp, x, " "); for (i = 1; i <= n; i++) spare[x[i]] = 1; '
    'n = split(k, x, " "); for (i = 1; i <= n; i++) { split(x[i], y, ":"); '
    'if ((y[1] in st) && (y[2] == "" || st[y[1]] == y[2])) seed[y[1]] = 1 } '
    'gsub(/\\/proc\\/|\\/environ/, "", m); n = split(m, x, " "); '
    "for (i = 1; i <= n; i++) if (x[i] in st) seed[x[i]] = 1; "
    'for (p in pp) kids[pp[p]] = kids[pp[p]] " " p; '
    "t = 0; for (p in seed) if (!(p in no)) { q[++t] = p; got[p] = 1 } "
    'for (h = 1; h <= t; h++) { n = split(kids[q[h]], x, " "); for (i = 1; i <= n; i++) { c = x[i]; '
    "if (!(c in got) && !(c in spare) && !(c in no)) { got[c] = 2; q[++t] = c } } } "
    'o = ""; b = ""; for (p in got) if (!zz[p]) { o = o " " p ":" st[p]; if (got[p] == 2) b = b " " p } '
    "print o; print b }"
)


def _scan(shells: list[Marked]) -> str:
    """``scan K``, a function setting ``found`` to ``pid:start`` of the processes of ``shells``
    alive now (each once): those of ``K`` (the ones found so far), those whose environment holds
    the ``TETHER_SHELL`` of a shell looked for everywhere, and everything below them — less a
    process below them carrying ``OWN_PROCESS`` and what is below it. A handful of processes a
    call (``grep``, ``awk``): it runs every tenth of a second while a sweep waits."""
    everywhere = [marked.shell_id for marked in shells if marked.everywhere]
    if everywhere:
        patterns = " ".join("-e " + sh_quote("TETHER_SHELL=" + shell_id) for shell_id in everywhere)
        marks = f"m=$(grep -lzxF {patterns} {_ALL} 2>/dev/null); "
    else:
        marks = "m=; "
    own = sh_quote("^" + OWN_PROCESS + "=")
    tree = (
        "r=$(grep '' /dev/null /proc/[0-9]*/stat 2>/dev/null | "
        f'ME=$$ K="$1" M="$m" SP="$s" awk {sh_quote(_TREE_AWK)}); '
        "{ read -r found; read -r below; } <<EOF\n$r\nEOF\n"
    )
    return (
        "scan() { s=; "
        + marks
        + tree
        # tether's own processes below them: read those processes' environments only, and walk
        # again without them (the common case, none below, costs no second walk).
        + 'if [ -n "$below" ]; then e=; for x in $below; do e="$e $x/environ"; done; '
        + f"s=$(cd /proc && grep -lz -e {own} $e 2>/dev/null); "
        + '[ -n "$s" ] && { '
        + tree
        + "}; fi; }\n"
    )


def collect_script(shell_id: str, root: int | None) -> str:
    """Print ``pid:start`` of the shell's processes now: ``root`` (its pane's bash, when that
    lives) and what carries its ``TETHER_SHELL``, with everything below them (exit 2 where
    ``grep -z`` does not work)."""
    known = str(root) if root else ""
    return _GREP_Z + _scan([Marked(shell_id)]) + f"scan {sh_quote(known)}; printf '%s\\n' $found"


def parse_known(out: str) -> tuple[str, ...]:
    """The ``pid:start`` words of a ``collect_script`` answer."""
    found = []
    for word in out.split():
        pid, _, start = word.partition(":")
        if pid.isdigit() and start.isdigit():
            found.append(word)
    return tuple(found)


def sweep_script(shells: list[Marked], grace_s: float) -> str:
    """End what closed shells left running on a Linux host, as the local host does: the processes
    found before the pane ended (by pid and start time), every process whose environment holds a
    closed shell's ``TETHER_SHELL`` (its background jobs, ``nohup``, ``setsid`` and disowned
    processes inherit it; tether's own channels there never carry it) and everything below them
    get ``SIGTERM`` and ``SIGCONT`` once, found again after 10, 20, 40, 80 ms and then every tenth
    of a second (a process forked meanwhile is ended too), and ``SIGKILL`` once ``grace_s`` has
    passed, then again every tenth of a second for at most ``_STUCK_S``. Time is the host's
    ``/proc/uptime``, not the pauses counted: a scan on a loaded host takes longer than its pause,
    and counting pauses alone had a 3 s grace last 15 s and more there. A respawned shell: only
    what was found before (its new processes carry the same marker). One ``grep -z`` reads every
    environment it may (other accounts' processes are unreadable, so never touched by marker).
    Prints a ``left PID:START SHELL COMMAND`` line for each process still running after all that
    (``SHELL`` from its ``TETHER_SHELL``, ``-`` without one), then how many were ended and how many
    were left; exits 2 where ``grep -z`` does not work (the host then keeps tmux's hang-up alone)."""
    grace_cs = max(1, round(grace_s * 100))
    known = " ".join(word for marked in shells for word in marked.known)
    return (
        _GREP_Z + _scan(shells) + f"K={sh_quote(known)}; seen=' '; el=0; cs=1; "
        # What is found joins what is known: below a process that ended, its orphans are no
        # longer anyone's but PID 1's, and are followed as known processes.
        'look() { scan "$K"; K="$K $found"; p=; for w in $found; do p="$p ${w%%:*}"; done; }; '
        "pause() { sleep \"0.$(printf '%02d' $cs)\" 2>/dev/null || sleep 1; el=$((el+cs)); "
        "cs=$((cs*2)); [ $cs -gt 10 ] && cs=10; }; "
        # Centiseconds since boot (``read`` is the shell's own: no process); the pauses counted
        # where ``/proc/uptime`` says something else.
        "now() { t=; read -r t _ </proc/uptime 2>/dev/null; case $t in *.[0-9][0-9]) "
        "t=${t%.*}${t#*.}; t=${t#0}; t=${t#0}; t=${t#0};; *) t=$el;; esac; }; "
        f'now; t0=$t; look; while [ -n "$p" ] && [ $((t - t0)) -lt {grace_cs} ]; do new=; '
        'for x in $p; do case "$seen" in *" $x "*) ;; *) new="$new $x"; seen="$seen$x ";; esac; done; '
        '[ -n "$new" ] && { kill -TERM $new; kill -CONT $new; } 2>/dev/null; pause; look; now; done; '
        f'now; t0=$t; while [ -n "$p" ] && [ $((t - t0)) -lt {_STUCK_S * 100} ]; do '
        "kill -KILL $p 2>/dev/null; sleep 0.1 2>/dev/null || sleep 1; el=$((el+10)); look; now; done; "
        # What is still there: named, with the shell it belongs to where its environment says.
        "for w in $found; do x=${w%%:*}; c=$(tr '\\000\\n' '  ' </proc/$x/cmdline 2>/dev/null); "
        '[ -n "$c" ] || c="[$(cat /proc/$x/comm 2>/dev/null)]"; '
        "m=$(tr '\\000' '\\n' </proc/$x/environ 2>/dev/null | sed -n 's/^TETHER_SHELL=//p' | head -n 1); "
        'printf \'left %s %s %s\\n\' "$w" "${m:--}" "$c"; done; '
        'set -- $seen; e=$#; set -- $p; printf "ended=%s left=%s\\n" "$e" "$#"'
    )


def parse_left(out: str) -> list[tuple[str, str, Survivor]]:
    """The ``left`` lines of a sweep's answer: ``pid:start``, the shell its environment names (or
    ``-``) and the survivor."""
    found = []
    for line in out.splitlines():
        tag, _, rest = line.partition(" ")
        word, _, rest = rest.partition(" ")
        shell, _, command = rest.partition(" ")
        pid = word.partition(":")[0]
        if tag == "left" and pid.isdigit() and shell:
            found.append((word, shell, Survivor(int(pid), command_text(command.strip().encode()))))
    return found


class Sweeper:
    """The sweeps of one host: ``collect`` before a close or respawn, ``sweep`` after it."""

    def __init__(
        self, *, name: str, sh: RemoteShell, grace_s: float, spawn: Callable[[asyncio.Task[None]], None]
    ) -> None:
        self._name = name
        self._sh = sh
        self._grace = grace_s
        self._adopt = spawn  # the host keeps (and cancels at its close) the task that sweeps
        self._waiting: list[tuple[Marked, asyncio.Future[Leftovers]]] = []
        self._task: asyncio.Task[None] | None = None

    async def collect(self, shell_id: str, root: int | None) -> tuple[str, ...]:
        """The shell's processes on the host now (``pid:start``): below ``root`` (its pane's
        bash) and below what carries its marker. None known on failure (logged)."""
        try:
            reply = await self._sh.run(collect_script(shell_id, root))
        except HostError as exc:
            logger.warning("host %s: finding what %s runs failed: %s", self._name, shell_id, exc.message)
            return ()
        return parse_known(reply.out) if reply.status == 0 else ()

    async def sweep(
        self, shell_id: str, known: tuple[str, ...] = (), *, everywhere: bool = True
    ) -> Leftovers:
        """End what the shell left running (``known``, and with ``everywhere`` whatever carries
        its marker); returns once they have exited — what was still running then — or once the
        host could not be asked (logged, and said in what is returned: a host out of reach keeps
        them)."""
        done: asyncio.Future[Leftovers] = asyncio.get_running_loop().create_future()
        self._waiting.append((Marked(shell_id, known, everywhere), done))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
            self._adopt(self._task)
        return await asyncio.shield(done)

    async def _run(self) -> None:
        try:
            while self._waiting:
                batch = [marked for marked, _ in self._waiting]
                names = ", ".join(marked.shell_id for marked in batch)
                try:
                    reply = await self._sh.run(
                        sweep_script(batch, self._grace), timeout=self._grace + _SLACK_S
                    )
                except HostError as exc:
                    logger.warning("host %s: ending what %s left failed: %s", self._name, names, exc.message)
                    unknown = f"host {self._name} did not answer while they were ended ({exc.message})"
                    left = {marked.shell_id: Leftovers(unknown=unknown) for marked in batch}
                else:
                    said = reply.out.strip()  # the script's last line ends with a line break
                    if reply.status != 0 or not said.endswith("left=0"):
                        said = said or str(reply.status)
                        logger.warning("host %s: ending what %s left: %s", self._name, names, said)
                    left = _left_by_shell(batch, reply.out if reply.status == 0 else "")
                _release(self._waiting[: len(batch)], left)
                del self._waiting[: len(batch)]
        finally:  # cancelled (the host closes): nobody waits for ever
            unknown = f"tether let go of host {self._name} before they were ended"
            _release(
                self._waiting,
                dict.fromkeys((m.shell_id for m, _ in self._waiting), Leftovers(unknown=unknown)),
            )
            self._waiting.clear()


def _left_by_shell(batch: list[Marked], out: str) -> dict[str, Leftovers]:
    """Each shell's survivors: those found before its pane ended (``known``) or carrying its marker;
    one that shows neither (its environment emptied, or unreadable) is every swept shell's."""
    found: dict[str, list[Survivor]] = {marked.shell_id: [] for marked in batch}
    for word, shell, survivor in parse_left(out):
        owners = [m.shell_id for m in batch if word in m.known or shell == m.shell_id] or list(found)
        for owner in owners:
            found[owner].append(survivor)
    return {shell: Leftovers(processes=tuple(found[shell])) for shell in found if found[shell]}


def _release(waiting: list[tuple[Marked, asyncio.Future[Leftovers]]], left: dict[str, Leftovers]) -> None:
    for marked, done in waiting:
        if not done.done():
            done.set_result(left.get(marked.shell_id, Leftovers()))
