"""The bench's own bookkeeping: the session it builds, where utterances belong, its spans."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from voxweft.actors.settings.topology import Commits
from voxweft.tools.bench.run import LEAD_S, BenchError, build_session, corpus_items
from voxweft.tools.bench.utterances import _assign, _pipeline_s

S = 1_000_000_000


def _corpus(tmp_path):
    for name, seconds, rate in (("a", 1.0, 16000), ("b", 0.5, 22050)):
        sf.write(str(tmp_path / f"{name}.wav"), np.full(int(seconds * rate), 0.1, np.float32),
                 rate)
    (tmp_path / "a.txt").write_text("hello there\n")
    (tmp_path / "a.pt.txt").write_text("olá\n")
    (tmp_path / "readme.md").write_text("not audio")
    return tmp_path


def test_corpus_items_and_references(tmp_path):
    items = corpus_items(_corpus(tmp_path), "pt")
    assert [i.name for i in items] == ["a", "b"]
    assert items[0].ref_text == "hello there" and items[0].ref_translation == "olá"
    assert items[1].ref_text is None and items[1].ref_translation is None
    assert [i.name for i in corpus_items(tmp_path, "pt", limit=1)] == ["a"]
    with pytest.raises(BenchError, match="not a folder"):
        corpus_items(tmp_path / "a.txt", "pt")


def test_session_layout_and_soak_looping(tmp_path):
    items = corpus_items(_corpus(tmp_path), "pt")
    placed, duration = build_session(items, 1.0, None, tmp_path / "s.wav")
    # 0.5 lead, a 1.0 s, pause 1.0, b 0.5 s (resampled from 22.05 kHz), pause 1.0
    assert [(p.item.name, p.start_s, p.end_s) for p in placed] == [
        ("a", LEAD_S, 1.5), ("b", 2.5, 3.0)]
    assert duration == pytest.approx(4.0)
    audio, rate = sf.read(str(tmp_path / "s.wav"))
    assert rate == 16000 and len(audio) == 4 * 16000
    assert abs(audio[int(0.7 * rate)] - 0.1) < 1e-3 and audio[int(1.7 * rate)] == 0
    placed, duration = build_session(items, 1.0, 0.2, tmp_path / "soak.wav")   # >= 12 s
    assert len(placed) == 8 and duration == pytest.approx(14.5)   # whole loops of 3.5 s
    assert placed[2].item.name == "a" and placed[2].start_s == pytest.approx(4.0)


def test_utterances_go_to_the_file_they_overlap_most():
    from voxweft.tools.bench.run import Item, Placed

    a, b = Item("a", None, None, None), Item("b", None, None, None)
    placed = [Placed(a, 0.5, 1.5), Placed(b, 2.5, 3.0)]
    assert _assign(placed, 0.3, 1.8) == 0          # pre-roll and hangover around a
    assert _assign(placed, 1.2, 2.9) == 1          # more of b than of a
    assert _assign(placed, 1.6, 2.4) is None       # in the pause


def test_pipeline_span_leaves_out_queueing():
    stages = {"hop_segmenter_asr": 0.001, "asr_queue": 0.25, "asr": 0.4, "hop_asr_mt": 0.002,
              "mt_queue": 0.0, "mt": 0.03, "hop_mt_tts": 0.001, "tts_queue": 0.5,
              "tts_first_chunk": 0.7, "hop_tts_player": 0.001, "player_wait": 1.2}
    assert _pipeline_s(stages) == 1.135
    assert _pipeline_s({**stages, "tts_first_chunk": None}) is None
    assert _pipeline_s(stages, ["asr"], {}) is None   # its draft was not heard


def test_long_form_figures_from_playback_traces():
    from voxweft.protocol.messages import PlaybackEvent
    from voxweft.tools.bench.run import BenchCollector
    from voxweft.tools.bench.score import _longform

    collected = BenchCollector()
    t0 = 100 * S
    # One utterance spoken from 1.0 to 3.0 s of the session; its 4-word translation started
    # playing at 4.4 s and lasted 2.5 s.
    collected.started["u"] = PlaybackEvent(utt="u", event="started", trace=(
        ("speech_start", t0 + 1 * S, 1.0), ("speech_end", t0 + 3 * S, 3.0),
        ("play.start", t0 + int(4.4 * S), None)))
    rows = [{"utt": "u", "translation": "um dois três quatro", "played_s": 2.5,
             "media_end_s": 3.0}]
    lf = _longform(collected, rows, [], 10.0, t0)
    # Session: StartOffset 4.4; EndOffset 4.4 + 2.5 - 10 = -3.1; word delays 4.4, 5.025,
    # 5.65, 6.275 (none after the source's 10 s), |Y| = 4: LAAL = mean(d_i - (i-1) * 2.5)
    # = mean(4.4, 2.525, 0.65, -1.225) = 1.5875.
    assert lf["start_offset_s"] == 4.4 and lf["end_offset_s"] == -3.1
    assert lf["laal_ca_s"] == pytest.approx(1.588, abs=0.001)
    # Not computation aware, out when its source was read (3.0 s): everything 1.4 s sooner.
    assert lf["start_offset_nca_s"] == 3.0 and lf["end_offset_nca_s"] == -4.5
    assert lf["laal_s"] == pytest.approx(0.188, abs=0.001)
    # ATD: 10 source pieces read by 3.0 s (the last ends 3.0), 9 speech pieces (8 of 0.3 s
    # and one of 0.1 s); piece t against source piece t: 3.0 + 0.3 t - 0.3 t = 3.0 s for
    # t <= 8, then 5.5 - 2.7 = 2.8 s: (8 * 3.0 + 2.8) / 9. Computation aware: 1.4 s more.
    assert lf["atd_s"] == pytest.approx(26.8 / 9, abs=0.001)
    assert lf["atd_ca_s"] == pytest.approx(26.8 / 9 + 1.4, abs=0.001)
    assert _longform(collected, rows, [], 10.0, None) is None


def test_soak_series_trends_and_queue_depth():
    from voxweft.protocol.messages import PlaybackEvent, Status
    from voxweft.tools.bench.run import BenchCollector
    from voxweft.tools.bench.score import _soak

    collected = BenchCollector()
    t0 = 1000 * S
    # One heartbeat per 5 s for 10 minutes: asr grows 1 MB a minute for the first 2 minutes,
    # then stays; the player grows steadily by 0.5 MB a minute (a leak).
    for i in range(121):
        t = i * 5
        asr_mb = 300 + min(t, 120) / 60
        player_mb = 70 + 0.5 * t / 60
        for actor, mb in (("asr", asr_mb), ("player", player_mb)):
            collected.statuses.setdefault(actor, []).append(Status(
                state="ready", sent_ns=t0 + t * S, src=actor,
                resources={"rss_kb": int(mb * 1024), "fds": 20}))
    # Utterance a committed at 10 s, heard at 12 s; b committed at 11 s, heard at 16 s;
    # c committed at 30 s, never heard.
    for utt, commit, heard in (("a", 10, 12), ("b", 11, 16), ("c", 30, None)):
        collected.commit_ns[utt] = t0 + commit * S
        if heard:
            collected.started[utt] = PlaybackEvent(
                utt=utt, event="started", trace=(("play.start", t0 + heard * S, None),))
    rows = [{"wall_s": 60.0 * k, "speech_end_to_first_audio_s": 2.0 + 0.1 * k}
            for k in range(10)]
    soak = _soak(collected, rows, t0, 10.0)
    assert soak["latency_slope"]["slope_per_10min"] == pytest.approx(1.0)
    assert soak["rss_after_s"] == 60.0
    assert soak["rss_slope"]["player"]["slope_per_10min"] == pytest.approx(5.0, abs=0.05)
    assert soak["rss_last_half_mb"] == {"asr": 0.0, "player": pytest.approx(2.5, abs=0.05)}
    depth = dict((t, d) for t, d in soak["series"]["queue_depth"])
    assert depth[10.0] == 1 and depth[15.0] == 1 and depth[20.0] == 0
    assert soak["queue_depth"]["max"] == 1 and soak["fds"]["asr"] == {"first": 20, "last": 20,
                                                                       "max": 20}
    from voxweft.tools.bench.score import _targets

    targets = {t["name"]: t for t in _targets({
        "latency": {"speech_end_to_first_audio_s": {"p50": 1.2},
                    "speech_end_to_first_voiced_s": {"p50": 1.6},
                    "stages_s": {"tts_first_chunk": {"p50": 0.15}}},
        "floor": {"ratio_p50": 1.2}, "bus": None, "soak": soak,
        "lag": {"max_lag_s": 6.0, "max_s": 6.4}})}
    assert targets["end of speech -> first audio p50 (s)"]["met"] is True
    assert targets["spoken share (%)"]["met"] is None   # not measured
    assert targets["LAAL_CA (s)"]["value"] is None
    assert targets["end of speech -> first voiced audio p50 (s)"]["met"] is False
    assert targets["max lag (s), within the bound"]["met"] is False
    assert targets["pipeline / in-process floor (p50)"]["met"] is False
    assert targets["tts first chunk p50 (s)"]["met"] is True   # within the 0.168 s anchor
    assert targets["soak: latency slope (s per 10 min)"]["met"] is False   # +1 s per 10 min
    growth = targets["soak: largest RSS growth over the second half (MB)"]
    assert growth["value"] == "player +2.50" and growth["met"] is False   # 2.5 MB > 1 % of 75


def test_first_voiced_sample_and_lag_figures():
    import numpy as np

    from voxweft.protocol.messages import Status
    from voxweft.tools.bench.run import BenchCollector
    from voxweft.tools.bench.score import _lag
    from voxweft.tools.bench.utterances import _first_voiced

    collected = BenchCollector()
    rate = 24000
    # 0.25 s of near-silence (below the voiced level), then speech, over two chunks
    collected.speech["u"] = [np.full(int(0.2 * rate), 0.001, np.float32),
                             np.concatenate([np.zeros(int(0.05 * rate), np.float32),
                                             np.full(rate, 0.3, np.float32)])]
    collected.speech_rate["u"] = rate
    assert _first_voiced(collected, "u", 1.0) == pytest.approx(1.25, abs=0.011)
    assert type(_first_voiced(collected, "u", 1.0)) is float   # JSON: no numpy scalars
    assert _first_voiced(collected, "u", None) is None
    assert _first_voiced(collected, "none", 1.0) is None
    # lag 2, 2.5, 3 ... s at one utterance a minute: +0.5 s per minute
    rows = [{"wall_s": 60.0 * k, "speech_end_to_first_audio_s": 2.0 + 0.5 * k,
             "not_spoken": ""} for k in range(6)]
    rows.append({"wall_s": 400.0, "speech_end_to_first_audio_s": None,
                 "not_spoken": "8.0 s behind the speaker"})
    collected.statuses["tts"] = [Status(src="tts", counters={"lag_speedup": 4, "lag_skip": 1})]
    lag = _lag(collected, rows, 6.0)
    assert lag["slope_s_per_min"] == pytest.approx(0.5) and lag["slope_distinguishable_from_zero"]
    assert lag["max_s"] == 4.5 and lag["not_spoken"] == 1 and lag["utterances"] == 7
    assert lag["steps"] == {"speedup": 4, "long_chunks": 0, "backlog_engine": 0, "skip": 1}


def test_per_word_asr_lag():
    from voxweft.protocol.messages import Transcript
    from voxweft.tools.bench.run import BenchCollector
    from voxweft.tools.bench.score import _word_lag

    collected = BenchCollector()
    t0 = 1000 * S
    # utterance from 2.0 s of the session; its transcript was published at 5.5 s
    collected.transcripts["u"] = Transcript(utt="u", media_start_s=2.0, media_end_s=4.0,
                                            trace=(("asr.end", t0 + int(5.5 * S), None),))
    floor_rows = {"u": {"words": [["one", 0.1, 0.5], ["two", 0.6, 1.5]]},
                  "gone": {"words": [["x", 0.0, 0.2]]}}   # no transcript: not counted
    lag = _word_lag(collected, floor_rows, t0)
    # words end at 2.5 s and 3.5 s: published 3.0 s and 2.0 s later
    assert lag == {"words": 2, "mean_s": 2.5, "p50_s": 2.5, "max_s": 3.0}
    assert _word_lag(collected, floor_rows, None)["words"] == 0   # --fast: no real time


def test_spoken_share_condensing_and_tts_cpu_headline():
    from voxweft.actors.budget import EXPANSION
    from voxweft.protocol.messages import Status
    from voxweft.tools.bench.run import BenchCollector, Item, Placed
    from voxweft.tools.bench.score import _spoken, _targets

    collected = BenchCollector()
    collected.statuses["mt"] = [Status(src="mt", counters={"fillers_removed": 3})]
    collected.statuses["tts"] = [Status(src="tts", counters={"pauses_cut_ms": 1250,
                                                             "lag_speedup": 4, "lag_skip": 1})]
    def row(text, speech_s, played=True, not_spoken="", complete=True, placed=0):
        return {"text": text, "speech_s": speech_s, "played": played,
                "not_spoken": not_spoken, "complete": complete, "placed": placed,
                "media_start_s": 0.0}

    rows = [row("one two three", 3.0),
            row("four five", 2.0, played=False, not_spoken="9.1 s behind the speaker",
                complete=None),
            row("six", 1.0, complete=None),
            # the player gave up on it part of the way: not spoken
            row("seven eight", 2.0, complete=False),
            row(None, 0.5, played=False, complete=None)]   # no words (noise)
    item = Item("a", None, None, None)
    placed = [Placed(item, 0.5, 10.5), Placed(item, 11.5, 21.5)]   # 20 s of source speech
    ignored = [{"file": "a", "start_s": 9.0, "session_s": 9.5, "length_s": 1.5,
                "reason": "not the speaker: 11 dB under their level"}]
    # No reference texts: the seconds of speech spoken, of those heard (ignored included)
    spoken = _spoken(collected, rows, placed, {"tts": {"cpu_s_after_ready": 25.0}},
                     {"engines": {"tts": {"cpu": 0.9}}}, "pt", ignored)
    assert spoken == {
        "share": 0.4, "basis": "speech heard", "words_spoken": None, "words": None,
        "speech_share": 0.4, "heard_s": 10.0, "spoken_s": 4.0, "ignored_s": 1.5,
        "ignored": 1, "utterances_spoken": 2, "utterances_not_spoken": 3, "utterances": 5,
        "fillers_removed": 3, "pauses_cut_s": 1.25,
        "lag_speedup": 4, "lag_long_chunks": 0, "lag_skip": 1, "tts_cpu_per_source_s": 1.25,
        "tts_budget_cpu_per_source_s": round(0.9 * EXPANSION["pt"], 3)}
    # Actors that count none of it, nothing committed: zeros and unknowns, no error.
    bare = _spoken(BenchCollector(), [], [], {}, {"engines": {}}, "xx")
    assert bare["share"] is None and bare["utterances"] == 0 and bare["pauses_cut_s"] == 0
    assert bare["tts_cpu_per_source_s"] is None and bare["tts_budget_cpu_per_source_s"] is None

    def targets(spoken):
        return {t["name"]: t for t in _targets({
            "latency": {"speech_end_to_first_audio_s": {"p50": None}},
            "floor": {"ratio_p50": None}, "spoken": spoken, "longform": {"laal_ca_s": 2.5},
            "asr_word_lag": {"mean_s": 1.6}})}

    got = targets(spoken)
    share = got["spoken share (%)"]
    assert share["value"] == 40.0 and share["target"] == 100 and share["met"] is False
    assert targets({**spoken, "share": 1.0})["spoken share (%)"]["met"] is True
    assert got["LAAL_CA (s)"]["met"] is True                       # 2.5 <= 3.0
    lag = got["per-word ASR lag mean (s)"]
    assert lag["target"] == 1.5 and lag["met"] is False
    cpu = got["tts CPU s per s of source"]
    assert cpu["value"] == 1.25 and cpu["target"] == 0.8 and cpu["met"] is False


def test_a_sentence_the_gate_ignored_counts_against_the_reference_share():
    """Today's transcripts say every word committed was spoken; the reference says a whole
    sentence was never heard (the speaker gate took it for the room)."""
    from voxweft.tools.bench.run import BenchCollector, Item, Placed
    from voxweft.tools.bench.score import _spoken

    a = Item("a", None, "The printing press changed Europe. Books became cheap and common.",
             None)
    b = Item("b", None, "It was a quiet revolution.", None)
    placed = [Placed(a, 0.5, 6.5), Placed(b, 7.5, 9.5)]
    rows = [  # a's second sentence was ignored: no utterance; b's was misheard, still voiced
        {"text": "The printing press changed Europe.", "speech_s": 2.5, "placed": 0,
         "media_start_s": 0.4, "played": True, "not_spoken": "", "complete": True},
        {"text": "It was a quite revolution.", "speech_s": 1.8, "placed": 1,
         "media_start_s": 7.4, "played": True, "not_spoken": "", "complete": True}]
    ignored = [{"file": "a", "start_s": 3.0, "session_s": 3.5, "length_s": 2.7,
                "reason": "not the speaker: 9 dB under their level"}]
    spoken = _spoken(BenchCollector(), rows, placed, {}, {"engines": {}}, "pt", ignored)
    # 5 + 5 of the 15 reference words ("quite" for "quiet" is heard, and the WER's error)
    assert spoken["basis"] == "reference words"
    assert (spoken["words_spoken"], spoken["words"], spoken["share"]) == (10, 15, 0.6667)
    assert spoken["utterances_not_spoken"] == 0 and spoken["ignored_s"] == 2.7
    assert spoken["speech_share"] == round(4.3 / 7.0, 4)
    # An utterance not spoken (too late) loses its words too; one of another file none
    late = [rows[0], {**rows[1], "played": False, "not_spoken": "too late"}]
    assert _spoken(BenchCollector(), late, placed, {}, {"engines": {}}, "pt")["share"] == \
        round(5 / 15, 4)


def test_the_machine_and_how_busy_it_was(monkeypatch):
    from voxweft.protocol.messages import Status
    from voxweft.tools.bench import run

    measured = []
    monkeypatch.setattr(run.Collector, "finished", lambda self: True)
    monkeypatch.setattr(run.cpu_budget, "others_busy_cores",
                        lambda pids: measured.append(pids) or 1.5)
    collected = run.BenchCollector()
    collected.statuses["tts"] = [Status(src="tts", pid=4321)]
    collected.statuses["mt"] = [Status(src="mt")]                  # no pid heard
    assert collected.finished() and collected.finished()
    assert measured == [[4321]]                                    # once, the actors left out
    host = run._host(0.5, 0.25, collected)
    assert host["cpu_model"] and host["vnni"] in (True, False, None)
    assert host["load_1min_start"] == 0.5 and isinstance(host["load_1min_end"], float)
    assert host["others_busy_cores_start"] == 0.25 and host["others_busy_cores_end"] == 1.5
    assert run._host(0.5, 0.25, run.BenchCollector())["load_1min_end"] is None


def _traced(t0: int, points: list[tuple[str, float]], media: dict | None = None) -> tuple:
    media = media or {}
    return tuple((name, t0 + int(round(s * S)), media.get(name)) for name, s in points)


def test_the_floor_compares_the_work_of_utterances_that_took_their_drafts():
    """A draft at each pause (speculative endpointing, on by default) is taken by asr and mt,
    and often by tts: the pipeline's work on such an utterance was done on the draft. It is
    compared with the floor from the draft messages (before: every utterance that took a
    draft had no pipeline figure, so a run where all did said n = 0 and no ratio beside a
    floor of every segment)."""
    import types

    from voxweft.protocol.messages import PlaybackEvent, Transcript, Translation, VadEvent
    from voxweft.tools.bench.run import BenchCollector, Item, Placed
    from voxweft.tools.bench.score import analyse

    collected = BenchCollector()
    collected.verdict = (True, [])
    speech = {"speech_start": 1.0, "speech_end": 3.0}
    floor = {"floor": {}}
    for i, tts_ahead in enumerate((False, False, False, True)):
        utt, t0 = f"u{i}", (100 + 10 * i) * S
        said = [("speech_start", -2.0), ("speech_end", 0.0)]
        # The draft, 0.1 s into the pause: asr 0.4 s, mt 0.03 s, each hop 1 ms.
        draft = _traced(t0, said + [("segment", 0.1), ("asr.ready", 0.0), ("asr.recv", 0.101),
                                    ("asr.start", 0.101), ("asr.end", 0.501)], speech)
        collected.add(Transcript(utt=utt, text="the words", final=False, trace=draft))
        draft_mt = draft + _traced(t0, [("mt.ready", 0.0), ("mt.recv", 0.502),
                                        ("mt.start", 0.502), ("mt.end", 0.532)])
        collected.add(Translation(utt=utt, source_text="the words", text="as palavras",
                                  final=False, trace=draft_mt))
        # The commit, 0.3 s into the pause: asr and mt take their drafts at once.
        collected.add(VadEvent(utt=utt, event="end", media_s=3.0))
        final = _traced(t0, said + [("segment", 0.3), ("asr.ready", 0.0), ("asr.recv", 0.301),
                                    ("asr.start", 0.301), ("asr.end", 0.302), ("asr.draft", 0.302)],
                        speech)
        collected.add(Transcript(utt=utt, text="the words", media_start_s=0.8,
                                 media_end_s=3.3, trace=final))
        final += _traced(t0, [("mt.ready", 0.0), ("mt.recv", 0.303), ("mt.start", 0.303),
                              ("mt.end", 0.304), ("mt.draft", 0.304)])
        collected.add(Translation(utt=utt, source_text="the words", text="as palavras",
                                  media_start_s=0.8, media_end_s=3.3, trace=final))
        # tts makes its first chunk in 0.7 s at the commit, or (the last) took its draft
        first = 0.306 if tts_ahead else 1.005
        played = final + _traced(t0, [("tts.ready", 0.0), ("tts.recv", 0.305),
                                      ("tts.start", 0.305), ("tts.first", first)]
                                 + [("tts.draft", 0.305)] * tts_ahead
                                 + [("play.ready", 0.0), ("play.recv", first + 0.001),
                                    ("play.start", first + 0.2)])
        collected.add(PlaybackEvent(utt=utt, event="started", trace=played))
        floor["floor"][utt] = {"asr": 0.38, "mt": 0.03, "tts_first_chunk": 0.66, "total": 1.07}
    placed = [Placed(Item("a", None, None, None), 0.5, 40.5)]
    topology = types.SimpleNamespace(max_lag_s=0, tgt_lang="pt",
                                     commits=Commits(at_pauses=True, by_agreement=True))
    report = analyse(collected, placed, 41.0, floor, None, True, None, topology)
    rows = report["utterances"]
    assert [r["drafted"] for r in rows] == [["asr", "mt"]] * 3 + [["asr", "mt", "tts"]]
    # hops 4 x 1 ms + asr 0.4 + mt 0.03 (on the draft) + tts 0.7 (at the commit)
    assert [r["pipeline_s"] for r in rows] == [1.134] * 3 + [None]   # tts's draft: not seen
    assert report["floor"]["pipeline_s"]["n"] == 3
    assert report["floor"]["ratio_p50"] == round(1.134 / 1.07, 3)
    # Stage by stage, on the utterances where the stage's work was seen: tts's made ahead
    # for the last one is not, but its asr and mt on the drafts are.
    assert rows[3]["pipeline_stages_s"] == {"asr": 0.4, "mt": 0.03, "tts_first_chunk": None}
    assert report["floor"]["stages"] == {
        "asr": {"n": 4, "pipeline_p50": 0.4, "floor_p50": 0.38, "ratio_p50": 1.053},
        "mt": {"n": 4, "pipeline_p50": 0.03, "floor_p50": 0.03, "ratio_p50": 1.0},
        "tts_first_chunk": {"n": 3, "pipeline_p50": 0.7, "floor_p50": 0.66,
                            "ratio_p50": 1.061}}
