"""Typed configuration: each actor's `[actors.NAME]` table, checked by pydantic.

Units are in the names; ranges and choices in the field declarations (see settings.base).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from voxweft.actors.settings.base import Between, Port, Settings

ACTOR_NAMES = ("capture", "segmenter", "asr", "mt", "tts", "player")

class VadKnobs(Settings):
    """The segmenter's tuning (actors.segmenting.UtteranceSegmenter), declared once.

    The topology's `[actors.segmenter]` table and the segmenter itself both check them here.
    """

    threshold: float = Field(0.5, gt=0.0, lt=1.0)  # speech prob to enter speech
    # prob below which a window counts as silence (hysteresis); 0 < it <= threshold
    neg_threshold: float = Field(0.35, gt=0.0, lt=1.0)
    min_speech_ms: int = Field(250, ge=0, le=10_000)  # shorter bursts are dropped as noise
    # silence needed after speech to close an utterance (latency knob)
    hangover_ms: int = Field(300, ge=0, le=10_000)
    # audio kept before speech onset so the first syllable survives
    pre_roll_ms: int = Field(200, ge=0, le=2_000)
    # audio kept after the last speech window; <= hangover_ms: in hand when the hangover closes
    post_roll_ms: int = Field(100, ge=0, le=10_000)
    # force a split (at a pause in the last seconds if any)
    max_segment_s: float = Field(15.0, ge=1.0, le=120.0)
    # silence after which a draft of the utterance goes out; 0 = none; < hangover_ms (a
    # draft after the hangover would come with the commit: pointless)
    speculate_ms: int = Field(100, ge=0, le=10_000)

    @model_validator(mode="after")
    def _between_fields(self) -> VadKnobs:
        if self.neg_threshold > self.threshold:
            raise ValueError(f"neg_threshold = {self.neg_threshold!r} must be <= threshold "
                             f"({self.threshold!r})")
        if self.post_roll_ms > self.hangover_ms:
            raise ValueError(f"post_roll_ms = {self.post_roll_ms!r} must be <= hangover_ms "
                             f"({self.hangover_ms!r}): post-roll must be in hand when the "
                             "hangover closes the utterance")
        if self.speculate_ms >= max(1, self.hangover_ms):
            raise ValueError(f"speculate_ms = {self.speculate_ms!r} must be < hangover_ms "
                             f"({self.hangover_ms!r}), or 0 for no drafts")
        return self


class SegmenterConfig(VadKnobs):
    """Tuning of :class:`UtteranceSegmenter`; durations are converted to samples at 16 kHz."""

    model_config = ConfigDict(frozen=True)

    # after such a pause, speech this long sends the grown utterance
    recheck_ms: int = Field(1000, ge=0, le=10_000)
    # while speech goes on, the open utterance so far this often (asr commits the words two
    # successive drafts agree on: LocalAgreement); 0 = none
    agree_every_ms: int = Field(0, ge=0, le=10_000)


class ActorConfig(Settings):
    """Keys every actor has."""

    host: str = "local"
    port: int = Port()                 # its PUB endpoint's TCP port on its host
    threads: int = Between(1, 64, 1)   # CPU threads for its model (oversubscription kills)
    nice: int = Between(0, 19, 0)      # CPU priority (0..19, higher yields): off-path work
    src_lang: str = ""                 # defaults to [pipeline] src_lang
    tgt_lang: str = ""                 # defaults to [pipeline] tgt_lang


class CaptureConfig(ActorConfig):
    """Microphone or file source publishing 20 ms frames of 16 kHz mono float32."""

    source: Literal["microphone", "file"] = "microphone"
    path: str = ""               # the file, when source = "file"
    fast: bool = False           # file only: do not pace in real time
    fast_speed: float = Between(1.0, 1000.0, 50.0)  # file + fast: pace at this x real time
    device: str = ""             # microphone name or index; "" = system default
    frame_ms: int = Between(10, 100, 20)
    wait_ready_s: float = 600.0  # file: wait this long for the pipeline to be ready, then start
    queue_ms: int = Between(20, 60000, 2000)  # microphone: audio held for a busy loop, then drop
    device_retry_ms: int = Between(100, 60000, 1000)  # after losing the device, retry this often
    # Never more than this much audio ahead of the segmenter (its SUB queue stays far below
    # its high-water mark, whose overflow stalls ZMTP heartbeats and drops the connection):
    # a file waits; a microphone's audio is dropped here, counted (dropped_ms) ...
    max_ahead_s: float = Between(1.0, 150.0, 30.0)
    # ... and no further reading while this many utterances are in flight (not yet done).
    max_outstanding: int = Between(1, 60, 8)
    # Echo cancelling (segmenter's echo_mode = "cancel"; docs/echo.md): the engine, and how
    # long an echo path its filter learns (the delay from loudspeaker to microphone and the
    # room's reverberation after it).
    echo_engine: Literal["speex", "webrtc"] = "speex"
    echo_filter_ms: int = Between(64, 2000, 512)

    @model_validator(mode="after")
    def _file_has_path(self) -> CaptureConfig:
        if self.source == "file" and not self.path:
            raise ValueError("path must name an audio file when source = 'file'")
        return self


class SegmenterActorConfig(ActorConfig, VadKnobs):
    """Silero VAD segmentation: the knobs of VadKnobs, its push port, cuts and the echo gate."""

    push_port: int = Port()
    # Commit a long utterance up to an earlier pause when asr says two drafts agree on it.
    commit_prefixes: bool = True
    # With commit_prefixes, while speech goes on: the open utterance so far this often, and
    # asr commits the words two successive drafts agree on at a pause in the audio, without
    # waiting for the VAD (LocalAgreement); 0 = off, else at least 300 ms. (Continuous run:
    # per-word ASR lag 2.33 -> 2.11 s, LAAL_CA 4.98 -> 4.39 s, asr +0.07 CPU s per s.)
    agree_every_ms: int = Between(0, 10_000, 1000)
    # Echo, where the microphone can hear the loudspeaker (Topology.echo_handling).
    # "cancel" (default) takes what the player plays out of the microphone (capture,
    # actors/echo.py: full duplex, the speaker heard while the translation plays; live, six
    # readers talking on: 79-84 % of their words heard, against 34 % with the gate and
    # nothing of the loudspeaker interpreted: docs/echo.md); "gate" ignores what the
    # microphone hears while the player is playing (and for echo_tail_ms after, room
    # reverberation and device latency: half duplex); "off" for headphones.
    echo_mode: Literal["cancel", "gate", "off"] = "cancel"
    echo_tail_ms: int = Between(0, 5000, 300)
    # The speaker, not the room (actors/gate.py): speech more than speaker_gate_db under the
    # running level of the voice that holds the floor may be someone else's, a talker behind
    # them; 0 = off (everyone the microphone hears, at once). While the holder speaks on,
    # speaker_hold_db under still passes: their quieter words. (A talker 10 dB below:
    # talker-only audio inside utterances 95 % -> 27 %; see docs/performance.md, the room.)
    speaker_gate_db: float = Between(0.0, 40.0, 8.0)
    speaker_hold_db: float = Between(0.0, 40.0, 10.0)
    # Nobody is made deaf by it (the floor): quieter speech is held back, and refused only when
    # the voice holding the floor is heard again soon (a talker under the speaker). Held-back
    # speech that goes on for floor_take_ms without the holder, or with nobody speaking for
    # floor_free_ms before and after it, took the floor (a new, quieter speaker; a question
    # from the floor): it is interpreted from its first word, that much later. docs/room.md.
    floor_free_ms: int = Between(500, 10_000, 1500)
    floor_take_ms: int = Between(500, 10_000, 2000)

    @model_validator(mode="after")
    def _agree_not_too_often(self) -> SegmenterActorConfig:
        if 0 < self.agree_every_ms < 300:
            raise ValueError(f"agree_every_ms = {self.agree_every_ms!r} must be 0 (off) or at "
                             "least 300: each one is a Whisper decode")
        if self.speaker_gate_db and self.speaker_hold_db < self.speaker_gate_db:
            raise ValueError(f"speaker_hold_db = {self.speaker_hold_db!r} must be >= "
                             f"speaker_gate_db ({self.speaker_gate_db!r}): the speaker's own "
                             "words pass more easily once they speak, not less")
        return self

    def vad_config(self) -> SegmenterConfig:
        """The segmenter's knobs; rechecks (cuts at an earlier pause) only with cuts."""
        values = self.model_dump(include=set(VadKnobs.model_fields))
        values["agree_every_ms"] = self.agree_every_ms
        if not self.commit_prefixes:
            values["recheck_ms"] = values["agree_every_ms"] = 0
        return SegmenterConfig.check(values)


