"""Hand-computed checks of tools/benchmetrics.py."""

import math

import numpy as np
import pytest

from voxweft.tools.bench import metrics as bm

# ---------------------------------------------------------------------------- normalisation


@pytest.mark.parametrize("text, expected", [
    ("Hello, World!", "hello world"),
    ("  Don’t stop—it's   well-known.  ", "don't stop it's well known"),
    ("'quoted' and ‘single’ and `back`", "quoted and single and back"),
    ("rock 'n' roll", "rock n roll"),
    ("Não está BOM?", "não está bom"),
    ("l’été à São Paulo", "l'été à são paulo"),
    ("na\u0303o", "não"),                      # combining tilde composed by NFKC
    ("ﬁne ＡＢＣ", "fine abc"),                 # ligature and full-width letters (NFKC)
    ("In 1850, 3.5% (approx.)", "in 1850 3 5 approx"),   # numbers stay as written
    ("a – b — c - d", "a b c d"),
    ("x+y=z $5 €3", "x y z 5 3"),
    ("", ""),
    ("?!...", ""),
    ("tab\tand\nnewline", "tab and newline"),
])
def test_normalize_text(text, expected):
    assert bm.normalize_text(text) == expected


# ---------------------------------------------------------------------------- WER


def test_wer_one_substitution_one_deletion_of_ten_words():
    refs = ["The cat sat on the mat.", "A dog ran home!"]            # 6 + 4 = 10 words
    hyps = ["the cat sat on a mat", "a dog, ran"]                    # the->a (S), home (D)
    out = bm.wer(refs, hyps)
    assert out == {"wer": 0.2, "substitutions": 1, "deletions": 1, "insertions": 0,
                   "reference_words": 10}


def test_wer_insertion_and_case_and_punctuation():
    out = bm.wer(["Bom dia, não está?"], ["bom dia não está mesmo"])   # 4 words, 1 insertion
    assert out["wer"] == 0.25 and out["insertions"] == 1 and out["reference_words"] == 4


def test_wer_empty_hypothesis_is_all_deletions():
    out = bm.wer(["one two three", "four"], ["", None])
    assert out["wer"] == 1.0 and out["deletions"] == 4 and out["reference_words"] == 4


def test_wer_skips_empty_references():
    out = bm.wer(["", "...", "hello there"], ["noise words", "x", "hello there"])
    assert out == {"wer": 0.0, "substitutions": 0, "deletions": 0, "insertions": 0,
                   "reference_words": 2}
    assert bm.wer(["", "!"], ["a", "b"])["wer"] is None


def test_wer_length_mismatch():
    with pytest.raises(ValueError):
        bm.wer(["a"], [])


def test_matched_words_are_hits_and_substitutions_not_deletions():
    # "sat" misheard as "bat" is heard and voiced (the WER counts it); the second sentence was
    # never transcribed (ignored, or not spoken): its 4 words are against the share
    refs = ["The cat sat down. And then he left."]
    assert bm.matched_words(refs, ["the cat bat down"]) == (4, 8)
    assert bm.matched_words(refs, ["the cat sat down and then he left, you see"]) == (8, 8)
    assert bm.matched_words(["one two", "", "three"], ["", "noise", None]) == (0, 3)
    assert bm.matched_words(["", "..."], ["a", "b"]) == (0, 0)
    with pytest.raises(ValueError):
        bm.matched_words(["a"], [])


# ---------------------------------------------------------------------------- MT


def test_mt_scores_identical_is_100():
    refs = ["the quick brown fox jumps over the lazy dog",
            "she sells sea shells by the sea shore"]
    out = bm.mt_scores(list(refs), refs)
    assert out["bleu"] == 100.0 and out["chrf"] == 100.0
    assert "tok:13a" in out["signature_bleu"] and "nc:6" in out["signature_chrf"]


def test_mt_scores_disjoint_is_low():
    out = bm.mt_scores(["zzz qqq vvv www"], ["the quick brown fox jumps over the lazy dog"])
    assert out["bleu"] < 5 and out["chrf"] < 10


def test_mt_scores_empty_corpus():
    assert bm.mt_scores([], [])["bleu"] is None


