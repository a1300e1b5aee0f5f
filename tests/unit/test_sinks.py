"""The player's WAV sink takes its rate from the chunks; device loss and retry, told once."""

from __future__ import annotations

import collections
import logging

import numpy as np
import pytest
import soundfile as sf

from tests.unit.helpers import run_actor
from voxweft.actors import devices
from voxweft.actors.player import PlayerActor
from voxweft.actors.sinks import DEFAULT_RATE, WavSink
from voxweft.deploy.topology import load
from voxweft.protocol.messages import PlaybackEvent, SpeechChunk, Status

TTS_READY = Status(state="ready", src="tts", epoch=1)


def wav_player(tmp_path, **settings):
    topo = load(None).with_overrides({"actors": {"player": {
        "sink": "wav", "path": str(tmp_path / "out.wav"), **settings}}})
    return PlayerActor(topo, topo.actors["player"])


def chunk(utt, index, rate, seconds=0.1, last=False):
    n = 0 if last else int(rate * seconds)
    return SpeechChunk(utt=utt, index=index, last=last, sample_rate=rate,
                       pcm=np.full(n, 0.1, np.float32))


def test_the_wav_file_takes_the_first_chunks_rate_and_resamples_the_others(tmp_path):
    # The player reads no tts setting: a 22.05 kHz voice makes a 22.05 kHz file.
    p = wav_player(tmp_path)
    inputs = [TTS_READY, chunk("a", 0, 22050), chunk("a", 1, 22050, last=True),
              chunk("b", 0, 16000, seconds=0.2), chunk("b", 1, 16000, last=True)]
    out = run_actor(p, inputs, src="tts", ticks=30, tick_sleep_s=0.02)   # heard in real time
    p.close()
    finished = [m for m in out if isinstance(m, PlaybackEvent) and m.event == "finished"]
    assert [m.utt for m in finished] == ["a", "b"]
    assert finished[1].duration_s == pytest.approx(0.2, abs=0.005)   # resampled, not sped up
    info = sf.info(tmp_path / "out.wav")
    assert info.samplerate == 22050 and info.frames >= int(0.3 * 22050)


def test_the_players_sample_rate_still_decides_when_set(tmp_path):
    p = wav_player(tmp_path, sample_rate=48000)
    run_actor(p, [TTS_READY, chunk("a", 0, 22050), chunk("a", 1, 22050, last=True)],
              src="tts", ticks=2)
    p.close()
    assert sf.info(tmp_path / "out.wav").samplerate == 48000


def test_a_session_with_no_speech_leaves_a_valid_empty_wav(tmp_path):
    p = wav_player(tmp_path)
    run_actor(p, [TTS_READY, chunk("x", 0, 22050, last=True)], src="tts", ticks=2)
    p.close()
    info = sf.info(tmp_path / "out.wav")
    assert info.samplerate == DEFAULT_RATE and info.frames == 0


def test_a_restarted_sink_goes_on_at_its_files_rate(tmp_path):
    path = str(tmp_path / "out.wav")
    first = WavSink(path, session="s1")
    first.take_rate(22050)
    first.write(np.full(2205, 0.5, np.float32))
    first.finished("a")
    again = WavSink(path, session="s1")   # killed and restarted: no close
    assert again.rate == 22050 and again.written == 2205 and again.done == ["a"]
    again.take_rate(16000)                # a later chunk's rate changes nothing
    again.close()
    assert sf.info(path).samplerate == 22050


class FakeStream:
    def __init__(self, owner, fail):
        self.owner, self.fail, self.calls = owner, fail, []

    def stop(self):
        self.calls.append(("stop", self.owner.closing))
        self.owner._finished()   # PortAudio ends the stream: no loss while we close it
        if self.fail:
            raise FakeSd.PortAudioError("gone")

    def close(self):
        self.calls.append(("close", self.owner.closing))


class FakeSd:
    class PortAudioError(Exception):
        pass

    def __init__(self):
        self.calls = []

    def _terminate(self):
        self.calls.append("terminate")

    def _initialize(self):
        self.calls.append("initialize")


@pytest.mark.parametrize("fail", [False, True])
def test_closing_a_stream_is_no_loss_and_a_vanished_device_is_no_error(fail):
    owner = devices.DeviceStream()
    owner.sd, owner.lost, owner.closing = FakeSd, "", False
    owner.stream = FakeStream(owner, fail)
    owner._close_stream()
    assert owner.lost == "" and not owner.closing
    assert owner.stream.calls == ([("stop", True)] if fail else [("stop", True), ("close", True)])
    owner._finished()   # the stream stopped by itself
    assert owner.lost == devices.STREAM_LOST


def test_reopen_rescans_portaudio_then_says_why_it_failed():
    sd = FakeSd()
    assert devices.reopen(sd, lambda: None) == ""
    assert sd.calls == ["terminate", "initialize"]

    def missing():
        raise devices.StartupError("output device 'x' not found")

    assert devices.reopen(sd, missing) == "output device 'x' not found"


def test_recovery_says_the_loss_once_and_retries_every_interval(caplog, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(devices.time, "monotonic", lambda: now[0])
    counters = collections.Counter()
    r = devices.Recovery("player", "output", "dropping audio and retrying", counters,
                         logging.getLogger("voxweft.player"))
    tries = []

    def again():
        tries.append(now[0])
        return "output 'x': 48000 Hz" if now[0] >= 103 else ""

    with caplog.at_level(logging.INFO, logger="voxweft.player"):
        backs = []
        for t in (100.0, 100.5, 101.0, 102.2, 103.0):   # at 103.0 the last try is 0.8 s old
            now[0] = t
            backs.append(r.step("", "the audio stream stopped", 1000, again))
        assert not any(backs) and tries == [100.0, 101.0, 102.2]
        assert counters["device_lost"] == 1
        assert [rec.getMessage() for rec in caplog.records] == [
            "player: output device 'default' lost (the audio stream stopped); dropping audio "
            "and retrying every 1.0 s; run `voxweft devices` to list devices"]
        now[0] = 103.3
        assert r.step("", "", 1000, again)
    assert caplog.records[-1].getMessage() == \
        "player: output device back after 3.3 s: output 'x': 48000 Hz"
    assert r.lost_at is None
