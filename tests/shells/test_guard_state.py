"""The guard with what the shell reported (``ShellState``): variables, functions, aliases, namerefs,
IFS, prompt hooks and traps of earlier calls; incomplete input; heredoc bodies; tether's socket.

The states are parsed from dumps written by a real bash (``bash -c`` running the same builtins the
shell integration runs), so the parser is tested against bash's own quoting."""

from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest
from test_guard import BENIGN, DANGEROUS

from tether.shells.guard import Guard, ShellState, dump_key, parse_dump
from tether.shells.guard.heredocs import lex
from tether.shells.integration.script import integration_script

P = "/srv"  # a protected directory of the defaults


def _functions(*names: str) -> str:
    """The integration's own definitions of ``names`` (the dump is tested as the shell runs it)."""
    script = integration_script("testnonce", state="/nonexistent/shell.state")
    found = [re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", script, re.S | re.M) for name in names]
    assert all(found), names
    return "".join(m.group(0) for m in found if m is not None)


_DUMP = _functions("__tether_dump", "__tether_sections")


def dump_after(setup: str, path: Path, *, bodies: bool = False, bash: str = "bash") -> bytes:
    """Run ``setup`` in a bash, then the integration's dump into ``path``; the file's bytes."""
    script = f"{_DUMP}\n{setup}\n__tether_dump {shlex.quote(str(path))} {'all' if bodies else ''}\n"
    subprocess.run([bash, "--norc", "-c", script], check=True, timeout=30)
    return path.read_bytes()


def state_after(setup: str, *, bodies: bool = False) -> ShellState:
    """What a shell that ran ``setup`` reports (as the prompt hook, or the reporter, writes it)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = dump_after(setup, Path(tmp) / "state", bodies=bodies)
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
    "text",
    [
        "cat <<EOF\n  $(rm -rf /)\nEOF",
        "cat <<-EOF >x\n\t\t$(rm -rf /)\n\tEOF",
        "cat <<E\nok\n \t$(rm -rf /) x\nE",
    ],
)
def test_an_indented_command_substitution_in_a_body_is_judged(guard: Guard, text: str) -> None:
    # tree-sitter-bash read a body line of blanks then `$(…)` as plain text: the command in it was
    # never judged (a tab-indented `<<-` body, an indented line of YAML or JSON).
    assert guard.check(text).rule == "recursive-delete", text
    quoted = re.sub(r"<<(-?)(\w+)", r"<<\1'\2'", text, count=1)  # a quoted body never runs
    assert guard.check(quoted).allowed, quoted
    assert guard.check("cat <<EOF\n  $(date)\n\t$(hostname) x\nEOF").allowed


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


# ---- a dump written over the one before (no truncation) ------------------------------------------


def test_a_shorter_dump_over_a_longer_one_is_read_alone(tmp_path: Path) -> None:
    path = tmp_path / "state"
    long_value = "x" * 5000
    first = dump_after(f"GONE={long_value}; KEEP=1", path)
    second = dump_after("KEEP=2", path)
    assert len(second) == len(first)  # written in place: the old tail is still in the file
    state = parse_dump(second)
    assert state is not None
    assert state.variables["KEEP"] == "2" and "GONE" not in state.variables


def test_a_dump_still_being_written_over_an_old_one_is_no_state(tmp_path: Path) -> None:
    path = tmp_path / "state"
    old = dump_after(f"OLD={'y' * 3000}", path)
    new = dump_after("NEW=1", tmp_path / "fresh")
    for cut in (len(new) // 4, len(new) // 2, len(new) - 2):
        # The new head over the old bytes, the old dump's own end marker still in them.
        torn = new[:cut] + old[cut:]
        assert b"#tether-end " in old[cut:]
        assert parse_dump(torn) is None, cut


def test_an_end_marker_inside_a_value_does_not_end_the_dump(tmp_path: Path) -> None:
    fake = "$'\\n#tether-end 1.2.3\\n'"
    state = parse_dump(dump_after(f"alias zz={fake}; V={fake}; later() {{ rm -rf /srv; }}", tmp_path / "s"))
    assert state is not None
    assert "zz" in state.aliases and state.variables["V"] == "\n#tether-end 1.2.3\n"
    assert "later" in state.functions


def test_without_srandom_the_dump_replaces_the_file(tmp_path: Path) -> None:
    # bash before 5.1 has no SRANDOM (unset here, it loses its meaning): untagged markers, and
    # the file truncated, so it ends where the dump does.
    path = tmp_path / "state"
    dump_after(f"GONE={'z' * 5000}", path)
    data = dump_after("unset SRANDOM; KEEP=3", path)
    assert data.startswith(b"#tether-state\n") and data.endswith(b"#tether-end\n")
    state = parse_dump(data)
    assert state is not None and state.variables["KEEP"] == "3" and "GONE" not in state.variables


def test_the_shells_home_is_a_home_whatever_its_path(guard: Guard, tmp_path: Path) -> None:
    # A HOME outside /home and /root (a CI account, a service's directory): with the shell's state
    # the guard knows $HOME's value, and that value is still the shell's home.
    (tmp_path / "src").mkdir()
    state = state_after(f"export HOME={tmp_path}; cd {tmp_path}")
    for command in ('rm -rf "$HOME"', "rm -rf ${HOME}/", 'rm -rf -- "$HOME"/*', "rm -rf ~", "rm -rf *"):
        verdict = guard.check(command, state)
        assert verdict.rule == "recursive-delete" and "home directory" in verdict.why, (command, verdict)
    # What lies in it is an ordinary path, and so is everything in a directory below it.
    assert guard.check('rm -rf "$HOME/build"', state).allowed
    assert guard.check("rm -rf *", state_after(f"export HOME={tmp_path}; cd {tmp_path}/src")).allowed


def _dumps(between: str, tmp: Path, *, before: str = "", bodies: bool = False) -> tuple[bytes, bytes]:
    """Two dumps of one bash, at two moments, with ``between`` run in between (``before`` before
    the first; ``bodies``: as the reporter writes them, every function's body included)."""
    first, second = tmp / "first.state", tmp / "second.state"
    every = " all" if bodies else ""
    script = (
        f"{_DUMP}\nA=1\n{before}\n__tether_dump {first}{every}\n: $RANDOM $SRANDOM\n{between}\n"
        f"__tether_dump {second}{every}\n"
    )
    subprocess.run(["bash", "--norc", "-c", script], check=True, timeout=30)
    return first.read_bytes(), second.read_bytes()


def test_dumps_of_two_prompts_with_nothing_defined_between_share_a_key(tmp_path: Path) -> None:
    # The guard parses a state once and keeps it while only the dump's clockwork changes: its
    # moment, random numbers, $_ and the hook's line numbers, which no judgement reads.
    first, second = _dumps("true", tmp_path)
    assert first != second  # the clocks, the tag, $_ and BASH_LINENO moved
    assert dump_key(first) is not None and dump_key(first) == dump_key(second)
    a, b = parse_dump(first), parse_dump(second)
    assert a is not None and b is not None and a.key == b.key


@pytest.mark.parametrize(
    "between",
    [
        "A=2",
        "B=1",
        "mapfile -t <<< /",
        "read -r <<< /etc",
        "alias ll='ls -l'",
        "f() { :; }",
        "trap 'rm -rf /tmp/x' EXIT",
    ],
)
def test_anything_the_user_defines_changes_the_key(tmp_path: Path, between: str) -> None:
    first, second = _dumps(between, tmp_path)
    assert dump_key(first) != dump_key(second)


@pytest.mark.parametrize(
    ("before", "between", "bodies"),
    [
        ("alias z=$'eval \"\\ndeclare -- _=1\"'", "alias z=$'eval \"\\ndeclare -- _=$(echo 2)\"'", False),
        ("trap $'eval \"\\ndeclare -- _=1\"' USR2", "trap $'eval \"\\ndeclare -- _=$(echo 2)\"' USR2", False),
        ('f() { eval "\ndeclare -i RANDOM=1"; }', 'f() { eval "\ndeclare -i RANDOM=1; echo 2"; }', True),
    ],
    ids=["alias", "trap", "function body"],
)
def test_a_definition_holding_a_line_like_the_clockwork_changes_the_key(
    tmp_path: Path, before: str, between: str, bodies: bool
) -> None:
    # A quoted string spanning lines puts a line of the definition at the start of a line of the
    # dump; shaped like ``declare -p``'s clockwork, it is still the definition's, and the state
    # parsed for the old definition must not serve the new one.
    first, second = _dumps(between, tmp_path, before=before, bodies=bodies)
    a, b = parse_dump(first), parse_dump(second)
    assert a is not None and b is not None and a.key != b.key
    assert dump_key(first) != dump_key(second)


def test_a_dump_still_being_written_has_no_key(tmp_path: Path) -> None:
    whole = dump_after("A=1", tmp_path / "state")
    assert dump_key(whole[: len(whole) // 2]) is None


@pytest.mark.parametrize("prompt", ["$ ", "$", "\\u@\\h:\\w\\$ ", "$$ ", "[$(date +%T)] $ ", "a$\n$ "])
def test_a_prompt_that_ends_in_a_dollar_is_allowed(guard: Guard, prompt: str) -> None:
    # The prompt string is read as a heredoc body; the parser called a body line that starts with
    # a lone `$` an error, and `PS1='$ '` was refused as text bash cannot parse.
    assert guard.check(f"PS1='{prompt}'").allowed, guard.check(f"PS1='{prompt}'").message
    assert guard.check(f"PS1='{prompt}'", state_after("PS1='> '")).allowed
    assert not guard.check(f"PS1='{prompt} $(rm -rf {P})'").allowed
    assert not guard.check(f"PS1='{prompt}\n  $(rm -rf {P})'").allowed  # indented, as in a body
