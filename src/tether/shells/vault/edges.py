"""Prefixes and suffixes of vault values in a text, found without a pattern per length.

Invariant: ``EdgeFinder.spans`` yields every maximal run of the text that is a prefix or a suffix
of a value at least ``edge_size`` characters long (half the value, and at least 8 characters):
what a screen shows of a value whose start or end scrolled off, or that a narrow pane cut. A
prefix is found by its shortest form and extended forward along the value, a suffix by its
shortest form and extended backward, and ``merged`` joins them with the pattern's matches
(``mask.SecretMasker``) so that every character either covers is masked.

Why not forms in the masker's pattern: a value of n characters has n/2 such prefixes, which a
trie nests one group inside the next (``re`` refuses past ~1,000 characters: ``RecursionError``
for a PEM key), and n/2 suffixes of ~n characters each (gigabytes for a 64 KiB value).

Imports only the standard library: a render worker unpickles the masker that holds a finder.
"""

from __future__ import annotations

from collections.abc import Iterable

MIN_EDGE = 8  # twice ``mask.MIN_FRAGMENT``: shorter runs are too common in unrelated text


def edge_size(flat: str) -> int:
    """The shortest prefix or suffix of the value that is masked (at least half of it)."""
    return max(MIN_EDGE, -(-len(flat) // 2))


class EdgeFinder:
    """The prefixes and suffixes of at least ``edge_size`` characters of the values, found in a
    text without a pattern per length: each occurrence of the shortest prefix is extended forward
    as far as the text goes on like the value, each occurrence of the shortest suffix backward."""

    __slots__ = ("_heads", "_tails")

    def __init__(self) -> None:
        self._heads: list[tuple[str, str, str]] = []  # (shortest prefix, value, label)
        self._tails: list[tuple[str, str, str]] = []  # (shortest suffix, value, label)

    def add(self, flat: str, label: str) -> None:
        size = edge_size(flat)
        if size < len(flat):
            self._heads.append((flat[:size], flat, label))
            self._tails.append((flat[-size:], flat, label))

    def __bool__(self) -> bool:
        return bool(self._heads)

    def spans(self, text: str) -> Iterable[tuple[int, int, str]]:
        """(start, end, label) of every maximal prefix or suffix occurrence, in no set order."""
        for head, flat, label in self._heads:
            at = text.find(head)
            while at >= 0:
                end, i = at + len(head), len(head)
                while i < len(flat) and end < len(text) and text[end] == flat[i]:
                    end, i = end + 1, i + 1
                yield at, end, label
                # On from where this one ended, as the pattern's matches do: in a run of a
                # repeated character every offset starts the head, and extending each is quadratic.
                at = text.find(head, max(end, at + 1))
        for tail, flat, label in self._tails:
            at = text.find(tail)
            while at >= 0:
                start, i = at, len(flat) - len(tail) - 1
                while i >= 0 and start > 0 and text[start - 1] == flat[i]:
                    start, i = start - 1, i - 1
                yield start, at + len(tail), label
                at = text.find(tail, at + len(tail))


def merged(
    found: Iterable[tuple[int, int, str]], edges: Iterable[tuple[int, int, str]]
) -> list[tuple[int, int, str]]:
    """Overlapping spans joined into one, labelled as the longest of those starting first (a form
    before an edge of the same extent): masking covers every character any form covers."""
    ranked = [(s, -e, 0, label) for s, e, label in found] + [(s, -e, 1, label) for s, e, label in edges]
    out: list[tuple[int, int, str]] = []
    for start, neg_end, _rank, label in sorted(ranked):
        end = -neg_end
        if out and start < out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end, out[-1][2])
        else:
            out.append((start, end, label))
    return out
