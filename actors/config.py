"""Typed configuration: each actor's `[actors.NAME]` table and each engine's `settings`.

Every table is a pydantic model (`Settings`): unknown keys are refused, types are strict (a
TOML integer is fine where a float is wanted, `true` is no number), ranges and choices live in
the field declarations, rules between fields in validators. `check()` builds one and turns the
first error into one line naming the key, the value and what is allowed; the topology loader
adds the file and table in front. Units are in the names.
"""

from __future__ import annotations

import types
import typing
from typing import Any, ClassVar, Literal, TypeVar

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

ACTOR_NAMES = ("capture", "segmenter", "asr", "mt", "tts", "player")

T = TypeVar("T", bound="Settings")


class Settings(BaseModel):
    """Base of every checked table: unknown keys refused, strict types, checked on assignment."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)

    @classmethod
    def check(cls: type[T], values: dict[str, Any]) -> T:
        """Build from `values`; ValueError with one line naming the key at fault."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ValueError(describe(cls, exc.errors()[0])) from None


def _field_at(cls: type[BaseModel], loc: tuple) -> tuple[type[BaseModel], Any]:
    """The model and field an error location names, through nested models and lists."""
    model, field, annotation = cls, None, cls
    for part in loc:
        if isinstance(part, int):          # an item of a list or tuple
            annotation = next(iter(typing.get_args(annotation)), None)
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
            field = model.model_fields.get(str(part))
            annotation = field.annotation if field is not None else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        model = annotation          # the location ends at a nested table
    return model, field


def _plain(annotation: Any) -> type | None:
    """The type a value must have: `int | None` -> int, `list[X]` -> list."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    annotation = typing.get_origin(annotation) or annotation
    return annotation if isinstance(annotation, type) else None


def describe(cls: type[BaseModel], error: dict) -> str:
    """One line for a pydantic error: `key = value must ...` with what is allowed."""
    loc = ".".join(str(part) for part in error["loc"])
    value, kind = error.get("input"), error["type"]
    model, field = _field_at(cls, error["loc"][:-1] if kind == "extra_forbidden"
                             else error["loc"])
    if kind == "extra_forbidden":
        return f"unknown key {loc!r}; allowed keys: {', '.join(model.model_fields)}"
    if kind == "value_error":      # a rule of our own: its message says it all
        return str(error["ctx"]["error"])
    if field is None:
        return f"{loc}: {error['msg']}"
    if kind == "literal_error":
        choices = ", ".join(str(c) for c in typing.get_args(field.annotation))
        return f"{loc} = {value!r} is not one of: {choices}"
    bounds = {type(m).__name__: m for m in field.metadata
              if isinstance(m, (annotated_types.Ge, annotated_types.Gt, annotated_types.Le,
                                annotated_types.Lt))}
    if bounds and kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal",
                           "finite_number"):
        low = bounds.get("Ge") or bounds.get("Gt")
        high = bounds.get("Le") or bounds.get("Lt")
        low_s = "" if low is None else str(getattr(low, "ge", getattr(low, "gt", "")))
        high_s = "" if high is None else str(getattr(high, "le", getattr(high, "lt", "")))
        return f"{loc} = {value!r} must be between {low_s} and {high_s}"
    expected = _plain(field.annotation)
    if expected is not None and kind.endswith(("_type", "_parsing")):
        return f"{loc} = {value!r} must be a {expected.__name__}"
    return f"{loc} = {value!r}: {error['msg']}"


def Between(low: float, high: float, default: Any, **kw) -> Any:  # noqa: N802 (reads as a type)
    """A number field in low..high (inclusive; NaN and infinities refused)."""
    return Field(default, ge=low, le=high, **kw)


def Port() -> Any:  # noqa: N802 (reads as a type)
    """A TCP port every topology must give (the default 0 is refused)."""
    return Field(0, ge=1, le=65535, validate_default=True)


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

    @model_validator(mode="after")
    def _file_has_path(self) -> CaptureConfig:
        if self.source == "file" and not self.path:
            raise ValueError("path must name an audio file when source = 'file'")
        return self


class SegmenterActorConfig(ActorConfig):
    """Silero VAD segmentation; actors.vad.SegmenterConfig checks and explains each knob."""

    push_port: int = Port()
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
    echo_mode: Literal["gate", "off"] = "gate"
    echo_tail_ms: int = Between(0, 5000, 300)
    VAD_KEYS: ClassVar[tuple[str, ...]] = (
        "threshold", "neg_threshold", "min_speech_ms", "hangover_ms", "pre_roll_ms",
        "post_roll_ms", "max_segment_s", "speculate_ms")

    @model_validator(mode="after")
    def _vad_knobs(self) -> SegmenterActorConfig:
        self.vad_config()   # the segmenter's own rules, checked at topology load
        return self

    def vad_config(self):
        """The segmenter's knobs (actors.vad.SegmenterConfig); rechecks only with cuts."""
        from actors.vad import SegmenterConfig

        values = {key: getattr(self, key) for key in self.VAD_KEYS}
        if not self.commit_prefixes:
            values["recheck_ms"] = 0
        return SegmenterConfig.check(values)


class EngineConfig(ActorConfig):
    """An actor that owns one model engine chosen by name."""

    engine: str = ""
    settings: dict[str, Any] = Field(default_factory=dict)

    def engine_settings(self) -> dict:
        """Settings for the engine's constructor: the actor's thread budget, then its own."""
        return {"threads": self.threads, **self.settings}


class TtsConfig(EngineConfig):
    """The voice, and how it catches up when the translation falls behind the speaker."""

    # Speech queued at the player (s) at which the voice starts to speed up, the backlog at
    # which it reaches catchup_max_speed, and that speed (1.0 turns catching up off).
    # (0.25/2.0 s instead of 0.5/3.0 s: 3-min soak p50 3.06 -> 2.55 s, round trip WER
    # 19.8 -> 22.0 %, chrF 84.9 -> 85.0.)
    catchup_after_s: float = Between(0.0, 600.0, 0.25)
    catchup_full_s: float = Between(0.0, 600.0, 2.0)
    # Kokoro pt round trip WER: 16 % at speed 1.0, 21 % at 1.3, 44 % at 1.5.
    catchup_max_speed: float = Between(1.0, 2.0, 1.3)
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
    # WAV sink rate (None: the tts engine's own, so nothing is lost); others are resampled
    sample_rate: int | None = Between(8000, 192000, None)
    gap_timeout_ms: int = Between(100, 60000, 2000)  # give up on a missing chunk after this
    jitter_ms: int = Between(0, 2000, 60)   # device: start (or resume after an underrun) with this
    device_retry_ms: int = Between(100, 60000, 1000)  # after losing the device, retry this often

    @model_validator(mode="after")
    def _wav_has_path(self) -> PlayerConfig:
        if self.sink == "wav" and not self.path:
            raise ValueError("path must name the output WAV file when sink = 'wav'")
        return self


CONFIG_TYPES: dict[str, type[ActorConfig]] = {
    "capture": CaptureConfig,
    "segmenter": SegmenterActorConfig,
    "asr": EngineConfig,
    "mt": EngineConfig,
    "tts": TtsConfig,
    "player": PlayerConfig,
}

