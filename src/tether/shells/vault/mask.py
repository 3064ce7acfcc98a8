"""Masking of vault secrets in text that goes back to a model, a log or an audit record.

Invariant: a string returned by ``SecretMasker.mask`` — or the concatenation of everything
``StreamMasker.feed``/``flush`` returned — contains none of the masked forms of any secret, each
replaced by ``[vault:NAME]``, even when a form straddles a chunk boundary.

Masked forms of a value ``v`` (its UTF-8 bytes ``b``):

- ``v`` itself (also with CRLF line ends, as a terminal prints it), and each line of a multi-line
  ``v`` (lines shorter than ``MIN_FRAGMENT`` are left alone: masking every ``}`` of a JSON key
  file would mask the whole screen);
- base64 (standard and URL-safe alphabets) of ``b`` whole, with and without padding, and the part
  of the encoding that depends only on ``b`` when ``b`` sits at byte offset 0, 1 or 2 of a longer
  encoded stream (the three alignments), so ``base64 <<< "x$SECRET"`` is caught too;
- URL-encoding (``quote`` with and without ``/`` kept, ``quote_plus``; upper- and lower-case
  ``%xx``), JSON string escaping (ASCII-only and not), Python ``repr`` escaping, and hex of
  ``b`` in lower and upper case.

Not covered (docs/vault.md says so): base64 wrapped across lines, other encodings
(gzip, rot13, a reversed string), and a value printed one piece at a time by its owner.

One regex alternation, longest form first, so the longest form wins where several start at the
same offset; Python's ``re`` tries alternatives in order at each position.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote, quote_plus

MIN_FRAGMENT = 4


def _b64_fragments(raw: bytes) -> Iterable[str]:
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode("ascii")
        yield whole
        yield whole.rstrip("=")
        for offset in range(3):
            # Character j of the encoding covers bits [6j, 6j+6); it depends only on the secret when
            # those bits lie inside the secret's bytes [8*offset, 8*(offset+len)).
            encoded = encode(b"\0" * offset + raw).decode("ascii")
            start = -(-8 * offset // 6)
            end = (8 * (offset + len(raw))) // 6
            yield encoded[start:end]


def _url_forms(value: str) -> Iterable[str]:
    for form in (quote(value, safe=""), quote(value), quote_plus(value)):
        yield form
        yield re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), form)


def secret_forms(value: str) -> list[str]:
    """Every masked form of one value, deduplicated, without forms shorter than ``MIN_FRAGMENT``
    unless the form is the whole raw value."""
    raw = value.encode("utf-8")
    forms: list[str] = [value]
    lines = value.splitlines()
    if len(lines) > 1:
        forms.append("\r\n".join(lines))  # as a terminal prints it (onlcr)
        forms.extend(lines)
    forms.extend(_b64_fragments(raw))
    forms.extend(_url_forms(value))
    forms.append(json.dumps(value)[1:-1])
    forms.append(json.dumps(value, ensure_ascii=False)[1:-1])
    forms.append(repr(value)[1:-1])  # Python's escaping: error messages quote values with !r
    forms.append(raw.hex())
    forms.append(raw.hex().upper())
    seen: set[str] = set()
    kept: list[str] = []
    for form in forms:
        if form and form not in seen and (form == value or len(form) >= MIN_FRAGMENT):
            seen.add(form)
            kept.append(form)
    return kept


class SecretMasker:
    """Replace every masked form of every secret (``{name: value}``) by ``[vault:NAME]``."""

    __slots__ = ("_label", "_pattern", "longest")

    def __init__(self, secrets: Mapping[str, str]) -> None:
        self._label: dict[str, str] = {}
        for name, value in secrets.items():
            for form in secret_forms(value):
                self._label.setdefault(form, f"[vault:{name}]")
        ordered = sorted(self._label, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self.longest = len(ordered[0]) if ordered else 0

    def __bool__(self) -> bool:
        return self._pattern is not None

    def mask(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: self._label[m.group(0)], text)

    def mask_until(self, text: str, cut: int) -> tuple[str, int]:
        """Mask the matches that start before ``cut``; return the masked text up to where the
        scan stopped (``cut``, or the end of a match straddling it) and that offset."""
        if self._pattern is None:
            return text[:cut], cut
        out: list[str] = []
        pos = 0
        for match in self._pattern.finditer(text):
            if match.start() >= cut:
                break
            out.append(text[pos : match.start()])
            out.append(self._label[match.group(0)])
            pos = match.end()
        end = max(pos, cut)
        out.append(text[pos:end])
        return "".join(out), end


class StreamMasker:
    """Mask a stream fed in chunks; holds back at most ``longest - 1`` characters.

    A form can start in the retained tail and finish in the next chunk, so the last
    ``longest - 1`` characters are not emitted until more text (or ``flush``) decides them. A match
    starting before that tail is final: every form that could start there fits in what we hold.
    """

    __slots__ = ("_masker", "_pending")

    def __init__(self, masker: SecretMasker) -> None:
        self._masker = masker
        self._pending = ""

    def feed(self, chunk: str) -> str:
        text = self._pending + chunk
        cut = len(text) - max(self._masker.longest - 1, 0)
        if cut <= 0:
            self._pending = text
            return ""
        safe, end = self._masker.mask_until(text, cut)
        self._pending = text[end:]
        return safe

    def flush(self) -> str:
        text, self._pending = self._pending, ""
        return self._masker.mask(text)

    @property
    def pending(self) -> int:
        """Characters held back, waiting for the next chunk."""
        return len(self._pending)