# ---------------------------------------------------------------------------- long-form latency

# Source 5.5 s. Segments (emit, duration, words):
#   A emitted 1.0, 2.0 s, 4 words -> plays 1.0..3.0
#   B emitted 2.0 (A still playing), 1.0 s, 2 words -> waits, plays 3.0..4.0
#   C emitted 5.0 (gap after B), 1.0 s, 1 word -> plays 5.0..6.0
SEGMENTS = [(1.0, 2.0, 4), (2.0, 1.0, 2), (5.0, 1.0, 1)]
SOURCE = 5.5


def test_playback_schedule_overlapping_emits_queue():
    assert bm.playback_schedule(SEGMENTS) == [(1.0, 3.0), (3.0, 4.0), (5.0, 6.0)]
    assert bm.playback_schedule([]) == []
    # emitted together: back to back
    assert bm.playback_schedule([(0.5, 1.0, 1), (0.5, 1.0, 1), (0.5, 0.5, 1)]) == [
        (0.5, 1.5), (1.5, 2.5), (2.5, 3.0)]
    with pytest.raises(ValueError):
        bm.playback_schedule([(0.0, -1.0, 1)])


def test_start_and_end_offset():
    assert bm.start_offset(SOURCE, SEGMENTS) == 1.0
    assert bm.end_offset(SOURCE, SEGMENTS) == pytest.approx(0.5)       # 6.0 - 5.5
    assert bm.end_offset(10.0, SEGMENTS) == pytest.approx(-4.0)        # output done early
    # the last segment delayed by the queue, not by its emission: ends 2+3+3 = 8
    assert bm.end_offset(6.0, [(2.0, 3.0, 1), (2.5, 3.0, 1)]) == pytest.approx(2.0)
    assert bm.start_offset(SOURCE, []) is None and bm.end_offset(SOURCE, []) is None


def test_word_delays_evenly_spread():
    # A: 1.0..3.0 / 4 words -> 0.5 s each; B: 3.0..4.0 / 2 -> 0.5 s; C: 5.0..6.0 / 1
    assert bm.word_delays(SEGMENTS) == pytest.approx([1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 5.0])
    assert bm.word_delays(SEGMENTS, "EOW") == pytest.approx([1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 6.0])
    assert bm.word_delays(SEGMENTS, "COW") == pytest.approx(
        [1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 5.5])
    # a wordless segment (a breath, a beep) takes time but adds no word
    assert bm.word_delays([(0.0, 1.0, 0), (0.0, 1.0, 2)]) == pytest.approx([1.0, 1.5])
    with pytest.raises(ValueError):
        bm.word_delays(SEGMENTS, "MID")


def test_laal_hand_computed():
    # Source |X| = 4 s, delays 1, 2, 3, 5, 6 (5 hypothesis words, no reference).
    # tau: first delay >= 4 is the 4th (5 s) -> tau = 4.  |Y| = max(5, 0) = 5, step 4/5 = 0.8.
    # LAAL = ((1 - 0) + (2 - 0.8) + (3 - 1.6) + (5 - 2.4)) / 4 = (11 - 4.8) / 4 = 1.55
    delays = [1.0, 2.0, 3.0, 5.0, 6.0]
    assert bm.laal(delays, 4.0, 5) == pytest.approx(1.55)
    # Reference longer than the hypothesis (8 words): |Y| = 8, step 0.5,
    # LAAL = (11 - (0 + 1 + 2 + 3) * 0.5) / 4 = (11 - 3) / 4 = 2.0
    assert bm.laal(delays, 4.0, 5, ref_words=8) == pytest.approx(2.0)
    # Reference shorter (3 words): max(5, 3) = 5, same as without a reference.
    assert bm.laal(delays, 4.0, 5, ref_words=3) == pytest.approx(1.55)
    # No delay reaches the source end: tau = all 3.  |Y| = 3, step 2:
    # ((0.5 - 0) + (2.5 - 2) + (4.5 - 4)) / 3 = 0.5
    assert bm.laal([0.5, 2.5, 4.5], 6.0, 3) == pytest.approx(0.5)
    # First word only after the source ended: LAAL = its delay (tau = 1).
    assert bm.laal([5.0, 6.0], 4.0, 2) == pytest.approx(5.0)
    assert bm.laal([], 4.0, 0) is None
    with pytest.raises(ValueError):
        bm.laal([1.0], 0.0, 1)


