"""Bounded lag: how the tts actor keeps the listener within `max_lag_s` of the speaker.

The lag of an utterance is how long after its speaker stopped the listener starts to hear
its translation: what has passed since then, plus whatever must happen before its first
sample plays (the speech still queued at the player, or synthesizing the first chunk,
whichever is longer). A talk that goes on faster than this machine can interpret makes the
lag grow without end; the tts actor takes these steps, in this order, one more the further
behind it is (see `decide`):

1. speedup: the voice speaks faster, up to `catchup_max_speed` (1.4: Kokoro's own Portuguese
   voice, pf_dora, round-trip WER 3.7 % at 1.0, 10.5 % at 1.3, 15-20 % at 1.4-1.5), and the
   pauses inside its speech are cut to 0.15 s (`actors.condense`). It ramps with the speech
   queued at the player and is at full speed from half the bound on. Faster speech is also
   cheaper to make. (Before that, mt took the fillers and stutters out of the source.)
2. long chunks: when the first audio would wait at the player anyway (speech queued), the
   text is synthesized in long chunks, which costs less per second of speech (7 %).
3. backlog engine: a faster engine (`backlog_engine`) speaks the utterance, from three
   quarters of the bound on. None by default: the only faster engine for Portuguese here
   (espeak-ng) is not understood (round-trip WER 108 %).
4. skip: an utterance that would start later than the bound is not spoken. Its transcript
   and translation are published as usual and kept in the outputs, marked "not spoken".

`max_lag_s = 0` turns the bound off (only the speed-up by queued speech is left): file
interpretation keeps every utterance.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxweft.protocol.messages import PlaybackEvent, trace_ns

#: The degradation steps, in the order they are taken (counters `lag_<step>` count them).
STEPS = ("speedup", "long_chunks", "backlog_engine", "skip")
FULL_SPEED_AT = 0.5       # of max_lag_s: from here on the voice speaks at full catch-up speed
BACKLOG_ENGINE_AT = 0.75  # of max_lag_s: from here on the backlog engine speaks


@dataclass(frozen=True)
class Decision:
    """What to do with one translation."""

    lag_s: float              # when its first sample would be heard, after its speech ended
    speed: float = 1.0        # speaking-rate multiplier
    long_chunks: bool = False
    backlog_engine: bool = False
    skip: str = ""            # non-empty: not spoken, and why

    def steps(self) -> list[str]:
        """The degradation steps this decision takes."""
        return [name for name, taken in zip(STEPS, (
            self.speed > 1.0, self.long_chunks, self.backlog_engine, bool(self.skip)),
            strict=True) if taken]


def decide(*, since_end_s: float, queued_s: float, first_chunk_s: float, max_lag_s: float,
           speed_for_queue: float, max_speed: float, has_backlog_engine: bool) -> Decision:
    """The steps for one translation.

    `since_end_s`: time since its speech ended; `queued_s`: speech queued at the player, not
    yet heard; `first_chunk_s`: what synthesizing a first chunk takes (measured at warm-up);
    `speed_for_queue`: the catch-up speed for `queued_s` (TtsConfig.speed).
    """
    lag = since_end_s + max(queued_s, first_chunk_s)
    if max_lag_s <= 0:
        return Decision(lag, speed_for_queue)
    if lag > max_lag_s:
        return Decision(lag, skip=f"{lag:.1f} s behind the speaker, over max_lag_s "
                                  f"{max_lag_s:g} s")
    # Long chunks while speech is queued: the first audio waits at the player anyway (the
    # tts actor also checks the long chunk will be made before the queued speech ends: a
    # long first chunk takes longer to make, tts first chunk p50 0.61 -> 1.08 s unchecked).
    long_chunks = queued_s > 2 * first_chunk_s
    if lag <= FULL_SPEED_AT * max_lag_s:
        return Decision(lag, speed_for_queue, long_chunks)
    # Falling behind: full speed.
    return Decision(lag, max_speed, long_chunks,
                    has_backlog_engine and lag > BACKLOG_ENGINE_AT * max_lag_s)


class Timeline:
    """When the player will have played all the speech sent so far, as tts can tell itself.

    The player plays a chunk after what it holds, or, when idle, after its jitter buffer, so
    each chunk sent at `now` moves the end to max(end, now + jitter) + its length. The
    player's events correct that when they come, though tts reads them only between two
    utterances, after a translation that may have waited behind a long one (counting on the
    events alone, a translation was judged against speech that had long been played: the
    lag came out ~1-2 s high). The last utterance sent finished: nothing is left after its
    end. A restarted player (new epoch) holds nothing.
    """

    def __init__(self, jitter_s: float = 0.1) -> None:
        self.jitter_ns = int(jitter_s * 1e9)
        self.end_ns = 0
        self.last_utt = ""
        self.epoch = 0

    def sent(self, utt: str, seconds: float, now_ns: int) -> None:
        """A chunk of `seconds` of speech of `utt` went to the player at `now_ns`."""
        self.end_ns = max(self.end_ns, now_ns + self.jitter_ns) + int(seconds * 1e9)
        self.last_utt = utt

    def heard(self, event: PlaybackEvent, now_ns: int) -> None:
        """What the player said it did."""
        if event.epoch != self.epoch:
            if self.epoch:   # restarted: what it held is gone (tts sends it again)
                self.end_ns = now_ns
            self.epoch = event.epoch
        if event.event != "started" and event.utt == self.last_utt:
            ended = trace_ns(event.trace, "play.end") or event.sent_ns or now_ns
            self.end_ns = min(self.end_ns, ended)

    def queued_s(self, now_ns: int) -> float:
        """Seconds of speech sent that will still be playing after `now_ns`."""
        return max(0.0, (self.end_ns - now_ns) / 1e9)
