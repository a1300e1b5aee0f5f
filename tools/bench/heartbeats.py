"""What the actors said of themselves in a bench session, from their status heartbeats.

The report's `resources` (memory, CPU, descriptors), `drops` (what was lost or refused),
`budget` (each engine's measured cost and the verdict) and `speculation` (drafts made at
pauses and what each stage did with them), and any actor's last counters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from voxweft.actors import budget as cpu_budget
from voxweft.deploy.topology import Topology
from voxweft.protocol.messages import Status
from voxweft.tools.latency import summarize

if TYPE_CHECKING:   # run imports the scoring: its collector only for the annotations
    from voxweft.tools.bench.run import BenchCollector

#: Counters that mean something was lost, refused or broken.
DROP_WORDS = ("gap", "overflow", "drop", "bad_", "error", "filled", "refused", "disconnect",
              "lost", "incomplete")


def counters(collected: BenchCollector, actor: str) -> dict[str, int]:
    """The actor's counters in its last heartbeat ({} when none was heard)."""
    seen = collected.statuses.get(actor)
    return seen[-1].counters if seen else {}


def resources(statuses: dict[str, list[Status]]) -> dict:
    """Per actor: peak and last RSS, CPU seconds (in all, after it was ready), fds, threads."""
    out = {}
    for actor, seen in sorted(statuses.items()):
        with_res = [s for s in seen if s.resources]
        if not with_res:
            continue
        last = with_res[-1].resources
        ready = next((s.resources for s in with_res if s.state != "loading"), last)
        out[actor] = {
            "peak_rss_mb": round(max(s.resources.get("peak_rss_kb", 0) for s in with_res)
                                 / 1024, 1),
            "rss_mb": round(last.get("rss_kb", 0) / 1024, 1),
            "cpu_s": round(last.get("cpu_ms", 0) / 1000, 2),
            "cpu_s_after_ready": round((last.get("cpu_ms", 0) - ready.get("cpu_ms", 0))
                                       / 1000, 2),
            "fds": last.get("fds"), "threads": last.get("threads"),
        }
    return out


def drops(statuses: dict[str, list[Status]]) -> dict:
    """Per actor, its last counters that are not zero and mean a loss (DROP_WORDS)."""
    out = {}
    for actor, seen in sorted(statuses.items()):
        last = seen[-1].counters if seen else {}
        out[actor] = {k: v for k, v in sorted(last.items())
                      if v and any(w in k for w in DROP_WORDS)}
    return out


def budget(collected: BenchCollector, topology: Topology) -> dict:
    """Each engine's measured cost (warm-up) and the verdict: it keeps up, or not."""
    budgets = {}
    for actor, seen in collected.statuses.items():
        measured = next((s.budget for s in reversed(seen) if s.budget), None)
        if measured:
            budgets[actor] = measured
    # As said when the pipeline was ready: the machine's other work measured then.
    ok, lines = collected.verdict or cpu_budget.verdict(topology, budgets)
    return {"engines": budgets, "keeps_up": ok if lines else None, "verdict": lines}


