"""Full duplex: continuous speech, the translation playing into the same room, live.

Several real readers at their own levels talk on without waiting for the translation; it is
played into the PulseAudio null sink the speech goes to, whose monitor is the microphone, so
the microphone hears the loudspeaker over the speaker (double talk) and alone after the
speaker stops. With the default, `echo_mode = "cancel"`, the speaker is heard and the
loudspeaker is never interpreted; `off` is the control, in which the interpreter goes on
interpreting itself after the speaker has stopped.
"""

from __future__ import annotations

import re
import subprocess
import time

import numpy as np
import pytest

from tests.conftest import ROOT, VOXWEFT, local_topology
from tests.pulse import DEVICE, SINK, pulse  # noqa: F401 - the fixture
from voxweft.deploy.topology import load
from voxweft.protocol.client import BusClient
from voxweft.protocol.messages import BUS_RATE, Status, Transcript, VadEvent
from voxweft.tools.bench import DEFAULT_CORPUS, readers, room
from voxweft.tools.bench.run import corpus_items

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: (reader, level in dB against the first): three real voices, soft and loud.
CAST = (("lj", 0.0), ("harvard-woman", -6.0), ("arctic-awb", -10.0))
#: After the speaker stops, the translations still play: this long is watched for echo.
AFTER_S = 25.0


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def continuous_speech(path) -> str:
    """Write ~35 s of the cast reading one after another (0.3 s apart); return the words."""
    voices = readers.voices(corpus_items(DEFAULT_CORPUS, "pt"))
    parts, said = [np.zeros(BUS_RATE // 2, np.float32)], []
    for reader, db in CAST:
        for text, clip in readers._reading(voices[reader], 12.0):
            parts += [readers.at(clip, 0.1, db), np.zeros(int(0.3 * BUS_RATE), np.float32)]
            said.append(text)
    room.write_wav(path, np.concatenate(parts))
    return " ".join(said)


def live_session(short_tmp, echo_mode: str | None) -> dict:
    """Speak continuously into the room; what was transcribed, and when (None: the default)."""
    run = short_tmp / f"run-{echo_mode or 'default'}"
    run.mkdir()
    speech = run / "speech.wav"
    reference = continuous_speech(speech)
    path = local_topology(run, speech, run / "out.wav", {"actors": {
        "capture": {"source": "microphone", "device": DEVICE},
        "player": {"sink": "device", "device": DEVICE},
        **({"segmenter": {"echo_mode": echo_mode}} if echo_mode else {})}})
    topology = load(path)
    assert topology.echo_handling == (echo_mode or "cancel")
    bus = BusClient([topology.pub_connect(a) for a in topology.actors],
                    [b"vad.", b"transcript.", b"status.capture"])
    seen: list = []
    up = subprocess.run([*VOXWEFT, "up", "--topology", str(path), "--run-dir",
                         str(run / "sv")], cwd=ROOT, capture_output=True, text=True, timeout=200)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        seen += bus.messages(1.0)
        player = subprocess.Popen(["paplay", f"--device={SINK}", str(speech)])
        while player.poll() is None:
            seen += bus.messages(0.5)
        speech_end_ns = time.time_ns()
        seen += bus.messages(AFTER_S)
    finally:
        subprocess.run([*VOXWEFT, "down", "--run-dir", str(run / "sv")], cwd=ROOT,
                       capture_output=True, timeout=60)
        bus.close()
    starts = {m.utt: m.sent_ns for m in seen if isinstance(m, VadEvent) and m.event == "start"}
    transcripts = [m for m in seen if isinstance(m, Transcript) and m.final]
    for m in transcripts:   # what happened, for the log of a failed run
        print(f"{(starts.get(m.utt, 0) - speech_end_ns) / 1e9:+.1f} s {m.utt} {m.text!r}")
    heard = words(" ".join(m.text for m in transcripts))
    said = words(reference)
    echo = [m for m in seen if isinstance(m, Status) and m.src == "capture" and m.echo]
    print(f"{echo_mode}: echo state at the end {echo[-1].echo if echo else None}")
    return {
        # each reference word heard (as often as said), against the source's words
        "recall": sum(min(heard.count(w), said.count(w)) for w in set(said)) / len(said),
        # utterances opened once the speaker had stopped: the loudspeaker interpreted
        "after": [m.text for m in transcripts
                  if starts.get(m.utt, 0) > speech_end_ns + 1.0e9],
        "echo": echo[-1].echo if echo else {},
    }


def test_by_default_the_speaker_is_heard_over_the_loudspeaker_and_never_itself(pulse, short_tmp):  # noqa: F811, E501
    # Live, this cast (61 words): 62, 74, 80, 82 % of the words heard in four runs
    # (headphones: 95 %; `off` 44-46 %; the gate, on six other readers: 34 %). What is lost:
    # the microphone is silenced for at most 2 s of the loudspeaker's first playing while the
    # canceller learns (once a session: 8-9 words of these 61), and Whisper's errors under
    # double talk (docs/echo.md).
    result = live_session(short_tmp, None)
    print(result)
    assert result["recall"] >= 0.55, result
    assert result["after"] == [], result
    assert result["echo"].get("playing_s", 0) > 5, result   # the loudspeaker did play over it
    assert result["echo"].get("converged") == 1.0, result


def test_without_cancelling_the_interpreter_interprets_itself(pulse, short_tmp):  # noqa: F811
    # The control: the same room with echo_mode "off" hears its own Portuguese after the
    # speaker stopped, so the test above is not passing by accident.
    result = live_session(short_tmp, "off")
    print(result)
    assert result["after"], result