def test_longform_on_the_schedule():
    # word delays 1, 1.5, 2, 2.5, 3, 3.5, 5 (none >= 5.5, tau = 7), |Y| = 7, step 5.5/7:
    # LAAL = (18.5 - 21 * 5.5 / 7) / 7 = (18.5 - 16.5) / 7 = 2/7
    out = bm.longform(SOURCE, SEGMENTS)
    assert out == {"start_offset_s": 1.0, "end_offset_s": 0.5, "laal_ca_s": round(2 / 7, 3),
                   "atd_ca_s": None, "start_offset_nca_s": None, "end_offset_nca_s": None,
                   "laal_s": None, "atd_s": None, "source_duration_s": 5.5, "output_words": 7}
    # a 14-word reference: step 5.5/14, LAAL = (18.5 - 21 * 5.5 / 14) / 7 = (18.5 - 8.25) / 7
    assert bm.longform(SOURCE, SEGMENTS, ref_words=14)["laal_ca_s"] == round(10.25 / 7, 3)
    empty = bm.longform(SOURCE, [])
    assert empty["start_offset_s"] is None and empty["laal_ca_s"] is None
    assert empty["output_words"] == 0


# ---------------------------------------------------------------------------- slope


def test_slope_constant_is_zero():
    t = list(range(0, 660, 60))
    out = bm.slope_per_10min(t, [0.1] * len(t))
    assert out == {"slope_per_10min": 0.0, "ci95_per_10min": 0.0, "n": 11,
                   "distinguishable_from_zero": False}


def test_slope_exact_line():
    t = list(range(0, 1200, 30))
    out = bm.slope_per_10min(t, [2.0 + 0.01 * x for x in t])   # 0.01 /s = 6 per 10 min
    assert out["slope_per_10min"] == pytest.approx(6.0)
    assert out["ci95_per_10min"] == pytest.approx(0.0, abs=1e-9)
    assert out["distinguishable_from_zero"] is True and out["n"] == 40


def test_slope_three_points_by_hand():
    # t = 0, 1, 2; y = 0, 2, 1. mean t = 1, mean y = 1, Sxx = 2, Sxy = 1 -> b = 0.5.
    # residuals -0.5, 1, -0.5 -> SSR = 1.5; se = sqrt(1.5 / 1 / 2); t(0.975, 1) = 12.706.
    out = bm.slope_per_10min([0, 1, 2], [0, 2, 1])
    assert out["slope_per_10min"] == pytest.approx(300.0)
    assert out["ci95_per_10min"] == pytest.approx(600 * 12.706 * math.sqrt(0.75))
    assert out["distinguishable_from_zero"] is False


def test_slope_noise_without_trend_is_not_distinguishable():
    rng = np.random.default_rng(7)
    t = np.arange(0, 3600, 10.0)                   # an hour, every 10 s (360 points)
    y = 0.8 + rng.normal(0, 0.05, t.size)
    out = bm.slope_per_10min(list(t), list(y))
    assert out["n"] == 360 and out["distinguishable_from_zero"] is False
    assert abs(out["slope_per_10min"]) < out["ci95_per_10min"] < 0.01
    # a real drift of 0.02 s / 10 min under the same noise is found
    drift = bm.slope_per_10min(list(t), list(y + 0.02 * t / 600))
    assert drift["distinguishable_from_zero"] is True
    assert drift["slope_per_10min"] == pytest.approx(0.02, abs=drift["ci95_per_10min"])


def test_slope_too_few_points_and_missing_values():
    assert bm.slope_per_10min([0, 1], [1, 2])["slope_per_10min"] is None
    out = bm.slope_per_10min([0, 1, None, 3, 4], [1, None, 5, 7, float("nan")])
    assert out["n"] == 2 and out["slope_per_10min"] is None
    assert bm.slope_per_10min([5, 5, 5], [1, 2, 3])["slope_per_10min"] is None


