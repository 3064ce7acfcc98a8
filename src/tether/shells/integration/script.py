"""The bash start-up file of a persistent shell: the user's own rc, then tether's shell integration.

Invariant: nothing the integration adds is exported (``env`` shows only ``TETHER_SHELL``), and the
line a person or an agent types is exactly what runs (``history`` and up-arrow see only that).
Every fact tether learns about commands comes from invisible OSC 6973 sequences the shell prints
itself, each carrying the shell's secret nonce so that program output cannot forge them::

    ESC ] 6973 ; NONCE ; P ; STATUS ; N ; TIME ; S BEL   the shell reads its next line (start of
                                                    PS1): the last line ended with STATUS; the
                                                    prompt hooks are done; N numbers the prompt
    ESC ] 6973 ; NONCE ; C ; TOKEN ; TIME ; S BEL    a command line starts running (PS0); TOKEN is
                                                    the run's (0: not tether's)
    ESC ] 6973 ; NONCE ; E ; STATUS ; TIME ; S BEL    the line ended with STATUS; the prompt hooks
                                                    start (STATUS empty: a hook of the user's ran
                                                    first)
    ESC ] 6973 ; NONCE ; Q ; S BEL                    bash waits for a continuation line (PS2)
    ESC ] 6973 ; NONCE ; H ; S ; <history 1> BEL      the text of a command a person typed
    ESC ] 6973 ; NONCE ; X ; STATUS ; S BEL           the shell exits (EXIT trap)
    ESC ] 6973 ; NONCE ; L ; SEQ ; LINE BEL           the reporter ran: LINE is readline's line now
                                                    (``${READLINE_LINE@Q}``), SEQ the request's
    ESC ] 6973 ; NONCE ; W BEL                        the prompt starts a new row unless the cursor is
                                                    at column 0 (blanks and ``\\r ESC [ K`` follow:
                                                    see ``termtext``); not an event of the scanner

S numbers the shell's events, one up each time from the integration's start time in microseconds
(a redraw of a prompt repeats its P whole; a bash that replaced this one starts above it). The
shell's own log holds its nonce, so a program that prints that log (``cat``, ``tail``, ``grep``)
prints events the nonce alone cannot tell from the shell's; their S is never above the last
event the shell printed before them, and the scanner (``events.EventScanner``) drops such an
event: a replayed prompt cannot end a run early, nor a replayed E forge its exit status.

A confined shell's first prompt hook also marks the end of each command for the tracer (``mark``).

TIME is ``$EPOCHREALTIME`` (seconds with microseconds; empty before bash 5), so the log itself
says when each command started, when its line ended and when the next prompt came.

``P`` sits at the start of PS1, which readline prints only after it has put the terminal in its
own mode: once ``P`` is in the log, keys typed reach readline, never the line discipline's echo.
bash restores ``$?`` after PROMPT_COMMAND, so ``P`` reports the command's status even behind the
user's prompt hooks, and only when they are done. A user who replaces PS1, PS0 or PS2 gets the
prefixes back from the hooks tether keeps first and last in PROMPT_COMMAND (a scalar assignment
replaces only element 0; the last hook puts the first one back) and from the loader before every
agent command.

Agent input goes through the loader, a ``bind -x`` function behind a private key sequence: it
reads a payload from the terminal (printable ASCII, see ``payload``), sets vault variables
(unexported) and ``READLINE_LINE`` exactly, and ``RUN_KEYS`` then accepts the line. A tab or a
control byte therefore never reaches readline as a key (no completion, no binding); the token it
sets is what PS0 and PS1 report, binding the markers to one run.

What the shell has defined is written, not printed: before every prompt the last hook writes
``declare -p``, ``declare -F``, ``alias -p``, ``trap -p``, ``hash -l`` and the bodies of the
functions its own prompt code names into ``<rc>.state`` (builtins only: no fork, nothing on the
terminal), which the dangerous-command guard reads (``guard.shellstate``). The *reporter* (another
``bind -x`` function behind a private key) writes the same with every function body into
``<rc>.report`` (vault variables shadowed, so no value is written) and prints an ``L`` event with
readline's line: the guard judges the line a person or an agent assembled, exactly as bash will
read it, before tether presses the key that accepts it.
"""

