"""Masking of vault secrets in text that goes back to a model, a log or an audit record.

Invariant: a string returned by ``SecretMasker.mask`` — or the concatenation of everything
``StreamMasker.feed``/``flush`` returned — contains none of the masked forms of any secret, each
replaced by ``[vault:NAME]``, even when a form straddles a chunk boundary or is cut into lines.

Line breaks do not protect a form: matching runs on the text with every ``\\n`` (and ``\\r\\n``,
and the ``12: `` line number of a search result after it) taken out, and a match is mapped back
onto the original text, line breaks and all. So a value printed in two pieces on two lines, one
character per line (``fold -w1``), base64 or hex wrapped at any width (``base64``, ``xxd -p``,
``od``) are caught like the value on one line.

Masked forms of a value ``v`` (its UTF-8 bytes ``b``):

- ``v`` itself, in upper and in lower case, reversed, rot13, and its prefixes and suffixes of at
  least half its length (a screen shows the rest of a value whose start scrolled off; found by
  ``edges``, not as forms of the pattern); each line
  of a multi-line ``v``
  (lines shorter than ``MIN_FRAGMENT`` are left alone: masking every ``}`` of a JSON key file
  would mask the whole screen);
- base64 (standard and URL-safe alphabets) of ``b`` whole, with and without padding, and the part
  of the encoding that depends only on ``b`` when ``b`` sits at byte offset 0, 1 or 2 of a longer
  encoded stream (the three alignments), so ``base64 <<< "x$SECRET"`` is caught too; the same for
  ``v`` in UTF-16 (LE, BE; a BOM is one more offset) and for the deflate stream of ``b`` (gzip,
  zlib: the compressed bytes up to the end of ``b``'s last literal, at levels 1, 6 and 9) and
  gzip's trailer (the CRC-32 and length of ``b``, or of ``b`` and a newline);
- base32 of ``b`` (five alignments, upper and lower case);
- hex of ``b`` (and of its UTF-16 and deflate forms) in lower and upper case, also with the bytes
  spaced (``61 62``), colon-separated or written as ``\\x61\\x62``;
- URL-encoding (``quote`` with and without ``/`` kept, ``quote_plus``; upper- and lower-case
  ``%xx``), JSON string escaping (ASCII-only and not), Python ``repr`` escaping.

Not covered (docs/vault.md says so): encryption and other keyed or arbitrary
transforms, encodings not listed (base85, uuencode, a hex dump with offsets and ASCII columns,
``od -c``), mixed-case edits, compression of a value among other data, and a value printed one
piece at a time across separate commands or reads.

One regex of the forms' first ``ANCHOR`` characters, built as a trie (``_trie_pattern``) so that
each position of the text costs one branch, not one try per form; where it finds an anchor, the
forms that begin with it are compared whole, and where several forms start at the same offset the
longest wins. (A pattern of whole forms made ``re`` parse and compile ~400 pattern characters per
character of a value: seconds per kilobyte, minutes for the 64 KiB a value may hold.)
"""

from __future__ import annotations

import base64
import bisect
import codecs
import json
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from urllib.parse import quote, quote_plus

from tether.shells.vault.edges import EdgeFinder, edge_size, merged

MIN_FRAGMENT = 4
ANCHOR = 32  # characters of each form in the pattern; the rest is compared as a string
# A line break, with the grep-style line number a search result puts after it (``12: ``, ``12- ``).
_BREAK = re.compile(r"\r?\n(?:[0-9]+[:-] )?")


