"""The system must not interpret itself: live pipeline, microphone hearing the loudspeaker.

Real speech is played into a PulseAudio null sink; capture records the sink's monitor (the
"microphone"); the player plays the translation into the same sink, so the microphone hears
it too, as in a room with a loudspeaker.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import ROOT, VOXWEFT, corpus_clips, local_topology
from tests.pulse import DEVICE, SINK, pulse  # noqa: F401 - the fixture
from voxweft.deploy.topology import load
from voxweft.protocol.client import BusClient
from voxweft.protocol.messages import PlaybackEvent, Transcript, VadEvent
from voxweft.tools.latency import utterance_latency

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def live_session(short_tmp, echo_mode: str) -> list[Transcript]:
    """Say A, wait for its translation to be spoken, say B; return every transcript."""
    clip_a, clip_b = corpus_clips()[3], corpus_clips()[0]
    run = short_tmp / f"run-{echo_mode}"
    run.mkdir()
    path = local_topology(run, clip_a, run / "out.wav", {"actors": {
        "capture": {"source": "microphone", "device": DEVICE},
        "player": {"sink": "device", "device": DEVICE},
        "segmenter": {"echo_mode": echo_mode}}})
    topology = load(path)
    bus = BusClient([topology.pub_connect(a) for a in topology.actors],
                    [b"vad.", b"transcript.", b"playback."])
    seen: list = []

    def collect(seconds: float, until=None):
        for msg in bus.messages(seconds):
            seen.append(msg)
            if until and until(msg):
                return msg
        return None

    def finished(msg) -> bool:
        return isinstance(msg, PlaybackEvent) and msg.event == "finished"

    try:   # `down` whatever stops `up` (the suite stopped during it left its run going)
        up = subprocess.run([*VOXWEFT, "up", "--topology", str(path), "--run-dir",
                             str(run / "sv")], cwd=ROOT, capture_output=True, text=True,
                            timeout=200)
        assert up.returncode == 0, up.stdout + up.stderr
        collect(1.0)
        for clip in (clip_a, clip_b):
            subprocess.run(["paplay", f"--device={SINK}", str(clip)], check=True, timeout=30)
            assert collect(30, finished), f"no translation of {clip.name} was played"
            collect(2.5)   # the echo, if heard, has time to become an utterance
    finally:
        subprocess.run([*VOXWEFT, "down", "--run-dir", str(run / "sv")], cwd=ROOT,
                       capture_output=True, timeout=60)
        bus.close()
    committed = [m.utt for m in seen if isinstance(m, VadEvent) and m.event == "end"]
    transcripts = [m for m in seen if isinstance(m, Transcript) and m.final]
    for m in seen:   # what happened, for the log of a failed run
        if isinstance(m, VadEvent | PlaybackEvent):
            print(f"{m.sent_ns / 1e9:.3f} {m.TYPE} {m.utt} {m.event}")
        elif isinstance(m, Transcript):
            print(f"{m.sent_ns / 1e9:.3f} transcript {m.utt} {m.media_start_s:.2f}-"
                  f"{m.media_end_s:.2f} {m.text!r}")
    # Nothing committed goes untranscribed; without the gate the loop of echoes may leave the
    # last one in flight when the session stops.
    assert len(committed) - len(transcripts) <= (0 if echo_mode == "gate" else 1)
    for started in (m for m in seen if isinstance(m, PlaybackEvent) and m.event == "started"):
        figures = utterance_latency(started.trace)   # the live figure, device to device
        print(f"live {echo_mode} {started.utt}: end of speech -> first audio "
              f"{figures['speech_end_to_first_audio_s']} s {figures['stages_s']}")
    return transcripts


def test_gate_interprets_the_speaker_but_never_its_own_voice(pulse, short_tmp):  # noqa: F811
    transcripts = live_session(short_tmp, "gate")
    texts = [t.text.lower() for t in transcripts]
    assert len(texts) == 2, texts
    # The two utterances are A and B (Whisper may miss a word of B as heard through the sink).
    assert "surpassed" in texts[0]
    assert len({"being", "comparatively", "modern"} & set(re.findall(r"\w+", texts[1]))) >= 2, texts


def test_without_the_gate_the_system_hears_itself(pulse, short_tmp):  # noqa: F811
    # The control: the same session with echo_mode "off" turns the loudspeaker's
    # Portuguese into extra utterances, so the gate test above is not passing by accident.
    transcripts = live_session(short_tmp, "off")
    assert len(transcripts) > 2, [t.text for t in transcripts]
