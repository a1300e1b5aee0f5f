"""The closed registry of wire messages: small frozen dataclasses, one per type.

Every message shares the identity fields `src`, `epoch`, `seq` and `sent_ns`, which the
actor runtime stamps at send time. Messages that belong to an utterance carry its id
(`utt`), their languages and a timing `trace` that grows by one entry per stage event,
so any message downstream can tell each stage's latency and the end-to-end latency.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

#: Protocol major version. A receiver refuses a newer major; minor changes only add fields.
MAJOR = 1

#: One trace entry: (event name, wall-clock ns, media time in s or None).
#: Event names are "capture", "speech_start", "speech_end", "segment" and
#: "<stage>.recv|start|first|end" for asr, mt, tts and "play.start|end" for the player;
#: "<stage>.draft" marks a stage that took the work it did ahead on a draft (see is_draft).
TraceEvent = tuple[str, int, "float | None"]
Trace = tuple[TraceEvent, ...]

#: The bus's PCM rate (Hz): capture publishes 16 kHz mono, and every stage up to the
#: translation reads it (the one place this rate is declared).
BUS_RATE = 16_000

#: PCM sample formats allowed on the wire.
PCM_DTYPES = {"int16": np.dtype("<i2"), "float32": np.dtype("<f4")}


def utt_id(segmenter_epoch: int, number: int) -> str:
    """An utterance's id: its segmenter process, then its number there ("3f03cf.00012").

    Numbers count the utterances in the order they start in the speech.
    """
    return f"{segmenter_epoch % 0xFFFFFF:06x}.{number:05d}"


def utt_number(utt: str) -> tuple[str, int] | None:
    """(its segmenter process, its number there) of an id `utt_id` made; None otherwise."""
    process, _, number = utt.rpartition(".")
    return (process, int(number)) if process and number.isdigit() else None


def utt_before(a: str, b: str) -> bool:
    """Whether utterance `a` came before `b` in the speech, as far as their ids tell.

    Both from one segmenter process, `a` numbered lower (ids of two processes say nothing).
    """
    na, nb = utt_number(a), utt_number(b)
    return na is not None and nb is not None and na[0] == nb[0] and na[1] < nb[1]


def now_ns() -> int:
    """Wall-clock time in ns: traces are compared across processes and hosts."""
    return time.time_ns()


def traced(trace: Trace, event: str, wall_ns: int | None = None,
           media_s: float | None = None) -> Trace:
    """Return `trace` with one more event appended."""
    return trace + ((event, now_ns() if wall_ns is None else wall_ns, media_s),)


def trace_ns(trace: Trace, event: str) -> int | None:
    """Wall-clock ns of the last `event` in `trace`, or None when absent."""
    for name, wall, _media in reversed(trace):
        if name == event:
            return wall
    return None


@dataclass(frozen=True, kw_only=True)
class Message:
    """Fields every message carries; the runtime stamps them when it sends."""

    TYPE: ClassVar[str] = ""
    src: str = ""
    epoch: int = 0
    seq: int = 0
    sent_ns: int = 0

    def topic(self) -> bytes:
        """ZeroMQ topic: `<type>.<src>`, so subscribers filter by type or by sender."""
        return f"{self.TYPE}.{self.src}".encode()


@dataclass(frozen=True, kw_only=True)
class PcmMessage(Message):
    """A message whose audio travels raw in its own frame, described by the header."""

    sample_rate: int = BUS_RATE
    pcm: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32), compare=False)

    @property
    def duration_s(self) -> float:
        """Length of the audio in seconds."""
        return len(self.pcm) / self.sample_rate if self.sample_rate else 0.0


@dataclass(frozen=True, kw_only=True)
class AudioFrame(PcmMessage):
    """20 ms of captured audio (16 kHz mono float32 in the pipeline)."""

    TYPE: ClassVar[str] = "audio"
    stream: str = ""          # which recording: a resumed file keeps its id, a microphone's is new
    media_s: float = 0.0      # stream time of the first sample
    capture_ns: int = 0       # wall-clock time the first sample was captured
    #: File sources: the segmenter epoch the frame is meant for. A restarted segmenter
    #: ignores what was meant for its predecessor; the source rewinds and sends again.
    for_epoch: int = 0


@dataclass(frozen=True, kw_only=True)
class EndOfStream(Message):
    """A finite source (a file) has ended; `utterances` is set by the segmenter."""

    TYPE: ClassVar[str] = "eos"
    media_s: float = 0.0
    utterances: int = -1
    stream: str = ""
    for_epoch: int = 0        # as AudioFrame.for_epoch


@dataclass(frozen=True, kw_only=True)
class VadEvent(Message):
    """Voice activity: an utterance started, ended (committed) or was discarded as noise.

    Or speech was heard that is not the speaker's ("rejected", no utterance): from `media_s`
    to `end_s`, and `reason` says why.
    """

    TYPE: ClassVar[str] = "vad"
    utt: str = ""
    event: str = "start"      # start | end | discard | rejected
    media_s: float = 0.0
    wall_ns: int = 0
    end_s: float = 0.0        # rejected: where that speech ended
    reason: str = ""          # rejected: why, in words ("11 dB under the speaker")


@dataclass(frozen=True, kw_only=True)
class Segment(PcmMessage):
    """One utterance's PCM with its media times, sent to ASR over PUSH."""

    TYPE: ClassVar[str] = "segment"
    utt: str = ""
    stream: str = ""          # the AudioFrame stream it was cut from
    src_lang: str = ""
    media_start_s: float = 0.0
    media_end_s: float = 0.0
    forced: bool = False      # cut at max_segment_s rather than at a pause
    #: The same speech goes on in the next segment, from this one's end (a cut, a forced
    #: split inside speech): its sentence is not over.
    goes_on: bool = False
    #: False: a draft (see `is_draft`), sent when a pause begins, before the hangover commits.
    final: bool = True
    #: A draft sent while the speaker goes on after a pause, for asr alone: with more audio
    #: it checks the words up to that pause (see Cut). Nothing downstream sees it.
    growing: bool = False
    trace: Trace = ()


