"""The voxweft wire protocol: message types, codec, socket presets, the bus client (client.py)."""

from voxweft.protocol.codec import ProtocolError, decode, encode
from voxweft.protocol.messages import (
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
    Voice,
    now_ns,
    trace_ns,
    traced,
)

__all__ = [
    "MAJOR", "REGISTRY", "AudioFrame", "Cut", "Done", "EndOfStream", "Message", "PlaybackEvent",
    "ProtocolError", "Segment", "SpeechChunk", "Status", "Supervision", "Transcript", "Translation",
    "VadEvent", "Voice", "decode", "encode", "now_ns", "trace_ns", "traced",
]
