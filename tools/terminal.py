"""What reaches a person's terminal from the bus: written so that the terminal shows it."""

from __future__ import annotations


def printable(value):
    """`value` with the characters a terminal obeys instead of showing written as escapes.

    Text from the bus is anybody's: an escape sequence in a transcript or a reason must not
    move the cursor, retitle or clear the terminal of the person reading it (`tap`,
    `watch`, `interpret`). Anything but a str is returned as it is.
    """
    if not isinstance(value, str) or value.isprintable():
        return value
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in value)
