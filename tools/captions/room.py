"""What the captions page shows, kept from the bus: utterances, the actors' health, latency.

`Room.apply` takes one bus message and returns the page events it causes, each the whole
new state of one thing (an utterance, an actor), so a browser that missed some catches up
with the next one, and `Room.snapshot` gives a browser that (re)connects everything at once.
`SpokenShare` counts how much of the speech heard was spoken in translation, in seconds:
the page, `voxweft interpret` and the bench on a corpus without reference texts all count
it the same way.
The subtitles served beside the page are made here from the same texts, by the code that
writes `voxweft interpret`'s subtitle files (tools.subtitles).
"""

from __future__ import annotations

import collections
import math
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

from voxweft.actors.echo import describe as describe_echo
from voxweft.actors.phrases import Sentence
from voxweft.deploy.events import DOWN, describe
from voxweft.protocol.messages import (
    PlaybackEvent,
    Status,
    Supervision,
    Transcript,
    Translation,
    VadEvent,
)
from voxweft.tools.latency import stage_times, utterance_latency
from voxweft.tools.subtitles import NOT_SPOKEN, render

#: Utterances kept (and sent to a browser that connects): a long talk's last half hour.
KEEP = 300
#: An actor whose heartbeat (2 Hz) is not heard for this long is shown down.
SILENT_S = 3.0
#: The bar under each utterance: end of speech -> first audio, by stage (tools.latency).
STAGES = {
    "endpointing": ("endpointing",),
    "asr": ("hop_segmenter_asr", "asr_queue", "asr"),
    "mt": ("hop_asr_mt", "mt_queue", "mt"),
    "tts": ("hop_mt_tts", "tts_queue", "tts_first_chunk"),
    "play": ("hop_tts_player", "player_wait"),
}

Event = tuple[str, dict]


def speech_seconds(trace) -> float | None:
    """Seconds of speech in an utterance: its trace's speech_start to speech_end (media time).

    None when the trace has not both (the segmenter stamps them on every segment).
    """
    media = {name: at for name, _wall, at in trace
             if name in ("speech_start", "speech_end") and at is not None}
    if len(media) < 2:
        return None
    return max(media["speech_end"] - media["speech_start"], 0.0)


@dataclass
class SpokenShare:
    """How much of the speech heard was spoken in translation: running totals, in seconds.

    Each utterance the segmenter closed counts once, with its seconds of speech (speech_start
    to speech_end): into `heard_s`, and into `spoken_s` too when its translation was spoken
    whole. Each stretch the speaker gate ignored counts into `heard_s` and `ignored_s`.
    share = spoken_s / heard_s: what was ignored, or not spoken, counts against it.
    """

    heard_s: float = 0.0
    spoken_s: float = 0.0
    ignored_s: float = 0.0
    ignored: int = 0
    utterances: int = 0
    spoken: int = 0

    @classmethod
    def of(cls, utterances: Iterable[tuple[float | None, bool]],
           ignored: Iterable[float] = ()) -> SpokenShare:
        """The totals of `(speech seconds, spoken)` pairs and of ignored stretches (s)."""
        tally = cls()
        for seconds, spoken in utterances:
            tally.add(seconds, spoken)
        for seconds in ignored:
            tally.ignore(seconds)
        return tally

    def add(self, seconds: float | None, spoken: bool, times: int = 1) -> None:
        """Count one utterance (`times=-1` takes back what was counted for it)."""
        seconds = seconds or 0.0
        self.heard_s += times * seconds
        self.utterances += times
        if spoken:
            self.spoken_s += times * seconds
            self.spoken += times

    def ignore(self, seconds: float) -> None:
        """Count one stretch of speech the segmenter did not interpret."""
        seconds = max(seconds, 0.0)
        self.heard_s += seconds
        self.ignored_s += seconds
        self.ignored += 1

    @property
    def share(self) -> float | None:
        """Seconds spoken / seconds heard; None before any speech was heard."""
        return self.spoken_s / self.heard_s if self.heard_s > 0 else None

    def percent(self) -> str:
        """The share as a whole percentage, rounded down: "100 %" only when all was spoken."""
        share = self.share
        return "-" if share is None else f"{math.floor(100 * share + 1e-9)} %"

    def summary(self) -> dict:
        """The share (4 decimals), the seconds (2) and the counts, for a report."""
        share = self.share
        return {"share": None if share is None else round(share, 4),
                "heard_s": round(self.heard_s, 2), "spoken_s": round(self.spoken_s, 2),
                "ignored_s": round(self.ignored_s, 2), "ignored": self.ignored,
                "utterances_spoken": self.spoken,
                "utterances_not_spoken": self.utterances - self.spoken,
                "utterances": self.utterances}


