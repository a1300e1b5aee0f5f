"""The captions page for the room (`voxweft captions`, `voxweft up --captions`).

`room` keeps what the page shows, `server` serves it (aiohttp), `static/` is the page.
What the command line needs is here, light: importing it imports no web server.
"""

from __future__ import annotations

DEFAULT_PORT = 8750


def url(bind: str, port: int, token: str | None) -> str:
    """The address to open (the token in it when there is one)."""
    host = f"[{bind}]" if ":" in bind else bind
    return f"http://{host}:{port}/" + (f"?token={token}" if token else "")
