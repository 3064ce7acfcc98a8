"""The guard with what the shell reported (``ShellState``): variables, functions, aliases, namerefs,
IFS, prompt hooks and traps of earlier calls; incomplete input; heredoc bodies; tether's socket.

The states are parsed from dumps written by a real bash (``bash -c`` running the same builtins the
shell integration runs), so the parser is tested against bash's own quoting."""

from __future__ import annotations

import subprocess

import pytest
from test_guard import BENIGN, DANGEROUS

from tether.shells.guard.guard import Guard
from tether.shells.guard.heredocs import lex
from tether.shells.guard.shellstate import ShellState, parse_dump

P = "/srv"  # a protected directory of the defaults
_DUMP = r"""
__tether_dump() {
  local __tether_w="${PROMPT_COMMAND[*]-} ${PS0-} ${PS1-} ${PS2-} command_not_found_handle"
  { printf '#tether-state\n'; declare -p; printf '#tether-names\n'; declare -F; printf '#tether-code\n'
    alias -p; trap -p; builtin hash -l
    if [[ ${2-} == all ]]; then declare -f; else declare -f -- ${__tether_w//[^A-Za-z0-9_:.-]/ }; fi
    printf '#tether-end\n'; } 2>/dev/null
}
"""


def state_after(setup: str, *, bodies: bool = False) -> ShellState:
    """What a shell that ran ``setup`` reports (as the prompt hook, or the reporter, writes it)."""
    script = f"{_DUMP}\n{setup}\n__tether_dump - {'all' if bodies else ''}\n"
    out = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, check=True, timeout=30).stdout
    found = parse_dump(out)
    assert found is not None, out[-400:]
    return found


@pytest.fixture(scope="module")
def guard() -> Guard:
    return Guard.default()


STATEFUL: list[tuple[str, str, str]] = [
    # (what earlier calls ran, the command now, the rule that must fire)
    (f"D={P}", 'rm -rf "$D"', "recursive-delete"),
    (f"export T={P}", "bash -c 'rm -rf \"$T\"'", "recursive-delete"),
    ('nuke() { rm -rf "$1"; }', f"nuke {P}", "recursive-delete"),
    ('wipe() { rm -rf "$@"; }', f"wipe ./build {P}", "recursive-delete"),
    ("alias nuke='rm -rf'", f"nuke {P}", "recursive-delete"),
    ("alias sudo='sudo ' nk='rm -rf'", f"sudo nk {P}", "recursive-delete"),
    ("IFS=:", f"X=keep:{P}; rm -rf $X", "recursive-delete"),
    (f"IFS=:; X=keep:{P}", "rm -rf $X", "recursive-delete"),
    ("declare -n R=PROMPT_COMMAND", f"R='rm -rf {P}'", "recursive-delete"),
    (f"read -r D <<< {P}", 'rm -rf "$D"', "recursive-delete"),
    (f"A=(./x {P})", 'rm -rf "${A[@]}"', "recursive-delete"),
    (f"C='rm -rf {P}'", 'eval "$C"', "recursive-delete"),
    (f"cd {P}", "rm -rf ./*", "recursive-delete"),
    (f"D={P}-old", 'rm -rf "${D%-old}"', "recursive-delete"),
    ("hash -p /bin/rm zz", f"zz -rf {P}", "recursive-delete"),
    ('command_not_found_handle() { rm -rf "/s$1"; }', "rv", "recursive-delete"),
    # code the shell runs on its own after the command, with the values it leaves behind
    ("PROMPT_COMMAND='rm -rf \"$D2\"'", f"D2={P}", "recursive-delete"),
    ("trap 'rm -rf \"$TMPD\"' EXIT", f"TMPD={P}", "recursive-delete"),
    ("PS1='$(rm -rf \"$W\") $ '", f"W={P}", "recursive-delete"),
    ('hook() { rm -rf "$Z"; }; PROMPT_COMMAND=hook', f"Z={P}", "recursive-delete"),
]