def latency_bar(trace) -> tuple[float | None, dict[str, float]]:
    """End of speech -> first audio (s) and its share per stage, from a playback trace."""
    total = utterance_latency(trace)["speech_end_to_first_audio_s"]
    parts = stage_times(trace)
    stages = {name: round(sum(parts[p] or 0.0 for p in keys), 3)
              for name, keys in STAGES.items()}
    return total, stages


class Room:
    """The page's state, from the bus; every method returns the page events to send."""

    def __init__(self, actors: dict[str, str], src_lang: str, tgt_lang: str,
                 title: str = "voxweft") -> None:
        self.hosts = dict(actors)             # actor -> host, in pipeline order
        self.src_lang, self.tgt_lang, self.title = src_lang, tgt_lang, title
        self.utts: collections.OrderedDict[str, dict] = collections.OrderedDict()
        self.order = 0
        self.media: dict[str, tuple[float, float]] = {}   # utt -> media start, end (s)
        self.actors = {name: {"name": name, "host": host, "state": "down",
                              "detail": "not heard yet", "restarts": 0, "queue": 0,
                              "busy_s": 0.0} for name, host in self.hosts.items()}
        self.heard: dict[str, float] = {}
        self.epochs: dict[str, int] = {}
        self.lag_s: float | None = None
        # Utterances are forgotten after KEEP; the share of speech spoken is over the talk,
        # and counts the stretches not interpreted (not the speaker's) against it.
        self.tally = SpokenShare()
        self.counted: dict[str, tuple[float | None, bool]] = {}   # utt -> in the tally
        self.speech_s: dict[str, float] = {}   # utt -> its seconds of speech, once known
        self.session = secrets.token_hex(4)   # a restarted server is a new session
        # A sentence asr committed in pieces is one row that grows (mt's rule: a piece that
        # starts where the last ended goes on its sentence, `actors.phrases`).
        self.rows: dict[str, list[str]] = {}   # row (its first piece) -> its pieces
        self.row_of: dict[str, str] = {}       # piece -> its row
        self.sentence = Sentence()             # the open sentence of the final sources
        self.last_final: str | None = None     # the piece it ends with

    # -- what a browser gets ----------------------------------------------------------------
    def hello(self) -> Event:
        """The first event of every connection: languages and actors; the page starts over."""
        return "hello", {"title": self.title, "src_lang": self.src_lang,
                         "tgt_lang": self.tgt_lang, "actors": list(self.hosts),
                         "session": self.session}

    def stats(self) -> Event:
        """How far behind the speaker the voice is, and how much of what was said it spoke.

        `lag_s`: the last utterance's latency. `spoken_share`: seconds of speech of the
        utterances spoken / seconds of speech heard: those of the utterances whose fate is
        known (spoken, or not) and every stretch ignored (`ignored` of them, `ignored_s`
        seconds), over the whole talk (SpokenShare); None before any.
        """
        tally = self.tally.summary()
        return "stats", {"lag_s": self.lag_s,
                         "utterances": sum(not u["ignored"] for u in self.utts.values()),
                         "spoken_share": tally["share"],
                         "utterances_spoken": tally["utterances_spoken"],
                         "utterances_not_spoken": tally["utterances_not_spoken"],
                         "ignored": tally["ignored"], "ignored_s": tally["ignored_s"]}

    def snapshot(self) -> list[Event]:
        """Everything, for a browser that (re)connects."""
        return [self.hello(), *(("actor", dict(a)) for a in self.actors.values()),
                *(self._row(row) for row in self.rows), self.stats()]

    # -- from the bus -----------------------------------------------------------------------
    def apply(self, msg, now: float | None = None) -> list[Event]:
        """The page events one bus message causes (none for most)."""
        now = time.monotonic() if now is None else now
        if isinstance(msg, Status):
            return self._status(msg, now)
        if isinstance(msg, Supervision):
            return self._supervision(msg)
        if isinstance(msg, (Transcript, Translation)):
            return self._text(msg)
        if isinstance(msg, PlaybackEvent):
            return self._playback(msg)
        if isinstance(msg, VadEvent) and msg.event == "rejected":
            return self._ignored(msg)
        return []

    def tick(self, now: float | None = None) -> list[Event]:
        """Actors not heard for SILENT_S are down (a killed process says nothing)."""
        now = time.monotonic() if now is None else now
        out = []
        for name, at in self.heard.items():
            actor = self.actors[name]
            if now - at > SILENT_S and actor["state"] != "down":
                actor.update(state="down", detail=f"no heartbeat for {now - at:.0f} s",
                             busy_s=0.0)
                out.append(("actor", dict(actor)))
        return out

    def _status(self, msg: Status, now: float) -> list[Event]:
        actor = self.actors.get(msg.src)
        if actor is None:
            return []
        self.heard[msg.src] = now
        before = dict(actor)
        previous = self.epochs.get(msg.src)
        if previous is not None and previous != msg.epoch:
            actor["restarts"] += 1
        self.epochs[msg.src] = msg.epoch
        detail = msg.detail
        if msg.unreachable:
            detail = "cannot hear " + ", ".join(sorted(msg.unreachable)) + (
                f"; {detail}" if detail else "")
        if msg.echo:   # capture cancelling the loudspeaker: learning, or how much it removes
            detail = "; ".join(d for d in (detail, describe_echo(msg.echo)) if d)
        actor.update(state=msg.state, detail=detail, busy_s=round(msg.busy_s, 1),
                     queue=msg.outstanding + msg.counters.get("backlog", 0))
        return [("actor", dict(actor))] if actor != before else []

    def _supervision(self, msg: Supervision) -> list[Event]:
        actor = self.actors.get(msg.actor)
        if actor is None or msg.state not in DOWN or actor["state"] == "down":
            return []
        actor.update(state="down", detail=describe(msg), busy_s=0.0)
        self.heard.pop(msg.actor, None)
        return [("actor", dict(actor))]

    def _utterance(self, utt: str, media_start_s: float | None = None) -> dict:
        """The piece `utt`, made (in a row of its own, or the open sentence's) if new."""
        u = self.utts.get(utt)
        if u is None:
            self.order += 1
            u = self.utts[utt] = {"utt": utt, "order": self.order, "source": "", "target": "",
                                  "source_final": False, "target_final": False,
                                  "spoken": False, "not_spoken": "", "latency_s": None,
                                  "stages": {}, "ignored": ""}
            sources, _said = (self.sentence.before(media_start_s) if media_start_s is not None
                              else ([], []))
            row = self.row_of.get(self.last_final) if sources and self.last_final else None
            row = row if row in self.rows else utt
            self.row_of[utt] = row
            self.rows.setdefault(row, []).append(utt)
            while len(self.utts) > KEEP:
                old, _ = self.utts.popitem(last=False)
                self.media.pop(old, None)
                self.counted.pop(old, None)   # stays in the totals
                self.speech_s.pop(old, None)
                row = self.row_of.pop(old, old)
                if old in self.rows.get(row, ()):
                    self.rows[row].remove(old)
                if not self.rows.get(row):
                    self.rows.pop(row, None)
        return u

    def _row(self, utt: str) -> Event:
        """The page event of the row `utt` is in: its pieces' texts joined, as one caption.

        The row is final when every piece is, spoken when every piece was, and its latency is
        its first piece's: when the listener first heard the sentence.
        """
        row = self.row_of.get(utt, utt)
        pieces = [self.utts[p] for p in self.rows.get(row, [utt]) if p in self.utts]
        out = dict(pieces[0])
        out["utt"] = row
        for side in ("source", "target"):
            out[side] = " ".join(p[side] for p in pieces if p[side])
            out[f"{side}_final"] = all(p[f"{side}_final"] for p in pieces)
        out["spoken"] = all(p["spoken"] for p in pieces)
        out["not_spoken"] = "; ".join(dict.fromkeys(p["not_spoken"] for p in pieces
                                                    if p["not_spoken"]))
        timed = next((p for p in pieces if p["latency_s"] is not None), pieces[0])
        out["latency_s"], out["stages"] = timed["latency_s"], timed["stages"]
        return "utterance", out

    def _text(self, msg: Transcript | Translation) -> list[Event]:
        u = self._utterance(msg.utt, msg.media_start_s)
        side = "source" if isinstance(msg, Transcript) else "target"
        if u[f"{side}_final"] or (u[side] == msg.text and not msg.final):
            return []   # a final text is never replaced by a draft, nor sent again
        u[side], u[f"{side}_final"] = msg.text, msg.final
        if msg.final:
            self.media[msg.utt] = (msg.media_start_s, msg.media_end_s)
            if side == "source":   # the sentence goes on with this piece, or ends
                # (its source stands for the translation: the row needs no translation)
                self.sentence.add(msg.media_start_s, msg.media_end_s, msg.text, msg.text)
                self.last_final = msg.utt
            if self._speech(msg.utt, msg.trace) and msg.utt in self.counted:
                self._count(msg.utt, u)   # its fate came first, without its speech
                return [self._row(msg.utt), self.stats()]
        return [self._row(msg.utt)]

    def _speech(self, utt: str, trace) -> bool:
        """Keep the utterance's seconds of speech from a trace; True when they are new."""
        seconds = speech_seconds(trace)
        if seconds is None or utt in self.speech_s:
            return False
        self.speech_s[utt] = seconds
        return True

    def _ignored(self, msg: VadEvent) -> list[Event]:
        """Speech the segmenter did not interpret (not the speaker's): a row that says so."""
        key = f"ignored.{msg.epoch:x}.{msg.seq}"
        if key in self.utts:       # the same event heard again
            return []
        self.tally.ignore(msg.end_s - msg.media_s)
        u = self._utterance(key)
        u["ignored"] = f"{max(msg.end_s - msg.media_s, 0.0):.1f} s not interpreted: {msg.reason}"
        u["source_final"] = u["target_final"] = True   # nothing more will come for it
        return [self._row(key), self.stats()]

    def _playback(self, msg: PlaybackEvent) -> list[Event]:
        if msg.event not in ("started", "skipped", "finished") or (
                msg.event == "finished" and msg.complete):
            return []
        u = self._utterance(msg.utt)
        self._speech(msg.utt, msg.trace)
        if msg.event == "skipped":
            u["not_spoken"] = msg.reason or "not spoken"
        elif msg.event == "finished":   # the player gave up on it part of the way through
            u["not_spoken"] = "cut off: a chunk came too late"
        else:
            u["spoken"] = True
            u["latency_s"], u["stages"] = latency_bar(msg.trace)
            if u["latency_s"] is not None:
                self.lag_s = u["latency_s"]
        self._count(msg.utt, u)
        return [self._row(msg.utt), self.stats()]

    def _count(self, utt: str, u: dict) -> None:
        """Count the utterance in the totals again: its fate, or its speech, is new."""
        if utt in self.counted:   # an event sent again (a restarted player) counts once
            self.tally.add(*self.counted[utt], times=-1)
        self.counted[utt] = (self.speech_s.get(utt), u["spoken"] and not u["not_spoken"])
        self.tally.add(*self.counted[utt])

    # -- the same texts as subtitles ----------------------------------------------------------
    def subtitles(self, side: str, fmt: str) -> str:
        """SRT or WebVTT of the final source or target texts, on the input's timeline."""
        rows = []
        for utt, u in self.utts.items():
            if not u[f"{side}_final"] or utt not in self.media:
                continue
            mark = NOT_SPOKEN if side == "target" and u["not_spoken"] else ""
            start, end = self.media[utt]
            rows.append({"text": mark + u[side], "media_start_s": start, "media_end_s": end})
        rows.sort(key=lambda r: r["media_start_s"])
        return render(rows, fmt)
