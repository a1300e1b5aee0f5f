"""run_actor: drive an actor's load/handle/tick directly, without sockets or processes."""

from __future__ import annotations

import time

from voxweft.protocol.codec import decode, encode
from voxweft.protocol.messages import stamp


def run_actor(actor, inputs, *, src: str = "upstream", ticks: int = 1, tick_sleep_s: float = 0.0,
              loaded: bool = False):
    """Feed `inputs` through the wire codec into `actor`, tick it; return all outputs."""
    if not loaded:
        actor.epoch = 12345
        actor.load()
    outputs = []
    for seq, msg in enumerate(inputs, 1):
        wire = decode(encode(stamp(msg, src=msg.src or src, epoch=msg.epoch or 1, seq=seq)))
        actor.recv_ns = time.time_ns()
        outputs.extend(actor.handle(wire) or ())
        outputs.extend(actor.tick() or ())
    for _ in range(ticks):
        if tick_sleep_s:
            time.sleep(tick_sleep_s)
        outputs.extend(actor.tick() or ())
    return outputs