from __future__ import annotations

# Private key sequences (C-x C-_ prefix; nothing else in readline uses C-_ after C-x).
LOAD_SEQ = "\\C-x\\C-_l"  # the loader (bind -x)
ACCEPT_SEQ = "\\C-x\\C-_a"  # accept-line
RUN_SEQ = "\\C-x\\C-_r"  # load, then accept: what a run types
INSERT_SEQ = "\\C-x\\C-_i"  # load into the line at the cursor, without accepting (shell_send text)
REPORT_SEQ = "\\C-x\\C-_q"  # the reporter: write the state, print the line (nothing is accepted)
RUN_KEYS = b"\x18\x1fr"
INSERT_KEYS = b"\x18\x1fi"
LOAD_KEYS = b"\x18\x1fl"
ACCEPT_KEYS = b"\x18\x1fa"
REPORT_KEYS = b"\x18\x1fq"
PAYLOAD_END = "~"

_TEMPLATE = r"""# tether persistent shell start-up (generated; see tether.shells.integration)
unset TMUX TMUX_PANE
if [[ ${1-} == --integration ]]; then
  # Re-installed after `exec bash` replaced the shell: the user's rc already ran; the line that
  # sourced this file leaves no trace in history.
  __tether_h=$(HISTTIMEFORMAT= builtin history 1)
  [[ $__tether_h == *" . "*" --integration"* ]] && builtin history -d -1
  unset __tether_h
elif [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi
__tether_n='@NONCE@'
__tether_sf=@STATE@
__tether_tok=0 __tether_cur=0 __tether_ran=0 __tether_pn=0 __tether_vn=()
# Events are numbered on from when the integration starts (in microseconds), so a bash that takes
# this one's place (`exec bash`, given the integration again with the same nonce) numbers above
# every event before it.
__tether_sq=${EPOCHREALTIME-}
__tether_sq=${__tether_sq//[.,]/}
[[ -n $__tether_sq ]] || printf -v __tether_sq '%(%s)T000000' -1
__tether_ps0='\e]6973;@NONCE@;C;$((__tether_cur=__tether_tok?__tether_tok:__tether_cur,__tether_tok=0,__tether_ran=1,__tether_cur));${EPOCHREALTIME-};$((++__tether_sq))\a'
__tether_ps1='\[\e]6973;@NONCE@;P;$?;$((__tether_tok=0,++__tether_pn));${EPOCHREALTIME-};$((++__tether_sq))\a\]'
__tether_ps2='\[\e]6973;@NONCE@;Q;$((++__tether_sq))\a\]'
__tether_arm() {
  [[ ${PS0-} == "$__tether_ps0"* ]] || PS0=$__tether_ps0${PS0-}
  [[ ${PS1-} == "$__tether_ps1"* ]] || PS1=$__tether_ps1${PS1-}
  [[ ${PS2-} == "$__tether_ps2"* ]] || PS2=$__tether_ps2${PS2-}
  # Nearly always armed already (this runs before every prompt and every agent command): one test,
  # half the cost of the checks below.
  [[ ${PROMPT_COMMAND[0]-} == __tether_pc0 && ${PROMPT_COMMAND[-1]-} == __tether_pc ]] && return
  if (( BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1) )); then
    # An array: ours first and last, the user's hooks in between, whatever they assigned since.
    local -a __tether_k=("${!PROMPT_COMMAND[@]}")
    if [[ ${PROMPT_COMMAND[${__tether_k[0]:-0}]-} != __tether_pc0 || \
          ${PROMPT_COMMAND[${__tether_k[-1]:-0}]-} != __tether_pc ]]; then
      local -a __tether_u=()
      local __tether_e
      for __tether_e in "${PROMPT_COMMAND[@]}"; do
        [[ $__tether_e == __tether_pc0 || $__tether_e == __tether_pc ]] || __tether_u+=("$__tether_e")
      done
      PROMPT_COMMAND=(__tether_pc0 "${__tether_u[@]}" __tether_pc)
    fi
  else
    case "${PROMPT_COMMAND-}" in
      "__tether_pc0;"*";__tether_pc") ;;
      *) PROMPT_COMMAND="__tether_pc0;${PROMPT_COMMAND:+$PROMPT_COMMAND;}__tether_pc" ;;
    esac
  fi
}
__tether_pc0() {
  # $? is the line's status only while this hook is the first to run; after another hook (a
  # scalar assignment put one in front) the E event carries none, and the run ends at its prompt.
  local s=$? f=
@MARK@  [[ ${PROMPT_COMMAND-} == __tether_pc0 || ${PROMPT_COMMAND-} == "__tether_pc0;"* ]] && f=$s
  printf '\e]6973;%s;E;%s;%s;%s\a' "$__tether_n" "$f" "${EPOCHREALTIME-}" "$((++__tether_sq))"
  return $s
}
__tether_pc() {
  if (( __tether_ran && ! __tether_cur )); then
    printf '\e]6973;%s;H;%s;' "$__tether_n" "$((++__tether_sq))"
    HISTTIMEFORMAT= builtin history 1; printf '\a'
  fi
  __tether_ran=0 __tether_cur=0
  unset -v "${!__TETHER_V_@}"
  __tether_vn=()
  __tether_arm
  __tether_dump "$__tether_sf"
  # Terminal state a program (or random bytes it printed) may have left: an escape sequence or a
  # DCS/OSC/APC string still open (CAN and ST end them: tmux would swallow the prompt), scroll margins (reset
  # between saving and restoring the cursor, which stays where it is), the alternate screen, a DEC
  # graphics charset (also through SO), insert mode, reverse video, application keys, mouse
  # reporting, a hidden cursor, no autowrap. The alternate screen is left by entering it first:
  # tmux restores the cursor a program saved on entering it at every later ESC[?1049l, even one
  # printed outside it (the prompt would go back to that row, over what came since); entering
  # saves the cursor where it is, unless the screen is still the alternate one (then the
  # program's saved cursor is restored, as it should be).
  # Output that did not end its line (`printf abc`) keeps it, on the screen too: bash clears the
  # prompt's line before the loader runs, so a prompt drawn after `abc` took it along. As zsh's
  # PROMPT_SP: a row of blanks wraps only from a column other than 0, and then the prompt starts on
  # the next row; from column 0 it stays on its row. The erase at column 0 also clears the wrap
  # mark of the row above (tmux would join the two rows on a read). It comes before the resets
  # that save and restore the cursor (a row printed full waits at its last column to wrap; restored,
  # the cursor is on that column, and the first blank would overwrite it), after autowrap and insert
  # mode are reset. The W event before it tells the log's renderer (termtext) to start a new line
  # there unless at column 0.
  case ${COLUMNS-} in
    ''|*[!0-9]*|0*|?????*) printf '\x18\e\\\e[?7h\e[4l' ;;
    *) printf '\x18\e\\\e[?7h\e[4l\e]6973;%s;W\a%*s\r\e[K' "$__tether_n" "$COLUMNS" '' ;;
  esac
  printf '\e7\e[r\e8\e[?1049h\e[?1049l\e(B\e)B\x0f\e[?5l\e[?1l\e>\e[?1000l\e[?1002l\e[?1003l\e[?1006l\e[?25h'
}
__tether_swallow() {
  # A terminal's answer to a query a program printed and did not read (tmux answers DA, DSR,
  # XTVERSION, colour queries): read to its end and dropped, instead of reaching readline as keys
  # (ESC P is M-P, a search that would swallow the next command).
  local __tether_c
  while IFS= read -r -s -n1 -t 0.05 __tether_c; do
    if [[ $1 == csi ]]; then
      [[ $__tether_c == [@-~] ]] && return
    elif [[ $__tether_c == $'\a' ]]; then
      return
    elif [[ $__tether_c == $'\e' ]]; then
      IFS= read -r -s -n1 -t 0.05 __tether_c
      return
    fi
  done
}
__tether_dump() {
  # Functions the prompt's own code may call are written whole; the rest by name (see the reporter).
  # The words of that code are found again only when it changed: bash's pattern substitution over
  # it costs more than all the rest of the dump.
  local __tether_w="${PROMPT_COMMAND[*]-} ${PS0-} ${PS1-} ${PS2-}" __tether_x
  if [[ $__tether_w != "${__tether_dw-}" ]]; then
    __tether_df=(command_not_found_handle)
    for __tether_x in ${__tether_w//[^A-Za-z0-9_:.-]/ }; do
      [[ $__tether_x == __tether_* ]] || __tether_df+=("$__tether_x")
    done
    __tether_dw=$__tether_w
  fi
  # Written over the old dump in place: truncating a file costs more than the rest of the dump.
  # Its end marker carries a tag no earlier dump (nor any value in this one) can hold, so a reader
  # finds where this dump ends, and calls it incomplete until it does. Without SRANDOM (bash < 5.1)
  # the dump replaces the file, and ends where the file does.
  local __tether_t=${SRANDOM:+$SRANDOM.$SRANDOM.$SRANDOM}
  if [[ -n $__tether_t ]]; then
    { __tether_sections "$__tether_t" "${2-}"; } 1<> "$1" 2>/dev/null || :
  else
    { __tether_sections "" "${2-}"; } >| "$1" 2>/dev/null || :
  fi
}
__tether_sections() {
  printf '#tether-state%s\n' "${1:+ $1}"; declare -p; printf '#tether-names\n'; declare -F
  printf '#tether-code\n'; alias -p; trap -p; builtin hash -l
  if [[ $2 == all ]]; then declare -f; else declare -f -- "${__tether_df[@]}"; fi
  printf '#tether-end%s\n' "${1:+ $1}"
}
__tether_report() {
  local __tether_p
  IFS= read -r -d '@END@' __tether_p || return
  # Shadow vault values (set for the line about to run): the report holds their names only.
  [[ -z ${!__TETHER_V_*} ]] || local -- ${!__TETHER_V_@}
  __tether_dump "${__tether_sf%.state}.report" all
  printf '\e]6973;%s;L;%s;%s\a' "$__tether_n" "${__tether_p%%|*}" "${READLINE_LINE@Q}"
  unset -v READLINE_POINT  # the cursor stays where it is, without bash's scan of the line
}
__tether_load() {
  local __tether_p __tether_f __tether_i
  IFS= read -r -d '@END@' __tether_p || return
  # The vault variables an earlier load set since the prompt (the prompt hook clears every one by
  # name scan, which costs more than the rest of a load).
  unset -v "${__tether_vn[@]}"
  __tether_vn=()
  # The fields, split on '|' alone with globbing off, so each is kept as sent (a here-string read
  # would cost a pipe and a read per byte).
  local IFS='|' __tether_g=
  [[ $- == *f* ]] || { __tether_g=1; set -f; }
  __tether_f=($__tether_p)
  [[ -z $__tether_g ]] || set +f
  IFS=$' \t\n'
  for (( __tether_i = 3; __tether_i < ${#__tether_f[@]}; __tether_i++ )); do
    [[ ${__tether_f[__tether_i]} =~ ^__TETHER_V_[A-Z0-9_]+= ]] || continue
    printf -v "${__tether_f[__tether_i]%%=*}" '%b' "${__tether_f[__tether_i]#*=}"
    __tether_vn+=("${__tether_f[__tether_i]%%=*}")
  done
  local __tether_t
  printf -v __tether_t '%b' "${__tether_f[2]}"
  # Where the cursor goes. In a UTF-8 locale bash turns a READLINE_POINT of N characters into
  # bytes by scanning the rest of the line once per character: a cursor put at the end of a 1 MB
  # line cost 16 s (quadratic). Unset, READLINE_POINT is not read back, and a line that changed
  # leaves readline's cursor at its end (bash inserts the new line whole), at no cost.
  if [[ ${__tether_f[0]} == i ]]; then
    if (( READLINE_POINT == ${#READLINE_LINE} )); then
      READLINE_LINE+=$__tether_t; unset -v READLINE_POINT
    else  # inside the line: the cursor after the text (bash's scan is as long as the line)
      READLINE_LINE=${READLINE_LINE:0:READLINE_POINT}$__tether_t${READLINE_LINE:READLINE_POINT}
      READLINE_POINT=$(( READLINE_POINT + ${#__tether_t} ))
    fi
  elif [[ ${__tether_f[0]} == a ]]; then
    READLINE_LINE+=$__tether_t; unset -v READLINE_POINT
  elif [[ ${__tether_f[0]} == h ]]; then
    READLINE_LINE=$__tether_t; unset -v READLINE_POINT  # held: the next line continues it
  else
    # The cursor at the start: the line is accepted next, and from 0 bash scans nothing.
    __tether_tok=${__tether_f[1]}; READLINE_LINE=$__tether_t; READLINE_POINT=0
  fi
  __tether_arm
}
__tether_exit() { printf '\e]6973;%s;X;%d;%s\a' "$__tether_n" "$1" "$((++__tether_sq))"; }
trap '__tether_exit $?' EXIT
for __tether_m in emacs vi-insert vi-command; do
  bind -m "$__tether_m" -x '"@LOAD@": __tether_load'
  bind -m "$__tether_m" '"@ACCEPT@": accept-line'
  bind -m "$__tether_m" '"@RUN@": "@LOAD@@ACCEPT@"'
  bind -m "$__tether_m" '"@INSERT@": "@LOAD@"'
  bind -m "$__tether_m" -x '"@REPORT@": __tether_report'
  bind -m "$__tether_m" -x '"\eP": __tether_swallow string'
  bind -m "$__tether_m" -x '"\e]": __tether_swallow string'
  bind -m "$__tether_m" -x '"\e[?": __tether_swallow csi'
  bind -m "$__tether_m" -x '"\e[>": __tether_swallow csi'
done
unset __tether_m
__tether_arm
"""