def _aligned(raw: bytes, encode: Callable[[bytes], bytes], group_bytes: int, char_bits: int) -> Iterable[str]:
    """The part of ``encode(prefix + raw)`` that depends only on ``raw``, for each prefix length."""
    for offset in range(group_bytes):
        # Character j covers bits [j*char_bits, (j+1)*char_bits); it depends only on the secret
        # when those bits lie inside the secret's bytes [8*offset, 8*(offset+len)).
        encoded = encode(b"\0" * offset + raw).decode("ascii")
        start = -(-8 * offset // char_bits)
        end = (8 * (offset + len(raw))) // char_bits
        yield encoded[start:end]


def _b64_fragments(raw: bytes) -> Iterable[str]:
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode("ascii")
        yield whole
        yield whole.rstrip("=")
        yield from _aligned(raw, encode, 3, 6)


def _b32_fragments(raw: bytes) -> Iterable[str]:
    whole = base64.b32encode(raw).decode("ascii")
    for form in (whole, whole.rstrip("="), *_aligned(raw, base64.b32encode, 5, 5)):
        yield form
        yield form.lower()


def _hex_forms(raw: bytes) -> Iterable[str]:
    for text in (raw.hex(), raw.hex().upper()):
        pairs = [text[i : i + 2] for i in range(0, len(text), 2)]
        yield text
        yield " ".join(pairs)
        yield ":".join(pairs)
        yield "".join(f"\\x{pair}" for pair in pairs)


def _deflated(raw: bytes) -> Iterable[bytes]:
    """Deflate streams of ``raw`` cut before the byte holding the end of its last literal: what
    gzip/zlib output shares with the compression of ``raw`` followed by anything (a newline)."""
    for level in (1, 6, 9):
        packer = zlib.compressobj(level, zlib.DEFLATED, -15)
        stream = packer.compress(raw) + packer.flush()
        if len(stream) > 3 + MIN_FRAGMENT:
            yield stream[:-3]


def _gzip_trailers(raw: bytes) -> Iterable[bytes]:
    """gzip's last 8 bytes (CRC-32, length) for ``raw`` and for ``raw`` + newline (``echo``)."""
    for data in (raw, raw + b"\n"):
        yield zlib.crc32(data).to_bytes(4, "little") + (len(data) % 2**32).to_bytes(4, "little")


def _edges(flat: str) -> Iterable[str]:
    """Prefixes and suffixes of at least half the value: what a screen shows of a value whose
    start or end scrolled off (one character per line) or was cut by a narrow pane."""
    for size in range(edge_size(flat), len(flat)):
        yield flat[:size]
        yield flat[-size:]


def _url_forms(value: str) -> Iterable[str]:
    for form in (quote(value, safe=""), quote(value), quote_plus(value)):
        yield form
        yield re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), form)


def secret_forms(value: str, *, edges: bool = True) -> list[str]:
    """Every masked form of one value as it is matched (line breaks taken out), deduplicated,
    without forms shorter than ``MIN_FRAGMENT`` unless the form is the whole raw value.

    ``edges=False`` leaves out the prefixes and suffixes (``_edges``): the masker finds those by
    extending its shortest one (``edges.EdgeFinder``), since as forms they are quadratic in the value's
    length and nest the pattern one group per prefix."""
    raw = value.encode("utf-8")
    flat = _BREAK.sub("", value)
    forms: list[str] = [flat, flat.upper(), flat.lower(), flat[::-1], codecs.encode(flat, "rot13")]
    if edges:
        forms.extend(_edges(flat))
    lines = value.splitlines()
    if len(lines) > 1:
        forms.extend(lines)
    forms.extend(_b64_fragments(raw))
    forms.extend(_b32_fragments(raw))
    forms.extend(_hex_forms(raw))
    for wide in (value.encode("utf-16-le"), value.encode("utf-16-be")):
        forms.extend(_b64_fragments(wide))
        forms.extend(_hex_forms(wide))
    for packed in (*_deflated(raw), *_gzip_trailers(raw)):
        forms.extend(_b64_fragments(packed))
        forms.extend(_hex_forms(packed))
    forms.extend(_url_forms(value))
    forms.append(json.dumps(value)[1:-1])
    forms.append(json.dumps(value, ensure_ascii=False)[1:-1])
    forms.append(repr(value)[1:-1])  # Python's escaping: error messages quote values with !r
    seen: set[str] = set()
    kept: list[str] = []
    for form in forms:
        form = _BREAK.sub("", form)
        if form and form not in seen and (form == flat or len(form) >= MIN_FRAGMENT):
            seen.add(form)
            kept.append(form)
    return kept


class _Node(dict[str, "_Node"]):
    """A trie node: children by character; the key ``""`` marks that a form ends here."""


