"""What reaches a person's terminal from the bus: written so that the terminal shows it."""

from __future__ import annotations

import os
import time


def printable(value):
    """`value` with the characters a terminal obeys instead of showing written as escapes.

    Text from the bus is anybody's: an escape sequence in a transcript or a reason must not
    move the cursor, retitle or clear the terminal of the person reading it (`tap`,
    `watch`, `interpret`). Anything but a str is returned as it is.
    """
    if not isinstance(value, str) or value.isprintable():
        return value
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in value)


def shown(text: str) -> str:
    """Each line of `text` printable: an actor's log holds what came on the bus (`logs`)."""
    return "\n".join(printable(line) for line in text.splitlines())


def follow(path, lines: int, write=print, poll_s: float = 0.2, stop=None) -> None:
    """`tail -n LINES -f PATH`, each line printable, until Ctrl-C (or `stop`, an Event, is set).

    A file that got shorter (supervisord rotated or truncated it) is read again from its
    start; a line still being written waits for its end. FileNotFoundError if there is none.
    """
    pos, rest, first = 0, b"", True
    while True:
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            if first:
                raise
            size = 0
        if size < pos:
            pos, rest = 0, b""
        if size > pos:
            with open(path, "rb") as f:
                f.seek(pos)
                data = f.read(size - pos)
            pos += len(data)
            *done, rest = (rest + data).split(b"\n")
            if first:   # what was there already: its last lines only
                done = done[-lines:] if lines else []
            for line in done:
                write(printable(line.decode(errors="replace")))
        first = False
        if stop is None:
            time.sleep(poll_s)
        elif stop.wait(poll_s):
            return
