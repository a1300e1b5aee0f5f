"""What `voxweft logs` shows: an actor's log, whose lines hold text that came on the bus, reaches
the terminal escaped (before, `logs` printed it raw and `logs -f` ran `tail -f`: a transcript
carrying an escape sequence retitled or cleared the reader's terminal; issue 48)."""

from __future__ import annotations

import threading
import time

from voxweft.tools.terminal import follow, shown

EVIL = "asr: [3] heard \x1b]0;owned\x07 \x1b[2J done"


def test_shown_escapes_each_line_and_keeps_the_lines():
    text = shown(f"first line\n{EVIL}\nlast")
    assert "\x1b" not in text and "\x07" not in text
    assert text.splitlines() == ["first line", "asr: [3] heard \\x1b]0;owned\\x07 \\x1b[2J done",
                                 "last"]


def test_follow_shows_the_last_lines_then_what_is_written_escaped(tmp_path):
    path = tmp_path / "asr.log"
    path.write_text("one\ntwo\nthree\n")
    got: list[str] = []
    stop = threading.Event()
    thread = threading.Thread(target=follow, args=(path, 2, got.append, 0.02, stop))
    thread.start()
    try:
        _until(lambda: got == ["two", "three"])
        with open(path, "a") as f:
            f.write(EVIL + "\nhalf a li")   # a line still being written waits for its end
            f.flush()
            _until(lambda: len(got) == 3)
            time.sleep(0.1)
            assert len(got) == 3 and "\x1b" not in got[2] and "owned" in got[2]
            f.write("ne\n")
        _until(lambda: got[-1] == "half a line")
        path.write_text("rotated\n")   # shorter: read again from its start
        _until(lambda: got[-1] == "rotated")
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


def _until(check, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.01)
