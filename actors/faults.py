"""Faults a test injects into an actor through VOXWEFT_FAULT (the only test hook in actors)."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("voxweft")


def injected_fault(actor: str) -> tuple[str, float] | None:
    """The fault VOXWEFT_FAULT injects into `actor`, or None (see `_parse_fault`)."""
    return _parse_fault(os.environ.get("VOXWEFT_FAULT", ""), actor)


def _parse_fault(spec: str, actor: str = "") -> tuple[str, float] | None:
    """The VOXWEFT_FAULT a test injects into this actor, or None.

    'crash_after:N' (exit 3 after N inputs), 'fail_load', 'flaky_load:N' (the first N load
    attempts fail), 'pace:S' (tts: each second of speech takes at least S seconds to make,
    drafts made ahead included, as on a machine that slow: slower in seconds, whatever
    this machine's speed). 'ACTOR/...' applies it to that actor only.
    """
    if not spec:
        return None
    if "/" in spec:
        only, _, spec = spec.partition("/")
        if only != actor:
            return None
    name, _, arg = spec.partition(":")
    if name not in ("crash_after", "fail_load", "flaky_load", "pace"):
        log.warning("ignoring unknown VOXWEFT_FAULT %r", spec)
        return None
    try:
        return name, float(arg or 0)
    except ValueError:
        log.warning("ignoring VOXWEFT_FAULT %r: %r is not a number", spec, arg)
        return None

