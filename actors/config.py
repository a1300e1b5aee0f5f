"""Typed configuration of each actor, as read from the topology's `[actors.NAME]` table.

Units are in the names. `validate()` raises ValueError naming the key and allowed values;
the topology loader adds the file and table to the message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ACTOR_NAMES = ("capture", "segmenter", "asr", "mt", "tts", "player")


def _choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{key} = {value!r} is not one of: {', '.join(allowed)}")


def _range(key: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValueError(f"{key} = {value!r} must be between {low} and {high}")


@dataclass
class ActorConfig:
    """Keys every actor has."""

    host: str = "local"
    port: int = 0             # its PUB endpoint's TCP port on its host
    threads: int = 1          # CPU threads for its model (small machines: oversubscription kills)
    nice: int = 0             # CPU priority (0..19, higher yields): work off the critical path
    src_lang: str = ""        # defaults to [pipeline] src_lang
    tgt_lang: str = ""        # defaults to [pipeline] tgt_lang

    def validate(self) -> None:
        """Raise ValueError on an unusable value."""
        _range("port", self.port, 1, 65535)
        _range("threads", self.threads, 1, 64)
        _range("nice", self.nice, 0, 19)


@dataclass
class CaptureConfig(ActorConfig):
    """Microphone or file source publishing 20 ms frames of 16 kHz mono float32."""

    source: str = "microphone"   # microphone | file
    path: str = ""               # the file, when source = "file"
    fast: bool = False           # file only: do not pace in real time
    fast_speed: float = 50.0     # file + fast: pace at this multiple of real time (bounded flood)
    device: str = ""             # microphone name or index; "" = system default
    frame_ms: int = 20
    wait_ready_s: float = 600.0  # file: wait this long for the pipeline to be ready, then start
    queue_ms: int = 2000         # microphone: audio held for a busy actor loop before dropping
    device_retry_ms: int = 1000  # microphone: after losing the device, try to reopen this often
    # Never more than this much audio ahead of the segmenter (its SUB queue stays far below
    # its high-water mark, whose overflow stalls ZMTP heartbeats and drops the connection):
    # a file waits; a microphone's audio is dropped here, counted (dropped_ms) ...
    max_ahead_s: float = 30.0
    # ... and no further reading while this many utterances are in flight (not yet done).
    max_outstanding: int = 8

    def validate(self) -> None:
        """Raise ValueError on an unusable value."""
        super().validate()
        _choice("source", self.source, ("microphone", "file"))
        _range("max_ahead_s", self.max_ahead_s, 1.0, 150.0)
        _range("max_outstanding", self.max_outstanding, 1, 60)
        if self.source == "file" and not self.path:
            raise ValueError("path must name an audio file when source = 'file'")
        _range("frame_ms", self.frame_ms, 10, 100)
        _range("fast_speed", self.fast_speed, 1.0, 1000.0)
        _range("queue_ms", self.queue_ms, 20, 60000)
        _range("device_retry_ms", self.device_retry_ms, 100, 60000)


@dataclass
class SegmenterActorConfig(ActorConfig):
    """Silero VAD segmentation; see actors.vad.SegmenterConfig for the meaning of each knob."""

    push_port: int = 0
    threshold: float = 0.5
    neg_threshold: float = 0.35
    min_speech_ms: int = 250
    hangover_ms: int = 300
    pre_roll_ms: int = 200
    post_roll_ms: int = 100
    max_segment_s: float = 15.0
    speculate_ms: int = 100
    # Commit a long utterance up to an earlier pause when asr says two drafts agree on it.
    commit_prefixes: bool = True
    # Echo: "gate" ignores what the microphone hears while the player is playing (and for
    # echo_tail_ms after, room reverberation and device latency); "off" for headphones.
    echo_mode: str = "gate"
    echo_tail_ms: int = 300

    def validate(self) -> None:
        """Raise ValueError on an unusable value."""
        super().validate()
        _range("push_port", self.push_port, 1, 65535)
        _choice("echo_mode", self.echo_mode, ("gate", "off"))
        _range("echo_tail_ms", self.echo_tail_ms, 0, 5000)


@dataclass
class EngineConfig(ActorConfig):
    """An actor that owns one model engine chosen by name."""

    engine: str = ""
    settings: dict = field(default_factory=dict)

    def engine_settings(self) -> dict:
        """Settings for the engine's constructor: the actor's thread budget, then its own."""
        return {"threads": self.threads, **self.settings}


@dataclass
class TtsConfig(EngineConfig):
    """The voice, and how it catches up when the translation falls behind the speaker."""

    # Speech queued at the player (s) at which the voice starts to speed up, the backlog at
    # which it reaches catchup_max_speed, and that speed (1.0 turns catching up off).
    # (0.25/2.0 s instead of 0.5/3.0 s: 3-min soak p50 3.06 -> 2.55 s, round trip WER
    # 19.8 -> 22.0 %, chrF 84.9 -> 85.0.)
    catchup_after_s: float = 0.25
    catchup_full_s: float = 2.0
    # Kokoro pt round trip WER: 16 % at speed 1.0, 21 % at 1.3, 44 % at 1.5.
    catchup_max_speed: float = 1.3
    # A faster engine that speaks what is late (actors.lag, step 3), with its settings;
    # "" = none (the fallback for Portuguese, espeak-ng, is not understood).
    backlog_engine: str = ""
    backlog_settings: dict = field(default_factory=dict)

    def validate(self) -> None:
        """Raise ValueError on an unusable value."""
        super().validate()
        _range("catchup_after_s", self.catchup_after_s, 0.0, 600.0)
        _range("catchup_full_s", self.catchup_full_s, self.catchup_after_s + 0.1, 600.0)
        _range("catchup_max_speed", self.catchup_max_speed, 1.0, 2.0)

    def speed(self, backlog_s: float) -> float:
        """Speaking-rate multiplier for a new utterance with `backlog_s` of speech queued."""
        share = (backlog_s - self.catchup_after_s) / (self.catchup_full_s - self.catchup_after_s)
        return round(1.0 + (self.catchup_max_speed - 1.0) * min(1.0, max(0.0, share)), 3)


@dataclass
class PlayerConfig(ActorConfig):
    """Plays speech chunks in utterance order to a device or a WAV file."""

    sink: str = "device"         # device | wav
    path: str = ""               # the WAV file, when sink = "wav"
    device: str = ""             # output device name or index; "" = system default
    sample_rate: int = 24000     # WAV sink rate; chunks at other rates are resampled
    gap_timeout_ms: int = 2000   # give up waiting for a missing chunk after this long
    jitter_ms: int = 60          # device: start (or resume after an underrun) with this much
    device_retry_ms: int = 1000  # device: after losing the device, try to reopen this often

    def validate(self) -> None:
        """Raise ValueError on an unusable value."""
        super().validate()
        _choice("sink", self.sink, ("device", "wav"))
        if self.sink == "wav" and not self.path:
            raise ValueError("path must name the output WAV file when sink = 'wav'")
        _range("sample_rate", self.sample_rate, 8000, 192000)
        _range("gap_timeout_ms", self.gap_timeout_ms, 100, 60000)
        _range("jitter_ms", self.jitter_ms, 0, 2000)
        _range("device_retry_ms", self.device_retry_ms, 100, 60000)


CONFIG_TYPES: dict[str, type[ActorConfig]] = {
    "capture": CaptureConfig,
    "segmenter": SegmenterActorConfig,
    "asr": EngineConfig,
    "mt": EngineConfig,
    "tts": TtsConfig,
    "player": PlayerConfig,
}
