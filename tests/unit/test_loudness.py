"""Speech brought to one level before ASR (actors.loudness)."""

from __future__ import annotations

import numpy as np
import pytest

from voxweft.actors.loudness import MAX_GAIN_DB, PEAK, active_rms, levelled


def db(x: np.ndarray) -> float:
    return 20 * np.log10(active_rms(x))


def speech_like(level_db: float, pause_s: float = 1.0) -> np.ndarray:
    """Two bursts of a 200 Hz tone at `level_db` (active), a silent pause between them."""
    t = np.arange(16000) / 16000
    burst = np.sin(2 * np.pi * 200 * t) * np.sqrt(2) * 10 ** (level_db / 20)
    return np.concatenate([burst, np.zeros(int(pause_s * 16000)), burst]).astype(np.float32)


@pytest.mark.parametrize("level", [-55.0, -38.0, -20.0, -8.0])
def test_speech_comes_out_at_the_level_asked_whatever_its_own(level):
    out = levelled(speech_like(level), -20.0)
    assert out.dtype == np.float32
    assert db(out) == pytest.approx(-20.0, abs=0.1)


def test_pauses_do_not_count_as_quiet():
    assert db(speech_like(-30.0, pause_s=0.1)) == pytest.approx(db(speech_like(-30.0, 5.0)),
                                                                abs=0.01)


def test_the_gain_is_one_number_and_never_clips():
    x = speech_like(-40.0)
    x[100] = 0.5                              # a click 34 dB over the speech
    out = levelled(x, -20.0)
    assert np.max(np.abs(out)) <= PEAK + 1e-6
    ratio = out[np.abs(x) > 1e-4] / x[np.abs(x) > 1e-4]
    assert np.allclose(ratio, ratio[0], rtol=1e-5)


def test_near_silence_is_not_lifted_to_speech():
    out = levelled(speech_like(-90.0), -20.0)
    assert db(out) == pytest.approx(-90.0 + MAX_GAIN_DB, abs=0.1)


@pytest.mark.parametrize("x", [np.zeros(16000, np.float32), np.zeros(0, np.float32),
                               np.full(320, np.nan, np.float32)])
def test_silence_nothing_and_garbage_come_back_as_they_are(x):
    assert levelled(x, -20.0) is x


def test_level_0_leaves_the_audio_as_it_came():
    x = speech_like(-40.0)
    assert levelled(x, 0.0) is x
