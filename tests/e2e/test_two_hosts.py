"""deploy/two-hosts.toml on two real network stacks: a file interpreted across a LAN, CURVE on.

Two Linux network namespaces joined through a switch (tests/netns.py) are the M2 and the
Ultra; each runs its own supervisord (`voxweft up --host NAME`) with the topology of
deploy/two-hosts.toml, only its addresses rewritten and its keys made here. ASR runs on one
host, MT and TTS on the other. A client without keys on the other host hears nothing of the
microphone's audio; the tap with a host's key hears it all.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import tomllib

import pytest
import tomli_w

from protocol import security
from tests import netns
from tests.conftest import ROOT, VOXWEFT, corpus_clips, write_session

#: A client that is not in the topology: prints each message it gets (it should get none).
STRANGER = """
import sys, zmq
from pathlib import Path
from protocol import security, sockets
kind, endpoint, server_key, key_file = sys.argv[1:5]
curve = None
if key_file:
    public, secret = security.load_keys(Path(key_file))
    curve = security.Curve(public=public, secret=secret, clients={},
                           servers={security.endpoint_address(endpoint): server_key.encode()})
ctx = zmq.Context()
s = (sockets.sub(ctx, [endpoint], [b""], curve) if kind == "sub"
     else sockets.pull(ctx, [endpoint], curve))
n = 0
while s.poll(60000):
    s.recv()
    n += 1
    print(n, flush=True)
"""
REASON = netns.available()
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(REASON is not None, reason=REASON or "")]


@pytest.fixture
def lan():
    netns.stale()
    with netns.TwoHosts(("m2", "ultra")) as hosts:
        yield hosts


def _topology(tmp_path, lan, clips: int = 3, pause_s: float = 1.0) -> tuple:
    raw = tomllib.loads((ROOT / "deploy" / "two-hosts.toml").read_text(encoding="utf-8"))
    keys = {"thief": security.create_keys("thief", tmp_path / "other-keys")}
    for host in ("m2", "ultra"):
        keys[host] = security.create_keys(host, tmp_path / "keys")
        address = lan.address(host)
        raw["hosts"][host].update(address=address, bind=address, public_key=keys[host][2])
    session = tmp_path / "session.wav"
    references = write_session(session, (corpus_clips() * 3)[:clips], pause_s)
    raw["pipeline"]["max_lag_s"] = 0          # a file: every utterance is spoken
    raw["actors"]["capture"].update(source="file", path=str(session))
    raw["actors"]["player"].update(sink="wav", path=str(tmp_path / "output.wav"))
    for actor in ("asr", "tts"):
        raw["actors"][actor]["threads"] = 1
    path = tmp_path / "two-hosts.toml"
    path.write_text(tomli_w.dumps(raw), encoding="utf-8")
    return path, references, keys


def _rows(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")]


def _utts(rows: list[dict], kind: str) -> list[str]:
    """Utterances of final `kind` messages in the order first heard (a sender repeats what
    a peer that rejoined may have missed: the tap hears both, a stage keeps one)."""
    seen: dict[str, None] = {}
    for r in rows:
        if r["topic"].startswith(f"{kind}.") and "detail" not in r:
            seen.setdefault(r["utt"])
    return list(seen)


def _wait_done(tmp_path, references, timeout_s: float = 300) -> list[dict]:
    """Wait for the segmenter's end of stream and every utterance played; the journal rows."""
    journal = tmp_path / "output.wav.journal"
    deadline = time.monotonic() + timeout_s
    while True:
        rows = _rows(tmp_path / "tap.jsonl")
        transcripts = _utts(rows, "transcript")
        done = [json.loads(x) for x in journal.read_text().splitlines() if '"utt"' in x] \
            if journal.exists() else []
        ended = any(r["topic"].startswith("eos.segmenter") for r in rows)
        if ended and len(done) >= len(transcripts) >= len(references):
            return done
        assert time.monotonic() < deadline, (len(transcripts), done, ended)
        time.sleep(1)


