"""The six actors, the runtime they share, and their engines."""

from __future__ import annotations


def actor_class(name: str):
    """The class of actor `name` (explicit table; imports only what that actor needs)."""
    if name == "capture":
        from voxweft.actors.capture import CaptureActor as cls
    elif name == "segmenter":
        from voxweft.actors.segmenter import SegmenterActor as cls
    elif name == "asr":
        from voxweft.actors.asr import AsrActor as cls
    elif name == "mt":
        from voxweft.actors.mt import MtActor as cls
    elif name == "tts":
        from voxweft.actors.tts import TtsActor as cls
    else:
        from voxweft.actors.player import PlayerActor as cls
    return cls
