"""Condensing: fillers, stutters and false starts out of the source; long pauses shortened."""

import numpy as np
import pytest

from voxweft.actors.condense import disfluencies, shorten_pauses


@pytest.mark.parametrize(("text", "lang", "want", "removed"), [
    ("So, uh, we start at nine.", "en", "So, we start at nine.", 1),
    ("Um, the plan is simple.", "en", "The plan is simple.", 1),
    ("It works. Um.", "en", "It works.", 1),
    ("We need, um.", "en", "We need.", 1),
    ("the the cat sat", "en", "the cat sat", 1),
    ("I- I think so", "en", "I think so", 1),
    ("we will chan- change it", "en", "we will change it", 1),
    # Doubled on purpose, or across a sentence end: kept.
    ("I know that that is true", "en", "I know that that is true", 0),
    ("It was very very good", "en", "It was very very good", 0),
    ("Go. Go now.", "en", "Go. Go now.", 0),
    # Words that only look like fillers in another language, and words that mean something.
    ("Like, you know, it is well done", "en", "Like, you know, it is well done", 0),
    ("Ele é um bom homem", "pt", "Ele é um bom homem", 0),
    ("Hum, ele é bom", "pt", "Ele é bom", 1),
    ("", "en", "", 0),
    ("uh", "en", "", 1),
])
def test_disfluencies_keep_the_speakers_words_in_order(text, lang, want, removed):
    assert disfluencies(text, lang) == (want, removed)


def test_an_unknown_language_loses_only_stutters():
    assert disfluencies("uh uh ja ja", "nl") == ("uh ja", 2)


def _speech(seconds, rate):
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def test_long_pauses_are_cut_to_the_bound_and_speech_is_kept():
    rate = 16000
    silence = np.zeros(int(0.6 * rate), np.float32)
    short = np.zeros(int(0.1 * rate), np.float32)
    audio = np.concatenate([short, _speech(0.5, rate), silence, _speech(0.4, rate), short,
                            _speech(0.3, rate), short])
    out = shorten_pauses(audio, rate, 0.15)
    loud_in = int(np.sum(np.abs(audio) > 0.01))
    loud_out = int(np.sum(np.abs(out) > 0.01))
    assert loud_out == loud_in                      # no speech lost
    assert len(audio) - len(out) == pytest.approx(0.45 * rate, abs=0.011 * rate)
    # the silences at both ends and the short pause stay as they were
    assert np.all(out[:int(0.1 * rate)] == 0) and np.all(out[-int(0.1 * rate):] == 0)


def test_audio_without_a_long_pause_is_returned_unchanged():
    rate = 24000
    audio = np.concatenate([_speech(0.5, rate), np.zeros(int(0.1 * rate), np.float32),
                            _speech(0.5, rate)])
    assert shorten_pauses(audio, rate, 0.15) is audio or \
        np.array_equal(shorten_pauses(audio, rate, 0.15), audio)
    assert len(shorten_pauses(np.zeros(0, np.float32), rate, 0.15)) == 0
