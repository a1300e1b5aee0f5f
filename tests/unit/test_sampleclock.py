"""actors.sampleclock: jittered, drifting block stamps in, each sample's wall time out to
within a fraction of the jitter (the echo canceller needs both ends to agree to ~1 ms)."""

from __future__ import annotations

import numpy as np

from voxweft.actors.sampleclock import SampleClock

RATE = 48000
BLOCK = 480
T0 = 1_796_000_000 * 10**9   # wall ns, as time.time_ns() reads today


def true_ns(sample: int, drift_ppm: float) -> int:
    return T0 + int(sample * 1e9 / RATE * (1 + drift_ppm * 1e-6))


def test_jitter_and_drift_are_smoothed_away():
    rng = np.random.default_rng(1)
    clock = SampleClock(RATE)
    errors_raw, errors_fit = [], []
    for i in range(3000):   # 30 s of 10 ms blocks, stamps off by up to 6 ms, 170 ppm drift
        sample = i * BLOCK
        stamp = true_ns(sample, 170) + int(rng.uniform(-3e6, 3e6))
        clock.stamp(sample, stamp)
        if i >= 200:
            errors_raw.append(abs(stamp - true_ns(sample, 170)))
            errors_fit.append(abs(clock.at(sample) - true_ns(sample, 170)))
    assert np.mean(errors_raw) > 1e6                   # the stamps: 1.5 ms off on average
    assert np.percentile(errors_fit, 99) < 0.5e6       # the line: under 0.5 ms
    # The drift is followed: a sample 30 s on is placed by the fitted rate, not the nominal.
    assert abs(clock.at(3000 * BLOCK) - true_ns(3000 * BLOCK, 170)) < 0.5e6


def test_a_gap_starts_the_line_again():
    clock = SampleClock(RATE)
    for i in range(100):
        clock.stamp(i * BLOCK, true_ns(i * BLOCK, 0))
    # The device stopped for 2 s and came back: its sample count went on as if it had not.
    for i in range(100, 120):
        clock.stamp(i * BLOCK, true_ns(i * BLOCK, 0) + 2 * 10**9)
    assert abs(clock.at(119 * BLOCK) - (true_ns(119 * BLOCK, 0) + 2 * 10**9)) < 10**5


def test_few_stamps_use_the_nominal_rate_and_none_says_so():
    clock = SampleClock(16000)
    assert clock.at(0) is None
    clock.stamp(0, T0)
    assert clock.at(16000) == T0 + 10**9


def test_hours_of_samples_lose_no_precision():
    clock = SampleClock(RATE)
    start = 10 * 3600 * RATE   # ten hours in
    for i in range(1500):
        sample = start + i * BLOCK
        clock.stamp(sample, true_ns(sample, -80))
    sample = start + 1500 * BLOCK
    assert abs(clock.at(sample) - true_ns(sample, -80)) < 10**4   # 10 us


def test_a_step_of_a_period_starts_the_line_again_from_the_stamps_after_it():
    # An ALSA underrun, recovered: the stream's samples move 18 ms against the wall clock.
    rng = np.random.default_rng(2)
    clock = SampleClock(RATE)
    for i in range(1000):
        clock.stamp(i * BLOCK, true_ns(i * BLOCK, 0) + int(rng.uniform(-3e6, 3e6)))
    for i in range(1000, 1040):
        clock.stamp(i * BLOCK, true_ns(i * BLOCK, 0) + 18 * 10**6 + int(rng.uniform(-3e6, 3e6)))
    assert clock.steps == 1
    assert abs(clock.at(1040 * BLOCK) - (true_ns(1040 * BLOCK, 0) + 18 * 10**6)) < 2e6
