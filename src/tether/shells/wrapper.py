"""How ``shell_run`` learns a command's exit status without changing what the command does.

Invariant: the command runs in the shell itself (``cd``, variables and ``exit`` act on the shell),
bracketed by two markers carrying a per-run nonce::

     __tb NONCE;{ COMMAND
    };__te

``__tb`` prints ``ESC ] 6973 ; NONCE ; b ESC \\`` (output starts here) and ``__te`` prints
``ESC ] 6973 ; NONCE ; e ; STATUS ESC \\``. OSC 6973 means nothing to tmux, so no screen shows it;
only the raw log has it. The braces on their own lines keep a trailing ``# comment`` and a heredoc
inside the group. When the list is aborted (Ctrl-C kills the foreground job, so bash drops the rest
of the line) the prompt hook ``__tp`` prints the end marker with ``$?`` before the next prompt;
it is first in ``PROMPT_COMMAND``, re-added by ``__tb`` if a user replaced the variable, and kept
exported while the variable is a string. After
``exec bash`` the new shell has the same pid, imports the exported functions and the exported
``PROMPT_COMMAND=__tp``, and reports through ``__tp`` with the nonce ``*`` (the nonce itself lives
in an unexported variable, so ``env`` never prints it). ``__tp`` also forgets every vault variable
(``__TETHER_V_*``, see ``vault_refs.FORGET_ALL``), so a Ctrl-C that drops a run's epilogue still
leaves no value behind at the next prompt.
"""

from __future__ import annotations

from pathlib import Path

RCFILE_NAME = "shellrc.bash"

RCFILE = r"""# tether persistent shell start-up: the user's ~/.bashrc, then tether's run markers.
if [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi
__tb() {
  __tether_n=$1; export __tether_p=$$
  printf '\033]6973;%s;b\033\\' "$1"
  __tether_hook
}
__tether_hook() {
  case " ${PROMPT_COMMAND[*]} " in *[\ \;]__tp[\ \;]*) return ;; esac
  if [[ ${#PROMPT_COMMAND[@]} -gt 1 ]]; then PROMPT_COMMAND+=(__tp)
  else PROMPT_COMMAND="__tp${PROMPT_COMMAND:+;$PROMPT_COMMAND}"; export PROMPT_COMMAND; fi
}
__te() {
  local s=$? n=${__tether_n-}
  unset __tether_n __tether_p
  printf '\033]6973;%s;e;%d\033\\' "${n:-*}" "$s"
  return $s
}
__tp() {
  local s=$?
  if [[ -n ${__tether_n-} ]]; then
    printf '\033]6973;%s;e;%d\033\\' "$__tether_n" "$s"; unset __tether_n __tether_p
  elif [[ ${__tether_p-} == "$$" ]]; then
    printf '\033]6973;*;e;%d\033\\' "$s"; unset __tether_p
  fi
  unset -v "${!__TETHER_V_@}"
  return $s
}
export -f __tb __te __tp __tether_hook
__tether_hook
"""


def write_rcfile(home: Path) -> Path:
    """Write the start-up file once per home (rewritten only when its text changed)."""
    path = home / RCFILE_NAME
    try:
        if path.read_text(encoding="utf-8") == RCFILE:
            return path
    except FileNotFoundError:
        pass
    tmp = path.with_suffix(".tmp")
    tmp.write_text(RCFILE, encoding="utf-8")
    tmp.replace(path)
    return path


def wrap_lines(command: str, nonce: str) -> list[str]:
    """The lines typed into the shell for one run (each followed by Enter)."""
    lines = command.split("\n")
    lines[0] = f" __tb {nonce};{{ {lines[0]}"
    lines.append("};__te")
    return lines


def unwrappable_reason(command: str) -> str | None:
    """Why a command cannot carry the markers (``None`` when it can)."""
    if not command.strip():
        return "the command is empty"
    if command.rstrip().endswith("\\"):
        return "the command ends with a line continuation '\\'"
    return None