def test_t_table_continues_smoothly():
    assert bm._t95(30) == pytest.approx(2.042, abs=1e-3)
    assert bm._t95(31) < bm._t95(30)
    assert bm._t95(60) == pytest.approx(2.000, abs=1e-3)
    assert bm._t95(120) == pytest.approx(1.980, abs=1e-3)


def test_longform_not_computation_aware_from_the_source_read():
    # The same three segments, each out as soon as its source was read: at 0.5, 1.5, 4.5 s.
    # Played 0.5..2.5, 2.5..3.5, 4.5..5.5: StartOffset 0.5, EndOffset 5.5 - 5.5 = 0; word
    # delays 0.5, 1, 1.5, 2, 2.5, 3, 4.5 (none >= 5.5): LAAL = (15 - 21 * 5.5 / 7) / 7 = -1.5 / 7
    out = bm.longform(SOURCE, SEGMENTS, read_s=[0.5, 1.5, 4.5])
    assert out["start_offset_nca_s"] == 0.5 and out["end_offset_nca_s"] == 0.0
    assert out["laal_s"] == round(-1.5 / 7, 3)
    assert out["start_offset_s"] == 1.0 and out["laal_ca_s"] == round(2 / 7, 3)   # as before
    assert out["atd_s"] == round(bm.atd([0.5, 1.5, 4.5], [(0.5, 2.0, 4), (1.5, 1.0, 2),
                                                          (4.5, 1.0, 1)]), 3)
    assert out["atd_ca_s"] == round(bm.atd([0.5, 1.5, 4.5], SEGMENTS), 3)
    assert out["atd_ca_s"] > out["atd_s"]


# ATD (SimulEval's ATDScorer, speech in and out): 300 ms pieces on both sides.


def test_atd_hand_computed_with_output_ahead_of_the_source():
    # Chunk 1: 0.3 s of source read (piece x1 ends 0.3), then 0.9 s of speech out at 0.3 s:
    # pieces y1..y3 end 0.6, 0.9, 1.2. Chunk 2: source up to 0.6 s (x2 ends 0.6), 0.3 s of
    # speech out at 0.6 s, played after chunk 1: y4 ends 1.5.
    # a(t) = min(t - f(t), pieces read): y1..y3 -> x1 (only x1 read); y4: f = 3 - 1 = 2 earlier
    # output pieces ahead of the source, a = min(4 - 2, 2) = 2 -> x2.
    # ATD = ((0.6 - 0.3) + (0.9 - 0.3) + (1.2 - 0.3) + (1.5 - 0.6)) / 4 = 2.7 / 4
    read = [0.3, 0.6]
    assert bm.atd(read, [(0.3, 0.9, 3), (0.6, 0.3, 1)]) == pytest.approx(0.675)
    # Computation aware: the same chunks out at 0.5 s and 1.5 s (wall clock): y ends 0.8, 1.1,
    # 1.4 and 1.8: ((0.8 + 1.1 + 1.4 - 3 * 0.3) + (1.8 - 0.6)) / 4 = 3.6 / 4
    assert bm.atd(read, [(0.5, 0.9, 3), (1.5, 0.3, 1)]) == pytest.approx(0.9)


def test_atd_last_pieces_are_shorter_and_equal_reads_are_one_chunk():
    # 0.5 s read: x1 ends 0.3, x2 (0.2 s) 0.5; 0.4 s out at 0.5: y1 ends 0.8, y2 (0.1 s) 0.9.
    # ((0.8 - 0.3) + (0.9 - 0.5)) / 2 = 0.45
    assert bm.atd([0.5], [(0.5, 0.4, 2)]) == pytest.approx(0.45)
    # two segments out at the same point are one chunk of 0.4 s: the same figure
    assert bm.atd([0.5, 0.5], [(0.5, 0.2, 1), (0.5, 0.2, 1)]) == pytest.approx(0.45)
    # as much output as source, each chunk out when read: piece t against source piece t
    assert bm.atd([0.6, 1.2], [(0.6, 0.6, 2), (1.2, 0.3, 1)]) == pytest.approx(0.6)
    assert bm.atd([], []) is None and bm.atd([0.5], [(0.5, 0.0, 0)]) is None
