"""Time-stretch for catching up, for engines with no speaking-rate knob (VoxCPM2).

Rubber Band, through Spotify's pedalboard: the pitch stays, the speech gets shorter. It is
applied to whole clauses: stretched chunk by chunk, each join would get its own transient.
"""

from __future__ import annotations

import numpy as np


def time_stretch(pcm: np.ndarray, sample_rate: int, speed: float) -> np.ndarray:
    """`pcm` (float32 mono) spoken `speed` times as fast, at the same pitch."""
    if speed == 1.0 or len(pcm) == 0:
        return np.asarray(pcm, np.float32)
    if not 0.5 <= speed <= 2.0:
        raise ValueError(f"speed {speed} is outside 0.5-2.0")
    import pedalboard

    out = pedalboard.time_stretch(np.asarray(pcm, np.float32)[None, :], float(sample_rate),
                                  stretch_factor=float(speed), high_quality=True)
    return np.ascontiguousarray(out[0], np.float32)
