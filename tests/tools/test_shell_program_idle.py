"""``idle`` for text typed to a program (``shell_run`` into a REPL, a ``steps`` step): the program
answered and waits again, or it ended and the shell is back at its prompt — never a quiet screen
over a program that still computes or exits (``WaitSpec.program_idle``).

A busy machine stretches a program's silent work past the screen's settling time (the flake that
found this: python's exit under load outlasted 150 ms, and the next command was refused because
python was still in front); here the program's silent work is made long on purpose.
"""

from __future__ import annotations

from pathlib import Path

from shell_harness import call, open_shell, run, shell_client

from hang import HANG_MS

# Half a second or more of computing, printing nothing (python, 3·10⁷ additions).
_SILENT_WORK = "sum(range(3 * 10**7))"
_IDLE = {"kind": "idle", "timeoutMs": HANG_MS}


async def test_exit_typed_in_a_step_is_idle_once_the_shell_is_back(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        steps = [
            {"send": "python3 -q", "expect": {"kind": "match", "pattern": ">>> "}},
            {
                "send": f"import atexit; atexit.register(lambda: {_SILENT_WORK})",
                "expect": {"kind": "match", "pattern": ">>> "},
            },
            {"send": "exit()", "expect": {"kind": "idle"}, "timeoutMs": HANG_MS},
        ]
        _, data = await call(
            client,
            "shell_run",
            {"tasks": [{"target": {"sessions": shell}, "action": {"kind": "steps", "steps": steps}}]},
        )
        assert data["tasks"][0]["met"] is True, data
        # python has ended: the next command is the shell's, not python's input.
        after = await run(client, shell, "(exit 3)")
        assert after["exitCode"] == 3, after


async def test_input_to_a_repl_is_answered_once_the_repl_waits_again(tether_home: Path) -> None:
    async with shell_client(tether_home) as client:
        shell = await open_shell(client)
        started = await run(client, shell, "python3 -q", wait={"kind": "match", "pattern": ">>> "})
        assert started["met"] is True, started
        # Typed to python (the shell is not at its prompt), with the default wait, idle.
        answered = await run(client, shell, f"x = {_SILENT_WORK}; print('do' + 'ne')", wait=_IDLE)
        assert answered["met"] is True and "done" in answered["lines"], answered
        # A REPL waiting for its next line is idle, though it is still in front.
        answered = await run(client, shell, "print(6 * 7)", wait=_IDLE)
        assert answered["met"] is True and "42" in answered["lines"], answered
        left = await run(client, shell, "exit()", wait=_IDLE)
        assert left["met"] is True, left
        assert (await run(client, shell, "(exit 4)"))["exitCode"] == 4
