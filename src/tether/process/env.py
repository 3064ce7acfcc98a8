"""The environment every child process starts with: scrubbed, non-interactive, then the caller's.

Invariant (in this order, later wins):

1. the inherited environment minus every name matching a scrub pattern (case-insensitive
   ``fnmatch``), minus any variable whose *value* has the shape of a credential (a URL carrying a
   password or a key as its user, a webhook URL, a JWT, a private key, a Docker auth config,
   ``.netrc`` content: ``secret_value``), except names listed in ``keep``;
2. ``NONINTERACTIVE_DEFAULTS``, so pagers, editors and credential prompts never wait for a person
   who is not there (the process has no terminal and stdin is ``/dev/null`` or a closed pipe);
3. the caller's explicit entries (shell-env registry output, then the request's ``env``), which
   are merged *after* scrubbing, so a caller can deliberately pass a token the scrub would drop.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Iterable, Mapping

from tether.config import EnvSection

# Why each entry matters, when stdin is not a terminal:
#   git log / git diff / man / systemctl would start a pager      → PAGER, GIT_PAGER, MANPAGER, …
#   git commit without -m, git rebase -i, crontab -e open $EDITOR  → the editor ``true`` exits 0 at once
#   git push over https asks for a user name                       → GIT_TERMINAL_PROMPT=0 makes it fail
#   git over ssh asks for a passphrase / host key                  → BatchMode=yes makes ssh fail
#   apt, pip, npx ask "proceed?"                                   → their non-interactive switches
NONINTERACTIVE_DEFAULTS: Mapping[str, str] = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "cat",
    "LESS": "-FRX",
    "GIT_TERMINAL_PROMPT": "0",
    "GCM_INTERACTIVE": "never",
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    "EDITOR": "true",
    "VISUAL": "true",
    "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
    "SSH_ASKPASS_REQUIRE": "never",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_NO_INPUT": "1",
    "npm_config_yes": "true",
    "TERM": "dumb",
}

# Values that are credentials whatever their variable is called. One search per value, run only
# when the inherited environment changes (the scrubbed result is cached).
_SECRET_VALUE = re.compile(
    # a URL carrying a password (scheme://user:pass@host), or a key as its user (a Sentry DSN,
    # https://<token>@github.com/…): 16+ characters of a token where a login name would be
    r"^[A-Za-z][A-Za-z0-9+.-]*://(?:[^/\s:@]*:[^/\s@]+|[A-Za-z0-9_~.%-]{16,})@"
    # webhook URLs whose path is the secret
    r"|^https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)/"
    r"|(?:[a-z0-9-]+\.)?discord(?:app)?\.com/api/webhooks/|[^/\s]+\.webhook\.office\.com/)"
    # a JSON Web Token (header.payload.signature, both JSON parts start with '{"' → eyJ)
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"
    # private keys: PEM, or a service-account JSON's "private_key"
    r"|-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----|\"private_key\"\s*:"
    # a Docker auth config ({"auths": {…: {"auth": "base64"}}})
    r"|\"auths?\"\s*:\s*[{\"]"
    # .netrc content
    r"|(?s:\bmachine\s+\S+.{0,200}?\bpassword\s+\S)"
)


def secret_value(value: str) -> bool:
    """The value is a credential by its shape (URL with a password or key, JWT, key, …)."""
    return len(value) >= 16 and _SECRET_VALUE.search(value) is not None


def scrub_patterns(section: EnvSection) -> tuple[str, ...]:
    return (*section.scrub_patterns, *section.extra_scrub_patterns)


@functools.lru_cache(maxsize=32)
def _name_matcher(patterns: tuple[str, ...]) -> re.Pattern[str]:
    # One alternation instead of len(patterns) fnmatch calls per variable: this runs on every spawn.
    return re.compile("|".join(f"(?:{fnmatch.translate(p.upper())})" for p in patterns) or "(?!)")


def is_scrubbed(name: str, value: str, patterns: Iterable[str], keep: Iterable[str] = ()) -> bool:
    """True when ``name``/``value`` must not reach a child (credential or code-injection hook)."""
    upper = name.upper()
    if upper in {k.upper() for k in keep}:
        return False
    if _name_matcher(tuple(patterns)).match(upper):
        return True
    return secret_value(value)


def scrub_environment(environ: Mapping[str, str], section: EnvSection) -> dict[str, str]:
    matcher = _name_matcher(scrub_patterns(section))
    keep = {k.upper() for k in section.keep}
    return {
        name: value
        for name, value in environ.items()
        if (upper := name.upper()) in keep or not (matcher.match(upper) or secret_value(value))
    }


_scrub_cache: tuple[dict[bytes, bytes], EnvSection, dict[bytes, bytes]] | None = None


def _inherited_bytes() -> dict[bytes, bytes]:
    # os.environ keeps its bytes form in ``_data``; copying that dict is C-speed, unlike iterating
    # the str mapping (which decodes every entry) — this runs on every spawn.
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict):
        return dict(data)
    return {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}


def build_child_env(
    environ: Mapping[str, str] | None, section: EnvSection, explicit: Mapping[str, str] | None = None
) -> dict[bytes, bytes]:
    """Scrubbed inherited environment + non-interactive defaults + explicit entries (in that order).

    ``environ=None`` means this process's environment (the scrubbed result is cached until it
    changes). Returned as bytes, which is what ``execve`` takes.
    """
    global _scrub_cache
    if environ is None:
        raw = _inherited_bytes()
        cached = _scrub_cache
        if cached is not None and cached[1] == section and cached[0] == raw:
            base = dict(cached[2])
        else:
            text = {os.fsdecode(k): os.fsdecode(v) for k, v in raw.items()}
            base = _encode(scrub_environment(text, section))
            _scrub_cache = (raw, section, dict(base))
    else:
        base = _encode(scrub_environment(environ, section))
    base.update(_NONINTERACTIVE_BYTES)
    if explicit:
        base.update(_encode(explicit))
    return base


def _encode(env: Mapping[str, str]) -> dict[bytes, bytes]:
    return {os.fsencode(k): os.fsencode(v) for k, v in env.items()}


_NONINTERACTIVE_BYTES = _encode(NONINTERACTIVE_DEFAULTS)
