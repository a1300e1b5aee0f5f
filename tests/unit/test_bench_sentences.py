"""The bench scores sentences as the listener hears them: pieces joined as mt joins them."""

from __future__ import annotations

import numpy as np
import pytest

from voxweft.tools.bench import sentences

RATE = 24000


def _pieces():
    return [
        ("u1", 0.0, 1.2, "And it is worth", "E vale a pena"),
        ("u2", 1.2, 2.5, "mentioning in passing that,", "mencionar de passagem que,"),
        ("u3", 2.5, 4.0, "the art of printing.", "a arte de imprimir."),   # ends the sentence
        ("u4", 4.0, 5.0, "Then in the same", "Então no mesmo"),            # starts one
        ("u5", 6.1, 7.0, "operations", "operações"),                       # after a pause
        ("u6", 7.0, 7.5, "", ""),                                          # nothing heard
        ("u7", 7.5, 8.0, "ugly ones", "feias"),
    ]


def test_pieces_join_exactly_as_mt_joins_them():
    assert sentences.group(_pieces()) == [["u1", "u2", "u3"], ["u4"], ["u5"], ["u6"], ["u7"]]


def _tone(seconds: float, lead: float = 0.0, tail: float = 0.0, edge: float = 0.0):
    """`seconds` of a loud tone between `lead` and `tail` seconds of silence; the first and
    last samples set to `edge`."""
    t = np.arange(int(seconds * RATE)) / RATE
    audio = np.concatenate([np.zeros(int(lead * RATE)), 0.3 * np.sin(2 * np.pi * 220 * t),
                            np.zeros(int(tail * RATE))]).astype(np.float32)
    audio[0] = audio[-1] = edge
    return audio


def test_joins_count_the_holes_silences_and_clicks_inside_a_sentence():
    groups = [["a", "b", "c"], ["d", "e"]]
    # a -> b: the player waited 0.3 s; b -> c back to back but the audio jumps (a click);
    # d -> e back to back and smooth; c -> d is between sentences and not a join.
    played = {"a": (1.0, 2.0), "b": (2.3, 3.0), "c": (3.0, 4.0), "d": (9.0, 10.0),
              "e": (10.0, 11.0)}
    speech = {"a": (_tone(0.9, tail=0.1), RATE), "b": (_tone(0.6, lead=0.1, edge=0.0), RATE),
              "c": (_tone(1.0, edge=0.2), RATE), "d": (_tone(1.0), RATE),
              "e": (_tone(1.0), RATE)}
    j = sentences.joins(groups, played, speech)
    assert j["joins"] == 3 and j["holes"] == 1
    assert j["hole_s_total"] == pytest.approx(0.3, abs=1e-3) == j["hole_s_max"]
    # a -> b heard as 0.1 s of a's tail + 0.3 s waited + 0.1 s of b's lead
    assert j["silence_s"]["max"] == pytest.approx(0.5, abs=0.011)
    assert j["clicks"] == 1 and j["step_max"] == pytest.approx(0.2, abs=1e-4)
    # Unplayed pieces are no join
    assert sentences.joins(groups, {"a": (1.0, 2.0)}, speech)["joins"] == 0


def test_offsets_take_each_sentence_as_its_own_source():
    groups = [["a", "b"], ["c"]]
    rows = {"a": {"translation": "um dois", "played_s": 1.0},
            "b": {"translation": "três quatro", "played_s": 1.0},
            "c": {"translation": "cinco", "played_s": 0.5}}
    # Sentence 1: speech 10.0 -> 14.0 s (a ends at 12.0); a heard 13.0-14.0, b 15.0-16.0.
    # Sentence 2: speech 20.0 -> 21.0; c heard 23.0-23.5.
    spoken = {"a": (10.0, 12.0), "b": (12.0, 14.0), "c": (20.0, 21.0)}
    played = {"a": (13.0, 14.0), "b": (15.0, 16.0), "c": (23.0, 23.5)}
    off = sentences.offsets(groups, rows, played, spoken)
    assert off["sentences"] == 2
    # StartOffset_CA: 3.0 and 3.0; EndOffset_CA: 16 - 14 = 2.0 and 23.5 - 21 = 2.5
    assert off["start_offset_s"] == {"p50": 3.0, "mean": 3.0}
    assert off["end_offset_s"]["mean"] == pytest.approx(2.25)
    # Not computation aware, each piece out when its speech ended: a at 2.0 s into its
    # sentence, b at 4.0 (played one after the other: 4.0 -> 5.0), c at 1.0 (-> 1.5)
    assert off["start_offset_nca_s"]["mean"] == pytest.approx(1.5)
    assert off["end_offset_nca_s"]["mean"] == pytest.approx((1.0 + 0.5) / 2)
    # A sentence nobody heard is not one of them
    assert sentences.offsets(groups, rows, {"c": (23.0, 23.5)}, spoken)["sentences"] == 1
