"""What a person sees in a shell's terminal is what the commands printed, in order.

tmux, unlike xterm, keeps the cursor a program saved when it entered the alternate screen
(``ESC [ ? 1049 h``) after it left, and restores it at every later ``ESC [ ? 1049 l`` — even one
printed outside the alternate screen. The prompt hook's reset of modes a program left on printed
that sequence before every prompt, so after any full-screen program (``less``, ``vim``, ``top``)
that started above the bottom row, every prompt was drawn back on that row, over the output of the
commands before it: the screen (and the panel) showed only the last command."""

from __future__ import annotations

from pathlib import Path

from shell_harness import open_shell, read, run, shell_client


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
