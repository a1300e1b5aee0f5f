"""The speaker, not the room: speech well below the voice that holds the floor is someone else's.

A microphone hears its speaker loudest; a second talker behind them (a stand, a corridor, a
conversation at the next table) is quieter by the extra distance, typically 10 dB or more.
Silero VAD hears both as speech. :class:`LevelGate` tells them apart by level, window by
window (the segmenter's 32 ms VAD windows), and the segmenter by timing (the floor):

* the level of a window is the mean energy of the last ``envelope_windows`` windows (512 ms
  by default) in dB: long enough to ride over a syllable's dip, short enough to fall within
  the hangover once the speaker stops (and low for the first windows after a pause: the
  floor is not decided in the first ``ONSET_WINDOWS`` of speech after a pause);
* the speaker's level is the ``PERCENTILE``-th percentile of that level over the last
  ``memory_windows`` windows of accepted speech (30 s by default), learned only from speech
  the gate let through, so a quieter talker never teaches it their level;
* speech more than ``below_db`` under the speaker's level may not be the speaker's; while an
  utterance of theirs is open, ``hold_db`` under passes (their quieter words, a clause resumed
  softly after a comma), and so does a sentence fading out further: the hold follows the
  utterance's own level down at most ``FADE_DB_PER_S``, passing down to ``FADE_STEP_DB``
  under it. A voice that stops with a talker under it takes the 512 ms envelope down faster,
  ~20 dB/s: the first window more than ``FADE_STEP_DB`` under the falling line ends the fade
  (else the line, falling on, would catch up with the talker's flat level and follow it).

Level alone would make the interpreter deaf to anyone quieter than the first voice. Who is
speaking is decided by the floor (``actors.floor``: the segmenter keeps it with this
gate's timings): quieter speech is held back, not thrown away, and it is refused only when the
voice that holds the floor is heard again soon (a talker under the speaker, overlapping or
between their sentences). Quieter speech that goes on for ``floor_take_ms`` (of speech)
without the holder, or with nobody speaking for ``floor_free_ms`` before and after it (a
question from the floor), took the floor: it is interpreted from its first window and its
level becomes the speaker's (:meth:`adopt`); a louder voice later takes the floor back at
once (it passes). A short quieter stretch after a pause that runs straight into the
holder's speech (a soft first word, at most ``soft_onset_ms``; after a pause or a dip shorter
than the hangover) is the holder's own, and so
is its mirror: as short a stretch begun within ``soft_onset_ms`` of the holder's last speech,
with as long a quiet after it (their soft last word).

The soft first word (and the soft last one) is a lone speaker's: with a talker under the
speaker, their lead-in looks just like it. A talker (or loud noise) shows under the
speaker's own words: the quiet between their words does not fall. So it is given only when
the room is quiet (:attr:`quiet_room`): the ``ROOM_PERCENTILE``-th percentile of the window
levels inside the holder's utterances, over the last ``ROOM_WINDOWS``, is at least
``QUIET_ROOM_DB`` under their level. The fade is given in every room: a recording whose own
noise is 20 dB under its reader is never a quiet room, and refusing its fades lost their
last words (docs/room.md).

Until ``learn_windows`` of speech have been heard (half a second) the gate lets everything
through: the first voice at the microphone is taken to be the speaker's. A louder voice later
passes and lifts the level within seconds. The level is kept across streams (the same
microphone); a restart of the segmenter learns it anew.

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
#: A sentence fading out (15 dB over its last 2-2.5 s falls 6-8 dB/s): the level the hold
#: follows falls at most this fast, and windows down to FADE_STEP_DB under it pass.
FADE_DB_PER_S = 9.0
FADE_STEP_DB = 4.0
#: The room is quiet (a lone speaker: a soft start is theirs) when this percentile
#: of the 32 ms window levels inside the holder's utterances (the last ROOM_WINDOWS, 10 s) is
#: QUIET_ROOM_DB or more under their level.
ROOM_PERCENTILE = 10.0
ROOM_WINDOWS = 312
QUIET_ROOM_DB = 25.0
_WINDOW_S = 0.032
#: The envelope of a voice starting after a pause still holds the pause for this many
#: windows (256 ms): no decision on the floor is made on them.
ONSET_WINDOWS = 8
_FLOOR = 1e-10   # -100 dBFS: digital silence has a level, not -inf


class LevelGate:
    """Speech more than `below_db` dB under the floor holder's running level may be a talker's."""

    def __init__(self, below_db: float, *, hold_db: float | None = None,
                 envelope_windows: int = 16, memory_windows: int = 940,
                 learn_windows: int = 16, floor_free_ms: int = 1500,
                 floor_take_ms: int = 2000, soft_onset_ms: int = 600) -> None:
        """`below_db` > 0, `hold_db` >= it (default: `below_db` + HOLD_EXTRA_DB).

        The counts are in VAD windows (32 ms); the floor's timings (read by the segmenter)
        in milliseconds.
        """
        if below_db <= 0:
            raise ValueError(f"below_db must be > 0, got {below_db!r}")
        self.below_db = float(below_db)
        self.hold_db = self.below_db + HOLD_EXTRA_DB if hold_db is None else float(hold_db)
        if self.hold_db < self.below_db:
            raise ValueError(f"hold_db ({hold_db!r}) must be >= below_db ({below_db!r})")
        self.floor_free_ms = floor_free_ms
        self.floor_take_ms = floor_take_ms
        self.soft_onset_ms = soft_onset_ms
        self.onset_windows = ONSET_WINDOWS
        self._windows = 0                         # windows heard
        self._followed: tuple[float, int] | None = None   # a fade: (level, window) followed
        self._room: deque[float] = deque(maxlen=ROOM_WINDOWS)   # levels inside utterances
        self._room_db: float | None = None        # their ROOM_PERCENTILE-th percentile
        self.window_db = -100.0                   # the last window's own level
        self._energies: deque[float] = deque(maxlen=max(1, envelope_windows))
        self._learned: deque[float] = deque(maxlen=max(1, memory_windows))
        self._learn_windows = max(1, learn_windows)
        self._since_refresh = 0
        self.level_db = -100.0                    # the last window's level
        self.speaker_db: float | None = None      # the speaker's level, once learned

    def reset_stream(self) -> None:
        """A new stream: forget the recent windows, keep the speaker's level."""
        self._energies.clear()
        self._followed = None
        self.level_db = -100.0

    def hear(self, window: np.ndarray, holding: bool = False) -> float:
        """Take the next window's samples; return its level (dBFS of the recent energy).

        `holding`: the window is inside an utterance of the holder's (the room's quiet).
        """
        x = np.asarray(window, np.float32)
        energy = float(np.mean(x * x)) if len(x) else 0.0
        self.window_db = 10.0 * float(np.log10(max(energy, _FLOOR)))
        if holding:
            self._room.append(self.window_db)
            if len(self._room) % REFRESH_WINDOWS == 0 or self._room_db is None:
                self._room_db = float(np.percentile(np.fromiter(self._room, float),
                                                    ROOM_PERCENTILE))
        self._energies.append(energy)
        self.level_db = 10.0 * float(np.log10(max(sum(self._energies) / len(self._energies),
                                                   _FLOOR)))
        self._windows += 1
        return self.level_db

    @property
    def below_speaker_db(self) -> float:
        """How far the last window's level is under the speaker's (0 before it is learned)."""
        return 0.0 if self.speaker_db is None else self.speaker_db - self.level_db

    def passes(self, holding: bool = False) -> bool:
        """The last window may be the speaker's (always, until their level is learned).

        `holding`: an utterance of the speaker's is open (they speak, or pause for less
        than the hangover): `hold_db` under their level passes, their quieter words and a
        clause resumed softly, and a fade (see the module); else `below_db`.
        """
        if self.speaker_db is None:
            return True
        if not holding:
            self._followed = None
            return self.level_db >= self.speaker_db - self.below_db
        if self.level_db >= self.speaker_db - self.hold_db:
            return True
        fade = self._fade_db()
        if fade is None:
            return False
        if self.level_db < fade - FADE_STEP_DB:
            self._followed = None   # it fell faster than a fade: the fade is over (falling on,
            return False            # the line would catch up with a talker's flat level)
        return True

    def _fade_db(self) -> float | None:
        """The level followed in the open utterance, fallen to now (None: none followed)."""
        if self._followed is None:
            return None
        level, at = self._followed
        return level - FADE_DB_PER_S * _WINDOW_S * (self._windows - at)

    def learn(self) -> None:
        """The last window was the speaker's speech: its level feeds the speaker's."""
        fade = self._fade_db()
        self._followed = (self.level_db if fade is None else max(self.level_db, fade),
                          self._windows)
        self._learned.append(self.level_db)
        self._since_refresh += 1
        if len(self._learned) >= self._learn_windows and (
                self.speaker_db is None or self._since_refresh >= REFRESH_WINDOWS):
            self._refresh()

    def _refresh(self) -> None:
        self.speaker_db = float(np.percentile(np.fromiter(self._learned, float), PERCENTILE))
        self._since_refresh = 0

    @property
    def quiet_room(self) -> bool:
        """Between the holder's words the room falls quiet: nobody under them (see module)."""
        return (self.speaker_db is not None and self._room_db is not None and
                self._room_db <= self.speaker_db - QUIET_ROOM_DB)

    def forget(self) -> None:
        """Forget the speaker's level: the next voice heard is the speaker's."""
        self._learned.clear()
        self._followed = None
        self.speaker_db = None
        self._since_refresh = 0

    def adopt(self, levels: list[float]) -> None:
        """A quieter voice took the floor: its speech's `levels` are the speaker's from now."""
        self.forget()
        self._learned.extend(levels)
        if self._learned:
            self._refresh()
            self._followed = (levels[-1], self._windows)   # their utterance goes on