def _trie_pattern(forms: Iterable[str]) -> str:
    """A regex matching exactly ``forms``, the longest at each offset: a radix trie whose
    branches are tried longer-first (a form that ends at a node comes after its extensions)."""
    trie = _Node()
    for form in forms:
        node = trie
        for char in form:
            node = node.setdefault(char, _Node())
        node[""] = _Node()

    def emit(node: _Node) -> str:
        branches = []
        for char, child in node.items():
            if char == "":
                continue
            run = [char]
            # A chain of single-child nodes is one literal: the nesting stays as deep as the
            # number of branch points, not the length of the longest form.
            while len(child) == 1 and "" not in child:
                ((char, child),) = child.items()
                run.append(char)
            branches.append(re.escape("".join(run)) + emit(child))
        if "" in node:
            branches.append("")
        if len(branches) == 1:
            return branches[0]
        return "(?:" + "|".join(branches) + ")"

    return emit(trie)


class _Flat:
    """``text`` without its line breaks, and the way back from a position in it to the original."""

    __slots__ = ("_origins", "_starts", "text")

    def __init__(self, text: str) -> None:
        pieces: list[str] = []
        self._starts: list[int] = []  # where each piece starts in the flat text …
        self._origins: list[int] = []  # … and in the original
        flat = orig = 0
        for brk in _BREAK.finditer(text):
            self._starts.append(flat)
            self._origins.append(orig)
            pieces.append(text[orig : brk.start()])
            flat += brk.start() - orig
            orig = brk.end()
        self._starts.append(flat)
        self._origins.append(orig)
        pieces.append(text[orig:])
        self.text = "".join(pieces)

    def origin(self, position: int) -> int:
        """Original offset of the flat character at ``position``."""
        piece = bisect.bisect_right(self._starts, position) - 1
        return self._origins[piece] + position - self._starts[piece]


class SecretMasker:
    """Replace every masked form of every secret by ``[vault:NAME]``.

    ``secrets`` is ``{name: value}`` or (name, value) pairs: one name may have several values (an
    item rotated after its old value was delivered to a shell), each masked.
    """

    __slots__ = ("_by_anchor", "_edges", "_label", "_lengths", "_pattern", "longest")

    def __init__(self, secrets: Mapping[str, str] | Iterable[tuple[str, str]]) -> None:
        self._label: dict[str, str] = {}
        self._edges = EdgeFinder()
        pairs = secrets.items() if isinstance(secrets, Mapping) else secrets
        for name, value in pairs:
            for form in secret_forms(value, edges=False):
                self._label.setdefault(form, f"[vault:{name}]")
            self._edges.add(_BREAK.sub("", value), f"[vault:{name}]")
        # Forms by their anchor, longest first; the anchor lengths, to find every anchor at an offset.
        self._by_anchor: dict[str, list[str]] = {}
        for form in sorted(self._label, key=len, reverse=True):
            self._by_anchor.setdefault(form[:ANCHOR], []).append(form)
        self._lengths = sorted({len(anchor) for anchor in self._by_anchor}, reverse=True)
        self._pattern = re.compile(_trie_pattern(self._by_anchor)) if self._label else None
        self.longest = max(map(len, self._label), default=0)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def mask(self, text: str) -> str:
        return self.mask_until(text, len(text))[0]

    def _spans(self, text: str, cut: int) -> Iterable[tuple[int, int, str]]:
        """(start, end, label) in ``text`` of every match starting before ``cut``, in order."""
        if "\n" not in text and not self._edges:
            for start, end, label in self._matches(text):
                if start >= cut:
                    return
                yield start, end, label
            return
        flat = _Flat(text)
        # An edge may start before ``cut`` and be found only past it (a suffix is found by its
        # end), so with edges the whole text is matched; it holds at most ``longest`` - 1
        # characters past ``cut`` (``StreamMasker``), so every edge starting before it is whole.
        found: Iterable[tuple[int, int, str]] = list(self._matches(flat.text))
        if self._edges:
            found = merged(found, self._edges.spans(flat.text))
        for start, end, label in found:
            origin = flat.origin(start)
            if origin >= cut:
                return
            yield origin, flat.origin(end - 1) + 1, label

    def _matches(self, text: str) -> Iterator[tuple[int, int, str]]:
        """(start, end, label) of the leftmost-longest whole forms in ``text``, left to right."""
        assert self._pattern is not None
        pos = 0
        while (anchor := self._pattern.search(text, pos)) is not None:
            at = anchor.start()
            best = ""
            for size in self._lengths:  # every anchor starting here, not only the longest
                for form in self._by_anchor.get(text[at : at + size], ()):
                    if len(form) > len(best) and text.startswith(form, at):
                        best = form
                        break  # the rest of this anchor's forms are shorter
            if not best:  # an anchor whose forms all go on differently here
                pos = at + 1
                continue
            yield at, at + len(best), self._label[best]
            pos = at + len(best)

    def mask_until(self, text: str, cut: int) -> tuple[str, int]:
        """Mask the matches that start before ``cut``; return the masked text up to where the
        scan stopped (``cut``, or the end of a match straddling it) and that offset."""
        if self._pattern is None:
            return text[:cut], cut
        out: list[str] = []
        pos = 0
        for start, end, label in self._spans(text, cut):
            out.append(text[pos:start])
            out.append(label)
            pos = end
        end = max(pos, cut)
        out.append(text[pos:end])
        return "".join(out), end


