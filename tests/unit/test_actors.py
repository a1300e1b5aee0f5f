"""Actor logic through run_actor: real engines and files, no sockets."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import soundfile as sf

from tests.conftest import corpus_clips, read_16k
from tests.unit.helpers import run_actor
from voxweft.actors.capture import CaptureActor
from voxweft.actors.player import PlayerActor, Utterance
from voxweft.actors.segmenter import SegmenterActor
from voxweft.actors.settings.base import StartupError
from voxweft.actors.sources import FileSource
from voxweft.deploy.topology import load
from voxweft.protocol.messages import (
    BUS_RATE,
    AudioFrame,
    Cut,
    EndOfStream,
    PlaybackEvent,
    Segment,
    SpeechChunk,
    Status,
    VadEvent,
)


def topology(**overrides):
    return load(None).with_overrides({"actors": overrides})


def frames_of(audio: np.ndarray, frame: int = 320):
    """Frames as captured in real time, ending now."""
    base = time.time_ns() - len(audio) * 62_500
    return [AudioFrame(sample_rate=16000, pcm=audio[i:i + frame], media_s=i / 16000,
                       capture_ns=base + i * 62_500)
            for i in range(0, len(audio), frame)]


def test_segment_pcm_is_exactly_the_captured_samples():
    # The modelled system turned a 44-byte WAV header into 22 loud samples at the start of
    # every segment. Here the segment must start with the very samples capture sent.
    speech = read_16k(corpus_clips()[0])
    stream = np.concatenate([np.zeros(16000, np.float32), speech,
                             np.zeros(16000, np.float32)])
    topo = topology()
    seg = SegmenterActor(topo, topo.actors["segmenter"])
    out = run_actor(seg, frames_of(stream) + [EndOfStream(media_s=len(stream) / 16000)],
                    src="capture")
    segments = [m for m in out if isinstance(m, Segment) and m.final]
    assert len(segments) == 1
    s = segments[0]
    start = round(s.media_start_s * 16000)
    np.testing.assert_array_equal(s.pcm, stream[start:start + len(s.pcm)])
    # Drafts went out at pauses before it (same id), each the captured samples too; the
    # last, at the pause that closed it, is the segment itself.
    drafts = [m for m in out if isinstance(m, Segment) and not m.final]
    assert drafts and all(d.utt == s.utt for d in drafts)
    assert out.index(drafts[-1]) < out.index(s)
    assert drafts[-1].pcm.tobytes() == s.pcm.tobytes()
    for d in drafts:
        first = round(d.media_start_s * 16000)
        np.testing.assert_array_equal(d.pcm, stream[first:first + len(d.pcm)])
    assert s.src_lang == "en" and s.sample_rate == 16000
    events = [m.event for m in out if isinstance(m, VadEvent)]
    assert events == ["start", "end"]
    assert [name for name, _, _ in s.trace] == ["capture", "speech_start", "speech_end",
                                                "segment"]
    eos = [m for m in out if isinstance(m, EndOfStream)]
    assert eos and eos[0].utterances == 1


def test_segmenter_commits_up_to_the_pause_asr_cuts_at():
    clips = [read_16k(c) for c in corpus_clips()[3:5]]
    stream = np.concatenate([np.zeros(16000, np.float32), clips[0],
                             np.zeros(3200, np.float32), clips[1], np.zeros(16000, np.float32)])
    frames = frames_of(stream)
    # Cuts, not the speaker gate: "surpassed" ends 10-12 dB under the speaker's level, so the
    # gate starts the 290 ms pause 100 ms early, past the 300 ms hangover (docs/room.md).
    topo = topology(segmenter={"speaker_gate_db": 0})
    seg = SegmenterActor(topo, topo.actors["segmenter"])
    half = (16000 + len(clips[0]) + 3200 + len(clips[1]) // 2) // 320
    out = run_actor(seg, frames[:half], src="capture")
    drafts = [m for m in out if isinstance(m, Segment) and not m.final and not m.growing]
    pause = next(d for d in drafts if d.media_end_s < (16000 + len(clips[0]) + 3200) / 16000)
    grown = [m for m in out if isinstance(m, Segment) and m.growing]
    assert grown and all(g.utt == pause.utt and not g.final for g in grown)
    speech_end = dict((n, m) for n, _w, m in pause.trace)["speech_end"]
    cut = Cut(src="asr", utt=pause.utt, stream=pause.stream, media_start_s=pause.media_start_s,
              media_end_s=pause.media_end_s, speech_end_s=speech_end, text="has never been")
    out = run_actor(seg, [cut, cut] + frames[half:] +   # the second one comes too late
                    [EndOfStream(media_s=len(stream) / 16000)], src="capture", loaded=True)
    finals = [m for m in out if isinstance(m, Segment) and m.final]
    assert len(finals) == 2 and finals[0].utt == pause.utt != finals[1].utt
    assert finals[0].pcm.tobytes() == pause.pcm.tobytes()   # asr has its text already
    assert finals[1].media_start_s == pause.media_end_s     # the rest, from the cut on
    assert [(m.utt, m.event) for m in out if isinstance(m, VadEvent)][:2] == [
        (pause.utt, "end"), (finals[1].utt, "start")]
    assert seg.counters["cuts"] == 1 and seg.counters["cuts_late"] == 1
    assert ("asr", Cut) in seg.subscriptions()
    off = topology(segmenter={"commit_prefixes": False})
    assert ("asr", Cut) not in SegmenterActor(off, off.actors["segmenter"]).subscriptions()


def test_segmenter_drops_frames_of_the_wrong_format():
    topo = topology()
    seg = SegmenterActor(topo, topo.actors["segmenter"])
    bad = AudioFrame(sample_rate=44100, pcm=np.zeros(882, np.float32), media_s=0.0)
    stereo = AudioFrame(sample_rate=16000, pcm=np.zeros((320, 2), np.float32), media_s=0.0)
    assert run_actor(seg, [bad, stereo], src="capture") == []
    assert seg.counters["bad_format"] == 2


@pytest.mark.parametrize(("rate", "channels", "subtype"), [(8000, 2, "PCM_16"),
                                                           (48000, 1, "FLOAT"),
                                                           (22050, 1, "PCM_16")])
def test_file_source_resamples_any_rate_to_16k_mono(tmp_path, rate, channels, subtype):
    seconds = 1.3
    t = np.arange(int(rate * seconds)) / rate
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    data = np.stack([tone] * channels, axis=1) if channels > 1 else tone
    path = tmp_path / "in.wav"
    sf.write(path, data, rate, subtype=subtype)
    src = FileSource(str(path), 320)
    frames = []
    while not src.ended:
        frames.extend(src.read())
    audio = np.concatenate(frames)
    assert abs(len(audio) - seconds * BUS_RATE) <= 32   # nothing lost, nothing added
    assert all(len(f) == 320 for f in frames[:-1])
    spectrum = np.abs(np.fft.rfft(audio[1600:-1600]))
    peak_hz = np.argmax(spectrum) * BUS_RATE / len(audio[1600:-1600])
    assert abs(peak_hz - 440) < 5
    assert 0.3 < np.abs(audio).max() <= 0.51


def test_file_source_refuses_a_text_file_renamed_wav(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("this is not audio\n" * 100)
    with pytest.raises(StartupError, match="cannot read audio file"):
        FileSource(str(path), 320)


def test_capture_waits_for_ready_pipeline_then_paces_frames(tmp_path):
    path = tmp_path / "in.wav"
    sf.write(path, np.zeros(16000, np.float32), 16000)
    topo = topology(capture={"source": "file", "path": str(path), "fast": True})
    cap = CaptureActor(topo, topo.actors["capture"])
    assert run_actor(cap, [], ticks=3) == []   # nobody is ready: nothing is sent
    statuses = [Status(src=a, state="ready") for a in ("asr", "mt", "tts", "player")]
    statuses.append(Status(src="segmenter", state="ready", peers={"capture": cap.epoch}))
    out = run_actor(cap, statuses, ticks=60, tick_sleep_s=0.01, loaded=True)
    frames = [m for m in out if isinstance(m, AudioFrame)]
    assert len(frames) == 50 and all(len(f.pcm) == 320 for f in frames)
    assert [f.media_s for f in frames] == pytest.approx([i * 0.02 for i in range(50)])
    assert isinstance(out[-1], EndOfStream) and out[-1].media_s == pytest.approx(1.0)


def test_capture_rewinds_far_into_a_file_for_a_restarted_segmenter(tmp_path):
    # The chaos test hung here: after a rewind to 150 s the new segmenter, which had no
    # frame yet, stood at 0 s by its heartbeat, so capture thought itself 150 s ahead of
    # it (max_ahead_s 30) and waited forever.
    path = tmp_path / "in.wav"
    sf.write(path, np.zeros(16000 * 100, np.float32), 16000)
    topo = topology(capture={"source": "file", "path": str(path), "fast": True})
    cap = CaptureActor(topo, topo.actors["capture"])
    ready = [Status(src=a, state="ready") for a in ("asr", "mt", "tts", "player")]
    ready.append(Status(src="segmenter", state="ready", peers={"capture": 12345}))
    first = run_actor(cap, ready, ticks=5, tick_sleep_s=0.01)
    assert [f.for_epoch for f in first if isinstance(f, AudioFrame)][:1] == [1]
    restarted = [Status(src="asr", state="ready", stream=cap.stream, media_ms=60_000),
                 Status(src="segmenter", epoch=2, state="ready", peers={"capture": 12345})]
    out = run_actor(cap, restarted, ticks=20, tick_sleep_s=0.01, loaded=True)
    frames = [m for m in out if isinstance(m, AudioFrame) and m.for_epoch == 2]
    assert frames and frames[0].media_s == pytest.approx(60.0), frames[:1]
    assert cap.counters["rewinds"] == 1


def test_interpret_stall_is_nothing_moving_not_nothing_held(monkeypatch):
    from voxweft.tools import interpret

    c = interpret.Collector()
    c.add(Status(src="segmenter", media_ms=1000))
    assert c.stalled() == ""
    c.progress_at -= interpret.STALL_S + 1   # no audio moved and nobody holds anything
    assert "nothing moved" in c.stalled() and "segmenter at 1.0 s" in c.stalled()
    c.add(Status(src="segmenter", media_ms=1020))   # a long pause still moves the audio
    assert c.stalled() == ""


def chunk(utt, index, last=False, seconds=0.1, rate=24000):
    pcm = np.full(int(rate * seconds), 0.1 if not last else 0.0, np.float32)
    return SpeechChunk(utt=utt, index=index, last=last, sample_rate=rate,
                       pcm=pcm if not last else np.zeros(0, np.float32),
                       trace=(("speech_end", 1, 0.0), ("tts.first", 2, None)))


def player(tmp_path, gap_ms=200):
    topo = topology(player={"sink": "wav", "path": str(tmp_path / "out.wav"),
                            "gap_timeout_ms": gap_ms})
    return PlayerActor(topo, topo.actors["player"])


TTS_READY = Status(state="ready", src="tts", epoch=1)


def test_player_plays_in_order_resamples_and_reports(tmp_path):
    p = player(tmp_path)
    inputs = [chunk("a", 0), chunk("b", 0, rate=16000), chunk("a", 1), chunk("a", 2, True),
              chunk("b", 1, True)]
    out = run_actor(p, inputs, src="tts", ticks=40, tick_sleep_s=0.02)
    p.close()
    events = [(m.utt, m.event) for m in out if isinstance(m, PlaybackEvent)]
    assert events == [("a", "started"), ("a", "finished"), ("b", "started"), ("b", "finished")]
    finished = [m for m in out if isinstance(m, PlaybackEvent) and m.event == "finished"]
    assert finished[0].duration_s == pytest.approx(0.2, abs=0.01) and finished[0].complete
    audio, rate = sf.read(tmp_path / "out.wav")
    assert rate == 24000 and len(audio) >= int(0.3 * 24000)


def test_player_never_stalls_on_a_missing_chunk(tmp_path):
    p = player(tmp_path, gap_ms=150)
    # chunk 1 of "a" never comes; neither does the last chunk of "b"
    inputs = [TTS_READY, chunk("a", 0), chunk("a", 2), chunk("a", 3, True), chunk("b", 0)]
    out = run_actor(p, inputs, src="tts", ticks=40, tick_sleep_s=0.02)
    p.close()
    events = [(m.utt, m.event, m.complete) for m in out if isinstance(m, PlaybackEvent)]
    assert ("a", "finished", False) in events and ("b", "finished", False) in events
    assert p.counters["missing_chunks"] == 1 and p.counters["incomplete_utterances"] == 1
    # chunks arriving after their utterance was given up are counted, not played
    run_actor(p, [chunk("b", 1, True)], src="tts", loaded=True)
    assert p.counters["late_chunks"] == 1


def test_player_skips_an_utterance_with_no_audio(tmp_path):
    p = player(tmp_path)
    out = run_actor(p, [chunk("empty", 0, True)], src="tts", ticks=2)
    p.close()
    assert [(m.utt, m.event) for m in out if isinstance(m, PlaybackEvent)] == \
        [("empty", "skipped")]


def test_capture_real_time_never_sends_audio_before_it_is_spoken(tmp_path):
    # A file read in 0.5 s blocks must still leave capture one 20 ms frame at a time, each
    # once its last sample is due, as from a microphone.
    path = tmp_path / "in.wav"
    sf.write(path, np.zeros(32000, np.float32), 16000)
    topo = topology(capture={"source": "file", "path": str(path)})
    cap = CaptureActor(topo, topo.actors["capture"])
    cap.config.wait_ready_s = 0.0   # start at once
    cap.epoch = 1
    cap.load()
    t0 = time.monotonic()
    sent = 0
    while time.monotonic() - t0 < 0.3:
        for msg in cap.tick():
            assert isinstance(msg, AudioFrame)
            elapsed = time.monotonic() - cap.started_at
            assert msg.media_s + 0.02 <= elapsed + 1e-3, "frame sent before it was spoken"
            sent += 1
        time.sleep(0.005)
    assert 5 <= sent <= 16


def test_echo_gate_ignores_what_is_heard_while_the_player_plays():
    from voxweft.protocol.messages import PlaybackEvent

    speech = read_16k(corpus_clips()[0])
    silence = np.zeros(16000, np.float32)
    stream = np.concatenate([silence, speech, silence, speech, silence, speech, silence])
    frames = frames_of(stream)
    clip = len(speech) + 16000
    # The player "plays" while the second copy of the speech is heard: that copy is echo.
    t_ns = [f.capture_ns for f in frames]
    start_ns = t_ns[(16000 + clip) // 320] - 200_000_000
    end_ns = t_ns[(16000 + clip + len(speech)) // 320]
    started = PlaybackEvent(utt="p1", event="started", src="player", epoch=7,
                            trace=(("play.start", start_ns, None),))
    finished = PlaybackEvent(utt="p1", event="finished", src="player", epoch=7,
                             trace=(("play.end", end_ns, None),))
    cut = (16000 + clip) // 320
    inputs = frames[:cut] + [started] + frames[cut:cut + len(speech) // 320] + [finished] + \
        frames[cut + len(speech) // 320:] + [EndOfStream(media_s=len(stream) / 16000)]

    def run(mode):
        topo = topology(segmenter={"echo_mode": mode}, capture={"source": "microphone"},
                        player={"sink": "device"})
        seg = SegmenterActor(topo, topo.actors["segmenter"])
        out = run_actor(seg, inputs, src="capture")
        return [m for m in out if isinstance(m, Segment) and m.final], seg

    gated, seg = run("gate")
    assert len(gated) == 2, [(s.media_start_s, s.media_end_s) for s in gated]
    assert gated[0].media_end_s < (16000 + clip) / 16000          # the first real speech
    assert gated[1].media_start_s > (16000 + clip + len(speech)) / 16000   # the last speech
    assert seg.counters["echo_gated_frames"] > len(speech) // 320
    ungated, _ = run("off")
    assert len(ungated) == 3   # without the gate the echo becomes an utterance

    # A file source or a WAV sink has no echo path: the gate stays open.
    topo = topology(segmenter={"echo_mode": "gate"}, capture={"source": "file", "path": "x.wav"})
    assert not SegmenterActor(topo, topo.actors["segmenter"]).echo_gate


def test_player_waits_for_a_slow_chunk_while_audio_is_still_playing(tmp_path):
    # Kokoro may need longer than gap_timeout_ms for a long clause; while the previous
    # chunk is still being heard, the next one is not late.
    p = player(tmp_path, gap_ms=150)
    out = run_actor(p, [TTS_READY, chunk("a", 0, seconds=0.6)], src="tts", ticks=15,
                    tick_sleep_s=0.02)
    out += run_actor(p, [chunk("a", 1), chunk("a", 2, True)], src="tts", ticks=40,
                     tick_sleep_s=0.02, loaded=True)
    p.close()
    finished = [m for m in out if isinstance(m, PlaybackEvent) and m.event == "finished"]
    assert len(finished) == 1 and finished[0].complete
    assert finished[0].duration_s == pytest.approx(0.7, abs=0.01)
    assert p.counters["incomplete_utterances"] == 0


def test_player_waits_for_a_chunk_tts_is_still_making(tmp_path):
    # On a busy machine a chunk can take longer than gap_timeout_ms after the audio before it
    # has drained; while tts's heartbeat says it is in a model call, the chunk is not late.
    p = player(tmp_path, gap_ms=100)
    making = Status(state="ready", src="tts", epoch=1, busy_s=0.4)
    out = run_actor(p, [making, chunk("a", 0, seconds=0.05)], src="tts", ticks=20,
                    tick_sleep_s=0.02)
    out += run_actor(p, [chunk("a", 1, True)], src="tts", ticks=10, tick_sleep_s=0.02,
                     loaded=True)
    assert p.counters["incomplete_utterances"] == 0
    finished = [m for m in out if isinstance(m, PlaybackEvent) and m.event == "finished"]
    assert len(finished) == 1 and finished[0].complete
    # A model call that has run for longer than TTS_STUCK_S is stuck: the gap counts again.
    stuck = Status(state="ready", src="tts", epoch=1, busy_s=31.0)
    run_actor(p, [stuck, chunk("b", 0, seconds=0.05)], src="tts", ticks=20, tick_sleep_s=0.02,
              loaded=True)
    p.close()
    assert p.counters["incomplete_utterances"] == 1


def test_player_restarted_in_the_same_session_keeps_whole_utterances_only(tmp_path):
    # A restarted player goes on with the same output.wav: what was written whole stays,
    # a half-written utterance is cut off (tts sends it again), done ones are not played twice.
    from voxweft.actors.player import WavSink

    path = str(tmp_path / "out.wav")
    first = WavSink(path, 24000, session="s1")
    first.write(np.full(2400, 0.5, np.float32))
    first.finished("a")
    first.write(np.full(1200, -0.5, np.float32))   # "b" is half written when it crashes
    # (no close: the process was killed)
    again = WavSink(path, 24000, session="s1")
    assert again.done == ["a"] and again.written == 2400
    assert again.first_ns == first.first_ns       # the timeline goes on, not from zero
    again.close()
    audio, _ = sf.read(path, dtype="float32")
    assert len(audio) == 2400 and np.allclose(audio, 0.5, atol=1e-3)
    other = WavSink(path, 24000, session="s2")    # another session starts afresh
    assert other.done == [] and other.written == 0
    other.close()


def test_player_says_done_and_says_it_again_for_a_resent_utterance(tmp_path):
    from voxweft.protocol.messages import Done

    p = player(tmp_path)
    out = run_actor(p, [TTS_READY, chunk("a", 0), chunk("a", 1, True)], src="tts", ticks=3)
    assert [m.utt for m in out if isinstance(m, Done)] == ["a"]
    assert p.held() >= 0
    again = list(p.duplicate(chunk("a", 0)))   # tts did not hear it and sends "a" again
    assert [m.utt for m in again if isinstance(m, Done)] == ["a"]
    p.close()


def test_player_answers_a_holder_that_asks_about_an_utterance_it_finished(tmp_path):
    # A Done is published once. The chaos run lost one: the restarted player said Done for
    # the utterance tts sent it again 0.5 s before segmenter, asr and mt were reconnected to
    # it, and those three held that utterance for ever. So a holder's heartbeat lists the
    # oldest utterances it holds, and the player answers with the Done of each it finished,
    # whenever it is asked (at most every ANSWER_EVERY_S per utterance).
    from voxweft.actors import player as player_module
    from voxweft.protocol.messages import Done

    p = player(tmp_path)
    out = run_actor(p, [TTS_READY, chunk("a", 0), chunk("a", 1, True)], src="tts", ticks=3)
    assert [m.utt for m in out if isinstance(m, Done)] == ["a"]
    assert ("segmenter", Status) in p.subscriptions()
    assert ("mt", Status) in p.subscriptions()

    def hb(src, *holding):
        return Status(src=src, epoch=5, state="ready", holding=list(holding))

    def dones(*statuses):
        out = run_actor(p, list(statuses), src="x", loaded=True)
        return [m.utt for m in out if isinstance(m, Done)]

    assert dones(hb("segmenter")) == []                    # holds nothing
    assert dones(hb("mt", "a", "z")) == ["a"]              # "z" is not done: no answer
    assert dones(hb("mt", "a")) == []                      # answered a moment ago
    p.answered["a"] -= player_module.ANSWER_EVERY_S        # ... a while ago: asked again
    assert dones(hb("asr", "a")) == ["a"]
    assert dones(hb("capture", "a")) == []                 # not a holder
    p.close()


def test_player_reading_a_file_waits_for_what_a_holder_sends_again(tmp_path):
    # Under load, with actors killed one by one, the player gave up on utterances mid-way
    # ("no chunk for 2.0 s; moving on") although their chunks were coming again. Reading a
    # file, an utterance a holder still lists is waited for; when tts itself holds it and
    # makes nothing, what is missing was lost on the way: tts is asked to send it again.
    p = player(tmp_path, gap_ms=100)
    held = Status(state="ready", src="tts", epoch=1, holding=["a"])
    out = run_actor(p, [held, chunk("a", 0, seconds=0.05)], src="tts", ticks=12,
                    tick_sleep_s=0.02)
    assert p.counters["incomplete_utterances"] == 0 and p.counters["asked_again"] >= 1
    assert p.again == {"tts"}   # the runtime counts it as a broken link to tts
    out += run_actor(p, [held, chunk("a", 1, True)], src="tts", ticks=5, tick_sleep_s=0.02,
                     loaded=True)
    finished = [m for m in out if isinstance(m, PlaybackEvent) and m.event == "finished"]
    assert len(finished) == 1 and finished[0].complete
    # No holder lists "b": nothing will come again, so the gap timeout applies.
    run_actor(p, [Status(state="ready", src="tts", epoch=1), chunk("b", 0, seconds=0.05)],
              src="tts", ticks=12, tick_sleep_s=0.02, loaded=True)
    assert p.counters["incomplete_utterances"] == 1
    p.close()
    # A loudspeaker does not wait: what comes late is not heard in time.
    topo = topology(player={"sink": "device", "gap_timeout_ms": 100})
    live = PlayerActor(topo, topo.actors["player"])
    live.holding["tts"] = (time.monotonic(), {"a"})
    assert not live._coming_again(p.queue.get("a") or Utterance("a"))


def test_player_queue_is_bounded_against_a_peer_gone_wrong(tmp_path):
    from voxweft.actors import player as player_module

    p = player(tmp_path, gap_ms=60000)
    flood = [chunk(f"u{i}", 0) for i in range(player_module.QUEUE_UTTERANCES + 50)]
    run_actor(p, [TTS_READY] + flood + [chunk("u0", player_module.UTTERANCE_CHUNKS)],
              src="tts")
    assert len(p.queue) == player_module.QUEUE_UTTERANCES
    assert p.counters["refused_chunks"] == 51
    p.close()


def test_player_says_why_when_it_gives_up_on_an_utterance_with_no_audio(tmp_path):
    # In a run under load one utterance was "spoken: false" with no reason: the player gave
    # up on it before any audio came. It now says so.
    from voxweft.actors import player as player_module

    p = player(tmp_path, gap_ms=100)
    empty = SpeechChunk(utt="c", index=0, sample_rate=24000, pcm=np.zeros(0, np.float32))
    out = run_actor(p, [TTS_READY, empty], src="tts", ticks=15, tick_sleep_s=0.02)
    p.close()
    skipped = [m for m in out if isinstance(m, PlaybackEvent) and m.event == "skipped"]
    assert [(m.utt, m.reason, m.complete) for m in skipped] == \
        [("c", player_module.NO_AUDIO, False)]


def test_the_segmenter_refuses_a_quieter_voice_says_why_and_remembers_the_speaker():
    """A remark 14 dB under the speaker, between two of their sentences, is the room's."""
    clips = [read_16k(c) for c in corpus_clips()]
    loud, again, other = clips[1], clips[3], clips[2]
    remark = other[:round(1.2 * 16000)] * np.float32(10 ** (-14 / 20))
    gap, short = np.zeros(16000, np.float32), np.zeros(4800, np.float32)
    stream = np.concatenate([gap, loud, short, remark, short, again, gap])
    topo = topology()
    seg = SegmenterActor(topo, topo.actors["segmenter"])
    out = run_actor(seg, frames_of(stream) + [EndOfStream(media_s=len(stream) / 16000)],
                    src="capture")
    start = (16000 + len(loud) + len(short)) / 16000     # where the quieter voice is
    end = start + len(remark) / 16000
    finals = [m for m in out if isinstance(m, Segment) and m.final]
    assert len(finals) == 2 and finals[0].media_end_s < start + 0.15 and \
        finals[1].media_start_s > end - 0.1, [(m.media_start_s, m.media_end_s) for m in finals]
    (rejected,) = [m for m in out if isinstance(m, VadEvent) and m.event == "rejected"]
    assert start <= rejected.media_s < rejected.end_s <= end + 0.1
    assert rejected.reason.startswith("not the speaker: ") and "dB under" in rejected.reason
    assert seg.counters["rejected"] == 1 and seg.counters["rejected_ms"] > 500
    # a new stream (the same microphone, the same person): the speaker's level is kept
    again_stream = np.concatenate([remark, short, again, gap])
    frames = [AudioFrame(stream="next", sample_rate=16000, pcm=f.pcm, media_s=f.media_s,
                         capture_ns=f.capture_ns) for f in frames_of(again_stream)]
    out = run_actor(seg, frames, src="capture", loaded=True)
    assert [m.event for m in out if isinstance(m, VadEvent)].count("rejected") == 1
    # without the gate, the same quieter voice is interpreted
    off = topology(segmenter={"speaker_gate_db": 0})
    bare = SegmenterActor(off, off.actors["segmenter"])
    out = run_actor(bare, frames_of(stream) + [EndOfStream(media_s=len(stream) / 16000)],
                    src="capture")
    assert any(m.media_start_s <= start + 0.1 and end - 0.1 <= m.media_end_s for m in out
               if isinstance(m, Segment) and m.final)


