"""What ``tether serve`` prints before it serves: its banner, up to the ``Ready.`` line."""

from __future__ import annotations

from collections.abc import Iterable


def read_banner(stdout: Iterable[str]) -> list[str]:
    """The banner's lines as printed (newlines kept), read until ``Ready.``."""
    banner: list[str] = []
    for line in stdout:
        banner.append(line)
        if line.startswith("Ready."):
            break
    return banner


def banner_field(banner: Iterable[str], name: str) -> str:
    """The value of the banner's ``URL:`` or ``token:`` line."""
    return next(line.split()[-1] for line in banner if line.strip().startswith(f"{name}:"))
