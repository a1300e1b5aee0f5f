"""Real supervisord, real actors, real sockets: up, status, kill -9 each actor, down."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, VOXWEFT, corpus_clips, local_topology, write_session
from voxweft.deploy.events import Board
from voxweft.deploy.supervisor import BusWatcher, Supervisor
from voxweft.deploy.topology import load
from voxweft.protocol.client import BusClient

pytestmark = pytest.mark.timeout(600)


def voxweft(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*VOXWEFT, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture
def running(short_tmp):
    session = short_tmp / "in.wav"
    write_session(session, corpus_clips()[:1])
    topo_path = local_topology(short_tmp, session, short_tmp / "out.wav")
    run_dir = short_tmp / "run"
    sup = Supervisor(run_dir)
    try:   # `down` even when `up` failed halfway
        up = voxweft("up", "--topology", str(topo_path), "--run-dir", str(run_dir))
        assert up.returncode == 0, up.stdout + up.stderr
        assert "supervisorctl -c" in up.stdout
        yield sup, load(topo_path), run_dir, up
    finally:
        pids = [p["pid"] for p in sup.processes().values() if p["pid"]] \
            if sup.running() else []
        voxweft("down", "--run-dir", str(run_dir))
        for pid in pids:
            wait_for(lambda pid=pid: not pid_alive(pid), 10, f"pid {pid} to exit")


def test_up_status_kill_each_actor_down(running):
    sup, topology, run_dir, up = running
    assert "all 6 actors ready" in up.stdout

    status = voxweft("status", "--run-dir", str(run_dir))
    assert status.returncode == 0, status.stderr
    lines = {line.split()[0]: line for line in status.stdout.splitlines()[1:]}
    for actor in topology.actors:
        assert "RUNNING" in lines[actor] and " ready " in lines[actor], status.stdout
    # what the engines cost here, measured at warm-up, and whether that keeps up
    for out in (up.stdout, status.stdout):
        host = topology.actors["asr"].host
        assert f"budget on {host}: continuous speech needs asr " in out, out
        # "... of 2 cores: keeps up", or "... of 2 cores (1.0 busy with other work): ..."
        assert re.search(r" of \d+ cores(: | \([\d.]+ busy with other work\): )", out), out
    if topology.actors["asr"].settings.get("compute_type") == "auto":   # the variant chosen
        assert "faster-whisper int8" in lines["asr"] or "faster-whisper float32" in lines["asr"]

    # plain supervisorctl works as people expect
    ctl = subprocess.run(sup.ctl_command().split() + ["status"], capture_output=True,
                         text=True)
    assert ctl.stdout.count("RUNNING") == 7, ctl.stdout   # six actors and the event listener

    watcher = BusWatcher(topology)
    events = EventsWatcher(topology)
    try:
        # the crash must not happen before the watcher is subscribed (a slow joiner under
        # load heard only "running again")
        wait_for(lambda: events.heard(topology.actors), 30, "the event listener heard")
        for victim in topology.actors:
            before = {n: p["pid"] for n, p in sup.processes().items()}
            os.kill(before[victim], signal.SIGKILL)

            def restarted(victim=victim, old=before[victim]):
                info = sup.processes()[victim]
                return info["statename"] == "RUNNING" and info["pid"] != old

            wait_for(restarted, 60, f"{victim} restarted by supervisord")
            new_pid = sup.processes()[victim]["pid"]

            def ready_again(victim=victim, new_pid=new_pid):
                watcher.poll(0.3)
                st = watcher.latest.get(victim)
                return st is not None and st.pid == new_pid and st.state == "ready"

            wait_for(ready_again, 120, f"{victim} ready on the bus again")
            # supervisord's word on the bus: the crash, then the restart
            said = wait_for(lambda victim=victim: events.said(victim, "RUNNING"), 30,
                            f"{victim} said running again")
            assert f"{victim} on _interpret crashed (killed by a signal); supervisord restarts it" \
                in said, said
            after = {n: p["pid"] for n, p in sup.processes().items()}
            for other, pid in before.items():
                if other != victim:
                    assert after[other] == pid, f"{other} was restarted when {victim} died"
    finally:
        watcher.close()
        events.close()

    old = sup.processes()["mt"]["pid"]
    restart = voxweft("restart", "mt", "--run-dir", str(run_dir))
    assert restart.returncode == 0, restart.stderr
    assert sup.processes()["mt"]["pid"] != old
    wait_for(lambda: sup.processes()["mt"]["statename"] == "RUNNING", 30, "mt running again")
    logs = voxweft("logs", "mt", "--run-dir", str(run_dir))
    assert logs.returncode == 0 and "mt: starting" in logs.stdout and "got SIGTERM" in logs.stdout

    pids = [p["pid"] for p in sup.processes().values()]
    down = voxweft("down", "--run-dir", str(run_dir))
    assert down.returncode == 0, down.stderr
    for pid in pids:
        wait_for(lambda pid=pid: not pid_alive(pid), 10, f"actor pid {pid} gone after down")
    assert not sup.running()


class EventsWatcher:
    """The lines `watch` would print from the event listener, per actor."""

    def __init__(self, topology) -> None:
        self.bus = BusClient([topology.events_connect(h) for h in topology.hosts_in_use()],
                             [b"supervision."])
        self.board = Board()
        self.lines: list[str] = []

    def said(self, actor: str, state: str) -> list[str]:
        """Every line so far, once `actor` has reached `state`; else []."""
        self._read()
        got = self.board.latest.get(actor)
        return self.lines if got and got.state == state else []

    def heard(self, actors) -> bool:
        """Whether the listener's state of every one of `actors` came in: subscribed.

        PUB/SUB drops what is published before a subscription is in place (on a busy
        machine that takes a while); the listener says every state again each second.
        """
        self._read()
        return all(a in self.board.latest for a in actors)

    def _read(self) -> None:
        while (msg := self.bus.recv(0.2)) is not None:
            line = self.board.update(msg)
            if line:
                self.lines.append(line)

    def close(self) -> None:
        self.bus.close()


def up_with_fault(short_tmp, fault: str, timeout_s: int):
    """`voxweft up` of a one-clip file pipeline with VOXWEFT_FAULT set, run to its end."""
    session = short_tmp / "in.wav"
    write_session(session, corpus_clips()[:1])
    topo_path = local_topology(short_tmp, session, short_tmp / "out.wav")
    run_dir = short_tmp / "run"
    up = subprocess.run([*VOXWEFT, "up", "--topology", str(topo_path), "--run-dir",
                         str(run_dir), "--timeout", str(timeout_s)], cwd=ROOT,
                        capture_output=True, text=True, timeout=timeout_s + 80,
                        env={**os.environ, "VOXWEFT_FAULT": fault})
    return up, topo_path, run_dir


def test_up_names_the_actor_that_cannot_start(short_tmp):
    up, _, run_dir = up_with_fault(short_tmp, "fail_load", 60)
    try:
        assert up.returncode != 0
        assert "failed" in up.stderr and "simulated missing model" in up.stderr, up.stderr
        # a permanent failure is not restarted, and status says why in words
        status = voxweft("status", "--run-dir", str(run_dir))
        down = [line for line in status.stdout.splitlines() if "EXITED" in line]
        assert down and all("exit 78: configuration, model or language; not restarted" in line
                            and "simulated missing model" in line for line in down), \
            status.stdout
    finally:
        voxweft("down", "--run-dir", str(run_dir))


def test_transient_load_failure_is_retried_then_restarted(short_tmp):
    """flaky_load:2: two failed loads, retried in the process with backoff, then ready.
    flaky_load:9: every try fails; the actor exits 75 and supervisord starts it again."""
    up, topo_path, run_dir = up_with_fault(short_tmp, "flaky_load:2", 120)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        log = (run_dir / "logs" / "mt.log").read_text()
        assert "load failed (OSError: VOXWEFT_FAULT flaky_load: simulated failure 2); " \
               "retry in 3 s" in log, log
    finally:
        voxweft("down", "--run-dir", str(run_dir))

    env = {**os.environ, "VOXWEFT_FAULT": "flaky_load:9"}
    topology = load(topo_path)
    events = EventsWatcher(topology)
    sup = Supervisor(run_dir)
    try:
        up = subprocess.Popen([*VOXWEFT, "up", "--topology", str(topo_path), "--run-dir",
                               str(run_dir), "--timeout", "60"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        said = "mt on _interpret crashed (exit 75: its model failed to load"
        lines = wait_for(lambda: [x for x in events.said("mt", "STARTING") or [] if said in x],
                         90, "mt exit 75 and a restart")
        assert "transient; failed 4 times" in lines[0], lines
        # mt never becomes ready: `up` would wait out its timeout (60 s); down stops the rest
        up.terminate()
        up.wait(30)
    finally:
        events.close()
        if sup.running():
            voxweft("down", "--run-dir", str(run_dir))


def test_two_hosts_split_pipeline(short_tmp):
    """Two supervisord instances, one per "host" (127.0.0.1 and 127.0.0.2 are both loopback
    on Linux): ASR side and TTS side, as on two Macs. Speech in, Portuguese speech out."""
    import tomllib

    from voxweft.deploy.topology import parse
    from voxweft.protocol.messages import PlaybackEvent, Translation

    session = short_tmp / "in.wav"
    write_session(session, corpus_clips()[3:4])
    raw = tomllib.loads(local_topology(short_tmp, session, short_tmp / "out.wav").read_text())
    raw["hosts"] = {"m2": {"address": "127.0.0.1", "bind": "127.0.0.1"},
                    "ultra": {"address": "127.0.0.2", "bind": "127.0.0.2"}}
    for name in raw["actors"]:
        raw["actors"][name]["host"] = "ultra" if name in ("mt", "tts") else "m2"
    topology = parse(raw, "two.toml")
    path = short_tmp / "two.toml"
    path.write_text(topology.dumps())
    assert topology.pub_connect("tts").startswith("tcp://127.0.0.2:")

    bus = BusClient([topology.pub_connect(a) for a in topology.actors],
                    [b"translation.", b"playback."])
    dirs = {host: short_tmp / f"run-{host}" for host in ("ultra", "m2")}
    try:
        for host, run_dir in dirs.items():
            up = voxweft("up", "--topology", str(path), "--host", host, "--run-dir",
                         str(run_dir))
            assert up.returncode == 0, up.stdout + up.stderr
        assert set(Supervisor(dirs["m2"]).processes()) == {"capture", "segmenter", "asr",
                                                           "player"}
        assert set(Supervisor(dirs["ultra"]).processes()) == {"mt", "tts"}
        seen = {}
        for msg in bus.messages(120):
            if isinstance(msg, Translation) and msg.final:
                seen["translation"] = msg.text
            elif isinstance(msg, PlaybackEvent):
                seen[msg.event] = msg
            if "finished" in seen:
                break
        assert "nunca" in seen.get("translation", "").lower(), seen
        assert seen["finished"].duration_s > 0.5
    finally:
        bus.close()
        for run_dir in dirs.values():
            voxweft("down", "--run-dir", str(run_dir))


def test_up_watch_stops_what_it_started_on_sigterm(short_tmp):
    session = short_tmp / "in.wav"
    write_session(session, corpus_clips()[:1])
    topo_path = local_topology(short_tmp, session, short_tmp / "out.wav")
    run_dir = short_tmp / "run"
    proc = subprocess.Popen([*VOXWEFT, "up", "--watch", "--topology", str(topo_path),
                             "--run-dir", str(run_dir)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sup = Supervisor(run_dir)
    try:
        for line in proc.stdout:   # ready, then watching
            if "actors ready" in line:
                break
        pids = [p["pid"] for p in sup.processes().values()]
        supervisord = int((run_dir / "supervisord.pid").read_text())
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert proc.wait(30) == 128 + signal.SIGTERM
        assert time.monotonic() - t0 < 15
        for pid in [*pids, supervisord]:
            wait_for(lambda pid=pid: not pid_alive(pid), 10, f"pid {pid} gone")
        assert "stopping the pipeline" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        if sup.running():
            voxweft("down", "--run-dir", str(run_dir))


@pytest.mark.slow
def test_interpret_runs_beside_a_live_up(short_tmp):
    """A user's `up` holds the default topology's ports; `interpret` takes free ones, and
    both pipelines do their work, neither disturbing the other (issue 37)."""
    from tests.e2e.whole import played_whole

    talk, clip = short_tmp / "talk.wav", short_tmp / "clip.wav"
    write_session(talk, corpus_clips()[:4])
    write_session(clip, corpus_clips()[4:5])
    default = load(None)
    live = default.with_overrides({"actors": {
        "capture": {"source": "file", "path": str(talk)},
        "player": {"sink": "wav", "path": str(short_tmp / "live.wav")}}})
    assert [live.actors[a].port for a in live.actors] == \
        [default.actors[a].port for a in default.actors]   # the ports a user's `up` holds
    topo_path = short_tmp / "live.toml"
    topo_path.write_text(live.dumps())
    run_dir = short_tmp / "run"
    up = voxweft("up", "--topology", str(topo_path), "--run-dir", str(run_dir))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        out = short_tmp / "out"
        done = voxweft("interpret", "--input", str(clip), "--out", str(out), timeout=400)
        assert done.returncode == 0, done.stdout + done.stderr
        rows = [json.loads(x) for x in (out / "transcript.jsonl").read_text().splitlines()]
        assert rows and all(r["text"] for r in rows)
        played_whole(out, [r["utt"] for r in rows])
        status = voxweft("status", "--run-dir", str(run_dir))   # the live one, unharmed
        lines = status.stdout.splitlines()[1:]
        assert sum(" ready " in line and "RUNNING" in line for line in lines) == 6, \
            status.stdout
        journal = Path(str(short_tmp / "live.wav") + ".journal")
        wait_for(lambda: journal.exists() and '"utt"' in journal.read_text(), 120,
                 "the live pipeline to speak")
    finally:
        voxweft("down", "--run-dir", str(run_dir))