@dataclass(frozen=True, kw_only=True)
class Voice(PcmMessage):
    """segmenter -> tts: a committed utterance's speech, for its translation's voice.

    Published on the segmenter's PUB for every committed utterance; ZeroMQ filters by topic
    at the sender, so only a subscriber of `voice.` gets it (tts, when its engine speaks in
    the speaker's voice), and nothing crosses a link to hosts that do not ask. Raw 16 kHz
    mono PCM; samples the echo gate took from the microphone are zeros.
    """

    TYPE: ClassVar[str] = "voice"
    utt: str = ""
    stream: str = ""


@dataclass(frozen=True, kw_only=True)
class Cut(Message):
    """asr -> segmenter: commit the open utterance `utt` up to an earlier pause, now.

    Sent when two successive drafts of a growing utterance agree on its words up to the
    earlier draft's end, and the later one puts a clause mark there (actors.asr). The
    segmenter, if `utt` is still open, closes it at `media_end_s` (the earlier draft's end,
    inside its pause) as an utterance of its own, and the rest goes on as the next one.
    """

    TYPE: ClassVar[str] = "cut"
    utt: str = ""
    stream: str = ""
    media_start_s: float = 0.0   # the draft's audio: where the utterance starts...
    media_end_s: float = 0.0     # ...where it is cut
    speech_end_s: float = 0.0    # the end of its last speech (the cut is after it)
    text: str = ""               # what the committed part says (the earlier draft's words)


@dataclass(frozen=True, kw_only=True)
class Transcript(Message):
    """Source-language text of an utterance (final, or a draft: see `is_draft`)."""

    TYPE: ClassVar[str] = "transcript"
    utt: str = ""
    src_lang: str = ""
    text: str = ""
    final: bool = True
    media_start_s: float = 0.0
    media_end_s: float = 0.0
    #: The speech goes on in the next transcript (Segment.goes_on): its sentence is not over.
    goes_on: bool = False
    #: The source text of the earlier pieces of this one's sentence, as asr committed them
    #: (actors.phrases): what mt translates this piece after, even if mt restarted meanwhile.
    context: list[str] = field(default_factory=list)
    trace: Trace = ()


@dataclass(frozen=True, kw_only=True)
class Translation(Message):
    """Target-language text of an utterance."""

    TYPE: ClassVar[str] = "translation"
    utt: str = ""
    src_lang: str = ""
    tgt_lang: str = ""
    source_text: str = ""
    text: str = ""
    media_start_s: float = 0.0
    media_end_s: float = 0.0
    final: bool = True        # False: a draft (see `is_draft`), never spoken
    trace: Trace = ()