class EngineConfig(ActorConfig):
    """An actor that owns one model engine chosen by name."""

    engine: str = ""
    settings: dict[str, Any] = Field(default_factory=dict)

    def engine_settings(self) -> dict:
        """Settings for the engine's constructor: the actor's thread budget, then its own."""
        return {"threads": self.threads, **self.settings}


class AsrConfig(EngineConfig):
    """Speech -> text, each utterance first brought to one level (`actors.loudness`)."""

    # Every utterance at this active level (dBFS) before the engine hears it; 0 = as it
    # came. (Room bench, Whisper base, offline: a reader 18 dB under the first after no
    # pause 19.6 -> 9.4 % WER, fading sentences 11.6 -> 5.8 %, the rest +-1 word.)
    level_dbfs: float = Between(-60.0, 0.0, -20.0)
    # With commits by agreement (`agree_every_ms`): a draft's words that end at least this
    # long before its audio ends are committed without waiting for the next draft to agree
    # (actors.asr.settled_words); 0 = only what two drafts agree on.
    settle_ms: int = Between(0, 5000, 0)


class MtConfig(EngineConfig):
    """Text -> text, a sentence committed in pieces translated as one (`actors.phrases`)."""

    # A piece the speech goes on from says all but its last hold_words new words; the next
    # piece says them as the whole sentence puts them. 0 = say every word at once.
    hold_words: int = Between(0, 4, 1)