def speculation(collected: BenchCollector, rows: list[dict], duration_s: float) -> dict:
    """Speculative endpointing: drafts sent at pauses, and what each stage did with them.

    Per stage: drafts made, used by the final message (hit rate = used / made), wasted
    (the speaker went on, or the text changed), the time they cost and the time wasted
    (in s per minute of input: the CPU speculation costs); tts also counts drafts it did
    not make because speech queued at the player would have hidden the gain.
    """
    segmenter = (collected.statuses.get("segmenter") or [None])[-1]
    said = segmenter.counters if segmenter else {}
    ahead = [r for r in rows if "tts" in (r.get("drafted") or ())]
    others = [r for r in rows if "tts" not in (r.get("drafted") or ())]
    out: dict = {"utterances": len(rows),
                 "drafts_sent": said.get("drafts") if segmenter else None,
                 "cuts": said.get("cuts", 0), "cuts_late": said.get("cuts_late", 0),
                 # The headline for utterances whose first chunk was made ahead, and the rest
                 # (often queued behind earlier speech at the player: no draft was needed).
                 "first_audio_s": {
                     "first_chunk_ahead": summarize(
                         [r["speech_end_to_first_audio_s"] for r in ahead]),
                     "not_ahead": summarize([r["speech_end_to_first_audio_s"] for r in others])},
                 "stages": {}}
    minutes = duration_s / 60 if duration_s else None
    asr = (collected.statuses.get("asr") or [None])[-1]
    if asr is not None:   # grown utterances asr transcribed to check the words to a pause
        out["rechecks"] = asr.counters.get("rechecks", 0)
        # commits asr made itself when two drafts of a growing utterance agreed: each is a
        # draft of asr's, not one the segmenter sent at a pause
        out["agreements"] = asr.counters.get("agreements", 0)
        out["recheck_s"] = round(asr.counters.get("recheck_ms", 0) / 1000, 2)
    for actor in ("asr", "mt", "tts"):
        last = (collected.statuses.get(actor) or [None])[-1]
        if last is None:
            continue
        c = last.counters
        made, used = c.get("drafts", 0), c.get("drafts_used", 0)
        out["stages"][actor] = {
            "made": made, "used": used, "wasted": c.get("drafts_wasted", 0),
            "not_needed": c.get("drafts_not_needed", 0),
            "hit_rate": round(used / made, 3) if made else None,
            "utterances_ahead": round(used / len(rows), 3) if rows else None,
            "cost_s": round(c.get("draft_ms", 0) / 1000, 2),
            "wasted_s": round(c.get("draft_wasted_ms", 0) / 1000, 2),
            "wasted_s_per_min": (round(c.get("draft_wasted_ms", 0) / 1000 / minutes, 3)
                                 if minutes else None),
        }
    return out


def work(collected: BenchCollector, rows: list[dict], topology: Topology,
         budgets: dict[str, dict[str, float]]) -> dict:
    """What asr and tts worked per second of the source's speech, counted live.

    Beside it, what the budget's GPU line counts for it (`budget.stage_need`) from the
    warm-up's one pass. asr: every decode (finals, drafts, full-window fallbacks); tts:
    every piece made. asr's `engine_s_per_s` over `one_pass_s_per_s` is what
    `budget.ASR_WORK` stands for.
    """
    speech_s = sum(r.get("speech_s") or 0.0 for r in rows)
    if speech_s <= 0:
        return {}
    out: dict = {"speech_s": round(speech_s, 2),
                 "commits": cpu_budget.commit_mode(topology, budgets.get("asr") or {})}
    asr, tts = counters(collected, "asr"), counters(collected, "tts")
    if asr.get("decodes"):
        one = (budgets.get("asr") or {}).get("rtf")
        out["asr"] = {
            "decodes_per_s": round(asr["decodes"] / speech_s, 3),
            "decoded_s_per_s": round(asr.get("decoded_ms", 0) / 1000 / speech_s, 3),
            "fallback_share": round(asr.get("fallbacks", 0) / asr["decodes"], 3),
            "engine_s_per_s": round(asr.get("engine_ms", 0) / 1000 / speech_s, 3),
            "one_pass_s_per_s": one,
            "counted_s_per_s": None if one is None else round(cpu_budget.stage_need(
                topology, "asr", budgets["asr"], one), 3)}
    if tts.get("pieces"):
        measured = budgets.get("tts") or {}
        one = measured.get("rtf")
        out["tts"] = {
            "syntheses_per_s": round(tts.get("syntheses", 0) / speech_s, 3),
            "pieces_per_s": round(tts["pieces"] / speech_s, 3),
            "made_s_per_s": round(tts.get("made_ms", 0) / 1000 / speech_s, 3),
            "engine_s_per_s": round(tts.get("engine_ms", 0) / 1000 / speech_s, 3),
            "counted_s_per_s": None if one is None else round(cpu_budget.stage_need(
                topology, "tts", measured, one, budgets.get("asr") or {}), 3)}
    return out
