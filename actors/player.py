"""player: speech chunks in, utterances played in order, Done out for each one it finished.

It keeps utterances in order, never stalls on a missing chunk, and answers the holders of
an utterance (actors.custody). Where the audio goes, a device or a WAV file, is actors.sinks.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soxr

from voxweft.actors.custody import OUTBOX_UTTERANCES, Finished
from voxweft.actors.devices import Recovery
from voxweft.actors.echo import Reference, StartSound, sweep
from voxweft.actors.runtime import Actor
from voxweft.actors.sinks import DeviceSink, WavSink
from voxweft.protocol.messages import (
    Done,
    Message,
    PlaybackEvent,
    Played,
    SpeechChunk,
    Status,
    now_ns,
    traced,
    utt_before,
    utt_number,
)

#: tts is taken for down when its heartbeat (2 Hz) has not been heard for this long.
TTS_SILENT_S = 1.5
#: A tts model call this long is stuck, not slow: the gap timeout applies again.
TTS_STUCK_S = 30.0
#: The stages that hold an utterance until our Done (actors.custody). A Done is published
#: once: a holder whose subscription to us is not live then (we or it just restarted, its
#: link to us broke and libzmq is still reconnecting), or that took the utterance again after
#: it, would hold the utterance for ever. So each holder's heartbeat lists what it holds
#: (`Status.holding`) and we answer with the Done of any we have finished.
HOLDERS = ("segmenter", "asr", "mt", "tts")
#: The same question is answered at most this often (a holder in a long model call reads
#: our answer only when the call ends; its heartbeat asks meanwhile).
ANSWER_EVERY_S = 2.0
#: A holder's list counts while its heartbeat is this recent (a dead holder sends nothing).
HOLDER_SILENT_S = 3.0
#: Reading a file, an utterance a holder lists is waited for at most this long after its
#: last chunk came: a holder that never sends its end (an engine that failed partway, a bug)
#: must not stop the whole file. (A tts restart with its model load takes 10-30 s.)
HELD_WAIT_S = 120.0
#: Why an utterance was not spoken when tts said nothing of it: the player gave up on it.
NO_AUDIO = "no audio came in time: the player moved on"
#: Bounded memory: utterances queued at most (each holder keeps at most OUTBOX_UTTERANCES)
#: and chunks per utterance (tts splits at clauses: a 15 s segment makes a few dozen).
QUEUE_UTTERANCES = 2 * OUTBOX_UTTERANCES
UTTERANCE_CHUNKS = 4096
#: The utterances begun whose progress the heartbeat lists at most (the head one, mostly).
PROGRESS_LISTED = 16
#: Audio of an utterance begun that comes this much after the audio before it has played is
#: an underrun (a hole the listener hears); less is the player's own tick (20 ms).
UNDERRUN_S = 0.04


@dataclass
class Utterance:
    """Playback state of one utterance."""

    utt: str
    chunks: dict[int, SpeechChunk] = field(default_factory=dict)
    next_index: int = 0
    last_index: int | None = None
    last_arrival: float = 0.0
    started_ns: int | None = None
    played_s: float = 0.0
    trace: tuple = ()
    complete: bool = True
    resampler: object = None      # soxr stream at the chunks' rate: no edge at chunk joins
    resampler_rate: int = 0
    hold_since: float | None = None   # monotonic time the jitter buffer started holding
    skipped: str = ""             # why tts did not speak it (its last chunk says)
    # One synthesis at a time (SpeechChunk.word): the chunks queued are those of the tts
    # epoch `synth`, its chunk i at index i + `offset` (after what an earlier one left).
    synth: int = 0
    offset: int = 0
    # Switched to a new synthesis: (the word it goes on from, the index its first chunk
    # takes); its chunks of words already had are dropped until then.
    resume: tuple[int, int] | None = None
    fed_to: int = 0               # words written whole (their piece's last part written)
    spans: list[list[int]] = field(default_factory=list)   # word spans written, in order
    of: int | None = None         # how many words the translation has (its last chunk says)
    underruns: int = 0            # holes heard inside it: a chunk came after the last played
    underrun_s: float = 0.0
    heard_until_ns: int = 0       # when its audio written so far will have been heard


class PlayerActor(Actor):
    """Plays utterances in arrival order; a missing chunk never stalls playback."""

    name = "player"

    def __init__(self, topology, config) -> None:
        super().__init__(topology, config)
        self.sink = None
        self.queue: collections.OrderedDict[str, Utterance] = collections.OrderedDict()
        # Events wait until the audio they describe is really heard: (due wall ns, event).
        self.pending: list[tuple[int, PlaybackEvent]] = []
        self.done = Finished(limit=1000)   # utterances written whole or skipped
        self.cut_next = False        # the next audio written does not continue the last
        self.recovery = Recovery("player", "output", "dropping audio and retrying",
                                 self.counters, self.log)
        self.acks: list[Done] = []   # utterances written whole or skipped, to announce
        self.tts: tuple[int, str, float] | None = None   # (epoch, state, monotonic heard)
        self.tts_back = 0.0          # monotonic time tts (re)started working for us
        self.answered: dict[str, float] = {}   # utterance -> when we last said its Done again
        # holder -> (monotonic heard, what its last heartbeat says it holds)
        self.holding: dict[str, tuple[float, list[str]]] = {}
        self.waited: set[str] = set()   # utterances held back for an earlier one (counted once)
        self.started = time.monotonic()
        self.asked_again = 0.0       # when we last asked tts for what it holds (a file)
        self.reported: dict[str, int] = {}   # what `progress` says (made by tick)
        # What we play, for capture to cancel its echo (actors.echo): a device only.
        self.reference: Reference | None = None
        self.played: list[Played] = []
        self.start_sound: StartSound | None = None

    def subscriptions(self) -> list[tuple[str, type[Message]]]:
        """TTS's speech chunks; the heartbeats of tts and of the other holders.

        A chunk is not late while tts restarts; a holder asks about what it holds (see
        `_answer`).
        """
        return [("tts", SpeechChunk)] + [(a, Status) for a in HOLDERS
                                         if a != "tts" and a in self.topology.actors] + \
            ([("capture", Status)] if self._teaches_room() else [])

    def _teaches_room(self) -> bool:
        """Whether the start sound is ours to play: a device, capture cancelling its echo."""
        return self.config.sink == "device" and self.config.start_sound and \
            self.topology.echo_handling == "cancel" and "capture" in self.topology.actors

    def _answer(self, msg: Status) -> list[Done]:
        """The Done again of each utterance holder `msg.src` asks about that we finished."""
        if msg.src not in HOLDERS:
            return []
        now = time.monotonic()
        self.holding[msg.src] = (now, list(msg.holding))   # oldest first: the send order
        again = [utt for utt in msg.holding if utt in self.done
                 and now - self.answered.get(utt, -ANSWER_EVERY_S) >= ANSWER_EVERY_S]
        for utt in again:
            self.answered[utt] = now
        if len(self.answered) > 256:   # bounded: what was answered a while ago is forgotten
            self.answered = {u: t for u, t in self.answered.items()
                             if now - t < ANSWER_EVERY_S}
        self.counters["done_again"] += len(again)
        return [Done(utt=utt) for utt in again]

    def _coming_again(self, u: Utterance) -> bool:
        """Reading a file: whether a holder will send what `u` lacks again (so wait for it).

        A holder lists `u`: tts is making it, or sends it again once back; or mt, asr or the
        segmenter does, once tts is. When tts holds `u`, is working and makes nothing, what
        `u` lacks was lost on the way: ask tts to send again what it holds.
        """
        if self.config.sink != "wav":
            return False   # a loudspeaker does not wait: what is late is not heard in time
        now = time.monotonic()
        if now - u.last_arrival > HELD_WAIT_S:
            self.counters["held_too_long"] += 1
            self.log.warning("player: %s: nothing came for %.0f s although it is held; "
                             "moving on", u.utt, now - u.last_arrival)
            return False
        held = {src for src, (heard, utts) in self.holding.items()
                if u.utt in utts and now - heard < HOLDER_SILENT_S}
        if "tts" in held:
            self._ask_tts_again(now)
        return bool(held)

    def _ask_tts_again(self, now: float) -> None:
        """Ask tts to send again all it holds (counted as a broken link), at most once a gap."""
        if now - self.asked_again > self.config.gap_timeout_ms / 1000:
            self.asked_again = now
            self.counters["asked_again"] += 1
            self.again.add("tts")

    def _session(self) -> str:
        """The session: the frozen topology file `up` and `interpret` write for each run."""
        source = Path(self.topology.source)
        if not source.is_file():
            return ""
        return f"{source.resolve()}|{source.stat().st_mtime_ns}"

    def held(self) -> int:
        """Utterances queued or not yet heard (the heartbeat's `outstanding`)."""
        return len(self.queue) + len(self.pending)

    def _tts_working(self) -> bool:
        if self.tts is None:
            return False
        _epoch, state, heard, _busy = self.tts
        return state in ("ready", "degraded") and time.monotonic() - heard < TTS_SILENT_S

    def _tts_making(self) -> bool:
        """Whether tts is alive and in a model call: making what the head utterance lacks.

        tts speaks one translation after another, so while the head utterance lacks its
        last chunk, what tts is making is that utterance's next chunk (on a busy machine a
        long chunk took longer than gap_timeout_ms after the audio before it had drained:
        the player cut 12 of 60 utterances short, each one heard only in part).
        """
        return self._tts_working() and 0.0 < self.tts[3] < TTS_STUCK_S

    def duplicate(self, msg: Message) -> Iterator[Message]:
        """A chunk sent again: if its utterance is done, say so again (tts missed it)."""
        if isinstance(msg, SpeechChunk) and msg.utt in self.done:
            yield Done(utt=msg.utt)

    def engine_name(self) -> str:
        """The sink kind."""
        return self.config.sink

    def load(self) -> None:
        """Open the device or the file.

        The file's rate is the player's `sample_rate`, else the first chunk's (each chunk
        says its rate): the player reads no other actor's settings.
        """
        if self.config.sink == "wav":
            self.sink = WavSink(self.config.path, self.config.sample_rate or 0, self._session())
            for utt in self.sink.done:
                self.done.add(utt)
            if self.sink.done:
                self.log.info("player: restarted; %s holds %d utterance(s) whole, %.1f s",
                              self.config.path, len(self.sink.done),
                              self.sink.written / self.sink.rate)
        else:
            self.sink = DeviceSink(self.config.device, self.counters,
                                   latency_s=self.config.latency_ms / 1000)
            self.log.info("player: %s", self.sink.describe())
            if self.topology.echo_handling == "cancel":
                self.reference = Reference(self.sink.rate, self.sink.now)
                self.start_sound = StartSound() if self._teaches_room() else None

    def handle(self, msg: Message) -> Iterator[Message]:
        """Buffer a chunk under its utterance."""
        if isinstance(msg, Status):
            if msg.src == "capture":
                self._teach_room(msg)
                return iter(())
            if msg.src == "tts":
                working_before = self._tts_working()
                self.tts = (msg.epoch, msg.state, time.monotonic(), msg.busy_s)
                if self._tts_working() and not working_before:
                    self.tts_back = time.monotonic()
            return iter(self._answer(msg))
        if not isinstance(msg, SpeechChunk):
            return iter(())
        if msg.utt in self.done:
            self.counters["late_chunks"] += 1   # its utterance is done already
            return iter((Done(utt=msg.utt),))
        if msg.utt not in self.queue and len(self.queue) >= QUEUE_UTTERANCES or \
                not 0 <= msg.index < UTTERANCE_CHUNKS:
            # More than any pipeline sends (its holders keep at most OUTBOX_UTTERANCES, tts
            # splits at clauses): a peer gone wrong. Dropped, counted, said once a while.
            self.counters["refused_chunks"] += 1
            if self.counters["refused_chunks"] in (1, 10, 100, 1000):
                self.log.warning("player: refused chunk %d of %s (%d utterances queued): "
                                 "more than a pipeline sends", msg.index, msg.utt,
                                 len(self.queue))
            return iter(())
        u = self.queue.setdefault(msg.utt, Utterance(msg.utt))
        if not self._of_synthesis(u, msg):
            return iter(())
        index = msg.index + u.offset
        u.chunks[index] = msg
        u.last_arrival = time.monotonic()
        if msg.last:
            u.last_index = index
            u.skipped = msg.skipped
            if msg.skipped and msg.index > 0:   # tts started it and could not finish it
                u.complete = False
        if not u.trace:
            u.trace = self.arrived(msg.trace, "play")
        return iter(())

    def _teach_room(self, capture: Status) -> None:
        """Play the start sound if it is due (actors.echo.StartSound): capture learns from it."""
        if self.start_sound is None or getattr(self.sink, "lost", ""):
            return
        idle = not self.queue and self.sink.idle()
        if self.start_sound.due(capture.echo or {}, capture.epoch, idle):
            pcm = sweep(self.sink.rate)
            self.sink.write(pcm, cut=True, end=True)
            self.played += self.reference.wrote(self.sink.last_pos, pcm)
            self.counters["start_sounds"] += 1
            self.log.info("player: the start sound (capture learns the room's echo from it)")

    def _of_synthesis(self, u: Utterance, msg: SpeechChunk) -> bool:
        """Whether `msg` is queued: a chunk belongs to one synthesis of its utterance.

        A restarted tts synthesises the utterance again (from the word the player has, see
        `progress`), perhaps cut into other pieces: its chunk i is not the old one's. So the
        first chunk of a newer synthesis switches to it (`_switch`); what the old one had
        sent that follows on whole is played first, and the new one's chunks of words
        already had are dropped. A chunk of an older synthesis than the one taken is dropped.
        """
        if msg.epoch != u.synth:
            if u.synth and msg.epoch < u.synth:
                self.counters["old_synthesis"] += 1
                return False
            self._switch(u, msg.epoch)
        if u.resume is None:
            return True
        word, slot = u.resume
        if word < 0 or not msg.last and msg.words and msg.word + msg.words <= word:
            self.counters["words_had"] += 1   # it speaks words already written or queued
            return False
        u.resume, u.offset = None, slot - msg.index
        if msg.word != word and msg.words:
            self.log.warning("player: %s: the new synthesis goes on at word %d, not %d",
                             u.utt, msg.word, word)
        return True

    def _switch(self, u: Utterance, epoch: int) -> None:
        """Take the chunks of `epoch`'s synthesis for `u` from now on."""
        old, u.synth = u.synth, epoch
        if not old:
            return
        self.counters["synthesis_switched"] += 1
        if u.started_ns is None and u.next_index == 0:   # nothing of it written: start over
            u.chunks.clear()
            u.last_index, u.skipped, u.offset = None, "", 0
            return
        # Keep what follows on from the audio written, up to the end of a whole piece.
        end, kept, i = u.fed_to, u.next_index, u.next_index
        while i in u.chunks and not u.chunks[i].last:
            if u.chunks[i].piece_end and u.chunks[i].words:
                end, kept = u.chunks[i].word + u.chunks[i].words, i + 1
            i += 1
        if i in u.chunks:   # the old synthesis is all here: none of the new one is needed
            u.resume = (-1, 0)
            return
        for index in [j for j in u.chunks if j >= kept]:
            del u.chunks[index]
        u.last_index, u.skipped = None, ""
        u.resume = (end, kept)
        self.log.info("player: %s: tts restarted; going on from word %d with its new "
                      "synthesis", u.utt, end)

    def _said(self, u: Utterance) -> int:
        """Words of `u` written whole or queued whole: a new synthesis goes on from there."""
        if u.resume is not None and u.resume[0] >= 0:
            return u.resume[0]
        end, i = u.fed_to, u.next_index
        while i in u.chunks and not u.chunks[i].last:
            if u.chunks[i].piece_end and u.chunks[i].words:
                end = u.chunks[i].word + u.chunks[i].words
            i += 1
        return end

    def progress(self) -> dict[str, int]:
        """The words the player has of each utterance begun (see `_said`), for a new tts."""
        return self.reported

    def health(self) -> str:
        """Degraded while the output device is lost."""
        lost = getattr(self.sink, "lost", "")
        return f"output device {self.config.device or 'default'!r} lost: {lost}" if lost else ""

    def tick(self) -> Iterator[Message]:
        """Feed the sink, head utterance first; publish started/finished events."""
        if getattr(self.sink, "lost", ""):
            self._recover()
        self._advance()
        yield from self.acks
        self.acks.clear()
        yield from self.played
        self.played.clear()
        # A new dict each time: the heartbeat thread reads it (`progress`).
        said = {}
        for u in self.queue.values():
            if len(said) >= PROGRESS_LISTED:
                break
            if u.synth:
                said[u.utt] = self._said(u)
        self.reported = {utt: n for utt, n in said.items() if n}
        now = now_ns()
        while self.pending and self.pending[0][0] <= now:
            yield self.pending.pop(0)[1]

    def _recover(self) -> None:
        """The device is lost: audio is dropped until it opens again (actors.devices)."""
        if self.recovery.step(self.config.device, self.sink.lost, self.config.device_retry_ms,
                              lambda: self.sink.describe() if self.sink.reopen() else ""):
            self.cut_next = True

    def _head(self) -> Utterance | None:
        """The utterance to write next; None while an earlier one is still to come.

        Reading a file, an utterance not started waits for the earlier ones a holder lists
        (see `_earlier`): a player restarted while tts was making the next one got the later
        ones live and the one its predecessor died with only in tts's resend, 10 s later (tts
        noticed the restart only between two syntheses), and wrote utterance 2 before 1; in
        CI a restarted player wrote 4 before 0-3, which tts had not made yet but the
        segmenter still held (test_kills_close). An earlier one that is neither here nor done
        is waited for (at most HELD_WAIT_S after the head's last chunk).
        """
        first = next(iter(self.queue.values()))
        if self.config.sink != "wav" or first.started_ns is not None:
            return first
        now = time.monotonic()
        if not self._heard_holders(now):
            return None
        seen = {first.utt}
        while True:   # the earliest here: what comes before the one before it, and so on
            earlier = self._earlier(first.utt, now)
            here = [self.queue[utt] for utt in earlier if utt in self.queue]
            if not here or here[0].utt in seen:
                break
            first = here[0]
            seen.add(first.utt)
        if here:
            return first
        if now - first.last_arrival < HELD_WAIT_S and \
                any(utt not in self.done for utt in earlier):
            if first.utt not in self.waited:
                self.waited.add(first.utt)
                self.counters["waited_for_earlier"] += 1
            if self._tts_working() and not self._tts_making():
                self._ask_tts_again(now)   # tts idles and has not sent it
            return None
        return first

    def _heard_holders(self, now: float) -> bool:
        """Whether we know what is still to come before what is here.

        A player restarted in this session (its file goes on) knows it once each holder's
        list has been heard (or HOLDER_SILENT_S has passed); in a new session nothing was
        sent before us.
        """
        holders = [a for a in HOLDERS if a in self.topology.actors]
        return not self.sink.resumed or \
            now - self.started >= HOLDER_SILENT_S or all(a in self.holding for a in holders)

    def _earlier(self, utt: str, now: float) -> list[str]:
        """The utterances to write before `utt`, in the order to write them.

        Those tts lists before it (its send order: oldest first), then those any holder
        lists that came before it in the speech (`utt_before`: one segmenter's numbering),
        oldest first. A holder counts while its heartbeat is recent.
        """
        lists = {src: utts for src, (heard, utts) in self.holding.items()
                 if now - heard < HOLDER_SILENT_S}
        order = lists.get("tts", [])
        earlier = [u for u in order[:order.index(utt)] if not utt_before(utt, u)] \
            if utt in order else []
        before = {u for utts in lists.values() for u in utts if utt_before(u, utt)}
        rest = sorted(before - set(earlier), key=utt_number)
        return earlier + rest

    def _advance(self) -> None:
        while self.queue:
            u = self._head()
            if u is None:
                return
            self._feed(u)
            if self.sink.busy_until_ns() > now_ns() or not self._tts_working() \
                    or self._tts_making():
                # Audio is still playing: the next chunk is not late until it has drained
                # (a long clause can take Kokoro longer than gap_timeout_ms to make), nor
                # while tts is making it. Nor while tts is down or loading: it sends the
                # utterance again when back.
                u.last_arrival = max(u.last_arrival, time.monotonic())
            u.last_arrival = max(u.last_arrival, self.tts_back)
            gap_s = time.monotonic() - u.last_arrival
            if u.last_index is not None and u.next_index > u.last_index:
                self._finish(u)
            elif gap_s * 1000 > self.config.gap_timeout_ms and not self._coming_again(u):
                self._feed(u, force=True)   # what the jitter buffer holds plays now
                if u.last_index is not None and u.next_index < u.last_index:
                    # A chunk in the middle is missing: skip it and play what follows.
                    self.counters["missing_chunks"] += 1
                    u.next_index += 1
                    u.complete = False
                    self.cut_next = True
                    continue
                self.counters["incomplete_utterances"] += 1
                u.complete = False
                self.log.warning("player: %s: no chunk for %.1f s; moving on", u.utt, gap_s)
                self._finish(u)
            else:
                return

    def _schedule(self, due_ns: int, event: PlaybackEvent) -> None:
        self.pending.append((due_ns, event))
        self.pending.sort(key=lambda item: item[0])   # stable: same time keeps send order

    def _holding(self, u: Utterance) -> bool:
        """Jitter buffer: True while the chunks from silence on should wait.

        From silence (an utterance's start, or after an underrun) audio waits until
        `jitter_ms` of it is here, the utterance is complete, or `jitter_ms` has passed.
        """
        jitter_s = self.config.jitter_ms / 1000
        if not jitter_s or not self.sink.idle():
            u.hold_since = None
            return False   # audio still queued ahead: appending keeps playback continuous
        held_s, i = 0.0, u.next_index
        while i in u.chunks:
            held_s += len(u.chunks[i].pcm) / u.chunks[i].sample_rate
            i += 1
        complete = u.last_index is not None and i > u.last_index
        if held_s >= jitter_s or complete:
            u.hold_since = None
            return False
        now = time.monotonic()
        if u.hold_since is None:
            u.hold_since = now
        if held_s and now - u.hold_since >= jitter_s:
            u.hold_since = None
            return False   # never wait longer than the buffer itself would have lasted
        return True

    def _resample(self, u: Utterance, chunk: SpeechChunk) -> np.ndarray:
        pcm = chunk.pcm.astype(np.float32)
        pcm = pcm.mean(axis=1) if pcm.ndim == 2 else pcm
        if chunk.sample_rate == self.sink.rate and u.resampler is None:
            return pcm
        if u.resampler is None or u.resampler_rate != chunk.sample_rate:
            tail = self._flush(u)
            # One stream per utterance: chunks resampled one by one would each get filter
            # edges (an audible tick at every join) and rounding drift in their lengths.
            u.resampler = soxr.ResampleStream(chunk.sample_rate, self.sink.rate, 1,
                                              dtype="float32")
            u.resampler_rate = chunk.sample_rate
            return np.concatenate([tail, u.resampler.resample_chunk(pcm)])
        return u.resampler.resample_chunk(pcm)

    def _flush(self, u: Utterance) -> np.ndarray:
        """What the utterance's resampler still holds (its filter delay)."""
        if u.resampler is None:
            return np.zeros(0, np.float32)
        tail = u.resampler.resample_chunk(np.zeros(0, np.float32), last=True)
        u.resampler = None
        return tail

    def _write(self, u: Utterance, pcm: np.ndarray, end: bool = False) -> None:
        if getattr(self.sink, "lost", ""):
            u.complete = False   # the device is gone: this audio is not heard
        if not len(pcm) and not end:
            return
        if len(pcm) and u.started_ns is not None:
            late_s = (now_ns() - u.heard_until_ns) / 1e9
            if late_s > UNDERRUN_S:   # the listener heard a hole inside the utterance
                u.underruns += 1
                u.underrun_s += late_s
                self.counters["underruns_inside"] += 1
        start_ns = self.sink.write(pcm, cut=self.cut_next and len(pcm) > 0, end=end)
        if self.reference is not None and len(pcm) and not getattr(self.sink, "lost", ""):
            # Ahead of being heard: capture has it before the microphone hears it.
            self.played += self.reference.wrote(self.sink.last_pos, pcm)
        u.heard_until_ns = self.sink.busy_until_ns()
        if len(pcm):
            self.cut_next = False
            u.played_s += len(pcm) / self.sink.rate
            if u.started_ns is None:
                u.started_ns = start_ns
                u.trace = traced(u.trace, "play.start", start_ns)
                self._schedule(start_ns, PlaybackEvent(utt=u.utt, event="started",
                                                       trace=u.trace))

    def _feed(self, u: Utterance, force: bool = False) -> None:
        if not force and self._holding(u):
            return
        while u.next_index in u.chunks:
            chunk = u.chunks.pop(u.next_index)
            u.next_index += 1
            if chunk.last:
                u.of = chunk.word
            elif chunk.words and len(chunk.pcm):
                span = [chunk.word, chunk.word + chunk.words]
                if chunk.part == 0 or not u.spans or u.spans[-1] != span:
                    u.spans.append(span)
                if chunk.piece_end:
                    u.fed_to = span[1]
            if len(chunk.pcm) == 0 and not (chunk.last and u.resampler is not None):
                continue
            if len(chunk.pcm):
                self.sink.take_rate(chunk.sample_rate)
            pcm = self._resample(u, chunk)
            if chunk.last:
                pcm = np.concatenate([pcm, self._flush(u)])
            self._write(u, pcm, end=chunk.last)

    def _whole(self, u: Utterance) -> bool:
        """Whether the words written are the translation's, each once, in order.

        Only for chunks that say their words (a tts of this version): the spans written
        tile 0..`of` without a hole or an overlap.
        """
        if not u.spans or u.of is None:
            return True
        at = 0
        for start, end in u.spans:
            if start != at:
                return False
            at = end
        return at == u.of

    def _finish(self, u: Utterance) -> None:
        if u.complete and not self._whole(u):
            u.complete = False
            self.counters["not_whole"] += 1
            self.log.warning("player: %s: the words written are not the translation's once "
                             "each: %s of %s", u.utt, u.spans, u.of)
        del self.queue[u.utt]
        self.done.add(u.utt)
        self.waited.discard(u.utt)
        self._write(u, self._flush(u), end=True)   # the last chunk never came
        self.sink.finished(u.utt, u.complete, u.played_s, u.spans, u.of)
        # Upstream stages may forget it now: it is in the sink, whole or as whole as it gets.
        self.acks.append(Done(utt=u.utt, complete=u.complete))
        if not u.complete:
            self.cut_next = True   # what follows does not continue this audio
        if u.started_ns is None:
            after = max([now_ns()] + [due for due, _ in self.pending])   # keep event order
            self._schedule(after, PlaybackEvent(utt=u.utt, event="skipped",
                                                complete=u.complete,
                                                reason=u.skipped or ("" if u.complete else
                                                                     NO_AUDIO),
                                                trace=traced(u.trace, "play.end")))
            return
        end_ns = self.sink.busy_until_ns()
        event = PlaybackEvent(utt=u.utt, event="finished", duration_s=round(u.played_s, 3),
                              complete=u.complete, reason="" if u.complete else u.skipped,
                              underruns=u.underruns, underrun_s=round(u.underrun_s, 3),
                              trace=traced(u.trace, "play.end", end_ns))
        self._schedule(end_ns, event)

    def tick_interval_s(self) -> float:
        """Audio is fed at 20 ms granularity."""
        return 0.02

    def close(self) -> None:
        """Flush the file or stop the device."""
        if self.sink is not None:
            self.sink.close()