def test_the_segmenter_interprets_a_quieter_voice_that_takes_the_floor():
    """A voice 20 dB under the first one, reading on after it: heard as without the gate."""
    clips = [read_16k(c) for c in corpus_clips()]
    quiet = np.concatenate([clips[2], np.zeros(6400, np.float32), clips[3]]) * \
        np.float32(10 ** (-20 / 20))
    gap = np.zeros(8000, np.float32)
    stream = np.concatenate([gap, clips[1], gap, quiet, gap, gap, gap])
    start = (2 * len(gap) + len(clips[1])) / 16000
    end = start + len(quiet) / 16000

    def covered(segmenter) -> tuple[float, list]:
        out = run_actor(segmenter, frames_of(stream) +
                        [EndOfStream(media_s=len(stream) / 16000)], src="capture")
        finals = [m for m in out if isinstance(m, Segment) and m.final]
        return (sum(max(0.0, min(m.media_end_s, end) - max(m.media_start_s, start))
                    for m in finals), out)

    topo, off = topology(), topology(segmenter={"speaker_gate_db": 0})
    seg = SegmenterActor(topo, topo.actors["segmenter"])
    gated, out = covered(seg)
    plain, _ = covered(SegmenterActor(off, off.actors["segmenter"]))
    assert plain > 0.85 * len(quiet) / 16000 and gated >= plain - 0.05, (gated, plain)
    assert not [m for m in out if isinstance(m, VadEvent) and m.event == "rejected"]
    assert seg.counters["rejected"] == 0