@pytest.mark.parametrize(("setup", "command", "rule"), STATEFUL, ids=[f"{s} ; {c}" for s, c, _ in STATEFUL])
def test_state_of_earlier_calls_is_judged(guard: Guard, setup: str, command: str, rule: str) -> None:
    # Without the shell's state the command looks harmless; with it, it is what it is.
    assert guard.check(command).allowed or guard.check(command).rule != rule or command.startswith("eval")
    verdict = guard.check(command, state_after(setup))
    if verdict.needs:  # a function called: the reporter's full state has its body
        verdict = guard.check(command, state_after(setup, bodies=True))
    assert not verdict.allowed and verdict.rule == rule, verdict


def test_a_function_whose_body_was_not_reported_is_asked_for(guard: Guard) -> None:
    state = state_after('zap() { rm -rf "$1"; }')
    assert state.functions == {"zap": None} or state.functions.get("zap") is None
    verdict = guard.check(f"zap {P}", state)
    assert verdict.rule == "dynamic-command" and verdict.needs == ("zap",)
    full = state_after('zap() { rm -rf "$1"; }', bodies=True)
    assert guard.check(f"zap {P}", full).rule == "recursive-delete"
    assert guard.check("zap ./build", full).allowed


def test_benign_corpus_stays_allowed_with_a_real_state(guard: Guard) -> None:
    state = state_after(
        "greet() { echo hi \"$1\"; }; alias ll='ls -la'; BUILD_DIR=./build; PROMPT_COMMAND='history -a'",
        bodies=True,
    )
    refused = [(c, guard.check(c, state).message) for c in BENIGN if not guard.check(c, state).allowed]
    assert refused == []
    assert guard.check("greet you; ll", state).allowed


def test_dangerous_corpus_stays_blocked_with_a_real_state(guard: Guard) -> None:
    state = state_after("Y=1", bodies=True)
    missed = [(c, r, guard.check(c, state).rule) for c, r in DANGEROUS if guard.check(c, state).rule != r]
    # With the shell's state an unset variable is known to be empty: only verdicts that were
    # about not knowing a command name may change (``$X -rf /`` runs a command named -rf).
    assert missed and all(r == "dynamic-command" for _, r, _ in missed), missed


def test_the_users_own_prompt_hooks_do_not_block_everything(guard: Guard) -> None:
    # pyenv, direnv and the like compute code at run time in their hooks: their own business.
    hooks = "h() { eval \"$(printf true)\"; }; PROMPT_COMMAND=h; PS1='$(git branch 2>/dev/null) $ '"
    state = state_after(hooks)
    assert guard.check("ls -la", state).allowed


@pytest.mark.parametrize(
    "text",
    [
        "cat > heredoc.txt << EOF",
        "cat > heredoc.txt << EOF\nline 1",
        "cat > heredoc.txt << EOF\nline 1\nline 2\n",
        "echo 'an unclosed quote",
        'echo "a $(ls',
        "if true; then",
        "for f in *; do\n  echo $f",
        "ls |",
        "echo a \\",
        "f() {",
    ],
)
def test_incomplete_input_is_held_not_refused(guard: Guard, text: str) -> None:
    verdict = guard.check(text)
    assert verdict.allowed and verdict.incomplete and verdict.why, verdict


def test_incomplete_input_that_is_already_dangerous_is_blocked(guard: Guard) -> None:
    assert guard.check("bash <<EOF\nrm -rf /").rule == "recursive-delete"
    assert guard.check("cat <<EOF | sh\nrm -rf ~").rule == "recursive-delete"
    # …but data that merely mentions it is not
    assert guard.check("cat > notes.txt <<EOF\nrm -rf /").incomplete


def test_heredoc_bodies_are_read_as_bash_reads_them(guard: Guard) -> None:
    # tree-sitter-bash ends a body at a line that only starts with the delimiter
    for text in ("cat <<'EOF'\nEOF-not\nEOF", "cat <<EOF\n  EOF\nx\nEOF", 'cat <<"E"OF\n$x\nEOF'):
        assert guard.check(text).allowed and not guard.check(text).incomplete, text
    # a quoted body never runs; an unquoted one expands $(…)
    assert guard.check("cat <<'EOF'\nEOF-x\n$(rm -rf /)\nEOF").allowed
    assert guard.check("cat <<EOF\nEOF-x\n$(rm -rf /)\nEOF").rule == "recursive-delete"
    # the body fed to a shell is judged, however the delimiter is spelled
    assert guard.check("bash <<'EOF'\nEOF-not\nrm -rf /\nEOF").rule == "recursive-delete"
    assert guard.check('bash <<"E"OF\nrm -rf /\nEOF').rule == "recursive-delete"
    assert lex("cat <<'EOF'\nEOF-not\nEOF").heredocs[0].body == (12, 20)


