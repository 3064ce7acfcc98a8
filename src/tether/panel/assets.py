"""The panel's page and its assets, read once, when the panel is built.

Invariant: the panel serves the files of the build it runs. They are read into memory when the
app is built (17 files, about 0.7 MB with the vendored xterm.js) and never again from disk: an
upgrade under a running ``tether serve`` (``pip install -U``) replaces them with a later build's
page and scripts, which a reloaded page would have run against this server's API until the server
was restarted. A file is answered with its media type and an ``ETag`` of its bytes (a page that has
it already gets ``304``); a path that is not one of them is ``404``.
"""

from __future__ import annotations

import hashlib
import mimetypes
from pathlib import Path
from typing import NamedTuple

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response


class _Asset(NamedTuple):
    body: bytes
    media_type: str
    etag: str


class PanelAssets:
    """The files under ``static_dir`` as they were when this was made, by their path below it."""

    def __init__(self, static_dir: Path) -> None:
        self._files: dict[str, _Asset] = {}
        for path in sorted(static_dir.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            body = path.read_bytes()
            media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            etag = f'"{hashlib.blake2b(body, digest_size=16).hexdigest()}"'
            self._files[path.relative_to(static_dir).as_posix()] = _Asset(body, media_type, etag)

    def response(self, request: Request, name: str, *, headers: dict[str, str] | None = None) -> Response:
        asset = self._files.get(name)
        if asset is None:
            return PlainTextResponse("Not Found", status_code=404)
        sent = {"ETag": asset.etag, **(headers or {})}
        if request.headers.get("if-none-match") == asset.etag:
            return Response(status_code=304, headers=sent)
        return Response(asset.body, media_type=asset.media_type, headers=sent)

    async def static(self, request: Request) -> Response:
        """``GET /static/<path>``."""
        return self.response(request, str(request.path_params["path"]))
