"""Shared fixtures: the LJ Speech corpus, free-port topologies, short run directories."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from voxweft.tools.bench import DEFAULT_CORPUS

ROOT = Path(__file__).resolve().parents[1]
# The checks the end-to-end tests share say what they compared when they fail.
pytest.register_assert_rewrite("tests.e2e.whole")


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def pytest_configure(config) -> None:
    """Whatever started the suite, the processes the tests start get a terminal's signals.

    A signal mask and an ignored SIGINT pass to every child: a script's background job
    ignores SIGINT, and the tests send it as Ctrl-C in a terminal would.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # The suite stopped by SIGTERM (`timeout`, a CI runner) or SIGHUP stops as Ctrl-C does:
    # the running test's fixtures are torn down. Killed outright instead, a test's `up` was
    # left running and held the default ports, and the next run's `up` failed on them.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupted)


def _interrupted(signum, _frame) -> None:
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A proof marked `proof` that was skipped fails as root (CI is root).

    A LAN or network-namespace proof is skipped where this machine cannot make what it needs;
    root can always make it, so there a skip means the proof was never run, and says so.
    """
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("proof") and os.geteuid() == 0:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"a proof was skipped as root, where it must run: {reason}"


@pytest.fixture(autouse=True)
def _stop_signals_unblocked():
    """Each test starts with SIGINT, SIGTERM and SIGHUP unblocked in this process.

    `voxweft.actors.__main__` blocks SIGTERM and SIGINT when imported (an actor's signal
    thread takes them); a test module that imported it at collection blocked them for the
    rest of the run, and every process a test started inherited the mask: parec ignored its
    terminate, and `interpret`, `bench` and `up --watch` their stop (CI, twice).
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    yield


def _tests_supervisords(roots: list[str]) -> dict[int, str]:
    """pid -> config of each supervisord whose config lies under one of `roots` (the run
    directories tests make: pytest's tmp_path, short_tmp's vwt-*), not a user's own run."""
    import psutil

    found = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "supervisor.supervisord" in cmd and "-c" in cmd[:-1]:
            config = os.path.realpath(cmd[cmd.index("-c") + 1])
            if any(config.startswith(root) for root in roots):
                found[proc.info["pid"]] = config
    return found


def stop_supervisords(pids) -> None:
    """Stop these supervisords and what they run: TERM (supervisord stops its programs),
    then KILL whatever is left after 20 s."""
    import psutil

    procs = []
    for pid in pids:
        try:
            sup = psutil.Process(pid)
            procs += [sup, *sup.children(recursive=True)]
            sup.terminate()
        except psutil.Error:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=20)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass


def run_roots(tmp_path_factory) -> list[str]:
    """Where the tests' run directories are: pytest's tmp_path and short_tmp's vwt-*."""
    return [os.path.realpath(str(tmp_path_factory.getbasetemp())),
            os.path.join(os.path.realpath(tempfile.gettempdir()), "vwt-")]


@pytest.fixture(autouse=True)
def _no_supervisord_left(request, tmp_path_factory):
    """A test whose `up` outlived it (its `down` never ran: an assert before the try, the
    suite stopped during `up`) leaves no supervisord behind: stopped after the test (its
    actors with it), with a warning naming it. The suite, stopped while a test's `up` ran,
    once left that run going (its run directory already deleted)."""
    import warnings

    roots = run_roots(tmp_path_factory)
    before = set(_tests_supervisords(roots))
    yield
    left = {pid: cfg for pid, cfg in _tests_supervisords(roots).items() if pid not in before}
    if left:
        stop_supervisords(left)
        warnings.warn(f"{request.node.nodeid} left supervisord running "
                      f"({sorted(left.values())}); stopped it", stacklevel=1)


CORPUS = DEFAULT_CORPUS   # the five LJ Speech clips the repository carries
VOXWEFT = [sys.executable, "-m", "voxweft.tools.cli"]
#: Sentences with three of the bench glossary's names (tools/bench/terms), read by piper in
#: the tests that check a Whisper engine told the glossary hears them.
GLOSSARY_LINES = ("Siobhan Nakamura presented the new speech synthesis results this morning.",
                  "Voxweft runs the whole interpreter on a laptop without the cloud.",
                  "The CTranslate2 library makes the translation model twice as fast.")
GLOSSARY_NAMES = ("Siobhan Nakamura", "Voxweft", "CTranslate2")


def corpus_clips() -> list[Path]:
    """The LJ Speech WAV files (each with a .txt reference)."""
    clips = sorted(CORPUS.glob("*.wav"))
    if not clips:   # a missing corpus must fail loudly, not skip the tests that need it
        pytest.fail(f"LJ Speech corpus not found at {CORPUS}: it is part of the repository "
                    "(tools/bench/corpus/ljspeech); restore it with git")
    return clips


def read_16k(path: Path) -> np.ndarray:
    """A clip as 16 kHz mono float32."""
    audio, rate = sf.read(path, dtype="float32", always_2d=True)
    return soxr.resample(audio.mean(axis=1), rate, 16000).astype(np.float32)


def write_session(path: Path, clips: list[Path], pause_s: float = 1.0) -> list[str]:
    """Write clips separated by silence as one 16 kHz WAV; return their reference texts."""
    silence = np.zeros(int(16000 * pause_s), np.float32)
    parts = [silence]
    for clip in clips:
        parts += [read_16k(clip), silence]
    sf.write(path, np.concatenate(parts), 16000, subtype="PCM_16")
    return [clip.with_suffix(".txt").read_text().strip() for clip in clips]


@pytest.fixture
def short_tmp():
    """A temporary directory with a short path (unix socket paths are <= 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="vwt-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def local_topology(directory: Path, input_wav: Path, output_wav: Path,
                   overrides: dict | None = None) -> Path:
    """A topology file on free loopback ports: file capture, WAV player.

    (A session of `interpret` binds none: its sockets are ipc:// in its run directory. The
    tests that start actors or supervisord themselves use TCP, as `up` does.)
    """
    from voxweft.deploy.session import HOST
    from voxweft.deploy.topology import load
    from voxweft.protocol.sockets import free_ports
    from voxweft.tools.interpret import file_topology

    topology = file_topology(load(None), input_wav, output_wav.parent, "en", "pt", fast=False)
    ports = free_ports(8)
    actors = {name: {"port": port} for name, port in zip(topology.actors, ports, strict=False)}
    actors["segmenter"]["push_port"] = ports[6]
    topology = topology.with_overrides({"actors": actors,
                                        "hosts": {HOST: {"events_port": ports[7]}}})
    if overrides:
        topology = topology.with_overrides(overrides)
    path = directory / "topology.toml"
    path.write_text(topology.dumps())
    return path