def _up(lan, host, topology, run_dir, env) -> subprocess.Popen:
    log = open(run_dir.with_suffix(".up.log"), "w")   # noqa: SIM115 - closed by the OS at exit
    return lan.popen(host, [*VOXWEFT, "up", "--topology", str(topology), "--host", host,
                            "--run-dir", str(run_dir), "--timeout", "600"],
                     cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


@contextlib.contextmanager
def _hosts_up(tmp_path, lan, topology, env):
    """The keyed tap on the M2, then `voxweft up` on each host; both stopped at the end.

    Yields {host: (its `up` process, its run dir)}; `up` returns once its actors are ready.
    """
    tap = lan.popen("m2", [*VOXWEFT, "tap", "--topology", str(topology), "--host", "m2",
                           "--json", "--duration", "900"],
                    cwd=ROOT, env=env, stdout=open(tmp_path / "tap.jsonl", "w"),  # noqa: SIM115
                    stderr=subprocess.DEVNULL)
    runs = {h: tmp_path / f"run-{h}" for h in ("ultra", "m2")}
    try:
        yield {h: (_up(lan, h, topology, run, env), run) for h, run in runs.items()}
    finally:
        for host, run in runs.items():
            lan.run(host, [*VOXWEFT, "down", "--run-dir", str(run)], cwd=ROOT, env=env,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        tap.kill()


def _ready(ups) -> None:
    for proc, run in ups.values():
        assert proc.wait(timeout=700) == 0, run.with_suffix(".up.log").read_text()[-3000:]


def test_a_file_interpreted_across_two_hosts_with_curve(tmp_path, lan):
    env = {**os.environ, "VOXWEFT_KEYS": str(tmp_path / "keys")}
    topology, references, keys = _topology(tmp_path, lan)
    with _hosts_up(tmp_path, lan, topology, env) as ups:
        # Strangers on the Ultra's side: audio from capture, utterances from the segmenter.
        m2 = lan.address("m2")
        server = keys["m2"][2]
        strangers = {
            "no CURVE": ("sub", f"tcp://{m2}:47601", "", ""),
            "unlisted key": ("sub", f"tcp://{m2}:47601", server, str(keys["thief"][1])),
            "wrong server key": ("sub", f"tcp://{m2}:47601", keys["ultra"][2],
                                 str(keys["ultra"][1])),
            "unlisted PULL": ("pull", f"tcp://{m2}:47603", server, str(keys["thief"][1])),
        }
        for name, args in strangers.items():
            lan.popen("ultra", [sys.executable, "-c", STRANGER, *args], cwd=ROOT,
                      stdout=open(tmp_path / f"{name}.txt", "w"),  # noqa: SIM115
                      stderr=subprocess.STDOUT)
        _ready(ups)
        done = _wait_done(tmp_path, references)
        time.sleep(2)    # the tap's last messages
        rows = _rows(tmp_path / "tap.jsonl")
        assert _utts(rows, "transcript") == [d["utt"] for d in done]
        assert _utts(rows, "translation") == [d["utt"] for d in done]
        assert any(r["topic"].startswith("audio.capture") for r in rows)   # the tap, keyed
        for name in strangers:   # each heard nothing, and was refused and said so
            assert (tmp_path / f"{name}.txt").read_text() == "", name
        logs = ups["m2"][1] / "logs"
        capture, segmenter = ((logs / f"{a}.log").read_text() for a in ("capture", "segmenter"))
        assert f"refused a peer with an unlisted key {keys['thief'][2]}" in capture
        assert f"refused a peer with an unlisted key {keys['thief'][2]}" in segmenter
        assert "capture: refused a peer on" in capture


@pytest.mark.parametrize("cut_s", [5])
def test_a_cable_pulled_mid_session_loses_and_repeats_nothing(tmp_path, lan, cut_s):
    env = {**os.environ, "VOXWEFT_KEYS": str(tmp_path / "keys")}
    topology, references, _keys = _topology(tmp_path, lan, clips=6, pause_s=3.0)
    with _hosts_up(tmp_path, lan, topology, env) as ups:
        _ready(ups)
        deadline = time.monotonic() + 120
        while not any(r["topic"].startswith("translation.") and "detail" not in r
                      for r in _rows(tmp_path / "tap.jsonl")):
            assert time.monotonic() < deadline, "no translation came back before the cut"
            time.sleep(0.5)
        lan.cut("ultra")        # MT and TTS's host drops off the LAN mid-session
        time.sleep(cut_s)
        lan.restore("ultra")
        done = _wait_done(tmp_path, references, timeout_s=400)
        time.sleep(2)
        rows = _rows(tmp_path / "tap.jsonl")
        played = [d["utt"] for d in done]
        # all, once (one in flight may be played late: the player moves on after 2 s)
        assert sorted(played) == sorted(_utts(rows, "transcript"))
        assert len(set(played)) == len(played)
        # (the tap is an observer: what was published during the cut it does not hear again)
