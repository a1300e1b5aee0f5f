"""The voxweft wire protocol: message types, codec, socket presets, the bus client (client.py)."""

from protocol.codec import ProtocolError, decode, encode
from protocol.messages import (
    MAJOR,
    REGISTRY,
    AudioFrame,
    Cut,
    Done,
    EndOfStream,
    Message,
    PlaybackEvent,
    Segment,
    SpeechChunk,
    Status,
    Supervision,
    Transcript,
    Translation,
    VadEvent,
    now_ns,
    trace_ns,
    traced,
)

__all__ = [
    "MAJOR", "REGISTRY", "AudioFrame", "Cut", "Done", "EndOfStream", "Message", "PlaybackEvent",
    "ProtocolError", "Segment", "SpeechChunk", "Status", "Supervision", "Transcript", "Translation",
    "VadEvent", "decode", "encode", "now_ns", "trace_ns", "traced",
]
