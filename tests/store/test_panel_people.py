"""Each person's panel access (``tether.store.panel_people``), tested as an attacker would read and
try it: only hashes at rest, one answer for every bad token, no early exit in the comparison,
names that can carry nothing into the log or a page."""

from __future__ import annotations

import hmac
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.errors import NotFoundError, UsageError
from tether.store.db import Store
from tether.store.panel_people import MAX_TOKEN_CHARS, PanelPeople, check_person_name, token_digest


@pytest.fixture
def people(tether_home: Path) -> Iterator[PanelPeople]:
    store = Store.open(tether_home)
    try:
        yield PanelPeople(store, tether_home)
    finally:
        store.close()


def test_only_the_tokens_hash_is_kept_and_every_file_is_private(
    people: PanelPeople, tether_home: Path
) -> None:
    alice, token = people.add("alice")
    people.store.close()  # everything on disk: the WAL checkpointed into the database
    stored = b"".join(p.read_bytes() for p in tether_home.rglob("*") if p.is_file())
    assert token.encode() not in stored
    assert token.removeprefix("tpp_").encode() not in stored
    assert alice.token_sha256 == token_digest(token) and token_digest(token).encode() in stored
    for path in [tether_home / "tether.db", tether_home / "panel" / "people"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    # What reading the database gives cannot sign in: a hash is no token.
    assert people.person_of_token(alice.token_sha256) is None
    assert people.person_of_token(token) == alice


def test_a_wrong_revoked_empty_overlong_or_foreign_token_matches_nobody(people: PanelPeople) -> None:
    alice, token = people.add("alice")
    bob, bobs = people.add("bob")
    assert people.person_of_token(token) == alice and people.person_of_token(bobs) == bob
    for bad in [
        "",
        " ",
        "tpp_nope",
        token[:-1],
        token + "x",
        token.upper(),
        "x" * (MAX_TOKEN_CHARS + 1),
        "tpp_é",
    ]:
        assert people.person_of_token(bad) is None, bad
    people.revoke("alice")
    assert people.person_of_token(token) is None
    assert people.person_of_token(bobs) == bob  # the others keep working
    again, new = people.add("alice")
    assert people.person_of_token(token) is None  # the old token stays dead
    assert people.person_of_token(new) == again and again.token_sha256 != alice.token_sha256


def test_the_comparison_does_not_stop_at_the_first_match(
    people: PanelPeople, monkeypatch: pytest.MonkeyPatch
) -> None:
    _first, token = people.add("alice")
    for name in ("bob", "carol", "dave"):
        people.add(name)
    compared: list[bytes] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    assert people.person_of_token(token) is not None
    assert len(compared) == 4  # every row, matched first or not
    compared.clear()
    assert people.person_of_token("tpp_" + "x" * 43) is None
    assert len(compared) == 4


@pytest.mark.parametrize(
    "name",
    [
        "",
        "<b>alice</b>",
        "alice\x1b[31m",
        "alice\nbob",
        "al ice",
        "-alice",
        ".alice",
        "a" * 65,
        "ålice",
        "alice\u202e",
        "panel",
        "Person",
        "CLI",
    ],
)
def test_names_that_could_carry_markup_or_control_characters_are_refused(
    people: PanelPeople, name: str
) -> None:
    with pytest.raises(UsageError) as refused:
        people.add(name)
    if name.lower() not in ("panel", "person", "cli"):  # a refused name is not echoed anywhere
        assert not name or name not in refused.value.message
    assert people.all() == []


def test_names_are_unique_whatever_their_case_and_revoking_twice_says_so(people: PanelPeople) -> None:
    assert check_person_name("carol@example.com") == "carol@example.com"
    people.add("Alice")
    with pytest.raises(UsageError, match="already has panel access"):
        people.add("alice")
    assert people.revoke("ALICE").name == "Alice"
    with pytest.raises(NotFoundError, match="already revoked"):
        people.revoke("alice")
    with pytest.raises(NotFoundError, match="nobody named"):
        people.revoke("zed")
