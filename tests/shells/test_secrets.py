"""Vault references (expansion without typing the value, force semantics) and output masking."""

from __future__ import annotations

import base64
import json
import random
import re
import shlex
import string
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from tether.errors import NotFoundError, RefusedError, UsageError
from tether.shells.integration import payload
from tether.shells.vault.mask import SecretMasker, StreamMasker, TimedStreamMasker, secret_forms
from tether.shells.vault.quoting import reference_contexts
from tether.shells.vault.refs import (
    ExpandedCommand,
    expand_references,
    find_references,
    reference_names,
)
from tether.store.db import Store
from tether.store.vault import Vault, VaultLockedError
from tether.store.vault.rules import MAX_VALUE_BYTES

CANARY = 'Cn4ry/+sécret&x=1"q\\z'  # URL-, JSON- and base64-alphabet characters, and non-ASCII


@pytest.fixture(autouse=True)
def _close_stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every ``Store`` a test opens is closed at teardown: no connection outlives its test."""
    opened: list[Store] = []
    real_open = Store.open.__func__  # type: ignore[attr-defined]

    def tracked(cls: type[Store], home: Path) -> Store:
        store: Store = real_open(cls, home)
        opened.append(store)
        return store

    monkeypatch.setattr(Store, "open", classmethod(tracked))
    yield
    for store in opened:
        store.close()


class FakeSource:
    """A vault stand-in: ``locked`` maps a name to its locked group."""

    def __init__(self, values: dict[str, str], locked: dict[str, str] | None = None) -> None:
        self.values = values
        self.locked = locked or {}

    def resolve(self, name: str) -> str:
        if name in self.locked:
            raise VaultLockedError(name=name, group=self.locked[name])
        if name not in self.values:
            raise NotFoundError(f"no vault secret named {name!r}")
        return self.values[name]


def _assign(expanded: ExpandedCommand) -> str:
    """What the loader does with the variables (set, unexported), as plain bash for these tests."""
    return "".join(f"{var}={shlex.quote(value)}\n" for var, value in expanded.variables.items())


def _bash(script: str) -> str:
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script], capture_output=True, text=True, timeout=10
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- references and quoting contexts --------------------------------------------------------------


def test_contexts_follow_bash_quoting() -> None:
    ref = "{{vault.X}}"
    cases = {
        f"echo {ref}": "plain",
        f'echo "a {ref}"': "double",
        f"echo 'a {ref}'": "single",
        f"echo $'a\\' {ref}'": "ansi",
        f'echo "$(echo {ref})"': "plain",
        f'echo "`echo {ref}`"': "plain",
        f'echo "it\'s" {ref}': "plain",
        f"# it's a comment\necho {ref}": "plain",
        f"echo \\' {ref}": "plain",
        f"cat <<EOF\n{ref}\nEOF": "heredoc",
        f"cat <<'EOF'\n{ref}\nEOF": "heredoc-quoted",
        f'cat <<-"EOF"\n\t{ref}\n\tEOF': "heredoc-quoted",
        f"cat <<EOF\nEOF\necho '{ref}'": "single",
        f"cat <<< '{ref}'": "single",
    }
    for command, expected in cases.items():
        start = command.index(ref)
        assert reference_contexts(command, [(start, start + len(ref))]) == [expected], command


def test_malformed_references_are_usage_errors() -> None:
    for bad in (
        "echo {{vault.}}",
        "echo {{vault.a b}}",
        "echo {{vault.1x}}",
        "echo {{vault.X}",
        "{{ vault.x.y }}",
    ):
        with pytest.raises(UsageError, match="vault"):
            find_references(bad)
    assert [r.name for r in find_references("a {{ vault.A }} {{vault.b-2}} {{vault.A}}")] == ["A", "b-2", "A"]
    assert reference_names("a {{vault.A}} {{vault.B}} {{vault.A}}") == ("A", "B")
    assert find_references("echo {{other.X}} {vault.X}") == []


NASTY = "a b$c'd\"e`f\\g*h ${x} $(id)\n  i\ttab"
SHAPES = [
    "printf '[%s]' {{vault.X}}",
    "printf '[%s]' \"pre {{vault.X}} post\"",
    "printf '[%s]' 'pre {{vault.X}} post'",
    "printf '[%s]' $'pre\\t{{vault.X}}\\tpost'",
    "printf '[%s]' \"$(printf '%s' \"{{vault.X}}\")\"",
    "cat <<EOF\n[{{vault.X}}]\nEOF",
    "cat <<-EOF\n\t[{{vault.X}}]\n\tEOF",
    "printf '[%s]' \"${UNSET:-{{vault.X}}}\"",
    'V={{vault.X}} bash -c \'printf "[%s]" "$V"\'',
    "# it's {{vault.X}}\nprintf '[%s]' {{vault.X}}",
    "printf '[%s|%s]' {{vault.X}} '{{vault.Y}}'",
]


@pytest.mark.parametrize("shape", SHAPES)
def test_env_delivery_gives_the_process_the_exact_value_without_typing_it(shape: str) -> None:
    values = {"X": NASTY, "Y": "y-" + NASTY}
    expanded = expand_references(shape, FakeSource(values))
    assert NASTY not in expanded.command and "  i\ttab" not in expanded.command
    # What bash would print had the value been typed as a plain word, with the value as one piece.
    expected = _bash(shape.replace("{{vault.X}}", "SAFE1").replace("{{vault.Y}}", "y-SAFE1")).replace(
        "SAFE1", NASTY
    )
    assert _bash(_assign(expanded) + expanded.command) == expected
    assert expanded.written == shape
    assert expanded.expanded == tuple(n for n in ("X", "Y") if "{{vault." + n in shape)


def test_quoted_heredoc_reference_is_refused() -> None:
    with pytest.raises(UsageError, match="quoted here-document"):
        expand_references("cat <<'EOF'\n{{vault.X}}\nEOF", FakeSource({"X": "v"}))


def test_locked_group_refuses_the_whole_command_without_force() -> None:
    source = FakeSource({"OPEN": "open-value"}, locked={"DB": "prod", "API": "prod"})
    with pytest.raises(RefusedError) as caught:
        expand_references("deploy {{vault.OPEN}} {{vault.DB}} {{vault.API}} {{vault.DB}}", source)
    message = caught.value.message
    assert "{{vault.DB}}, {{vault.API}}" in message and "'prod'" in message
    assert (
        "tether vault unlock prod" in message and "Nothing was sent" in message and "force: true" in message
    )
    assert "open-value" not in message


def test_force_expands_the_rest_and_still_refuses_the_locked_references() -> None:
    source = FakeSource({"OPEN": "open-value"}, locked={"DB": "prod"})
    expanded = expand_references("printf '%s|%s' {{vault.OPEN}} {{vault.DB}}", source, force=True)
    assert [(b.name, b.group) for b in expanded.blocked] == [("DB", "prod")]
    assert expanded.expanded == ("OPEN",)
    assert expanded.notice is not None
    assert "NOT expanded" in expanded.notice and "{{vault.DB}}" in expanded.notice
    assert "tether vault unlock prod" in expanded.notice
    # The locked reference reaches bash as inert text, never as a value.
    assert _bash(_assign(expanded) + expanded.command) == "open-value|{{vault.DB}}"
    assert expand_references("echo hi", source, force=True).notice is None


def test_unknown_name_is_not_found_even_with_force() -> None:
    with pytest.raises(NotFoundError, match=r"\{\{vault.NOPE\}\}"):
        expand_references("echo {{vault.NOPE}}", FakeSource({}), force=True)


def test_typed_delivery_substitutes_values_for_a_program_prompt() -> None:
    expanded = expand_references("{{vault.PW}}\n", FakeSource({"PW": "hunter2"}), delivery="typed")
    assert (
        expanded.command == "hunter2\n" and expanded.variables == {} and expanded.written == "{{vault.PW}}\n"
    )


def test_written_form_masks_a_value_typed_literally() -> None:
    expanded = expand_references("echo {{vault.T}} tok-123456", FakeSource({"T": "tok-123456"}))
    assert expanded.written == "echo {{vault.T}} [vault:T]"
    # A value that happens to occur inside a reference's own text does not mangle the reference.
    expanded = expand_references("echo {{vault.vault}} vault", FakeSource({"vault": "vault"}))
    assert expanded.written == "echo {{vault.vault}} [vault:vault]"


def test_values_travel_in_the_loader_payload_and_decode_exactly() -> None:
    """The loader's payload is printable ASCII that bash's ``printf %b`` turns back into the exact
    bytes: the value never appears in the command, and any byte survives (NUL aside: bash cannot
    hold one)."""
    expanded = expand_references("printf '%s' {{vault.my-key}}; (exit 3)", FakeSource({"my-key": NASTY}))
    assert list(expanded.variables) == ["__TETHER_V_my_key"]
    assert NASTY not in expanded.command
    everything = bytes(range(1, 256)).decode("utf-8", "surrogateescape")
    for value in (NASTY, everything):
        encoded = payload.encode(payload.to_bytes(value))
        assert encoded.isascii() and encoded.isprintable() and "|" not in encoded and "~" not in encoded
        script = 'printf -v v %b "$1"; printf %s "$v"'
        out = subprocess.run(["bash", "-c", script, "_", encoded], capture_output=True, check=True).stdout
        assert out == payload.to_bytes(value)


def test_expansion_against_the_real_vault(tether_home: Path) -> None:
    vault = Vault(Store.open(tether_home), tether_home)
    vault.set("OPEN", "open-value")
    vault.create_group("prod", "pass phrase")
    vault.set("DB", "db-value", group="prod", passphrase="pass phrase")
    with pytest.raises(RefusedError, match="tether vault unlock prod"):
        expand_references("x {{vault.OPEN}} {{vault.DB}}", vault)
    assert expand_references("x {{vault.OPEN}} {{vault.DB}}", vault, force=True).expanded == ("OPEN",)
    vault.unlock("prod", "pass phrase")
    expanded = expand_references("printf %s-%s {{vault.OPEN}} {{vault.DB}}", vault)
    assert _bash(_assign(expanded) + expanded.command) == "open-value-db-value"


# -- masking ---------------------------------------------------------------------------------------


def _encodings(value: str) -> dict[str, str]:
    """The value printed in every covered encoding, each embedded in a longer stream."""
    raw = value.encode()
    out = {
        "raw": f"<{value}>",
        "quote": f"?q={quote(value, safe='')}&",
        "quote-slash": f"/p/{quote(value)}/",
        "quote_plus": f"?q={quote_plus(value)}&",
        "quote-lower": "?q=" + re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(value, safe="")),
        "json": json.dumps({"token": value}),
        "json-unicode": json.dumps({"token": value}, ensure_ascii=False),
        "hex": f"0x{raw.hex()}.",
        "HEX": f"0x{raw.hex().upper()}.",
        "b64-whole": base64.b64encode(raw).decode(),
        "b64url-whole": base64.urlsafe_b64encode(raw).decode(),
    }
    for offset in range(6):  # byte offsets 0/1/2 and again one group later
        for enc, name in ((base64.b64encode, "b64"), (base64.urlsafe_b64encode, "b64url")):
            out[f"{name}@{offset}"] = enc(bytes(range(200, 200 + offset)) + raw + b"\x01\x02tail").decode()
    return out


def _stable_b64_region(value: str, offset: int) -> tuple[int, int]:
    bits_start, bits_end = 8 * offset, 8 * (offset + len(value.encode()))
    return -(-bits_start // 6), bits_end // 6


def _assert_clean(masked: str, encoded: str, region: tuple[int, int]) -> None:
    secret_part = encoded[region[0] : region[1]]
    for i in range(len(secret_part) - 5):
        assert secret_part[i : i + 6] not in masked, (
            f"{secret_part[i : i + 6]!r} of {secret_part!r} leaked: {masked!r}"
        )


def test_every_encoding_is_masked() -> None:
    masker = SecretMasker({"TOKEN": CANARY})
    for label, text in _encodings(CANARY).items():
        masked = masker.mask(text)
        assert "[vault:TOKEN]" in masked, (label, masked)
        if "@" in label:
            region = _stable_b64_region(CANARY, int(label.split("@")[1]))
        elif "whole" in label:
            region = (0, len(text))
        else:
            value_forms = [f for f in secret_forms(CANARY) if f in text]
            longest = max(value_forms, key=len)
            region = (text.index(longest), text.index(longest) + len(longest))
        _assert_clean(masked, text, region)
    assert CANARY not in masker.mask(f"x{CANARY}y{CANARY}")


def test_multi_line_value_is_masked_whole_and_line_by_line() -> None:
    body = "MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu"
    value = f"-----BEGIN KEY-----\n{body}\n}}\n-----END KEY-----"
    masker = SecretMasker({"KEY": value})
    terminal = value.replace("\n", "\r\n") + "\r\n$ "
    masked = masker.mask(terminal)
    assert masked == "[vault:KEY]\r\n$ "
    assert masker.mask(value) == "[vault:KEY]"
    assert masker.mask("if x {\n}\n") == "if x {\n}\n", "a line shorter than MIN_FRAGMENT is not masked alone"


def test_longest_form_wins_and_names_are_kept_apart() -> None:
    masker = SecretMasker({"SHORT": "abcd1234", "LONG": "abcd1234-more"})
    assert masker.mask("1 abcd1234-more 2 abcd1234") == "1 [vault:LONG] 2 [vault:SHORT]"
    assert SecretMasker({}).mask("anything") == "anything" and not SecretMasker({})


def _stream(masker: SecretMasker, chunks: list[str]) -> str:
    stream = StreamMasker(masker)
    return "".join(stream.feed(c) for c in chunks) + stream.flush()


def test_stream_masking_catches_a_secret_split_at_every_offset() -> None:
    masker = SecretMasker({"TOKEN": CANARY})
    text = "start\n" + "\n".join(_encodings(CANARY).values()) + "\nend"
    whole = masker.mask(text)
    for cut in range(len(text) + 1):
        assert _stream(masker, [text[:cut], text[cut:]]) == whole, cut
    assert _stream(masker, list(text)) == whole
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(len(text)), 6))
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert _stream(masker, chunks) == whole


def test_stream_holds_back_only_a_tail() -> None:
    masker = SecretMasker({"TOKEN": CANARY})
    stream = StreamMasker(masker)
    out = stream.feed("x" * 10_000)
    assert len(out) == 10_000 - (masker.longest - 1) and stream.pending == masker.longest - 1
    assert stream.flush() == "x" * (masker.longest - 1)
    assert StreamMasker(SecretMasker({})).feed("abc") == "abc"


def _timed(masker: SecretMasker, chunks: list[str]) -> list[tuple[float, str]]:
    stream = TimedStreamMasker(masker)
    parts = [p for i, c in enumerate(chunks) for p in stream.feed(c, float(i))]
    return parts + stream.flush()


def test_timed_stream_masks_across_pieces_and_keeps_each_part_at_its_own_time() -> None:
    masker = SecretMasker({"TOKEN": CANARY})
    text = "start\n" + "\n".join(_encodings(CANARY).values()) + "\nend"
    whole = masker.mask(text)
    rng = random.Random(11)
    for _ in range(200):
        cuts = sorted(rng.sample(range(len(text)), 6))
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        parts = _timed(masker, chunks)
        assert "".join(p for _t, p in parts) == whole
        assert [t for t, _p in parts] == sorted(t for t, _p in parts)
        # Every part is timed by the piece it came from: the text of a piece never moves later.
        ends = [sum(len(c) for c in chunks[: i + 1]) for i in range(len(chunks))]
        for at, part in parts:
            if "[vault:" not in part:
                assert part in text[: ends[int(at)]]
    # Held back, then released with the next piece: still at the first piece's time.
    assert _timed(masker, ["hello ", "world"]) == [(0.0, "hello "), (1.0, "world")]
    split = _timed(masker, ["a " + CANARY[:5], CANARY[5:] + " b"])
    assert split == [(0.0, "a [vault:TOKEN]"), (1.0, " b")]


def _pem(size: int, seed: int) -> str:
    rng = random.Random(seed)
    body = "".join(rng.choice(string.ascii_letters + string.digits + "+/") for _ in range(size))
    lines = "\n".join(body[i : i + 64] for i in range(0, size, 64))
    return f"-----BEGIN PRIVATE KEY-----\n{lines}\n-----END PRIVATE KEY-----"


def test_a_long_value_is_masked_whole_by_its_edges_and_in_a_stream() -> None:
    """A PEM key of ~1.7 KB: each prefix of a value used to be a form, nesting the pattern one
    group deeper per character (``RecursionError`` past ~1,000, so no tool call could be masked)."""
    value = _pem(1600, 11)
    masker = SecretMasker({"KEY": value})
    flat = value.replace("\n", "")
    half = len(flat) // 2 + 1
    text = f"a {value} b {flat[: half + 7]} c {flat[-(half + 3) :]} d\n" + "\n".join(flat) + "\n$ "
    masked = masker.mask(text)
    assert masked == "a [vault:KEY] b [vault:KEY] c [vault:KEY] d\n[vault:KEY]\n$ "
    assert _stream(masker, [text[i : i + 100] for i in range(0, len(text), 100)]) == masked


def test_edges_of_a_short_value_keep_their_extent_and_label() -> None:
    masker = SecretMasker({"A": "0123456789abcdefghij", "B": "0123456789ab"})
    assert masker.mask("x 0123456789abcdefg y") == "x [vault:A] y"  # a prefix of A, longer than B
    assert masker.mask("x 0123456789ab y") == "x [vault:B] y"  # B itself wins over A's prefix
    assert masker.mask("x 456789abcdefghij y 789abcdefghij z") == "x [vault:A] y [vault:A] z"
    assert masker.mask("x 0123456 y bcdefghij z") == "x 0123456 y bcdefghij z"  # under 8: no edge
    stream = StreamMasker(masker)
    text = "pad " * 10 + "456789abcdefghij" + " tail"
    out = "".join(stream.feed(c) for c in text) + stream.flush()
    assert out == "pad " * 10 + "[vault:A] tail"


def test_a_value_of_the_largest_size_is_masked_in_its_encodings() -> None:
    """64 KiB (``MAX_VALUE_BYTES``): the pattern holds each form's first ``ANCHOR`` characters only;
    whole forms made building this masker take minutes (every process, every vault change)."""
    value = _pem(MAX_VALUE_BYTES - 100, 3)[:MAX_VALUE_BYTES]
    masker = SecretMasker({"BIG": value})
    pattern = masker._pattern  # anchors only: whole forms were ~400 pattern characters per value character
    assert pattern is not None and len(pattern.pattern) < len(value)
    flat = value.replace("\n", "")
    raw = value.encode()
    shown = {
        "value": value,
        "prefix": flat[: len(flat) // 2 + 10],
        "base64": base64.encodebytes(raw).decode().strip(),  # wrapped at 76 columns
        "hex": raw.hex(),
        "json": json.dumps(value)[1:-1],
    }
    for label, text in shown.items():
        assert masker.mask(f"<{text}>") == "<[vault:BIG]>", label
