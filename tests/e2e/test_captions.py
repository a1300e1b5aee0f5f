"""The captions page in a real browser: headless Chromium (Debian's) over a real pipeline.

`voxweft interpret --captions` interprets a file with the page served beside the actors;
Selenium drives Debian's chromium through Debian's chromedriver (nothing downloads a
browser). The page must show every utterance's source and translation in order, the same
texts as the subtitle files, an actor killed as down and then ready again, and not be blank.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil
import pytest
import soundfile as sf
from PIL import Image

from tests.conftest import ROOT, VOXWEFT, corpus_clips, read_16k
from voxweft.protocol.messages import BUS_RATE
from voxweft.protocol.sockets import free_ports
from voxweft.tools.bench import room

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(not (CHROMIUM and DRIVER),
                                 reason="Debian's chromium and chromium-driver are not "
                                        "installed: run tools/test.sh (it installs them)")]


@pytest.fixture
def browser(monkeypatch):
    monkeypatch.setenv("SE_OFFLINE", "true")   # Selenium Manager must never fetch a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--window-size=1280,860"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(what: str, test, timeout_s: float = 120, proc=None):
    deadline = time.monotonic() + timeout_s
    while True:
        got = test()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"interpret ended (rc {proc.returncode}) while waiting for {what}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def _serving(page: str) -> bool:
    try:
        with urllib.request.urlopen(page, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _rows(driver) -> list[dict]:
    """Each caption row's utterance id and texts, top to bottom, and whether still drafts."""
    return driver.execute_script("""
        return [...document.querySelectorAll('#captions .utt:not(.ignored)')].map(r => ({
          utt: r.dataset.utt,
          src: r.querySelector('.src').textContent,
          tgt: r.querySelector('.tgt').textContent,
          draft: !!r.querySelector('.draft'),
          lat: r.querySelector('.lat').textContent}));""")


def _ignored(driver) -> tuple[list[str], str]:
    """The texts of the rows of speech not interpreted, and the header's count of them."""
    return driver.execute_script("""
        const c = document.querySelector('#stats .ignored');
        return [[...document.querySelectorAll('#captions .utt.ignored .src')]
                  .map(e => e.textContent), c ? c.textContent : ''];""")


def _session_with_a_talker(path: Path, clips: list[Path], pause_s: float = 2.0) -> None:
    """The clips `pause_s` apart, and after the second a short pause where a second talker
    (piper's man, 14 dB under the speaker, as at the next stand) says 1.5 s alone before the
    speaker goes on: a voice under the one that holds the floor."""
    speech = [read_16k(clip) for clip in clips]
    talk, _ = room.talker_speech(2.0)
    level = room.active_rms(np.concatenate(speech))
    talk = (talk / room.active_rms(talk) * level * 10 ** (-14 / 20))[:round(1.5 * BUS_RATE)]
    pause = np.zeros(round(pause_s * BUS_RATE), np.float32)
    short = np.zeros(round(0.4 * BUS_RATE), np.float32)
    parts = [pause]
    for i, clip in enumerate(speech):
        parts += [clip] + ([short, talk.astype(np.float32), short] if i == 1 else [pause])
    sf.write(path, np.concatenate(parts), BUS_RATE, subtype="PCM_16")


def _conn(driver) -> str:
    return driver.execute_script("return document.getElementById('conn').dataset.state")


def _state(driver, actor: str) -> str:
    return driver.execute_script(
        "const a = document.querySelector(`#actors .actor[data-name='${arguments[0]}']`);"
        "return a ? a.dataset.state : '';", actor)


def _pid(program: str, out: Path) -> int | None:
    """The pid of an actor (or "captions") of the pipeline `interpret` started for `out`."""
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cmd = proc.info["cmdline"] or []
        mine = cmd[-1] == program if "--actor" in cmd else program in cmd[:4]
        if mine and "--topology" in cmd and proc.info["cwd"] == str(ROOT):
            topology = Path(cmd[cmd.index("--topology") + 1])
            if topology.exists() and str(out) in topology.read_text():
                return proc.pid
    return None