class StreamMasker:
    """Mask a stream fed in chunks; holds back at most ``longest - 1`` characters.

    A form can start in the retained tail and finish in the next chunk, so the last
    ``longest - 1`` characters (line breaks not counted: a form may run across them) are not
    emitted until more text (or ``flush``) decides them. A match starting before that tail is
    final: every form that could start there fits in what we hold.
    """

    __slots__ = ("_masker", "_pending")

    def __init__(self, masker: SecretMasker) -> None:
        self._masker = masker
        self._pending = ""

    def feed(self, chunk: str) -> str:
        text = self._pending + chunk
        cut = _hold_back(text, max(self._masker.longest - 1, 0))
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


class TimedStreamMasker:
    """``StreamMasker`` for a stream whose pieces each carry a time (a recording's output).

    What is held back is released later, with the next piece — but each released part keeps the
    time of the piece it came from, so a pause after a piece is not moved before its tail. A
    masked label takes the time of the piece its match starts in. ``feed`` and ``flush`` return
    ``(time, text)`` parts in stream order (times as fed: non-decreasing if fed so).
    """

    __slots__ = ("_masker", "_pending", "_starts")

    def __init__(self, masker: SecretMasker) -> None:
        self._masker = masker
        self._pending = ""
        self._starts: list[tuple[int, float]] = []  # (offset in _pending, time) of each piece

    def feed(self, chunk: str, at: float) -> list[tuple[float, str]]:
        if chunk:
            self._starts.append((len(self._pending), at))
            self._pending += chunk
        cut = _hold_back(self._pending, max(self._masker.longest - 1, 0))
        return self._release(cut) if cut > 0 else []

    def flush(self) -> list[tuple[float, str]]:
        return self._release(len(self._pending))

    def _release(self, cut: int) -> list[tuple[float, str]]:
        text = self._pending
        spans = list(self._masker._spans(text, cut)) if self._masker else []
        end = max([cut, *(e for _s, e, _label in spans)])
        bounds = [o for o, _t in self._starts] + [len(text)]
        out: list[tuple[float, str]] = []
        for i, (start, at) in enumerate(self._starts):
            stop = min(bounds[i + 1], end)
            if start >= end:
                break
            pieces: list[str] = []
            pos = start
            # A match that began in an earlier piece covers this one's start: skipped (``pos = e``).
            for s, e, label in spans:
                if e <= pos or s >= stop:
                    continue
                if s >= pos:
                    pieces.append(text[pos:s])
                    pieces.append(label)
                pos = max(pos, min(e, len(text)))
            if pos < stop:
                pieces.append(text[pos:stop])
            if "".join(pieces):
                out.append((at, "".join(pieces)))
        self._pending = text[end:]
        kept = [(o - end, t) for o, t in self._starts if o >= end]
        first = next((t for o, t in reversed(self._starts) if o < end), None)
        if self._pending and (not kept or kept[0][0] > 0) and first is not None:
            kept.insert(0, (0, first))
        self._starts = kept
        return out


def _hold_back(text: str, keep: int) -> int:
    """The offset from which ``text`` holds ``keep`` characters other than line breaks."""
    if keep == 0:
        return len(text)
    cut = len(text) - keep
    # Every \n (with a \r before it) in the tail does not count: widen the tail for it.
    while cut > 0 and 2 * text.count("\n", cut) + keep > len(text) - cut:
        cut = len(text) - keep - 2 * text.count("\n", cut)
    return cut
