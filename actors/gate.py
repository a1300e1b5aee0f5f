"""The speaker, not the room: speech well below the speaker's own level is someone else's.

A microphone hears its speaker loudest; a second talker behind them (a stand, a corridor, a
conversation at the next table) is quieter by the extra distance, typically 10 dB or more.
Silero VAD hears both as speech. :class:`LevelGate` tells them apart by level alone, window
by window (the segmenter's 32 ms VAD windows):

* the level of a window is the mean energy of the last ``envelope_windows`` windows (512 ms
  by default) in dB: long enough to ride over a syllable's dip, short enough to fall within
  the hangover once the speaker stops;
* the speaker's level is the ``PERCENTILE``-th percentile of that level over the last
  ``memory_windows`` windows of accepted speech (30 s by default), learned only from speech
  the gate let through, so a quieter talker never teaches it their level;
* speech more than ``below_db`` under the speaker's level is not the speaker's: the
  segmenter treats it as silence (it opens no utterance, and it ends the speaker's after the
  hangover, as a pause does); while an utterance of theirs is open, ``hold_db`` under passes
  (their quieter words, a clause resumed softly after a comma).

Until ``learn_windows`` of speech have been heard (half a second) the gate lets everything
through: the first voice at the microphone is taken to be the speaker's. A louder voice later
(the speaker after a talker, or a speaker who came closer) passes the gate and lifts the
level within seconds; a speaker who moves away slowly is followed, one who drops by more than
``below_db`` at once is taken for the room. The level is kept across streams (the same
microphone and the same person); a restart of the segmenter learns it anew.

Pure logic: numpy only, no model, no sockets.
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: The speaker's level: this percentile of their accepted speech's levels (their loud part,
#: not their peaks: one shout does not raise it much).
PERCENTILE = 90.0
#: The reference is recomputed every this many learned windows (a percentile of 940 values).
REFRESH_WINDOWS = 8
#: While the speaker speaks (no pause yet), this much further under their level still passes.
HOLD_EXTRA_DB = 2.0
_FLOOR = 1e-10   # -100 dBFS: digital silence has a level, not -inf


class LevelGate:
    """Speech more than `below_db` dB under the speaker's running level is not the speaker's."""

    def __init__(self, below_db: float, *, hold_db: float | None = None,
                 envelope_windows: int = 16, memory_windows: int = 940,
                 learn_windows: int = 16) -> None:
        """`below_db` > 0, `hold_db` >= it (default: `below_db` + HOLD_EXTRA_DB).

        The counts are in VAD windows (32 ms).
        """
        if below_db <= 0:
            raise ValueError(f"below_db must be > 0, got {below_db!r}")
        self.below_db = float(below_db)
        self.hold_db = self.below_db + HOLD_EXTRA_DB if hold_db is None else float(hold_db)
        if self.hold_db < self.below_db:
            raise ValueError(f"hold_db ({hold_db!r}) must be >= below_db ({below_db!r})")
        self._energies: deque[float] = deque(maxlen=max(1, envelope_windows))
        self._learned: deque[float] = deque(maxlen=max(1, memory_windows))
        self._learn_windows = max(1, learn_windows)
        self._since_refresh = 0
        self.level_db = -100.0                    # the last window's level
        self.speaker_db: float | None = None      # the speaker's level, once learned

    def reset_stream(self) -> None:
        """A new stream: forget the recent windows, keep the speaker's level."""
        self._energies.clear()
        self.level_db = -100.0

    def hear(self, window: np.ndarray) -> float:
        """Take the next window's samples; return its level (dBFS of the recent energy)."""
        x = np.asarray(window, np.float32)
        self._energies.append(float(np.mean(x * x)) if len(x) else 0.0)
        self.level_db = 10.0 * float(np.log10(max(sum(self._energies) / len(self._energies),
                                                   _FLOOR)))
        return self.level_db

    @property
    def below_speaker_db(self) -> float:
        """How far the last window's level is under the speaker's (0 before it is learned)."""
        return 0.0 if self.speaker_db is None else self.speaker_db - self.level_db

    def passes(self, holding: bool = False) -> bool:
        """The last window may be the speaker's (always, until their level is learned).

        `holding`: an utterance of the speaker's is open (they speak, or pause for less
        than the hangover): `hold_db` under their level passes, their quieter words and a
        clause resumed softly; else `below_db`.
        """
        if self.speaker_db is None:
            return True
        return self.level_db >= self.speaker_db - (self.hold_db if holding else self.below_db)

    def learn(self) -> None:
        """The last window was the speaker's speech: its level feeds the speaker's."""
        self._learned.append(self.level_db)
        self._since_refresh += 1
        if len(self._learned) >= self._learn_windows and (
                self.speaker_db is None or self._since_refresh >= REFRESH_WINDOWS):
            self.speaker_db = float(np.percentile(np.fromiter(self._learned, float),
                                                  PERCENTILE))
            self._since_refresh = 0
