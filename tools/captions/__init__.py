"""The captions page for the room (`voxweft captions`, `voxweft up --captions`).

`room` keeps what the page shows, `server` serves it (aiohttp), `static/` is the page.
What the command line needs is here, light: importing it imports no web server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

DEFAULT_PORT = 8750
#: Where the access token comes from when no --token-file is given (`up --captions` sets it):
#: never the command line, which `ps` shows to every user of the machine.
TOKEN_ENV = "VOXWEFT_CAPTIONS_TOKEN"
#: What a token may hold: it goes in the URL as it is.
TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~-]+")


def read_token(path: str | None, environ: Mapping[str, str]) -> str | None:
    """The access token: the content of the file `path`, else $VOXWEFT_CAPTIONS_TOKEN, else None.

    Raises ValueError, naming where it looked, for a file it cannot read or a token that is
    empty or has characters other than letters, digits and -._~.
    """
    if path is None:
        token, where = environ.get(TOKEN_ENV, ""), TOKEN_ENV
        if not token:
            return None
    else:
        where = f"the token file {path}"
        try:
            token = Path(path).read_bytes().decode("utf-8", "replace").strip()
        except OSError as exc:
            raise ValueError(f"cannot read {where} ({exc.strerror})") from None
    if not TOKEN_CHARS.fullmatch(token):
        raise ValueError(f"{where} is empty" if not token else
                         f"{where}: a token is letters, digits and -._~ only (make one with "
                         "`python -c 'import secrets; print(secrets.token_urlsafe(16))'`)")
    return token


def url(bind: str, port: int, token: str | None) -> str:
    """The address to open (the token in it when there is one)."""
    host = f"[{bind}]" if ":" in bind else bind
    return f"http://{host}:{port}/" + (f"?token={token}" if token else "")
