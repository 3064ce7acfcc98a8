"""What a person sees in a shell's terminal is what the commands printed, in order.

tmux, unlike xterm, keeps the cursor a program saved when it entered the alternate screen
(``ESC [ ? 1049 h``) after it left, and restores it at every later ``ESC [ ? 1049 l`` — even one
printed outside the alternate screen. The prompt hook's reset of modes a program left on printed
that sequence before every prompt, so after any full-screen program (``less``, ``vim``, ``top``)
that started above the bottom row, every prompt was drawn back on that row, over the output of the
commands before it: the screen (and the panel) showed only the last command."""

from __future__ import annotations

from pathlib import Path

from shell_harness import call, open_shell, read, run, send, shell_client

from hang import HANG_MS


async def test_commands_after_a_full_screen_program_stay_on_the_screen(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, label="altscreen")
        assert (await run(client, shell, "clear"))["exitCode"] == 0
        # A full-screen program that starts on the top rows and leaves (as `less file` does)
        out = await run(client, shell, r"printf '\e[?1049hfull screen\e[?1049l'")
        assert out["exitCode"] == 0
        for word in ("one", "two", "three"):
            out = await run(client, shell, f"echo {word}-$((40+2))")
            assert out["lines"] == [f"{word}-42"], out
        screen = (await read(client, shell, {"mode": "screen"}))["lines"]
        shown = [line for line in screen if line.endswith("-42")]
        assert shown == ["one-42", "two-42", "three-42"], screen
        # each output under its own command line
        commands = [i for i, line in enumerate(screen) if "echo " in line and "-$((40+2))" in line]
        assert [screen[i + 1] for i in commands] == ["one-42", "two-42", "three-42"], screen


async def test_the_pager_of_a_pipeline_is_what_holds_the_terminal(tether_home: Path) -> None:
    """`seq … | less`: the group's leader (`seq`) ends at once and `less` holds the terminal. The
    foreground was named after the leader alone, so it read as nothing: `fg=` empty in
    shell_state, no "send q" note after a timeout, a `foreground` wait for less never met."""
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, label="pager")
        out = await run(client, shell, "seq 1 200 | less", wait={"kind": "none"})
        assert out["ok"], out
        task = await read(
            client,
            shell,
            {"mode": "screen"},
            wait={"kind": "foreground", "proc": "less", "timeoutMs": HANG_MS},
        )
        assert task["met"], task  # before the fix: never met
        _, data = await call(client, "shell_state", {"sessions": shell})
        assert data["shells"][0]["fg"] == "less", data


async def test_a_tab_typed_to_a_readline_program_is_a_tab(tether_home: Path) -> None:
    """Text for a program in front goes through a paste buffer, which tmux brackets only when asked
    (``paste-buffer -p``); it was not asked, so a readline program (a nested bash, python's REPL)
    took the tab as a completion key and the text arrived without it."""
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, label="nested")
        out = await run(
            client,
            shell,
            "PS1='nested> ' bash --norc",
            wait={"kind": "match", "pattern": "nested> ", "timeoutMs": HANG_MS},
        )
        assert out["met"], out
        out = await send(client, shell, "printf '%s' 'a\tb' | od -An -c", ["Enter"])
        assert any(line.split() == ["a", "\\t", "b"] for line in out["lines"]), out
        await send(client, shell, "exit", ["Enter"])


_READER = (
    "import os, sys, termios, tty; tty.setraw(0); "
    "sys.stdout.write('\\x1b[?2004hREADY\\r\\n'); sys.stdout.flush(); "
    "[sys.stdout.write(repr(os.read(0, 100)) + '\\r\\n') or sys.stdout.flush() for _ in range(2)]; "
    "termios.tcsetattr(0, termios.TCSADRAIN, termios.tcgetattr(0))"
)


async def test_text_without_a_tab_is_typed_even_to_a_program_that_asked_for_bracketed_paste(
    tether_home: Path,
) -> None:
    """Only text holding a tab is pasted bracketed: vim's normal mode inserts a paste as text, so
    `:q!` sent bracketed would land in the file instead of quitting."""
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, label="reader")
        script = tether_home / "reader.py"
        script.write_text(_READER)
        out = await run(
            client,
            shell,
            f"python3 {script}; stty sane",
            wait={"kind": "match", "pattern": "READY", "timeoutMs": HANG_MS},
        )
        assert out["met"], out
        out = await send(client, shell, ":q!")
        assert "b':q!'" in out["lines"], out
        out = await send(client, shell, "a\tb")
        assert "b'\\x1b[200~a\\tb\\x1b[201~'" in out["lines"], out


async def test_output_without_a_final_newline_stays_on_the_screen(tether_home: Path) -> None:
    """`printf abc` left its cursor after ``abc``; the prompt was drawn there, and bash clears the
    prompt's line before the loader runs, so tether typing the next command erased ``abc`` from the
    screen (and the log's line views lost it under the redrawn prompt). The prompt now starts a row
    of its own unless the cursor is at column 0 (zsh's PROMPT_SP); a result's text is unchanged."""
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, label="nonl", cols=40)
        assert (await run(client, shell, "PS1='> '; clear"))["exitCode"] == 0
        steps = [
            ("printf abc", ["abc"]),
            ("printf %040d 0", ["0" * 40]),  # the row full: the cursor waits at its last column
            ("printf %041d 0", ["0" * 41]),  # one more: it wrapped
            ("echo one", ["one"]),  # a newline: no blank row after it
            ("printf 'xy\\r'", ["xy"]),  # column 0: the prompt is drawn over it, as before
            ("printf 'a\\tb'", ["a       b"]),
        ]
        for command, lines in steps:
            out = await run(client, shell, command)
            printed = [
                line for line in out["lines"] if not line.startswith("[waited ")
            ]  # a busy machine's note
            assert out["exitCode"] == 0 and printed == lines, out
        assert (await run(client, shell, "true"))["exitCode"] == 0
        expected = [
            "> printf abc",
            "abc",
            "> printf %040d 0",
            "0" * 40,
            "> printf %041d 0",
            "0" * 41,
            "> echo one",
            "one",
            "> printf 'xy\\r'",
            "> printf 'a\\tb'",
            "a       b",
            "> true",
        ]
        # (the last prompt may be in the log or on the screen a moment after its marker)
        screen = _without_last_prompt((await read(client, shell, {"mode": "screen"}))["lines"])
        assert screen == expected, "\n".join(screen)
        history = (await read(client, shell, {"mode": "history"}, output={"lines": 50}))["lines"]
        assert _without_last_prompt(history)[-len(expected) :] == expected, history


def _without_last_prompt(lines: list[str]) -> list[str]:
    return lines[:-1] if lines and lines[-1] == ">" else lines
