"""How loud speech is, and speech brought to one level: what ASR hears, whoever speaks.

Whisper's features are the log-mel energies of the audio as it is: the same words 20 dB
quieter are other numbers, and Whisper base hears them differently. On the room bench's
speaker change without a pause (a reader at -38 dBFS after one at -20), Whisper base left
out two of a reader's three sentences in one utterance, and heard all three at -20 dBFS;
the readers the bench compares with ("each reader alone") are at the speaker's level,
-20 dBFS. So asr brings every utterance to one level before the engine hears it
(`level_dbfs`): a quieter person, a speaker stepping back or a microphone set low are heard
as the bench's readers are (docs/room.md has the measurements).

Pure numpy: no model, no sockets.
"""

from __future__ import annotations

import numpy as np

from voxweft.protocol.messages import BUS_RATE

#: At most this much gain (dB): a near-silent utterance (a cough, a click the VAD heard) is
#: not lifted to speech level. Speech at -60 dBFS still reaches -20.
MAX_GAIN_DB = 40.0
#: The loudest sample after the gain: never clipped.
PEAK = 0.99


def active_rms(speech: np.ndarray, frame_s: float = 0.02, range_db: float = 30.0) -> float:
    """The speech's level where it speaks: RMS of the frames within `range_db` of the loudest.

    The pauses inside an utterance do not lower it (plain RMS would call a sentence with
    long pauses quieter than the same sentence said without them). 0 for silence.
    """
    n = int(frame_s * BUS_RATE)
    if not len(speech):
        return 0.0
    frames = speech[:len(speech) // n * n].reshape(-1, n) if len(speech) >= n else \
        speech.reshape(1, -1)
    power = np.mean(np.square(frames, dtype=np.float64), axis=1)
    loud = power >= power.max() * 10 ** (-range_db / 10)
    return float(np.sqrt(power[loud].mean())) if power.max() > 0 else 0.0


def levelled(pcm: np.ndarray, level_dbfs: float) -> np.ndarray:
    """`pcm` (float32, full scale 1.0) with its active level at `level_dbfs`.

    The gain is one number for the whole of `pcm` (the voice's dynamics are kept), at most
    `MAX_GAIN_DB`, and no more than keeps the loudest sample at `PEAK`. `level_dbfs` 0
    returns `pcm` as it is; so does silence, and audio that is not finite (which the edges
    refuse before it gets here).
    """
    if level_dbfs >= 0 or not len(pcm):
        return pcm
    level = active_rms(pcm)
    peak = float(np.max(np.abs(pcm)))
    if not (level > 0 and np.isfinite(level) and np.isfinite(peak)):
        return pcm
    gain = min(10 ** (level_dbfs / 20) / level, 10 ** (MAX_GAIN_DB / 20), PEAK / peak)
    return (pcm * np.float32(gain)).astype(np.float32, copy=False)