# A confined shell's prompt hook first makes a failed open under /proc (nothing can be created
# there) that names the run's token: the trace collector cuts the shell's trace there (see
# tether.shell.sandbox.collect). ``2>&-`` keeps bash's message out of sight without an open.
_MARK = '  { : >"@MARKDIR@$__tether_cur"; } 2>&-\n'


def integration_script(nonce: str, *, mark: str | None = None, state: str | None = None) -> str:
    """The start-up file of one shell (its nonce inlined: never in the environment); ``mark``: the
    directory a confined shell's prompt hook names at the end of each command; ``state``: where
    the prompt hook writes the shell's state for the guard (``<state>``, and ``.report`` beside
    it), by default beside the start-up file (``<rc>.state``)."""
    if not nonce.isalnum():
        raise ValueError("nonce must be alphanumeric")
    if state is not None and not state.endswith(".state"):
        raise ValueError("the state file's name ends in .state")
    marking = _MARK.replace("@MARKDIR@", mark) if mark is not None else ""
    state_file = "${BASH_SOURCE[0]%.bash}.state" if state is None else _sh_single(state)
    return (
        _TEMPLATE.replace("@STATE@", state_file)
        .replace("@NONCE@", nonce)
        .replace("@MARK@", marking)
        .replace("@END@", PAYLOAD_END)
        .replace("@LOAD@", LOAD_SEQ)
        .replace("@ACCEPT@", ACCEPT_SEQ)
        .replace("@RUN@", RUN_SEQ)
        .replace("@INSERT@", INSERT_SEQ)
        .replace("@REPORT@", REPORT_SEQ)
    )


def _sh_single(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