class TtsConfig(EngineConfig):
    """The voice, and how it catches up when the translation falls behind the speaker."""

    # Speech queued at the player (s) at which the voice starts to speed up, the backlog at
    # which it reaches catchup_max_speed, and that speed (1.0 turns catching up off).
    # (0.25/2.0 s instead of 0.5/3.0 s: 3-min soak p50 3.06 -> 2.55 s, round trip WER
    # 19.8 -> 22.0 %, chrF 84.9 -> 85.0.)
    catchup_after_s: float = Between(0.0, 600.0, 0.25)
    catchup_full_s: float = Between(0.0, 600.0, 2.0)
    # Kokoro pt round trip WER (whisper base): Japanese voice jm_kumo 16 % at speed 1.0, 21 %
    # at 1.3, 44 % at 1.5 (LJ bench); its own pf_dora 3.7 % at 1.0, 10.5 % at 1.3, 15-20 % at
    # 1.4-1.5 (10 sentences), and it says the same in ~20 % less time.
    catchup_max_speed: float = Between(1.0, 2.0, 1.4)
    # A faster engine that speaks what is late (actors.lag, step 3), with its settings;
    # "" = none (the fallback for Portuguese, espeak-ng, is not understood).
    backlog_engine: str = ""
    backlog_settings: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _full_after_start(self) -> TtsConfig:
        if not self.catchup_full_s >= self.catchup_after_s + 0.1:
            raise ValueError(f"catchup_full_s = {self.catchup_full_s!r} must be between "
                             f"{self.catchup_after_s + 0.1} (catchup_after_s + 0.1) and 600.0")
        return self

    def speed(self, backlog_s: float) -> float:
        """Speaking-rate multiplier for a new utterance with `backlog_s` of speech queued."""
        share = (backlog_s - self.catchup_after_s) / (self.catchup_full_s - self.catchup_after_s)
        return round(1.0 + (self.catchup_max_speed - 1.0) * min(1.0, max(0.0, share)), 3)


class PlayerConfig(ActorConfig):
    """Plays speech chunks in utterance order to a device or a WAV file."""

    sink: Literal["device", "wav"] = "device"
    path: str = ""               # the WAV file, when sink = "wav"
    device: str = ""             # output device name or index; "" = system default
    # WAV sink rate (None: the rate of the first chunk, which each carries: nothing is
    # resampled); chunks at another rate are resampled to it
    sample_rate: int | None = Between(8000, 192000, None)
    gap_timeout_ms: int = Between(100, 60000, 2000)  # give up on a missing chunk after this
    jitter_ms: int = Between(0, 2000, 60)   # device: start (or resume after an underrun) with this
    device_retry_ms: int = Between(100, 60000, 1000)  # after losing the device, retry this often
    # device: the output stream's buffer (PortAudio's latency). Python's audio callback waits
    # for the GIL beside models on busy cores: at PortAudio's default (35 ms through ALSA's
    # pulse plugin) a 2-core machine running all six actors underran 91 times in 70 s (each a
    # click, and a jump in when the audio is heard, which the echo canceller cannot follow);
    # at 150 ms, none (docs/echo.md).
    latency_ms: int = Between(0, 1000, 150)
    # device, capture cancelling its echo: a 1 s rising sweep when capture starts listening,
    # from which the canceller learns the room before anyone talks (actors.echo.StartSound).
    # false: it learns from the first translation, over the speaker (held or lost meanwhile)
    start_sound: bool = True

    @model_validator(mode="after")
    def _wav_has_path(self) -> PlayerConfig:
        if self.sink == "wav" and not self.path:
            raise ValueError("path must name the output WAV file when sink = 'wav'")
        return self


CONFIG_TYPES: dict[str, type[ActorConfig]] = {
    "capture": CaptureConfig,
    "segmenter": SegmenterActorConfig,
    "asr": AsrConfig,
    "mt": MtConfig,
    "tts": TtsConfig,
    "player": PlayerConfig,
}