@dataclass(frozen=True, kw_only=True)
class SpeechChunk(PcmMessage):
    """Streamed synthesized audio for an utterance; `last` closes the utterance."""

    TYPE: ClassVar[str] = "speech"
    utt: str = ""
    tgt_lang: str = ""
    index: int = 0
    last: bool = False
    text: str = ""
    speed: float = 1.0        # speaking-rate multiplier the voice used (catching up)
    #: The words of the translation it speaks: its piece of the synthesis is words
    #: `word`..`word + words` of `text.split()`, in `part` + 1 parts, this one the piece's
    #: last if `piece_end`. The `last` chunk: `word` is how many words the translation has.
    #: A chunk belongs to one synthesis (its sender's epoch); a restarted tts makes the
    #: rest anew, perhaps cut otherwise, and the player goes on where the old one stopped.
    word: int = 0
    words: int = 0
    part: int = 0
    piece_end: bool = True
    #: On the `last` chunk: why the translation was not spoken ("" when it was), e.g. the
    #: listener is too far behind (actors.lag). The player says so in its "skipped" event.
    skipped: str = ""
    trace: Trace = ()


@dataclass(frozen=True, kw_only=True)
class PlaybackEvent(Message):
    """The player started or finished an utterance (or skipped an empty one)."""

    TYPE: ClassVar[str] = "playback"
    utt: str = ""
    event: str = "started"    # started | finished | skipped
    duration_s: float = 0.0
    complete: bool = True     # False when a gap timed out before the last chunk came
    reason: str = ""          # skipped: why it was not spoken ("" for an empty translation)
    #: finished: how often the listener heard a hole inside it (the next chunk came after the
    #: one before had played: an underrun), and how long they were in all (s)
    underruns: int = 0
    underrun_s: float = 0.0
    trace: Trace = ()


@dataclass(frozen=True, kw_only=True)
class Played(PcmMessage):
    """What the player is about to play, 16 kHz mono: the echo canceller's reference.

    Published when written to the device, ahead of being heard. The pieces of one player
    process form one continuous stream of the device's output, silence included: `pos` is
    the position of the first sample in it (16 kHz samples). Where the device is now, on the
    player's host: position `at_pos` is heard at wall time `at_ns` (PortAudio's DAC times,
    fitted; a recent point, never one extrapolated seconds ahead).
    """

    TYPE: ClassVar[str] = "played"
    pos: int = 0
    at_pos: int = 0
    at_ns: int = 0


@dataclass(frozen=True, kw_only=True)
class Done(Message):
    """The player wrote an utterance whole to its sink, or skipped it (no speech).

    Every stage keeps what it sent for an utterance until this arrives, and sends it again
    when the next stage restarts or loses its connection: a crash loses no utterance.
    """

    TYPE: ClassVar[str] = "done"
    utt: str = ""
    complete: bool = True


