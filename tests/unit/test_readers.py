"""The room's people (tools/bench/readers.py): real readers at the levels asked, and scored."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from voxweft.tools.bench import DEFAULT_CORPUS, readers, room
from voxweft.tools.bench.run import corpus_items


def _db(x: np.ndarray) -> float:
    return 20 * np.log10(room.active_rms(x))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("people")
    items = corpus_items(DEFAULT_CORPUS, "pt")
    conds = [c for c in room.conditions() if c.kind in readers.KINDS]
    return out, readers.build(items, out, conds)


def test_the_voices_are_real_people_with_their_words():
    people = readers.voices(corpus_items(DEFAULT_CORPUS, "pt"))
    assert {name for name, _ in readers.PANEL} <= set(people)
    for name, clips in people.items():
        assert clips, name
        for text, audio in clips:
            assert text.strip() and len(audio) > 16000 and np.abs(audio).max() > 0.05, name


def test_each_reader_speaks_at_the_level_asked(built):
    out, manifest = built
    session, _ = sf.read(str(out / "people-2-readers.wav"), dtype="float32")
    who = manifest["files"]["people-2-readers"]["readers"]
    assert [w["reader"] for w in who] == [name for name, _ in readers.PANEL]
    levels = [_db(session[round(w["start_s"] * 16000):round(w["end_s"] * 16000)]) for w in who]
    for w, level in zip(who, levels, strict=True):
        assert level - levels[0] == pytest.approx(w["level_db"], abs=1.0), (w, level)
    # the same words as each reader alone, in order, and those all at the speaker's level
    alone = {f: e for f, e in manifest["files"].items() if e["kind"] == "alone"}
    assert manifest["files"]["people-2-readers"]["reference"] == \
        " ".join(e["reference"] for _, e in sorted(alone.items()))
    alone_db = [_db(sf.read(str(out / f"{f}.wav"), dtype="float32")[0]) for f in alone]
    assert max(alone_db) - min(alone_db) < 1.0
    for name, entry in manifest["files"].items():
        assert (out / f"{name}.txt").read_text() == entry["reference"]


def test_no_pause_changes_speaker_within_a_tenth_of_a_second(built):
    _, manifest = built
    who = manifest["files"]["people-2-readers-no-pause"]["readers"]
    assert [w["level_db"] for w in who] == list(readers.NO_PAUSE_LEVELS)
    gaps = [b["start_s"] - a["end_s"] for a, b in zip(who, who[1:], strict=False)]
    assert max(gaps) < 0.35   # the clips' edges (0.1 s each, and their soft ends), 0.1 s


def test_soft_starts_and_fades_are_quieter_where_asked(built):
    out, _ = built
    soft, _ = sf.read(str(out / "people-3-soft-starts.wav"), dtype="float32")
    # the first sentence: 1.8 s of silence, then 0.4 s 10 dB down, then the sentence
    start = np.flatnonzero(np.abs(soft) > 1e-4)[0]
    head = soft[start:start + round(0.4 * 16000)]
    body = soft[start + round(0.5 * 16000):start + round(1.5 * 16000)]
    assert _db(body) - _db(head) > 5.0
    fading, _ = sf.read(str(out / "people-4-fading.wav"), dtype="float32")
    assert np.abs(fading).max() > 0.05


@pytest.mark.parametrize("kind", list(readers.TALKER_CASES))
def test_the_real_talker_is_under_the_speaker(built, kind):
    out, manifest = built
    files = {f: e for f, e in manifest["files"].items() if e["kind"] == kind}
    speaker, talkers, _ = readers.TALKER_CASES[kind]
    assert len(files) == len(readers.voices(corpus_items(DEFAULT_CORPUS, "pt"))[speaker])
    if kind == "talker-held-out":   # nobody the gate was tuned on or looked at
        assert not {speaker, *talkers} & {r for r, _ in readers.PANEL}
        assert not {speaker, *talkers} & {*readers.REAL_TALKERS, readers.TALKER_SPEAKER}
    for name, entry in files.items():
        assert entry["talker_words"] > 0 and entry["talker_lines"]
        mixed, _ = sf.read(str(out / f"{name}.wav"), dtype="float32")
        lead, tail = round(room.LEAD_S * 16000), round((room.TAIL_S - 0.2) * 16000)
        alone = np.concatenate([mixed[:lead], mixed[-tail:]])    # the talker alone
        # 10 dB under, less the talker's own ups and downs
        assert _db(mixed[lead:-tail]) - _db(alone) > 6.0, name


def test_analyse_counts_the_speech_ignored_and_compares_with_each_reader_alone(built):
    _, manifest = built
    rows = []
    for name, entry in manifest["files"].items():
        rows.append({"file": name, "text": entry["reference"], "played": True,
                     "not_spoken": "", "complete": True, "speech_end_to_first_audio_s": 1.0})
    ignored = [{"file": "people-2-readers", "length_s": 2.5, "start_s": 30.0,
                "session_s": 0.0, "reason": "not the speaker"}]
    out = room.analyse({"utterances": rows, "ignored": ignored},
                       json.loads(json.dumps(manifest)))
    panel = out[room.PEOPLE["readers"]]
    assert panel["ignored_s"] == 2.5 and panel["ignored"] == 1
    assert panel["wer"] == 0.0 and panel["wer_alone"] == 0.0
    assert out[room.PEOPLE["soft-starts"]]["ignored_s"] == 0
    assert "| readers in turn, 0 to -25 dB | 0.0 % (alone 0.0 %) |" in room.markdown(out)
