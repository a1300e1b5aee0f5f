"""One real actor process on real sockets: heartbeats, bad input, language refusal, SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import msgpack
import pytest

from tests.conftest import ROOT, corpus_clips
from tests.integration.conftest import FakeUpstream, start_actor
from voxweft.deploy.supervisor import STOP_WAIT_SECS
from voxweft.deploy.topology import load
from voxweft.protocol.codec import MAX_PAYLOAD_BYTES
from voxweft.protocol.messages import Status, Transcript, Translation

pytestmark = pytest.mark.timeout(300)


def stop_in_time(proc: subprocess.Popen) -> float:
    """SIGTERM: the actor exits cleanly before supervisord would kill it (STOP_WAIT_SECS).

    Its aim is 2 s (docs/guarantees.md); the deadline that matters,
    on any machine, is supervisord's: past it the actor is killed and its goodbye lost.
    """
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=STOP_WAIT_SECS + 10)
    elapsed = time.monotonic() - t0
    print(f"exited {elapsed:.2f} s after SIGTERM")
    assert code == 0, proc.stderr.read()
    assert elapsed < STOP_WAIT_SECS, f"took {elapsed:.2f} s to exit after SIGTERM"
    return elapsed


def test_mt_survives_garbage_refuses_wrong_language_and_stops_cleanly(topology_path):
    topology = load(topology_path)
    proc = start_actor(topology_path, "mt")
    bus = FakeUpstream(topology, "asr", "mt")
    try:
        assert bus.receive(Status, 60, lambda s: s.state == "ready"), "mt never ready"
        hello = Transcript(utt="u1", src_lang="en", text="The cat is in the garden.")
        reply = None
        for _ in range(20):   # the first sends may meet ZeroMQ's slow-joiner window
            bus.send(hello)
            reply = bus.receive(Translation, 1.0)
            if reply:
                break
        assert reply is not None and reply.utt == "u1"
        assert reply.tgt_lang == "pt" and "gato" in reply.text.lower(), reply

        garbage = [
            [b"transcript.asr", b"\xc1"],                                  # invalid msgpack
            [b"transcript.asr", msgpack.packb({"v": 99, "type": "transcript"})],
            [b"transcript.asr", msgpack.packb({"v": 1, "type": "nonsense"})],
            [b"transcript.asr", msgpack.packb({"v": 1, "type": "transcript", "text": 5})],
            [b"transcript.asr", b"\x91" * 5000 + b"\xc0"],                 # deep nesting
            [b"transcript.asr"],
        ]
        for frames in garbage:
            bus.pub.send_multipart(frames)
        bus.send(Transcript(utt="u2", src_lang="de", text="Die Katze ist im Garten."))
        refused = bus.receive(Translation, 5, lambda m: m.utt == "u2")
        assert refused is not None and refused.text == "", "wrong-language text was translated"
        bus.send(Transcript(utt="u3", src_lang="en", text="Good morning."))
        assert bus.receive(Translation, 5, lambda m: m.utt == "u3").text

        # A frame over MAXMSGSIZE makes libzmq drop the connection; the runtime reconnects.
        bus.pub.send_multipart([b"transcript.asr", b"\0" * (MAX_PAYLOAD_BYTES + 2**20)])
        back = None
        for i in range(30):
            bus.send(Transcript(utt=f"after{i}", src_lang="en", text="Thank you."))
            back = bus.receive(Translation, 0.5)
            if back:
                break
        assert back is not None, "mt never heard its upstream again after an oversized frame"

        status = bus.receive(Status, 3, lambda s: s.src == "mt"
                             and s.counters.get("refused_lang") == 1)
        assert status is not None
        bad = sum(v for k, v in status.counters.items() if k.startswith("bad_"))
        assert bad == len(garbage), status.counters
        assert status.counters.get("disconnects", 0) >= 1
        assert proc.poll() is None, "mt died on bad input"
        stop_in_time(proc)
    finally:
        bus.close()
        if proc.poll() is None:
            proc.kill()


def test_heartbeat_continues_during_long_model_call_and_sigterm_interrupts(topology_path):
    topology = load(topology_path)
    proc = start_actor(topology_path, "tts")
    bus = FakeUpstream(topology, "mt", "tts")
    try:
        assert bus.receive(Status, 120, lambda s: s.state == "ready"), "tts never ready"
        text = " ".join(["O gato está no jardim e o cachorro dorme perto da porta."] * 40)
        long = Translation(utt="long", src_lang="en", tgt_lang="pt", text=text)
        busy = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(busy) < 3:
            bus.send(long)
            st = bus.receive(Status, 1.5, lambda s: s.busy_s > 0.5)
            if st:
                busy.append(st)
        assert len(busy) >= 3, "no heartbeat while the model was busy"
        beats = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3:
            st = bus.receive(Status, 1.0)
            if st:
                beats.append(time.monotonic())
        assert len(beats) >= 3, f"only {len(beats)} heartbeats in 3 s during a model call"
        stop_in_time(proc)   # the model call interrupted: the long text takes minutes
    finally:
        bus.close()
        if proc.poll() is None:
            proc.kill()


def test_bad_config_exits_with_one_clear_line(short_tmp):
    bad = short_tmp / "bad.toml"
    bad.write_text((ROOT / "deploy" / "default.toml").read_text().replace(
        'engine = "faster-whisper"', 'engine = "faster-wisper"'))
    proc = subprocess.run([sys.executable, "-m", "voxweft.actors", "--topology", str(bad),
                           "--actor", "asr"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 78
    lines = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(lines) == 1 and "faster-wisper" in lines[0] and "faster-whisper" in lines[0]


def test_missing_microphone_exits_with_one_clear_line(short_tmp):
    from tests.conftest import local_topology, write_session

    session = short_tmp / "in.wav"
    write_session(session, corpus_clips()[:1])
    path = local_topology(short_tmp, session, short_tmp / "out.wav",
                          {"actors": {"capture": {"source": "microphone", "device": "USB Mic"}}})
    proc = subprocess.run([sys.executable, "-m", "voxweft.actors", "--topology", str(path),
                           "--actor", "capture"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 78
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "'USB Mic' not found" in errors[0], proc.stderr
    assert "voxweft devices" in errors[0]
