"""VOXWEFT_FAULT: what a test injects is parsed per actor, and `pace` slows tts in seconds."""

from __future__ import annotations

import time

import numpy as np

from voxweft.actors.engines.tts import Spoken
from voxweft.actors.faults import _parse_fault
from voxweft.actors.tts import _paced


def test_a_fault_applies_to_its_actor_only_and_takes_a_number():
    assert _parse_fault("tts/pace:2.5", "tts") == ("pace", 2.5)
    assert _parse_fault("tts/pace:2.5", "asr") is None
    assert _parse_fault("crash_after:3", "mt") == ("crash_after", 3.0)
    assert _parse_fault("pace:fast", "tts") is None      # said in the log, not a crash
    assert _parse_fault("slower:4", "tts") is None       # gone: a factor of this machine


def test_pace_makes_each_second_of_speech_take_that_long_whatever_the_engine_took():
    rate = 16000
    chunks = [Spoken(pcm=np.zeros(rate // 10, np.float32), piece=i) for i in range(3)]
    start = time.monotonic()
    out = list(_paced(iter(chunks), rate, 2.0))     # 0.3 s of speech at 2 s per second
    took = time.monotonic() - start
    assert [c.piece for c in out] == [0, 1, 2]
    assert 0.6 <= took < 2.0, took
