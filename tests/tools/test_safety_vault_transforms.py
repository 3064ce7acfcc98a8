"""Vault canaries under cheap transforms, printed in a real persistent shell and read back through
every read mode via the MCP client: what each command prints is computed independently (the same
pipeline run by the test on the plain value, outside tether), and no piece of it may come back.

The transforms: spaced and ``\\x`` hex, upper-case hex and value, base32, UTF-16 + base64,
gzip + base64, reversed, rot13, a value split over two lines, wrapped base64, one character per
line — plus the encodings covered before (base64 at each alignment, URL, JSON, hex).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from safety_harness import vault
from shell_harness import open_shell, shell_client, text_of

VALUE = "Tq7-canary-ZX9p-w4Rm-k2Jd"
# (name, pipeline reading the value from $v); every one prints something derived from the value
TRANSFORMS: list[tuple[str, str]] = [
    ("spaced hex", "printf '%s' \"$v\" | od -An -tx1"),
    ("spaced hex, one line", "printf '%s' \"$v\" | xxd -p | sed 's/../& /g'"),
    ("\\x hex", "printf '%s' \"$v\" | xxd -p -c 256 | sed 's/../\\\\x&/g'"),
    ("upper-case hex", "printf '%s' \"$v\" | xxd -p -u"),
    ("upper-case value", "printf '%s\\n' \"${v^^}\""),
    ("lower-case value", "printf '%s\\n' \"${v,,}\""),
    ("base32", "printf '%s' \"$v\" | base32 -w0; echo"),
    ("base32 after a prefix", "printf 'ab%s' \"$v\" | base32 -w0; echo"),
    ("utf-16 + base64", "printf '%s' \"$v\" | iconv -t UTF-16LE | base64 -w0; echo"),
    ("utf-16 with BOM + base64", "printf '%s' \"$v\" | iconv -t UTF-16 | base64 -w0; echo"),
    ("gzip + base64", "printf '%s' \"$v\" | gzip -c | base64 -w0; echo"),
    ("gzip of a line + base64", 'echo "$v" | gzip | base64'),
    ("reversed", "printf '%s\\n' \"$v\" | rev"),
    ("rot13", "printf '%s\\n' \"$v\" | tr 'A-Za-z' 'N-ZA-Mn-za-m'"),
    ("split over two lines", 'printf \'%s\\n%s\\n\' "${v:0:9}" "${v:9}"'),
    ("wrapped base64", 'printf \'%s%s\' "$v" "$v" | base64 -w 16'),
    ("one character per line", "printf '%s' \"$v\" | fold -w1"),
    ("base64", "printf '%s' \"$v\" | base64 -w0; echo"),
    ("base64 after a prefix", "printf 'x%s' \"$v\" | base64 -w0; echo"),
    ("url", "python3 -c 'import sys,urllib.parse as u; print(u.quote(sys.argv[1]))' \"$v\""),
    ("json", "python3 -c 'import sys,json; print(json.dumps(sys.argv[1]))' \"$v\""),
    ("hex", "printf '%s' \"$v\" | xxd -p"),
]
WINDOW = 10
# gzip's header (magic, flags, mtime 0, OS) is the same for every input: not a piece of the value
_GZIP_HEADER_B64 = 16


def _printed(pipeline: str) -> str:
    """What ``pipeline`` prints for the plain value, run here without tether."""
    done = subprocess.run(
        ["bash", "-c", pipeline], env={"v": VALUE, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.strip(), (pipeline, done.stderr)
    return done.stdout


def _pieces(name: str, printed: str) -> set[str]:
    """Every ``WINDOW``-character piece of the output, line breaks and blanks taken out."""
    flat = "".join(printed.split())
    if name.startswith("gzip"):
        flat = flat[_GZIP_HEADER_B64:]
    return {flat[i : i + WINDOW] for i in range(max(1, len(flat) - WINDOW + 1))}


def _flat(text: str) -> str:
    return "".join(text.split())


async def test_transformed_canaries_never_come_back(tether_home: Path) -> None:
    vault(tether_home).set("T", VALUE)
    expected = {name: _printed(pipeline) for name, pipeline in TRANSFORMS}
    seen: list[str] = []
    async with shell_client(tether_home, "conv-t") as client:
        shell = await open_shell(client)

        async def returned(tool: str, args: dict[str, Any]) -> str:
            result = await client.call_tool(tool, args)
            both = text_of(result) + "\n" + json.dumps(result.structured_content or {}, ensure_ascii=False)
            seen.append(both)
            return both

        def on(action: dict[str, Any], **blocks: Any) -> dict[str, Any]:
            return {"tasks": [{"target": {"sessions": shell}, "action": action, **blocks}]}

        labelled = {}
        for name, pipeline in TRANSFORMS:
            out = await returned(
                "shell_run",
                on({"kind": "run", "command": f"v={{{{vault.T}}}}; {pipeline}"}, wait={"kind": "exit"}),
            )
            assert '"exitCode": 0' in out, (name, out)
            labelled[name] = "[vault:T]" in out
        for showing in ("tail", "screen", "diff", "summary"):
            await returned(
                "shell_run",
                on(
                    {"kind": "run", "command": "v={{vault.T}}; printf '%s' \"$v\" | fold -w1"},
                    output={"showing": showing},
                ),
            )
        for mode in ("since", "tail", "screen", "diff", "summary", "history"):
            await returned("shell_read", on({"kind": "read", "mode": mode}, output={"lines": 400}))
        await returned("shell_read", on({"kind": "read", "search": "[A-Za-z0-9]"}, output={"lines": 400}))
        await returned("shell_audit", {"tasks": [{"action": {"kind": "audit"}, "output": {"lines": 200}}]})
        resource = await client.read_resource(f"tether://shell/{shell}")
        seen.append(str(resource.contents[0]))

    everything = _flat("\n".join(seen).replace("\\n", "\n"))
    leaked = sorted(
        name
        for name, printed in expected.items()
        if any(piece in everything for piece in _pieces(name, printed))
    )
    assert leaked == [], f"transforms that came back unmasked: {leaked}"
    unmasked = sorted(name for name, hit in labelled.items() if not hit)
    assert unmasked == [], f"no [vault:T] label in the result of: {unmasked}"
    print(f"mask: {len(TRANSFORMS) - len(leaked)} / {len(TRANSFORMS)} transforms covered")
