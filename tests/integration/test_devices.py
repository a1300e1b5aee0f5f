"""The live audio path through a private PulseAudio null sink, in real time, no hardware.

The player plays into the sink ``out``; what it plays comes back on ``out.monitor`` (the
default source), which the capture side records through the same PortAudio ``pulse``
device a user would pick. Everything here runs at the daemon's real-time pace.
"""

from __future__ import annotations

import collections
import functools
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import soundfile as sf

from tests.conftest import ROOT, corpus_clips, local_topology, read_16k
from tests.integration.conftest import FakeUpstream, start_actor
from tests.pulse import DEVICE, MONITOR, pulse  # noqa: F401  (pytest fixture)
from voxweft.actors.player import PlayerActor
from voxweft.actors.sources import MicrophoneSource
from voxweft.deploy.topology import load
from voxweft.protocol.client import BusClient
from voxweft.protocol.codec import decode, encode
from voxweft.protocol.messages import (
    BUS_RATE,
    AudioFrame,
    PlaybackEvent,
    SpeechChunk,
    Status,
    stamp,
)

TONE_HZ = 440.0
TONE_AMP = 0.5


class Recorder:
    """Records the sink's monitor with `parec`, in its own process, with wall times.

    Not a second PortAudio stream in this process: with the ALSA `pulse` plugin, an
    output and an input stream in one process sometimes drive the output callback in an
    underflow storm (blocks every 2 ms, audio consumed ~5x too fast). Actors never do
    that: each owns one stream in its own process.
    """

    rate = 44100

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            ["parec", f"--device={MONITOR}", "--raw", "--format=float32le", "--channels=1",
             f"--rate={self.rate}", "--latency-msec=10"], stdout=subprocess.PIPE)
        self.data = bytearray()
        self.first_ns: int | None = None   # wall time of the first recorded sample
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        while block := self.proc.stdout.read1(65536):
            arrived = time.time_ns()
            self.data += block
            # The earliest "arrival minus recorded duration" is the tightest estimate of
            # the first sample's time (a late read only makes it later).
            first = arrived - int(len(self.data) // 4 * 1e9 / self.rate)
            self.first_ns = first if self.first_ns is None else min(self.first_ns, first)

    def __enter__(self) -> Recorder:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(5)
        self.thread.join(5)

    def audio(self) -> np.ndarray:
        n = len(self.data) // 4
        return np.frombuffer(bytes(self.data[:n * 4]), np.float32)


def tone(rate: int, seconds: float) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (TONE_AMP * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float32)


def wire(msg, src="tts", seq=1):
    """Through the codec, as the actor would receive it."""
    return decode(encode(stamp(msg, src=src, epoch=1, seq=seq)))


def settle(actor: PlayerActor, timeout_s: float = 3.0) -> None:
    """Wait until the new output stream stops reporting device underflows.

    A null-sink quirk, not the player's: when a stream joins, the sink re-plans its
    latency and for a moment the ALSA plugin reports underflow after underflow and eats
    audio ~4x too fast (`xruns` climbs by dozens). A sound card does not do this.
    """
    deadline = time.monotonic() + timeout_s
    seen, quiet_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        if actor.counters["xruns"] != seen:
            seen, quiet_since = actor.counters["xruns"], time.monotonic()
        elif time.monotonic() - quiet_since > 0.3:
            return
        time.sleep(0.02)


def device_player(**settings) -> PlayerActor:
    topo = load(None).with_overrides(
        {"actors": {"player": {"sink": "device", "device": DEVICE, **settings}}})
    actor = PlayerActor(topo, topo.actors["player"])
    actor.epoch = 1
    actor.load()
    return actor


def play_chunks(actor: PlayerActor, utt: str, audio: np.ndarray, rate: int, n_chunks: int,
                every_s: float) -> list[PlaybackEvent]:
    """Send `audio` as chunks `every_s` apart, tick until finished; return the events."""
    events: list[PlaybackEvent] = []
    parts = np.array_split(audio, n_chunks)
    parts.append(np.zeros(0, np.float32))   # an empty last chunk, as the TTS sends
    next_send = time.monotonic()
    deadline = next_send + len(audio) / rate + 5.0
    i = 0
    while time.monotonic() < deadline:
        if i < len(parts) and time.monotonic() >= next_send:
            chunk = SpeechChunk(utt=utt, index=i, last=i == len(parts) - 1, sample_rate=rate,
                                pcm=parts[i])
            actor.recv_ns = time.time_ns()
            list(actor.handle(wire(chunk, seq=i + 1)))
            i += 1
            next_send += every_s
        events += [m for m in actor.tick() if isinstance(m, PlaybackEvent)]
        if any(e.event == "finished" for e in events):
            return events
        time.sleep(0.01)
    return events


def test_devices_lists_the_pulse_device(pulse):  # noqa: F811
    out = subprocess.run([sys.executable, "-m", "voxweft.tools.cli", "devices"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:]]
    pulse_rows = [r for r in rows if r[-1] == DEVICE]
    assert pulse_rows, out.stdout
    index, inputs, outputs, rate = (int(x) for x in pulse_rows[0][:4])
    assert inputs >= 1 and outputs >= 1 and rate == 44100


@pytest.mark.parametrize("rate", [24000, 22050])
def test_player_plays_a_tone_whole_and_on_time(pulse, rate):  # noqa: F811
    seconds = 1.0
    actor = device_player()
    try:
        with Recorder() as rec:
            settle(actor)   # the recorder runs before the first sample plays
            # 5 chunks sent 0.1 s apart: faster than real time, as TTS sends them.
            events = play_chunks(actor, "tone", tone(rate, seconds), rate, 5, 0.1)
            time.sleep(0.3)
    finally:
        actor.close()
    kinds = [e.event for e in events]
    assert kinds == ["started", "finished"], kinds
    assert actor.counters["underruns"] == 0
    audio = rec.audio()
    loud = np.flatnonzero(np.abs(audio) > 0.05 * TONE_AMP)
    assert len(loud), "nothing recorded from the monitor"
    first, last = loud[0], loud[-1]
    duration = (last - first) / rec.rate
    assert abs(duration - seconds) < 0.05, duration
    body = audio[first:last]
    # Frequency: the spectrum's peak.
    spectrum = np.abs(np.fft.rfft(body * np.hanning(len(body))))
    peak_hz = np.argmax(spectrum) * rec.rate / len(body)
    assert abs(peak_hz - TONE_HZ) < 3, peak_hz
    # No discontinuity: no sample step above the tone's own steepest slope (plus the
    # 16-bit sink's rounding), anywhere, edges included (the fades).
    max_step = 2 * np.pi * TONE_HZ * TONE_AMP / rec.rate
    steps = np.abs(np.diff(audio[max(0, first - 500):last + 500]))
    assert steps.max() < 1.15 * max_step + 2e-4, (steps.max(), max_step, np.argmax(steps),
                                                  first, last, dict(actor.counters))
    # Events at the times the sound is heard: the monitor records each sample when the
    # sink plays it, so started ~ the tone's first recorded sample.
    started = next(e for e in events if e.event == "started")
    finished = next(e for e in events if e.event == "finished")
    heard_ns = rec.first_ns + int(first * 1e9 / rec.rate)
    start_error_ms = (started.trace[-1][1] - heard_ns) / 1e6
    end_error_ms = (finished.trace[-1][1] - (rec.first_ns + int(last * 1e9 / rec.rate))) / 1e6
    print(f"\nrate {rate}: device latency {actor.sink.latency_s * 1000:.1f} ms, started event "
          f"{start_error_ms:+.1f} ms, finished event {end_error_ms:+.1f} ms vs recorded")
    assert abs(start_error_ms) < 60 and abs(end_error_ms) < 60


def test_jitter_buffer_avoids_underruns_of_a_trickle(pulse):  # noqa: F811
    # 40 ms chunks arriving every 35 ms: barely faster than real time. Started at the
    # first chunk, one late chunk empties the device; with the jitter buffer it does not.
    rate = 24000
    counts = {}
    for jitter_ms in (0, 60):
        actor = device_player(jitter_ms=jitter_ms)
        settle(actor)
        try:
            play_chunks(actor, f"trickle{jitter_ms}", tone(rate, 0.8), rate, 20, 0.035)
        finally:
            actor.close()
        counts[jitter_ms] = actor.counters["underruns"]
    print(f"\nunderruns of a 40 ms / 35 ms trickle: {counts}")
    assert counts[60] <= min(counts[0], 1)


def test_capture_hears_speech_played_into_the_sink_in_real_time(pulse):  # noqa: F811
    clip = corpus_clips()[0]
    speech, clip_rate = sf.read(clip, dtype="float32")
    counters: collections.Counter[str] = collections.Counter()
    mic = MicrophoneSource(DEVICE, 320, counters)
    frames: list[tuple[np.ndarray, int, float]] = []
    try:
        time.sleep(0.2)
        mic.read_timed()   # start from now
        t0 = time.monotonic()
        # The speech is played by paplay, in its own process (see Recorder).
        player = subprocess.Popen(["paplay", "--latency-msec=20", str(clip)])
        while time.monotonic() - t0 < len(speech) / clip_rate + 0.8:
            frames += [(pcm, ns, time.monotonic() - t0) for pcm, ns in mic.read_timed()]
            time.sleep(0.02)
    finally:
        mic.close()
    assert player.wait(10) == 0
    assert all(len(pcm) == 320 for pcm, _, _ in frames)
    captured = np.concatenate([pcm for pcm, _, _ in frames])
    reference = read_16k(clip)
    corr = np.correlate(captured, reference, "valid")
    lag = int(np.argmax(corr))
    window = captured[lag:lag + len(reference)]
    similarity = corr[lag] / (np.linalg.norm(window) * np.linalg.norm(reference))
    # 1.000 on an idle machine; an underrun under load shifts part of the clip, and 0.6
    # still identifies the speech (unrelated audio scores near 0).
    assert similarity > 0.6, similarity
    # Real time: the frames arrive as fast as they are spoken, not in a burst.
    arrived = np.array([t for _, _, t in frames])
    audio_s = np.arange(len(frames)) * 0.02
    drift = arrived - arrived[0] - audio_s
    assert np.max(np.abs(drift)) < 0.15, np.max(np.abs(drift))
    # capture_ns: frames 20 ms apart on average, in order, none off by half a frame (the ADC
    # time PortAudio reports per block jitters by ~5 ms on a loaded machine).
    stamps = np.array([ns for _, ns, _ in frames])
    steps = np.diff(stamps)
    assert np.all(steps > 0) and abs(np.mean(steps) - 20_000_000) < 500_000, steps
    assert np.max(np.abs(steps - 20_000_000)) < 10_000_000, steps
    print(f"\ncapture: similarity {similarity:.3f}, timestamps via {mic.time_source}, "
          f"pacing drift max {np.max(np.abs(drift)) * 1000:.0f} ms, "
          f"input latency {mic.stream.latency * 1000:.1f} ms")
    assert counters["overflow"] == 0


def test_capture_counts_overflow_and_keeps_the_timeline(pulse):  # noqa: F811
    counters: collections.Counter[str] = collections.Counter()
    mic = MicrophoneSource(DEVICE, 320, counters, queue_ms=20)   # room for one block
    try:
        mic.read_timed()
        t0 = time.monotonic()
        time.sleep(0.4)   # the actor loop is stuck: the callback must drop, not block
        frames = mic.read_timed()   # the one queued block, and silence for the dropped ones
        while time.monotonic() - t0 < 0.7:   # the loop runs again
            frames += mic.read_timed()
            time.sleep(0.01)
        elapsed = time.monotonic() - t0
    finally:
        mic.close()
    assert counters["overflow"] >= 10 and counters["overflow_ms"] >= 200
    # Dropped audio came back as silence of the same length: media time keeps up with
    # wall time (less the input latency, audio not yet delivered).
    assert abs(len(frames) * 0.02 - elapsed) < 0.1, (len(frames), elapsed)
    stamps = np.array([ns for _, ns in frames])
    assert np.max(np.abs(np.diff(stamps) - 20_000_000)) < 5_000_000


def _capture_frames(topo, stop, out):
    with BusClient([topo.pub_connect("capture")], [b"audio.", b"status."]) as bus:
        while not stop.is_set():
            msg = bus.recv(0.05)
            if msg is not None:
                out.append(msg)


def _wait_ready(messages, actor, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(isinstance(m, Status) and m.src == actor and m.state == "ready"
               for m in list(messages)):
            return True
        time.sleep(0.05)
    return False


def _speak(up: FakeUpstream, utt: str, speech: np.ndarray, rate: int):
    parts = np.array_split(speech, 4) + [np.zeros(0, np.float32)]
    for i, part in enumerate(parts):
        up.send(SpeechChunk(utt=utt, index=i, last=i == len(parts) - 1, sample_rate=rate,
                            pcm=part.astype(np.float32)))
        time.sleep(0.05)


def test_actor_processes_play_and_capture_through_the_device(pulse, short_tmp):  # noqa: F811
    path = local_topology(short_tmp, corpus_clips()[0], short_tmp / "out.wav", {"actors": {
        "capture": {"source": "microphone", "device": DEVICE},
        "player": {"sink": "device", "device": DEVICE},
        # what the microphone hears of the player is the point here: not cancelled
        "segmenter": {"echo_mode": "off"}}})
    from voxweft.deploy.topology import load as load_topology

    topo = load_topology(path)
    clip = corpus_clips()[3]
    speech, rate = sf.read(clip, dtype="float32")
    up = FakeUpstream(topo, "tts", "player")
    stop = threading.Event()
    captured: list = []
    reader = threading.Thread(target=_capture_frames, args=(topo, stop, captured))
    reader.start()
    procs = [start_actor(path, "player"), start_actor(path, "capture")]
    try:
        player_status = up.receive(Status, 30, lambda m: m.state == "ready")
        assert player_status is not None, "player never became ready"
        assert _wait_ready(captured, "capture", 30), "capture never became ready"
        time.sleep(0.3)   # the player's SUB has joined the fake TTS
        captured.clear()
        _speak(up, "u1", speech, rate)
        started = up.receive(PlaybackEvent, 10, lambda m: m.event == "started")
        finished = up.receive(PlaybackEvent, 10, lambda m: m.event == "finished")
        assert started is not None and finished is not None
        assert finished.complete and abs(finished.duration_s - len(speech) / rate) < 0.05
        time.sleep(0.3)
        frames = [m for m in list(captured) if isinstance(m, AudioFrame)]
        audio = np.concatenate([f.pcm for f in frames])
        reference = read_16k(clip)
        corr = np.correlate(audio, reference, "valid")
        lag = int(np.argmax(corr))
        window = audio[lag:lag + len(reference)]
        similarity = corr[lag] / (np.linalg.norm(window) * np.linalg.norm(reference))
        assert similarity > 0.6, similarity   # see the test above
        # The capture actor stamps the speech when the player said it started.
        heard_ns = frames[0].capture_ns + lag * 1e9 / BUS_RATE
        assert abs(heard_ns - started.trace[-1][1]) / 1e6 < 80

        # The device vanishes: the player says so once, stays up, and plays again once
        # the sound server is back.
        pulse.kill()
        time.sleep(1.5)
        assert procs[0].poll() is None, "player exited when the device vanished"
        degraded = up.receive(Status, 3, lambda m: m.state == "degraded")
        assert degraded is not None and "lost" in degraded.detail
        pulse.start()
        time.sleep(2.5)   # the player retries every second
        _speak(up, "u2", speech, rate)
        again = up.receive(PlaybackEvent, 10, lambda m: m.utt == "u2" and
                           m.event == "finished")
        assert again is not None and again.complete
    finally:
        stop.set()
        reader.join()
        up.close()
        for p in procs:
            p.terminate()
        logs = [p.communicate(timeout=10)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    lost = [line for line in logs[0].splitlines() if "output device" in line and "lost" in line]
    assert len(lost) == 1 and "voxweft devices" in lost[0], logs[0]
    assert "output device back" in logs[0]


def microphone_capture(**settings):
    """A loaded capture actor on the null sink's monitor, driven by tick() in the test."""
    from voxweft.actors.capture import CaptureActor

    topo = load(None).with_overrides({"actors": {"capture": {
        "source": "microphone", "device": DEVICE, **settings}}})
    cap = CaptureActor(topo, topo.actors["capture"])
    cap.epoch = 1
    cap.load()
    return cap


def tick_for(cap, seconds: float) -> list[AudioFrame]:
    """Tick the capture actor for `seconds`; the frames it sent."""
    frames, t0 = [], time.monotonic()
    while time.monotonic() - t0 < seconds:
        frames += [m for m in cap.tick() if isinstance(m, AudioFrame)]
        time.sleep(0.01)
    return frames


def test_capture_survives_its_device_vanishing_and_resumes(pulse):  # noqa: F811
    cap = microphone_capture(device_retry_ms=300)
    run_for = functools.partial(tick_for, cap)

    try:
        assert len(run_for(0.5)) >= 10
        pulse.kill()
        run_for(1.0)
        assert cap.health(), "capture did not notice its device vanished"
        assert cap.counters["device_lost"] == 1
        pulse.start()
        deadline = time.monotonic() + 10
        resumed = []
        while time.monotonic() < deadline and len(resumed) < 10:
            resumed += run_for(0.3)
        assert len(resumed) >= 10 and not cap.health(), "capture did not come back"
        assert cap.counters["device_lost"] == 1   # one error line for one loss
    finally:
        cap.close()


def test_live_audio_is_dropped_only_at_capture_and_counted(pulse):  # noqa: F811
    """A segmenter that falls behind: capture drops live audio itself, counted, and media
    time jumps over the gap; never a silent overflow inside a socket queue."""
    cap = microphone_capture(max_ahead_s=1.0)
    run_for = functools.partial(tick_for, cap)

    def segmenter_at(media_ms: int) -> None:
        status = Status(state="ready", stream=cap.stream, media_ms=media_ms,
                        peers={"capture": 1})
        list(cap.handle(wire(status, src="segmenter")))

    try:
        segmenter_at(0)   # it heard our stream start and then took nothing more
        sent = run_for(2.0)
        assert 0.9 <= len(sent) * 0.02 <= 1.3, len(sent)   # max_ahead_s, then dropping
        assert cap.counters["behind_ms"] >= 600 and \
            cap.counters["dropped_ms"] == cap.counters["behind_ms"] + cap.counters["overflow_ms"]
        segmenter_at(int(cap.sent_samples * 1000 / BUS_RATE))   # it caught up
        resumed = run_for(0.5)
        assert len(resumed) >= 15
        gap = resumed[0].media_s - (sent[-1].media_s + 0.02)
        assert abs(gap - cap.counters["behind_ms"] / 1000) < 0.05, gap   # time stays true
    finally:
        cap.close()


def test_a_microphone_that_sends_exact_zeros_is_said_to_hear_nothing(pulse):  # noqa: F811
    """The null sink's monitor with nothing playing sends exact zeros, as a Mac's microphone
    does without the permission (`up` over SSH): capture says so within a few seconds, in
    one line (its health: the heartbeat, `voxweft status`, the captions page), and clears
    it when sound comes (issue 38)."""
    from voxweft.actors import capture as capture_module

    cap = microphone_capture()
    try:
        deadline = time.monotonic() + capture_module.DIGITAL_SILENCE_S + 3
        while time.monotonic() < deadline and not cap.health():
            tick_for(cap, 0.2)
        assert cap.health() == capture_module.DIGITAL_SILENCE
        assert "Privacy & Security > Microphone" in cap.health()
        assert cap.counters["digital_silence"] == 1
        clip = corpus_clips()[0]
        player = subprocess.Popen(["paplay", str(clip)])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and cap.health():
            tick_for(cap, 0.2)
        player.kill()
        assert cap.health() == "", "sound came, and capture still says it hears nothing"
    finally:
        cap.close()


def test_doctor_says_whether_the_devices_can_be_paired_for_echo_cancelling(pulse):  # noqa: F811
    import sounddevice as sd

    from voxweft.actors.devices import echo_pairing
    from voxweft.tools.doctor import echo_check

    ok, line = echo_pairing(sd, DEVICE, DEVICE)
    assert ok and f"input {DEVICE!r} and output {DEVICE!r}" in line, line
    ok, line = echo_pairing(sd, DEVICE, "no such speaker")
    assert not ok and "'no such speaker' not found" in line, line
    live = {"capture": {"source": "microphone", "device": DEVICE},
            "player": {"sink": "device", "device": DEVICE}}
    echo = echo_check(load(None).with_overrides({"actors": live}), "local")
    assert echo["ok"] and echo["line"].startswith("echo: cancel; input"), echo
    gated = echo_check(load(None).with_overrides(
        {"actors": {**live, "segmenter": {"echo_mode": "gate"}}}), "local")
    assert gated == {"ok": True, "line": "echo: gate"}
    to_file = {**live, "player": {"sink": "wav", "path": "o.wav"}}
    assert echo_check(load(None).with_overrides({"actors": to_file}), "local") is None

    class TwoApis:   # a microphone on one host API, a loudspeaker on another: two clocks
        PortAudioError = sd.PortAudioError
        default = type("D", (), {"device": (0, 1)})()

        @staticmethod
        def query_hostapis():
            return [{"name": "ALSA"}, {"name": "JACK Audio Connection Kit"}]

        @staticmethod
        def query_devices(kind=None):
            devices = [{"name": "mic", "max_input_channels": 1, "max_output_channels": 0,
                        "hostapi": 0},
                       {"name": "speaker", "max_input_channels": 0, "max_output_channels": 2,
                        "hostapi": 1}]
            return devices if kind is None else devices[0 if kind == "input" else 1]

    ok, line = echo_pairing(TwoApis, "mic", "speaker")
    assert not ok and "different host APIs" in line and 'echo_mode = "gate"' in line, line


@pytest.mark.parametrize("start_sound", [True, False])
def test_the_start_sound_teaches_capture_the_room_before_anyone_talks(pulse, short_tmp,  # noqa: F811
                                                                       start_sound):
    # Capture cancels (the default where microphone and loudspeaker share a host) and has
    # not heard the loudspeaker: the player plays its sweep once, and capture's canceller
    # converges on it (the null sink's monitor is the microphone: the echo is the sweep).
    # The control: without it nothing plays, and capture has learnt nothing.
    path = local_topology(short_tmp, corpus_clips()[0], short_tmp / "out.wav", {"actors": {
        "capture": {"source": "microphone", "device": DEVICE},
        "player": {"sink": "device", "device": DEVICE, "start_sound": start_sound}}})
    from voxweft.deploy.topology import load as load_topology

    topo = load_topology(path)
    assert topo.echo_handling == "cancel"
    bus = BusClient([topo.pub_connect("capture"), topo.pub_connect("player")])
    procs = [start_actor(path, "player"), start_actor(path, "capture")]
    heard: dict[str, Status] = {}
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            for msg in bus.messages(0.5):
                if isinstance(msg, Status):
                    heard[msg.src] = msg
            echo = heard["capture"].echo if "capture" in heard else {}
            if echo.get("converged") or (not start_sound and "player" in heard and
                                         echo and time.monotonic() > deadline - 32):
                break
    finally:
        bus.close()
        for p in procs:
            p.terminate()
        logs = [p.communicate(timeout=10)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    capture, player = heard["capture"], heard["player"]
    if start_sound:
        assert capture.echo.get("converged") == 1.0, (capture.echo, logs[0][-3000:])
        # within a sweep's second: a half second of it lost 15 dB; the null sink is a direct
        # path, no delay. A second sweep when the first did not teach it (once in a whole
        # .ci/run, after 1 s of it; 3 of 3 alone on the first)
        sweeps = player.counters.get("start_sounds")
        assert sweeps in (1, 2), player.counters
        assert 0 < capture.counters["echo_converged_after_ms"] <= 1000 * sweeps, {
            k: v for k, v in capture.counters.items() if k.startswith("echo")}
        # (CI once: 341.6 ms, converged on one sweep: the stamps, not the room; the logs
        # and the player's counters say more the next time)
        assert abs(capture.echo["delay_ms"]) < 20, (capture.echo, player.counters,
                                                     logs[0][-3000:], logs[1][-2000:])
        assert "the start sound" in logs[0]
    else:
        assert capture.echo == {"converged": 0.0, "removed_db": 0.0, "playing_s": 0.0,
                                "reference": 1.0}, capture.echo
        assert not player.counters.get("start_sounds")