def _cue_texts(path: Path) -> list[str]:
    """The text of each cue of a WebVTT file, joined per cue."""
    cues = []
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        lines = block.strip().split("\n")
        timing = next((i for i, line in enumerate(lines) if "-->" in line), None)
        if timing is not None:
            cues.append(" ".join(lines[timing + 1:]))
    return cues


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_page_shows_captions_health_and_latency_in_a_browser(tmp_path, browser):
    session = tmp_path / "talk.wav"
    _session_with_a_talker(session, corpus_clips()[:5])
    out = tmp_path / "out"
    port = free_ports(1)[0]
    log = open(tmp_path / "interpret.log", "w")  # noqa: SIM115 - closed by the OS at exit
    proc = subprocess.Popen([*VOXWEFT, "interpret", "--input", str(session), "--out", str(out),
                             "--captions", "--captions-port", str(port)], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT, env=os.environ)
    try:
        page = _wait("the captions URL", lambda: re.search(
            r"captions: (http://\S+)", (tmp_path / "interpret.log").read_text()), proc=proc)[1]
        _wait("the captions server", lambda: _serving(page), 60, proc)
        browser.get(page)
        _wait("the page", lambda: browser.execute_script(
            "return document.body.classList.contains('ready')"), 30, proc)
        # The server restarts (supervisord does it) while the models load, before anything
        # is said (what is said while no server listens, no page can show): the page says
        # so and reconnects by itself.
        psutil.Process(_wait("the captions server", lambda: _pid("captions", out), 10)).kill()
        _wait("the page to notice", lambda: _conn(browser) == "closed", 30, proc)
        _wait("the page to reconnect", lambda: _conn(browser) == "open", 60, proc)
        # Drafts show for a moment (a pause's draft, until the utterance is committed): the
        # page notes every draft text it shows, 50 times a second.
        browser.execute_script(
            "window.drafts = new Set(); setInterval(() => { for (const e of "
            "document.querySelectorAll('#captions .draft')) if (e.textContent.trim()) "
            "window.drafts.add(e.textContent); }, 20);")
        first = _wait("a first translation", lambda: [r for r in _rows(browser)
                                                      if r["tgt"] and not r["draft"]], 300, proc)
        assert first[0]["src"]
        # An actor is killed: the strip says it is down, then ready again after its restart.
        pid = _wait("mt's process", lambda: _pid("mt", out), 30, proc)
        psutil.Process(pid).kill()
        _wait("mt shown down", lambda: _state(browser, "mt") == "down", 30, proc)
        _wait("mt shown ready again", lambda: _state(browser, "mt") == "ready", 180, proc)
        restarts = browser.execute_script(
            "return document.querySelector(\"#actors .actor[data-name='mt'] .restarts\")"
            ".textContent")
        assert restarts == "↻1", restarts   # one restart, on mt's own chip
        # The second talker is not interpreted: the captions say so where they spoke, and why,
        # and the header counts it.
        texts, count = _wait("the talker shown as ignored", lambda: _ignored(browser)[0] and
                             _ignored(browser), 120, proc)
        assert all(re.fullmatch(r"\(\d+\.\d s not interpreted: not the speaker: \d+ dB "
                                r"under their level\)", t) for t in texts), texts
        assert count == f"{len(texts)} ignored", (count, texts)
        assert browser.execute_script(   # nothing is awaited for it: no "…" where MT would be
            "return [...document.querySelectorAll('#captions .utt.ignored .tgt')]"
            ".every(e => !e.classList.contains('draft') && !e.textContent)")
        # Not blank: mid-talk, the screenshot has text and colour on it.
        _wait("three translations", lambda: len([r for r in _rows(browser) if r["lat"]]) >= 3,
              120, proc)
        shot = tmp_path / "captions.png"
        browser.save_screenshot(str(shot))
        pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.float32)
        assert pixels.std() > 20 and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50
        if os.environ.get("VOXWEFT_SCREENSHOT"):   # the README's picture is made here
            shutil.copy(shot, os.environ["VOXWEFT_SCREENSHOT"])
        assert proc.wait(timeout=400) == 0, (tmp_path / "interpret.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)

    # The server is gone with the pipeline: the page says so and keeps what it showed, every
    # utterance, in order, with the final texts the files have.
    _wait("the page to notice the server is gone", lambda: _conn(browser) == "closed", 30)
    rows = [r for r in _rows(browser) if not r["draft"]]
    assert browser.execute_script("return window.drafts.size") > 0, "no draft was ever shown"
    transcripts = [line for line in (out / "transcript.jsonl").read_text().splitlines()]
    # A sentence committed in pieces is one row (it grew): at least one row per clip
    assert len(transcripts) >= len(rows) >= 5
    assert all(r["src"] and r["tgt"] and re.search(r"\d\.\d s", r["lat"]) for r in rows), rows
    assert _words(" ".join(r["src"] for r in rows)) == \
        _words(" ".join(_cue_texts(out / "subtitles.en.vtt")))
    assert _words(" ".join(r["tgt"] for r in rows)) == \
        _words(" ".join(_cue_texts(out / "subtitles.pt.vtt")))
    # On a phone the two languages are stacked, source above translation.
    browser.set_window_size(390, 844)
    src, tgt = browser.execute_script(
        "const r = document.querySelector('#captions .utt');"
        "return [r.querySelector('.src').getBoundingClientRect().bottom,"
        "        r.querySelector('.tgt').getBoundingClientRect().top];")
    assert tgt >= src, (src, tgt)
