"""The speaker's voice, for a TTS that speaks as they do: what tts keeps of the source speech.

The segmenter publishes each committed utterance's speech (protocol Voice); tts keeps the
voiced part of the last few, within a bound, and hands its engine a reference for each
translation: the speech that produced it and what came just before, 3 to 10 s of it. Frames
that are silent (pauses, or zeros where the echo gate took the microphone away while the
loudspeaker played) are never part of a reference.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from voxweft.actors.engines.tts import Reference
from voxweft.protocol.messages import BUS_RATE

FRAME = BUS_RATE // 50          # 20 ms
#: A frame is voiced when its RMS is within this of the loudest frames' level (dB).
VOICED_DB = 30.0
#: Below this RMS a frame is never voiced (digital silence, the echo gate's zeros).
FLOOR_RMS = 1e-4
#: A quiet stretch inside speech shorter than this (frames) is kept: a pause is not.
MAX_DIP_FRAMES = 10


def voiced(pcm: np.ndarray) -> np.ndarray:
    """The speech in `pcm`, joined: pauses and the echo gate's zeros removed.

    Quiet frames between syllables stay (a dip shorter than `MAX_DIP_FRAMES` inside speech),
    so the speech keeps its rhythm; a frame at digital silence never stays.
    """
    n = len(pcm) // FRAME
    if n == 0:
        return np.zeros(0, np.float32)
    frames = np.asarray(pcm[: n * FRAME], np.float32).reshape(n, FRAME)
    rms = np.sqrt(np.mean(frames * frames, axis=1))
    keep = (rms > FLOOR_RMS) & (rms >= np.percentile(rms, 90) * 10 ** (-VOICED_DB / 20))
    i = 0
    while i < n:
        if keep[i]:
            i += 1
            continue
        j = i
        while j < n and not keep[j]:
            j += 1
        if 0 < i and j < n and j - i < MAX_DIP_FRAMES and (rms[i:j] > FLOOR_RMS).all():
            keep[i:j] = True
        i = j
    return frames[keep].reshape(-1)


@dataclasses.dataclass
class _Utterance:
    utt: str
    speech: np.ndarray        # voiced frames only
    pcm: np.ndarray           # as received (for a prompt that needs the exact words)
    text: str = ""


class VoiceMemory:
    """The last utterances' speech, bounded in count and in seconds; references from it."""

    def __init__(self, min_s: float = 3.0, max_s: float = 10.0, keep: int = 16,
                 keep_s: float = 60.0) -> None:
        if not 0 < min_s <= max_s:
            raise ValueError(f"need 0 < min_s <= max_s, got {min_s} and {max_s}")
        self.min_s, self.max_s = min_s, max_s
        self.keep, self.keep_samples = keep, int(keep_s * BUS_RATE)
        self.utterances: collections.OrderedDict[str, _Utterance] = collections.OrderedDict()

    @property
    def held_s(self) -> float:
        """Seconds of audio held (as received), which the bounds keep small."""
        return sum(len(u.pcm) for u in self.utterances.values()) / BUS_RATE

    def add(self, utt: str, pcm: np.ndarray, sample_rate: int) -> None:
        """Keep `utt`'s speech (16 kHz mono); forget the oldest beyond the bounds.

        An utterance heard again (its draft first, then the whole of it) keeps the newest.
        """
        if sample_rate != BUS_RATE or pcm.ndim != 1:
            raise ValueError(f"a voice must be {BUS_RATE} Hz mono, got {sample_rate} Hz "
                             f"with shape {pcm.shape}")
        pcm = np.asarray(pcm, np.float32)
        text = self.utterances[utt].text if utt in self.utterances else ""
        self.utterances[utt] = _Utterance(utt, voiced(pcm), pcm, text)
        while len(self.utterances) > self.keep or (
                len(self.utterances) > 1
                and sum(len(u.pcm) for u in self.utterances.values()) > self.keep_samples):
            self.utterances.popitem(last=False)

    def words(self, utt: str, text: str) -> None:
        """What was said in `utt` (its transcript), for a prompt that needs the words."""
        if utt in self.utterances:
            self.utterances[utt].text = text

    def reference(self, utt: str = "") -> Reference | None:
        """The voice for `utt`'s translation: the voiced speech up to and including it.

        At most `max_s`, newest first; None while less than `min_s` has been heard. An
        utterance not (yet) heard, e.g. a draft's, takes the latest speech.
        """
        items = list(self.utterances.values())
        end = next((i for i, u in enumerate(items) if u.utt == utt), len(items) - 1)
        parts, total, keys = [], 0, []
        limit = int(self.max_s * BUS_RATE)
        for u in reversed(items[: end + 1]):
            if total >= limit:
                break
            take = u.speech[-(limit - total):]
            if len(take):
                parts.append(take)
                keys.append(u.utt)
                total += len(take)
        if total < self.min_s * BUS_RATE:
            return None
        return Reference(key="+".join(reversed(keys)), pcm=np.concatenate(parts[::-1]),
                         sample_rate=BUS_RATE)

    def prompt(self, utt: str) -> Reference | None:
        """`utt`'s own speech with its words (for a prompt), if both are known and long enough."""
        u = self.utterances.get(utt)
        if u is None or not u.text or len(u.pcm) < self.min_s * BUS_RATE:
            return None
        return Reference(key=f"{utt}:prompt", pcm=u.pcm, sample_rate=BUS_RATE, text=u.text)