@dataclass(frozen=True, kw_only=True)
class Status(Message):
    """Liveness and readiness heartbeat, published at >= 1 Hz by every actor."""

    TYPE: ClassVar[str] = "status"
    state: str = "loading"    # loading | ready | degraded | stopping
    detail: str = ""
    pid: int = 0
    engine: str = ""
    busy_s: float = 0.0       # how long the current model call has run; 0 when idle
    counters: dict[str, int] = field(default_factory=dict)
    peers: dict[str, int] = field(default_factory=dict)   # sender -> epoch last heard
    #: sender -> how often its stream broke (disconnect, sequence gap): each change asks the
    #: sender to send again what it still holds for us
    links: dict[str, int] = field(default_factory=dict)
    outstanding: int = 0      # utterances sent and held until Done (or queued, the player)
    #: The oldest utterances it holds until Done (at most HOLDING_LISTED): it asks the player
    #: their fate, so a Done it missed is said again; a player reading a file waits for what
    #: a holder will send again rather than cut an utterance short.
    holding: list[str] = field(default_factory=list)
    stream: str = ""          # the audio stream this actor works on ...
    media_ms: int = 0         # ... and how far into it: consumed (segmenter), received (asr)
    #: rss_kb, peak_rss_kb, cpu_ms (user + system), fds (open descriptors), threads
    resources: dict[str, int] = field(default_factory=dict)
    #: What its engine costs on this machine, measured at warm-up (tools.budget): `cpu` CPU
    #: seconds and `rtf` wall seconds per second of speech (the source's for asr and mt, its
    #: own for tts), `first_s` (tts: its first chunk), `cores` this host has.
    budget: dict[str, float] = field(default_factory=dict)
    #: Clocks across hosts (actors.clock): for each sender whose heartbeat we hear, when it
    #: sent its last one (its clock) and when that arrived (ours) ...
    echo_sent: dict[str, int] = field(default_factory=dict)
    echo_recv: dict[str, int] = field(default_factory=dict)
    #: ... and what we make of them: each other host's clock minus ours, in ms.
    clock_ms: dict[str, float] = field(default_factory=dict)
    #: Peers whose heartbeat we take but have not heard for UNREACHABLE_S: seconds silent
    #: (a cut link, a host or actor down).
    unreachable: dict[str, float] = field(default_factory=dict)
    #: The player: of each utterance it has begun, how many of its words it has whole (a
    #: restarted tts speaks only the rest).
    progress: dict[str, int] = field(default_factory=dict)
    #: Capture cancelling the loudspeaker's echo (actors.echo): converged (1/0), delay_ms,
    #: removed_db (how much quieter the microphone got while it played), playing_s, and
    #: reference (1/0: the player's heartbeat heard, so what it plays reaches capture).
    echo: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Supervision(Message):
    """What supervisord says about one actor, from the host's event listener (deploy.events).

    Sent on every state change and again each second, so a late subscriber learns the state
    too. `state` is supervisord's: STARTING, RUNNING, BACKOFF, STOPPING, STOPPED, EXITED,
    FATAL. `exit_status` is the last exit code (-1: killed by a signal); `reason` the actor's
    own last error line since it started, or what supervisord knows.
    """

    TYPE: ClassVar[str] = "supervision"
    actor: str = ""
    host: str = ""
    state: str = ""
    exit_status: int = 0
    expected: bool = True     # an exit supervisord does not restart (0, or 78: configuration)
    reason: str = ""
    since_ns: int = 0         # when it entered this state


#: The closed registry. Nothing on the wire is resolved by name outside this table.
REGISTRY: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (AudioFrame, EndOfStream, VadEvent, Segment, Voice, Cut, Transcript,
                Translation, SpeechChunk, PlaybackEvent, Played, Done, Status, Supervision)
}

#: The utterance path. A sender keeps each of these until the player's Done for its
#: utterance; a receiver drops one it has already handled.
CUSTODY_TYPES = (Segment, Transcript, Translation, SpeechChunk)

STATES = ("loading", "ready", "degraded", "stopping")


def is_draft(msg: Message) -> bool:
    """A draft: what an utterance would be if it ended at the pause now beginning.

    Speculative endpointing: the segmenter sends a draft Segment when a pause has lasted
    `speculate_ms`, before the hangover commits the utterance; asr, mt and tts work on it
    ahead and keep the result, which the final message of the same utterance uses when its
    speech is the same (the speaker did not go on). Drafts are never held for custody, never
    deduplicated, never written to transcripts and never spoken.
    """
    return not getattr(msg, "final", True)


def stamp(msg: Message, *, src: str, epoch: int, seq: int) -> Message:
    """Return `msg` with the sender identity and send time filled in."""
    return dataclasses.replace(msg, src=src, epoch=epoch, seq=seq, sent_ns=now_ns())


class Sender:
    """One publisher's identity on the wire: the one place messages are stamped.

    `src` names it, `epoch` is new at each process start (a receiver sees a restart), and
    `seq` counts per message type. `stamp` takes the next seq; for a send that may not go
    out (a PUSH with no worker yet) `stamp(msg, commit=False)` stamps without taking it and
    `sent(msg)` takes it once the message went out, so seqs stay gapless.
    """

    def __init__(self, src: str, epoch: int | None = None) -> None:
        self.src = src
        self.epoch = time.time_ns() if epoch is None else epoch
        self.seq: collections.Counter[str] = collections.Counter()

    def stamp(self, msg: Message, commit: bool = True) -> Message:
        """`msg` stamped with this sender's identity, its next seq and the send time."""
        stamped = stamp(msg, src=self.src, epoch=self.epoch, seq=self.seq[msg.TYPE] + 1)
        if commit:
            self.sent(stamped)
        return stamped

    def sent(self, msg: Message) -> None:
        """Take the seq of `msg` (stamped with commit=False), which went out."""
        self.seq[msg.TYPE] = msg.seq
