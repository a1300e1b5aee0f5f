"""The wall time of an audio stream's samples, smoothed: a line fitted to its blocks' stamps.

PortAudio says when each block is heard (an output's DAC time) or was taken (an input's ADC
time). One block's stamp is off by a few ms (when its callback ran, how the host API counts
its periods), and the device's clock drifts against the wall clock (170 ppm seen on
PulseAudio's null sink). Where a few ms matter, the echo canceller's reference against the
microphone (actors.echo), samples are counted instead and mapped to wall time by the
least-squares line through the recent stamps. Both ends of the echo path use it: the player's
output stream (actors.sinks.DeviceSink) and capture's microphone frames (actors.echo).
"""

from __future__ import annotations

import collections

import numpy as np

#: A stamp this far (ns) from where the line puts it is a gap in the stream (a reopened
#: device): the line starts again.
GAP_NS = 200 * 10**6
#: This many stamps in a row off the line by more than STEP_NS, all on one side, are a step
#: (an ALSA underrun recovered: the stream's samples moved against the wall clock by a
#: period or two, 18 ms seen live): the line starts again from them. One stamp's jitter is
#: a few ms, either way.
STEP_NS = 4 * 10**6
STEP_STAMPS = 10


class SampleClock:
    """Stamps in (`stamp`, sample index -> wall ns), the fitted wall time of any sample out."""

    def __init__(self, rate: int, window: int = 1500, refit: int = 50) -> None:
        self.rate = rate
        self.refit = refit            # refit after this many new stamps
        self.points: collections.deque[tuple[int, int]] = collections.deque(maxlen=window)
        self.origin = 0               # ns: the stamps are kept relative to this
        self.fit: tuple[float, float, float] | None = None   # (a sample, its ns, ns per sample)
        self.new = 0                  # stamps since the last fit
        self.stepped = 0              # stamps in a row off the line, signed by the side
        self.steps = 0                # steps seen (and started again from)

    def stamp(self, sample: int, ns: int) -> None:
        """Sample `sample` of the stream is heard (or was taken) at wall time `ns`."""
        if self.points:
            last_sample, last_ns = self.points[-1]
            expected = last_ns + (sample - last_sample) * 1e9 / self.rate
            if abs(ns - self.origin - expected) > GAP_NS:
                self.reset()
        if not self.points:
            self.origin = ns
        elif len(self.points) >= STEP_STAMPS:
            off = ns - self.at(sample)
            side = (off > STEP_NS) - (off < -STEP_NS)
            self.stepped = self.stepped + side if side and self.stepped * side >= 0 else side
        self.points.append((sample, ns - self.origin))
        self.new += 1
        if abs(self.stepped) >= STEP_STAMPS:   # the new line: only the stamps since the step
            recent = list(self.points)[-STEP_STAMPS:]
            self.points.clear()
            self.points.extend(recent)
            self.fit, self.stepped = None, 0
            self.steps += 1

    def reset(self) -> None:
        """Forget the stamps (a new stream)."""
        self.points.clear()
        self.fit, self.new, self.stepped = None, 0, 0

    def at(self, sample: float) -> int | None:
        """The fitted wall time (ns) of `sample` (a fraction too); None before any stamp."""
        if not self.points:
            return None
        if self.fit is None or self.new >= self.refit:
            self._fit()
        x0, y0, slope = self.fit
        return self.origin + int(round(y0 + slope * (sample - x0)))

    def sample_at(self, ns: int) -> float:
        """The sample heard (or taken) at wall time `ns`, on the line (a fraction)."""
        if self.fit is None or self.new >= self.refit:
            self._fit()
        x0, y0, slope = self.fit
        return x0 + (ns - self.origin - y0) / slope

    def _fit(self) -> None:
        """Least squares about the stamps' mean (hours of samples lose no precision)."""
        x = np.fromiter((p[0] for p in self.points), np.float64, len(self.points))
        y = np.fromiter((p[1] for p in self.points), np.float64, len(self.points))
        x0, y0 = float(x.mean()), float(y.mean())
        nominal = 1e9 / self.rate
        slope = nominal
        spread = float(np.sum((x - x0) ** 2))
        if len(x) >= 10 and spread > 0:
            slope = float(np.sum((x - x0) * (y - y0)) / spread)
            if abs(slope / nominal - 1) > 0.01:   # no device is 1 % off: a bad fit
                slope = nominal
        self.fit, self.new = (x0, y0, slope), 0
