"""The room corpus (`voxweft bench --room`): levels as asked, the talker known, read back right."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from voxweft.protocol.messages import BUS_RATE
from voxweft.tools.bench import DEFAULT_CORPUS, room
from voxweft.tools.bench.run import corpus_items


def _band(x: np.ndarray, lo: float, hi: float) -> float:
    power = np.abs(np.fft.rfft(x)) ** 2
    f = np.fft.rfftfreq(len(x), 1 / BUS_RATE)
    return float(power[(f >= lo) & (f < hi)].sum())


def _db(a: float, b: float) -> float:
    return 20 * np.log10(a / b)


def test_noises_have_their_colour_and_unit_level():
    rng = np.random.default_rng(0)
    n = 10 * BUS_RATE
    w, p, t = room.white(n, rng), room.pink(n, rng), room.tones(n, rng)
    for x in (w, p, t):
        assert x.dtype == np.float32 and room.rms(x) == pytest.approx(1.0, rel=1e-3)
    # white: the same power per hertz, so an octave twice as high holds twice as much;
    # pink: the same power per octave
    assert _band(w, 2000, 4000) / _band(w, 1000, 2000) == pytest.approx(2.0, rel=0.1)
    assert _band(p, 2000, 4000) / _band(p, 1000, 2000) == pytest.approx(1.0, rel=0.1)
    # tones: a few strong partials, not a spread: 1 % of the bins hold most of the power
    power = np.sort(np.abs(np.fft.rfft(t)) ** 2)[::-1]
    assert power[: len(power) // 100].sum() > 0.5 * power.sum()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("room")
    items = corpus_items(DEFAULT_CORPUS, "pt", limit=2)
    conds = room.conditions((10.0, 5.0), (10.0,), people=False)
    return items, out, room.build(items, out, conds)


def test_the_room_corpus_mixes_at_the_levels_asked(built):
    items, out, manifest = built
    names = [c["name"] for c in manifest["conditions"]]
    assert names == ["clean", "white 10 dB", "pink 10 dB", "babble 10 dB", "tones 10 dB",
                     "white 5 dB", "pink 5 dB", "babble 5 dB", "tones 5 dB", "talker -10 dB",
                     "no speech: quiet-pink -35 dBFS", "no speech: quiet-tones -35 dBFS",
                     "no speech: silence"]
    assert json.loads((out / "room.json").read_text()) == manifest
    for item in items:
        clean, _ = sf.read(str(out / f"{item.name}@clean.wav"), dtype="float32")
        level = room.active_rms(clean)
        for tag, below in (("pink_10_dB", 10), ("babble_5_dB", 5), ("talker_-10_dB", 10)):
            mixed, rate = sf.read(str(out / f"{item.name}@{tag}.wav"), dtype="float32")
            lead = int(room.LEAD_S * BUS_RATE)     # the room sounds before and after too
            assert rate == BUS_RATE and len(mixed) == lead + len(clean) + room.TAIL_S * BUS_RATE
            other = mixed.copy()
            other[lead:lead + len(clean)] -= clean
            measure = room.active_rms if tag.startswith("talker") else room.rms
            # 16-bit files: within 0.2 dB of what was asked
            assert _db(measure(other), level) == pytest.approx(-below, abs=0.2), tag
        assert (out / f"{item.name}@pink_10_dB.txt").read_text() == item.ref_text
    silence, _ = sf.read(str(out / "nospeech@no_speech_silence.wav"), dtype="float32")
    quiet, _ = sf.read(str(out / "nospeech@no_speech_quiet-pink_-35_dBFS.wav"), dtype="float32")
    assert len(silence) == room.NO_SPEECH_S * BUS_RATE and not silence.any()
    assert _db(room.rms(quiet), 1.0) == pytest.approx(-35, abs=0.2)
    talker = [e for e in manifest["files"].values() if e["kind"] == "talker"]
    assert len(talker) == 2 and all(e["talker_words"] >= 5 and e["talker_lines"]
                                    for e in talker)
    assert talker[0]["talker_lines"] != talker[1]["talker_lines"]   # the talker goes on


def _row(file, text, played=True, latency=1.0):
    return {"file": file, "text": text, "played": played, "not_spoken": None,
            "complete": True if played else None, "speech_end_to_first_audio_s": latency}


def test_analyse_reads_wer_intrusions_made_up_lines_and_latency_per_condition():
    manifest = {
        "conditions": [{"kind": "clean", "name": "clean"},
                       {"kind": "talker", "name": "talker -10 dB"},
                       {"kind": "silence", "name": "no speech: silence"}],
        "files": {
            "a@clean": {"condition": "clean", "kind": "clean", "reference": "the cat sat down"},
            "a@talker": {"condition": "talker -10 dB", "kind": "talker",
                         "reference": "the cat sat down",
                         "talker_lines": ["The train leaves at seven."], "talker_words": 5},
            "nospeech@silence": {"condition": "no speech: silence", "kind": "silence",
                                 "reference": None},
        }}
    rows = [_row("a@clean", "The cat sat down.", latency=1.0),
            # "the" is the speaker's word too: only "train" and "seven" intrude, and the
            # second line was not spoken, so its "leaves" does not count
            _row("a@talker", "The cat sat down, the train seven.", latency=1.5),
            _row("a@talker", "leaves", played=False),
            _row("nospeech@silence", "Thank you.")]
    out = room.analyse({"utterances": rows}, manifest)
    assert out["clean"]["wer"] == 0.0 and out["clean"]["latency_cost_s"] == 0.0
    talker = out["talker -10 dB"]
    assert talker["intrusions"] == {"words": 2, "talker_words": 5, "share": 0.4,
                                    "examples": ["seven", "train"]}
    assert talker["wer"] == pytest.approx(4 / 4) and talker["latency_cost_s"] == 0.25
    assert out["no speech: silence"]["lines"] == 1
    # the speaker's 4 words all spoken, on clean and with the talker; no words on no speech
    assert out["clean"]["spoken_share"] == 1.0 and talker["spoken_share"] == 1.0
    assert out["no speech: silence"]["spoken_share"] is None
    assert out["no speech: silence"]["texts"] == ["Thank you."]
    table = room.markdown(out)
    assert ("| talker -10 dB | 100.0 % | 2 of 5 (40.0 %) | - | 100.0 % | 0 s | 1.25 (+0.25) |"
            in table)
    assert "| no speech: silence | - | - | 1 | - | 0 s | 1.00 |" in table
    fast = room.markdown(out, real_time=False)   # --fast: no latency to speak of
    assert "| talker -10 dB | 100.0 % | 2 of 5 (40.0 %) | - | 100.0 % | 0 s | - |" in fast
    assert "no latency is given" in fast


def test_an_intrusion_is_a_talker_word_added_not_one_heard_for_the_speakers():
    """ "and" in place of the speaker's "than" is a WER error; "morning" after "modern" and
    "salt" after the sentence are the talker's words spoken."""
    manifest = {
        "conditions": [{"kind": "talker", "name": "talker -10 dB"}],
        "files": {
            f"{n}@talker": {"condition": "talker -10 dB", "kind": "talker", "reference": ref,
                            "talker_lines": ["Good morning, pass the salt and the honey."],
                            "talker_words": 8}
            for n, ref in (("a", "than in the same operations"), ("b", "comparatively modern"))}}
    rows = [_row("a@talker", "And in the same operations, the salt."),
            _row("b@talker", "comparatively modern morning")]
    talker = room.analyse({"utterances": rows}, manifest)["talker -10 dB"]
    # "and" is heard for "than"; "the" is the speaker's word too
    assert talker["intrusions"] == {"words": 2, "talker_words": 16, "share": 0.125,
                                    "examples": ["morning", "salt"]}
    assert talker["wer"] == pytest.approx((1 + 2 + 1) / 7, abs=1e-4)


def test_the_spoken_share_of_a_condition_counts_the_reference_words_not_heard():
    """A sentence the speaker gate ignored has no utterance: its words count against it."""
    manifest = {
        "conditions": [{"kind": "talker", "name": "talker -10 dB"}],
        "files": {"a@talker": {"condition": "talker -10 dB", "kind": "talker",
                               "reference": "The cat sat down. It was a sunny day.",
                               "talker_lines": ["Pass the salt."], "talker_words": 3}}}
    rows = [_row("a@talker", "The cat sat down."), _row("a@talker", "It was", played=False)]
    talker = room.analyse({"utterances": rows}, manifest)["talker -10 dB"]
    assert talker["spoken_share"] == 0.4444   # 4 of 9: the rest not spoken, or not heard


def test_inserted_words_are_the_additions_of_the_alignment():
    from voxweft.tools.bench.metrics import inserted_words

    assert inserted_words("than in the same", "And in the same, the salt.") == ["the", "salt"]
    assert inserted_words("a b c", "a b c") == []
    assert inserted_words("", "Thank you.") == ["thank", "you"]
    assert inserted_words("a b", "") == []
