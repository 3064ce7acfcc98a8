"""Masking holds for every read, tried as an attacker would: a pattern over a secret's value never
matches, and no count, wait or change test tells a right guess from a wrong one."""

from __future__ import annotations

from pathlib import Path

from safety_harness import task, vault
from shell_harness import open_shell, run, shell_client

SECRET = "s3cr3t-Pa55w0rd-xyz"


async def test_search_match_diff_and_if_changed_see_only_the_mask(tether_home: Path, tmp_path: Path) -> None:
    vault(tether_home).set("K", SECRET)
    # The value sits in a file the shell prints: tether never delivered it to this shell, the
    # vault can read it, so it is masked like any delivered one.
    (tmp_path / "conf").write_text(f"secret={SECRET}\n")
    async with shell_client(tether_home) as client:
        shell = await open_shell(client, cwd=str(tmp_path))
        await run(client, shell, "cat conf")
        right, wrong = "secret=s3c", "secret=xyz"
        for guess in (right, wrong, "s3cr3t", "Pa55", SECRET):
            _, out = await task(client, "shell_read", shell, {"kind": "read", "search": guess})
            assert out["lines"][0].startswith("0 matches"), (guess, out["lines"])
        _, out = await task(client, "shell_read", shell, {"kind": "read", "search": "secret="})
        assert out["lines"][0].startswith("1 matches") and "[vault:K]" in "\n".join(out["lines"])
        # A wait on a prefix of the value is never met; the same wait without the value is.
        guessed = await run(
            client, shell, "cat conf", wait={"kind": "match", "pattern": "secret=s3c", "timeoutMs": 1500}
        )
        assert guessed["met"] is False, guessed
        masked = await run(client, shell, "cat conf", wait={"kind": "match", "pattern": r"secret=\[vault"})
        assert masked["met"] is True, masked
        # The screen a conversation saw last is stored masked: printing the value again changes
        # nothing that ifChanged or diff can tell from a different value of the same length.
        _, first = await task(client, "shell_read", shell, {"kind": "read", "mode": "diff"})
        await run(client, shell, "clear; cat conf")
        _, again = await task(client, "shell_read", shell, {"kind": "read", "ifChanged": True})
        _, diff = await task(client, "shell_read", shell, {"kind": "read", "mode": "diff"})
        for out in (first, again, diff):
            assert SECRET not in "\n".join(out["lines"]) and "s3cr3t" not in "\n".join(out["lines"])
