"""ASR engines: speech -> text. The interface, and the guards every Whisper engine shares.

One engine per file beside this one; `actors.engines` registers them by name.
"""

from __future__ import annotations

import abc
import logging
import zlib
from typing import ClassVar

import numpy as np
from pydantic import Field

from voxweft.actors.engines.resources import Resources
from voxweft.actors.settings.base import Settings
from voxweft.protocol.messages import BUS_RATE

log = logging.getLogger("voxweft.asr")   # the ASR engines' logger


class AsrEngine(Resources, abc.ABC):
    """Speech -> text for one process; the model is built once by load()."""

    name: ClassVar[str] = ""
    #: Resident memory once loaded (MB; measured RSS of its actor on Linux, see Resources).
    MEMORY_MB: ClassVar[int] = 600
    #: Words to expect (a glossary's terms), given to the model as the text said before
    #: (Whisper's previous-text prompt); "" = none. Set by the actor after load().
    prompt: str = ""

    @abc.abstractmethod
    def languages(self) -> frozenset[str]:
        """ISO 639-1 codes this engine transcribes."""

    @abc.abstractmethod
    def load(self) -> None:
        """Build the model (heavy work here, never in __init__)."""

    @abc.abstractmethod
    def transcribe(self, pcm: np.ndarray, lang: str, prefix: str = "") -> str:
        """Text of 16 kHz mono float32 speech in language `lang`.

        `prefix`: the words the start of `pcm` is known to say (a piece already committed,
        see `actors.asr`): the model is made to say them first, and only the words after
        them are returned. The words at the join are then neither lost nor said twice.
        """

    def word_times(self, pcm: np.ndarray, lang: str) -> list[tuple[str, float, float]] | None:
        """(word, start s, end s) of each word in `pcm`, for measurements (the bench's lag).

        None (the default): this engine cannot time words. Not on the live path.
        """
        return None

    @classmethod
    def times_words(cls) -> bool:
        """Whether it times words as it goes (`timed`): asr then commits by agreement."""
        return cls.timed is not AsrEngine.timed

    def timed(self, pcm: np.ndarray, lang: str,
              prefix: str = "") -> list[tuple[str, float, float]] | None:
        """(word, start s, end s) of speech that may still be going on, on the live path.

        Cheap enough to run every second on a growing utterance (asr's LocalAgreement
        commits); the words after `prefix` only (as `transcribe`). None (the default): this
        engine cannot, and words wait for a pause.
        """
        return None

    @classmethod
    def process_env(cls) -> dict[str, str]:
        """Environment the actor process must start with (e.g. a preload); {} by default."""
        return {}


class WhisperEngine(AsrEngine):
    """What both Whisper engines do with an utterance first: decode it in a short window.

    Whisper always encodes a 30 s window, most of its cost on a short utterance; the engines
    encode it in `window_s` multiples (their setting) with 1 s of margin instead. A short
    decode that loops or starts over is not trusted: the engine decodes again in the full
    window (counted in `fallbacks`).
    """

    FULL_WINDOW_S: ClassVar[int] = 30   # Whisper's native window
    fallbacks = 0    # short-window decodes redone with the full window

    @abc.abstractmethod
    def _window_text(self, pcm: np.ndarray, lang: str, window_s: int, duration_s: float,
                     prefix: str = "") -> str:
        """Text of `pcm` after `prefix`, decoded in a window of `window_s` seconds (<= 30)."""

    def _window_s(self, duration_s: float) -> int:
        """The shortest multiple of `window_s` that holds the speech and one second more."""
        step = int(self.settings.window_s)
        # One second of margin: the utterance must not touch the window's end.
        return min(self.FULL_WINDOW_S, step * int(np.ceil((duration_s + 1) / step)))

    def _short_window(self, pcm: np.ndarray, lang: str, prefix: str = "") -> str | None:
        """The short window's text (a restart cut), or None: the full window must decode it."""
        duration_s = len(pcm) / BUS_RATE
        window_s = self._window_s(duration_s)
        if window_s < self.FULL_WINDOW_S:
            whole = cut_restart(joined(prefix, self._window_text(pcm, lang, window_s,
                                                                 duration_s, prefix)))
            if not degenerate(whole, duration_s) and not starts_over(whole):
                return after(prefix, whole)
            self.fallbacks += 1
        return None


class NoSpeechRule(Settings):
    """Whisper's own rule against text made up from noise, as settings of a Whisper engine.

    A decode whose no-speech probability is over `no_speech_threshold` and whose mean token
    log-probability is under `logprob_threshold` says nothing (Whisper's and faster-whisper's
    full-window defaults); `no_speech_threshold` = 1 turns it off.
    """

    no_speech_threshold: float = Field(0.6, ge=0.0, le=1.0)
    logprob_threshold: float = Field(-1.0, ge=-20.0, le=0.0)

    def said_nothing(self, no_speech_prob: float, mean_logprob: float) -> bool:
        """The decode is of noise, not speech, by the rule."""
        return (self.no_speech_threshold < 1.0 and no_speech_prob > self.no_speech_threshold
                and mean_logprob < self.logprob_threshold)


def _restarts(text: str) -> tuple[list[str], list[tuple[int, bool]]]:
    """The words of `text`, and where it starts over, with whether it does so to its end.

    Word k (the fourth or later, three or more before the end) starts over when from it the
    text repeats its opening, as far as it goes or the whole opening once; to its end when all
    that follows is the opening again. Words compare without case and punctuation: tiny.en
    looped "then ... Then ... Then in the".
    """
    words = text.split()
    keys = [w.lower().strip(".,;:!?\"'") for w in words]
    n = len(keys)
    return words, [(k, keys[k:] == keys[:n - k]) for k in range(3, n - 2)
                   if keys[k:k + min(k, n - k)] == keys[:min(k, n - k)]]


def cut_restart(text: str) -> str:
    """Whisper in a short window sometimes starts the utterance over ("A B C. A B"): keep one."""
    words, restarts = _restarts(text)
    to_end = [k for k, at_end in restarts if at_end]
    return " ".join(words[:to_end[0]]) if to_end else text


def joined(prefix: str, said: str) -> str:
    """What Whisper said after being made to say `prefix` first, with the prefix."""
    return f"{prefix.strip()} {said}".strip()


def after(prefix: str, whole: str) -> str:
    """The words of `whole` after those of `prefix` (see `joined`)."""
    return " ".join(whole.split()[len(prefix.split()):])


def without_restart(prefix: str, said: str) -> str:
    """`said` (after `prefix`) without a restart of the whole.

    Whisper made to say a prefix first sometimes says it again where the audio ends
    ("operations with ugly ones. Then in the same" after "Then in the same": seen in the
    hostile-peer test).
    """
    return after(prefix, cut_restart(joined(prefix, said)))


def starts_over(text: str) -> bool:
    """Whisper began the utterance again inside its text and may have gone on after it.

    "A B C. A B" (what :func:`cut_restart` cuts) and also "A B C. A B C. D" (seen with a
    quieter talker after the speaker's sentence: "... with ugly ones. Then in the same
    operations with ugly ones. Did you pass?"). Such a decode is not trusted; the engines
    decode the utterance again in Whisper's own 30 s window, which says a real repetition
    ("one two three, one two three four") again.
    """
    return bool(_restarts(text)[1])


def degenerate(text: str, duration_s: float) -> bool:
    """Whisper looping: far more words than anyone says, or highly repetitive text."""
    words = len(text.split())
    if words > 6 * duration_s + 4:
        return True
    data = text.encode()
    return len(data) > 40 and len(data) / len(zlib.compress(data)) > 2.4
