"""The live echo bench's parts that need no sound server: its room and its report."""

from __future__ import annotations

import numpy as np

from voxweft.protocol.messages import BUS_RATE, AudioFrame, Status, Transcript, VadEvent
from voxweft.tools.bench import echo as offline
from voxweft.tools.bench import echolive, roomrelay


def test_the_relay_plays_the_room_as_the_offline_bench_convolves_it():
    rng = np.random.default_rng(0)
    h = offline.room_response(80, 0.4, rng)
    x = rng.standard_normal(roomrelay.BLOCK * 60)
    room = roomrelay.Convolver(h)
    live = np.concatenate([room(x[i:i + roomrelay.BLOCK])
                           for i in range(0, len(x), roomrelay.BLOCK)])
    assert np.allclose(live, np.convolve(x, h)[:len(x)], atol=1e-9)


class _Heard(echolive.LiveCollector):
    def __init__(self, seen, end_ns):
        super().__init__(None)
        self.seen, self.end_ns = seen, end_ns


def test_what_was_heard_counts_against_the_speakers_words():
    said = "the quick brown fox jumps over the lazy dog"
    seen = [VadEvent(utt="a.0", event="start", sent_ns=100),
            Transcript(utt="a.0", text="The quick brown fox jumps.", final=True),
            VadEvent(utt="a.1", event="start", sent_ns=5 * 10**9),   # after the speaker
            Transcript(utt="a.1", text="Muito bom.", final=True),
            Status(src="capture", echo={"converged": 1.0},
                   counters={"echo_held_max_ms": 1600, "echo_gated_ms": 0})]
    got = echolive.measure(_Heard(seen, end_ns=10**9), said)
    assert got["heard_pct"] == round(100 * 5 / 9, 1)
    assert got["not_said_words"] == 2 and got["after"] == ["Muito bom."]
    assert got["held_s"] == 1.6 and got["echo"] == {"converged": 1.0}
    report = {"speaker_words": 9, "readers": ["lj"], "after_s": 20.0,
              "rows": [{"condition": "headphones", "echo_mode": "off", **got}]}
    assert "| headphones | off |" in echolive.markdown(report)


def test_without_a_sound_server_the_live_bench_says_what_to_install(monkeypatch, tmp_path, capsys):
    from voxweft.tools import cli

    monkeypatch.setattr(echolive, "missing", lambda: ["pulseaudio"])
    code = cli.main(["bench", "--echo", "--live", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 1 and "pulseaudio not found" in err and "apt-get install" in err
    assert len(err.strip().splitlines()) == 1, err


def test_what_capture_passed_on_is_laid_out_by_stream_time_and_the_speaker_found_in_it():
    rng = np.random.default_rng(1)
    near = rng.standard_normal(BUS_RATE).astype(np.float32)
    heard = np.concatenate([np.zeros(12345, np.float32), near, np.zeros(BUS_RATE, np.float32)])
    heard += 0.3 * rng.standard_normal(len(heard)).astype(np.float32)   # a residual, noise
    frame = 320
    frames = [AudioFrame(src="capture", media_s=7.0 + i / BUS_RATE, pcm=heard[i:i + frame])
              for i in range(0, len(heard), frame)]
    frames = frames[1::2] + frames[::2]              # held frames come on late
    got, t0 = echolive.passed_on(frames)
    assert t0 == 7.0 and np.array_equal(got, heard)
    assert echolive.offset(got, near) == 12345


def test_a_row_says_how_many_blocks_the_relay_had_late():
    assert echolive.late_blocks("relaying\nspoke\nrelay: 3 block(s) late") == 3
    assert echolive.late_blocks("relay: 0 block(s) late") == 0
    assert echolive.late_blocks("") is None   # it did not get to say: unknown, not 0


def test_the_session_waits_for_the_words_of_what_started_after_the_speaker(monkeypatch):
    """The control (`off`) hears its own voice after the speaker stopped; on a slow machine
    asr's transcript of it came after the 20 s watch had ended (issue 48). The watch goes on
    while an utterance started since has no transcript, up to AFTER_MAX_S."""
    clock = [100.0]
    monkeypatch.setattr(echolive.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(echolive, "AFTER_S", 20.0)
    monkeypatch.setattr(echolive, "AFTER_MAX_S", 90.0)
    heard = _Heard([], end_ns=10**9)
    heard.talking, heard.ended = True, 100.0
    clock[0] = 121.0
    assert heard.finished()   # nothing started since: done at AFTER_S, as before
    heard.seen += [VadEvent(utt="a.7", event="start", sent_ns=3 * 10**9),   # the loudspeaker
                   VadEvent(utt="a.8", event="start", sent_ns=4 * 10**9),
                   VadEvent(utt="a.8", event="discard", sent_ns=5 * 10**9)]
    assert heard.awaited() == {"a.7"} and not heard.finished()
    heard.seen.append(Transcript(utt="a.7", text="Muito bom.", final=True))
    assert heard.finished()
    heard.seen.append(VadEvent(utt="a.9", event="start", sent_ns=6 * 10**9))
    assert not heard.finished()
    clock[0] = 190.0   # its transcript never comes: the watch ends all the same
    assert heard.finished()
