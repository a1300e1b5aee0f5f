"""apertium: rule-based translation by the apertium programs (Debian packages)."""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from voxweft.actors.engines.mt import MtEngine
from voxweft.actors.settings.base import Settings, StartupError
from voxweft.actors.settings.manifest import INSTALL

_APERTIUM_MISSING = ("the apertium program is not installed; install it: "
                     f"{INSTALL[('mt', 'apertium')][0]}")


def apertium_modes_dir() -> Path | None:
    """Folder holding apertium's installed `<pair>.mode` files, or None without apertium.

    The data sits beside the program: /usr/bin/apertium -> /usr/share/apertium/modes
    (Debian), /opt/homebrew/bin/apertium -> /opt/homebrew/share/apertium/modes.
    """
    exe = shutil.which("apertium")
    if exe is None:
        return None
    return Path(os.path.realpath(exe)).parent.parent / "share" / "apertium" / "modes"


class ApertiumEngine(MtEngine):
    """Rule-based apertium (Debian `apertium` + language packages), one live pipeline per pair.

    `apertium` started once per sentence costs ~150-300 ms just to start its dozen programs
    and load their transducers; here each direction's pipeline is started once, in null-flush
    mode (every program given -z), and a sentence is written followed by a NUL byte, which
    makes every stage flush its output, ended by a NUL, without exiting. A sentence then
    costs a few milliseconds.

    The `apertium` shell wrapper cannot be used for this: its text deformatter
    (apertium-destxt) buffers stdin until EOF even with -z, so the pipeline is built from
    the pair's `.mode` file (as `apertium-wblank-mode -z` prints it), and the text is escaped
    for apertium's stream format here instead.
    """

    name = "apertium"
    MEMORY_MB = 150   # the actor and one apertium pipeline per direction
    # (source, target) -> mode names, newest naming first (Debian 12 ships eng-spa, fr-es).
    MODES: ClassVar[dict[tuple[str, str], tuple[str, ...]]] = {
        ("en", "es"): ("eng-spa", "en-es"), ("es", "en"): ("spa-eng", "es-en"),
        ("en", "ca"): ("eng-cat", "en-ca"), ("ca", "en"): ("cat-eng", "ca-en"),
        ("fr", "es"): ("fra-spa", "fr-es"), ("es", "fr"): ("spa-fra", "es-fr"),
    }
    # The Debian package that ships each pair's data (Homebrew has no per-pair formulae).
    PACKAGES: ClassVar[dict[tuple[str, str], str]] = {
        ("en", "es"): "apertium-eng-spa", ("es", "en"): "apertium-eng-spa",
        ("en", "ca"): "apertium-eng-cat", ("ca", "en"): "apertium-eng-cat",
        ("fr", "es"): "apertium-fr-es", ("es", "fr"): "apertium-fr-es",
    }

    class Settings(Settings):
        """How long one translation may take before the pipeline is restarted."""

        threads: int = Field(1, ge=1, le=64)
        timeout_s: float = Field(10.0, ge=0.5, le=120.0)

    # Characters with a meaning in apertium's stream format; a backslash makes them literal.
    _RESERVED = re.compile(r"([\\^$@/<>\[\]{}])")
    _UNESCAPE = re.compile(r"\\(.)")

    def __init__(self, **settings) -> None:
        self.settings = self.Settings.check(settings)
        self.procs: dict[tuple[str, str], subprocess.Popen] = {}
        self.restarts = 0    # pipelines started again after one died

    def pairs(self) -> frozenset[tuple[str, str]]:
        """Pairs whose data is installed; every pair apertium has here when it is missing.

        Without the program the topology still loads (the mt actor may run on another host)
        and load() says what to install.
        """
        installed = self.installed_pairs()
        return installed if apertium_modes_dir() is not None else frozenset(self.MODES)

    @classmethod
    def installed_pairs(cls) -> frozenset[tuple[str, str]]:
        """Pairs whose mode file is installed (cheap: looks at files, starts nothing)."""
        return frozenset(pair for pair in cls.MODES if cls._mode_file(pair) is not None)

    @classmethod
    def _mode_file(cls, pair: tuple[str, str]) -> Path | None:
        modes = apertium_modes_dir()
        for mode in cls.MODES.get(pair, ()):
            if modes is not None and (modes / f"{mode}.mode").is_file():
                return modes / f"{mode}.mode"
        return None

    def load(self) -> None:
        """Check the program; pipelines start on first use of their direction (warmup)."""
        if apertium_modes_dir() is None or shutil.which("apertium-wblank-mode") is None:
            raise StartupError(_APERTIUM_MISSING)
        if not self.installed_pairs():
            raise StartupError(f"apertium has no language data installed; {_APERTIUM_MISSING}")

    def translate(self, text: str, src: str, tgt: str) -> str:
        """Translate one utterance through the live pipeline of `src`->`tgt`."""
        # Newlines and NULs mean nothing in speech, and NUL is the pipeline's flush mark.
        text = " ".join(text.replace("\0", " ").split())
        if not text:
            return ""
        try:
            return self._run((src, tgt), text)
        except (BrokenPipeError, EOFError):
            # The pipeline died (killed, crashed on odd input): start it again once.
            self.restarts += 1
            self._stop((src, tgt))
            return self._run((src, tgt), text)

    def _run(self, pair: tuple[str, str], text: str) -> str:
        proc = self.procs.get(pair) or self._start(pair)
        # Trailing newline: the analyser holds the last token until it sees a blank after it.
        proc.stdin.write(self._RESERVED.sub(r"\\\1", text).encode("utf-8") + b"\n\0")
        proc.stdin.flush()
        out = bytearray()
        deadline = time.monotonic() + float(self.settings.timeout_s)
        fd = proc.stdout.fileno()
        while not out.endswith(b"\0"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._stop(pair)
                raise RuntimeError(f"apertium {pair[0]}->{pair[1]} gave no answer within "
                                   f"{self.settings.timeout_s} s for {text[:60]!r}")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError
            out += chunk
        text = self._UNESCAPE.sub(r"\1", out[:-1].decode("utf-8", "replace"))
        return " ".join(text.split())   # sentence breaks come back as runs of blanks

    def _start(self, pair: tuple[str, str]) -> subprocess.Popen:
        mode = self._mode_file(pair)
        if mode is None:
            if apertium_modes_dir() is None:
                raise StartupError(_APERTIUM_MISSING)
            raise StartupError(f"apertium {pair[0]}->{pair[1]} is not installed: install "
                               f"the package {self.PACKAGES.get(pair, 'for this pair')} "
                               f"(apt-get install {self.PACKAGES.get(pair, '')})")
        script = subprocess.run(["apertium-wblank-mode", "-z", str(mode)], capture_output=True,
                                text=True, check=True).stdout.strip()
        # $1: generator option (-n: no unknown-word marks, they would be read aloud);
        # $2: tagger option (none). A new session so close() can end the whole pipeline.
        proc = subprocess.Popen(["bash", "-c", script, "apertium", "-n", ""],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs[pair] = proc
        return proc

    def _stop(self, pair: tuple[str, str]) -> None:
        proc = self.procs.pop(pair, None)
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        proc.wait(timeout=5)
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def pids(self) -> dict[tuple[str, str], int]:
        """The pipeline process of each started direction (one per direction, long-lived)."""
        return {pair: proc.pid for pair, proc in self.procs.items()}

    def close(self) -> None:
        """End every pipeline (closing stdin alone would also end them, at EOF)."""
        for pair in list(self.procs):
            self._stop(pair)