def test_no_actor_reads_another_actors_table():
    """What one actor needs of another is derived once in the topology model (echo_path,
    playout_buffer_s, commits, same_host) or travels in a message (issue 35, part 3)."""
    import re

    from tests.conftest import ROOT

    pipeline_wide = {"budget.py", "__main__.py"}   # the whole pipeline's budget; the start
    found = []
    for path in sorted((ROOT / "actors").glob("*.py")):
        if path.name in pipeline_wide:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"topology\.actors\[|topology\.actors\.get\(", line):
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e30])
def test_one_bad_float_sample_from_the_bus_does_not_deafen_the_segmenter(bad):
    """A frame with one NaN, inf or huge sample, as it comes off the wire, inside a
    sentence: that sentence and the next one of the same speaker are still interpreted."""
    from voxweft.protocol.codec import decode, encode

    clips = [read_16k(c) for c in corpus_clips()]
    gap = np.zeros(16000, np.float32)
    stream = np.concatenate([gap, clips[1], gap, gap, clips[3], gap])
    frames = frames_of(stream)
    at = (len(gap) + len(clips[1]) // 2) // 320   # inside the first sentence's speech
    poisoned = frames[at].pcm.copy()
    poisoned[100] = bad
    frames[at] = AudioFrame(sample_rate=16000, pcm=poisoned, media_s=frames[at].media_s,
                            capture_ns=frames[at].capture_ns)
    wire = [decode(encode(f)) for f in frames]
    assert all(np.isfinite(f.pcm).all() and np.abs(f.pcm).max() <= 1.0 for f in wire)   # clean
    topo = topology()
    seg = SegmenterActor(topo, topo.actors["segmenter"])
    out = run_actor(seg, wire + [EndOfStream(media_s=len(stream) / 16000)], src="capture")
    finals = [m for m in out if isinstance(m, Segment) and m.final]
    second = (2 * len(gap) + len(clips[1]) + len(gap)) / 16000
    assert len(finals) == 2 and finals[1].media_start_s > second - 0.5, \
        [(m.media_start_s, m.media_end_s) for m in finals]
    assert not [m for m in out if isinstance(m, VadEvent) and m.event == "rejected"]


def test_player_reading_a_file_waits_for_a_held_utterance_only_so_long(tmp_path, monkeypatch):
    """A holder that lists an utterance for ever and never sends its end (an engine that
    failed partway) must not stop the file: the wait is bounded."""
    import voxweft.actors.player as player_module

    monkeypatch.setattr(player_module, "HELD_WAIT_S", 0.4)
    p = player(tmp_path, gap_ms=100)
    out = []
    for _ in range(4):   # tts lists "a" in every heartbeat and sends nothing more
        held = Status(state="ready", src="tts", epoch=1, holding=["a"])
        out += run_actor(p, [held] + ([chunk("a", 0, seconds=0.05)] if not out else []),
                         src="tts", ticks=10, tick_sleep_s=0.02, loaded=bool(out))
    p.close()
    finished = [m for m in out if isinstance(m, PlaybackEvent) and m.event == "finished"]
    assert len(finished) == 1 and not finished[0].complete
    assert p.counters["held_too_long"] == 1 and p.counters["incomplete_utterances"] == 1


def test_player_counts_the_holes_heard_inside_an_utterance(tmp_path):
    """A chunk that comes after the one before has played is a hole the listener hears
    (an underrun): counted on the utterance's `finished` event, for the bench (issue 38)."""
    p = player(tmp_path, gap_ms=2000)
    out = run_actor(p, [TTS_READY, chunk("a", 0, seconds=0.1)], src="tts", ticks=2)
    time.sleep(0.35)   # chunk 1 comes ~0.25 s after chunk 0 has played
    out += run_actor(p, [chunk("a", 1, seconds=0.1), chunk("a", 2, seconds=0.1),
                         chunk("a", 3, True)], src="tts", ticks=20, tick_sleep_s=0.02,
                     loaded=True)
    p.close()
    (done,) = [m for m in out if isinstance(m, PlaybackEvent) and m.event == "finished"]
    assert done.underruns == 1 and 0.15 < done.underrun_s < 0.5, done
    assert p.counters["underruns_inside"] == 1


def _restarted_player(tmp_path, gap_ms=100):
    """A player that goes on with the file of a player killed in the same session."""
    first = player(tmp_path, gap_ms)
    first._session = lambda: "s1"
    run_actor(first, [], src="tts")
    first.close()
    p = player(tmp_path, gap_ms)
    p._session = lambda: "s1"
    return p


def _written(tmp_path) -> list[str]:
    journal = (tmp_path / "out.wav.journal").read_text().splitlines()
    return [j["utt"] for j in map(json.loads, journal) if "utt" in j]


def test_a_restarted_player_writes_first_what_came_first_in_the_speech(tmp_path):
    # CI 2026-12-07 (test_kills_close, six kills beside two hogs): a player restarted while
    # tts, itself back from a kill, made utterance 4 first wrote 4 before 0-3, which tts had
    # not made yet but the segmenter still held. Reading a file, an utterance waits for the
    # earlier ones of its segmenter (by number) that any holder lists.
    p = _restarted_player(tmp_path)
    ids = [f"00aa01.{n:05d}" for n in range(5)]
    heard = [Status(state="ready", src="segmenter", epoch=1, holding=ids),
             Status(state="ready", src="asr", epoch=1, holding=ids[:4]),
             Status(state="ready", src="mt", epoch=1, holding=ids[:4]),
             Status(state="ready", src="tts", epoch=1, holding=[ids[4]])]
    out = run_actor(p, [chunk(ids[4], 0), chunk(ids[4], 1, True)], src="tts", ticks=5,
                    tick_sleep_s=0.02)
    assert not [m for m in out if isinstance(m, PlaybackEvent)], "written before any holder"
    out += run_actor(p, heard, src="tts", ticks=10, tick_sleep_s=0.02, loaded=True)
    assert not [m for m in out if isinstance(m, PlaybackEvent)], "4 written before 0-3"
    assert p.counters["waited_for_earlier"] == 1
    late = [c for n in (1, 0, 2, 3) for c in (chunk(ids[n], 0), chunk(ids[n], 1, True))]
    out += run_actor(p, heard + late, src="tts", ticks=40, tick_sleep_s=0.02, loaded=True)
    p.close()
    assert _written(tmp_path) == ids


def test_a_restarted_player_that_hears_no_holder_writes_after_a_while(tmp_path, monkeypatch):
    """The wait for the holders' lists is bounded: holders that never heartbeat (a replay,
    a partial topology) do not stop the file."""
    import voxweft.actors.player as player_module

    monkeypatch.setattr(player_module, "HOLDER_SILENT_S", 0.3)
    p = _restarted_player(tmp_path)
    out = run_actor(p, [chunk("00aa01.00004", 0), chunk("00aa01.00004", 1, True)],
                    src="tts", ticks=5, tick_sleep_s=0.02)
    assert not [m for m in out if isinstance(m, PlaybackEvent)]
    run_actor(p, [], src="tts", ticks=30, tick_sleep_s=0.02, loaded=True)
    p.close()
    assert _written(tmp_path) == ["00aa01.00004"]


def test_player_reading_a_file_writes_what_tts_sent_first_first(tmp_path):
    # test_kills_close: the player was killed while it had utterance 1; its successor got 2
    # and 3 live while tts made them, and 1 only in tts's resend, 10 s later (tts noticed the
    # restart between two syntheses): output.wav had 2 before 1. Reading a file, what tts
    # lists as held (oldest first) decides the order of what has not started.
    p = player(tmp_path, gap_ms=100)
    holds = Status(state="ready", src="tts", epoch=1, holding=["u1", "u2", "u3"])
    busy = Status(state="ready", src="tts", epoch=1, holding=["u1", "u2", "u3"], busy_s=0.5)
    out = run_actor(p, [holds, busy, chunk("u2", 0), chunk("u2", 1, True), chunk("u3", 0),
                        chunk("u3", 1, True)], src="tts", ticks=10, tick_sleep_s=0.02)
    assert not [m for m in out if isinstance(m, PlaybackEvent)], "u2 written before u1"
    assert p.counters["waited_for_earlier"] == 1
    out += run_actor(p, [busy, chunk("u1", 0), chunk("u1", 1, True)], src="tts", ticks=30,
                     tick_sleep_s=0.02, loaded=True)
    p.close()
    journal = [json.loads(x) for x in (tmp_path / "out.wav.journal").read_text().splitlines()]
    assert [j["utt"] for j in journal if "utt" in j] == ["u1", "u2", "u3"]
    assert all(j["complete"] for j in journal if "utt" in j)