@pytest.mark.parametrize(
    "command",
    [
        "tmux -S /home/u/.tether/tmux.sock kill-server",
        'tmux -S "$TETHER_HOME/tmux.sock" ls',
        "cd /home/u/.tether && tmux -S tmux.sock kill-session -t dsh-aaaaaa",
        "TMUX=/home/u/.tether/tmux.sock,1,0 tmux kill-server",
        "socat - UNIX-CONNECT:/home/u/.tether/tmux.sock",
        "rm /home/u/.tether/tmux.s*",
    ],
)
def test_tethers_own_socket_is_refused(command: str) -> None:
    guard = Guard(home="/home/u/.tether")
    assert guard.check(command).rule == "tether-socket", guard.check(command)


def test_other_tmux_servers_pass() -> None:
    guard = Guard(home="/home/u/.tether")
    for command in ("tmux ls", "tmux new -d -s work", "tmux -L mine attach", "tmux -S /tmp/other.sock ls"):
        assert guard.check(command).allowed, command
    assert guard.check("rm -rf /home/u/.tether").rule == "recursive-delete"


@pytest.mark.parametrize(
    "command", ["rm -rf !$", "echo !!", "!rm", "sudo !!", "^foo^bar", 'echo "!-2"', "cd !$:h"]
)
def test_history_expansion_is_refused(guard: Guard, command: str) -> None:
    assert guard.check(command).rule == "dynamic-command"
    assert "history" in guard.check(command).why


@pytest.mark.parametrize(
    "command",
    ["echo 'hi!'", "echo hi!", 'echo "done!"', "[ ! -f x ] && echo y", "find . ! -name x", "echo $!"],
)
def test_exclamation_marks_that_bash_leaves_alone_pass(guard: Guard, command: str) -> None:
    assert guard.check(command).allowed, guard.check(command)
    state = state_after("set +H")
    assert guard.check("echo !!", state).allowed  # history expansion switched off


@pytest.mark.parametrize(
    "command",
    [
        f"printf -v PROMPT_COMMAND 'rm -rf %s' {P}",
        f"PROMPT_COMMAND[1]='rm -rf {P}'",
        f"PROMPT_COMMAND+=('rm -rf {P}')",
        f"declare -n r=PROMPT_COMMAND; r='rm -rf {P}'",
        f"source <(echo rm -rf {P})",
        f". <(printf 'rm -rf %s' {P})",
        f"bash <(echo rm -rf {P})",
        f"source /dev/stdin <<< 'rm -rf {P}'",
        f"IFS=,; X=x,{P}; rm -rf $X",
        f"bind -x '\"\\C-t\": rm -rf {P}'",
        f'bind \'"\\C-t": "rm -rf {P}\\n"\'',
        f"complete -C 'rm -rf {P}' ls",
        f"mapfile -C 'rm -rf {P}' -c 1 arr < /etc/hosts",
        f"PS1='$(rm -rf {P}) $ '",
        f'f() {{ rm -rf "$1"; }}; f {P}',
        f'echo {P}; rm -rf "$_"',
    ],
)
def test_stored_and_assembled_code_in_one_text(guard: Guard, command: str) -> None:
    assert guard.check(command).rule == "recursive-delete", guard.check(command)


@pytest.mark.parametrize(
    "command",
    [
        'printf -v "$name" x',
        'declare "$n=$v"',
        "mapfile -t PROMPT_COMMAND < file",
        "read -r PROMPT_COMMAND < file",
        "source <(cat file)",
        "IFS=$(cat f); X=a; rm -rf $X",
    ],
)
def test_what_only_run_time_knows_is_refused(guard: Guard, command: str) -> None:
    assert guard.check(command).rule == "dynamic-command", guard.check(command)
