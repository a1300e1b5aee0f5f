"""The tap and its recordings: what comes off the bus is shown, never obeyed."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import msgpack
import pytest

from voxweft.protocol.codec import encode
from voxweft.protocol.messages import Transcript, VadEvent
from voxweft.tools.tap import _private, describe, format_line, read_recording

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b31m\r\x08"


def test_control_characters_from_the_bus_are_written_not_obeyed():
    msgs = [Transcript(utt="u\x1b[2J", src_lang="en", text=f"hello{ESCAPES}world"),
            VadEvent(event="rejected", media_s=1.0, end_s=2.0, reason=f"not{ESCAPES}")]
    for msg in msgs:
        row = describe(msg, msg.sent_ns)
        line = format_line(row)
        assert line.isprintable() and "\\x1b" in line, line
        assert all(v.isprintable() for v in row.values() if isinstance(v, str))
    # ordinary text is left as it is
    plain = Transcript(utt="u", src_lang="pt", text="não, já é »ótimo«")
    assert describe(plain, plain.sent_ns)["text"] == "não, já é »ótimo«"


@pytest.mark.parametrize("item", [
    [1, b"transcript", None],                   # bytes(None) raised TypeError
    [1, b"transcript", 10 ** 12],                # bytes(n) allocated n bytes
    [1, b"transcript", msgpack.ExtType(5, b"x")],
    [1, b"transcript", [b"h"]],
])
def test_a_recording_with_items_that_are_not_bytes_is_refused_in_one_line(tmp_path, item):
    path = tmp_path / "bad.vwtap"
    path.write_bytes(msgpack.packb(item, use_bin_type=True))
    with pytest.raises(ValueError, match="not a voxweft tap recording"):
        list(read_recording(path))


def test_a_recording_reads_back_what_was_written(tmp_path):
    frames = encode(Transcript(utt="u", src_lang="en", text="hi"))
    path = tmp_path / "ok.vwtap"
    path.write_bytes(msgpack.packb([7, *frames], use_bin_type=True))
    assert list(read_recording(path)) == [(7, frames)]


def test_a_recording_is_readable_by_its_owner_alone(tmp_path):
    old = os.umask(0o022)
    try:
        fresh = tmp_path / "new.vwtap"
        _private(fresh).close()
        there = tmp_path / "there.vwtap"
        there.write_bytes(b"")
        there.chmod(0o644)
        _private(there).close()
    finally:
        os.umask(old)
    for path in (fresh, there):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_secret_keys_are_never_committed():
    root = Path(__file__).resolve().parents[2]
    for name in ("deploy/keys/asr.key_secret", "m2.key_secret"):
        assert subprocess.run(["git", "check-ignore", "-q", name], cwd=root).returncode == 0
