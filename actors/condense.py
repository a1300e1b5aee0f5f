"""Condensing: say the same in less time, before anything is left unsaid.

A human interpreter who falls behind does not fall silent: they leave out the "uh"s, the
false starts and the pauses, and speak a little faster. This module holds the two pieces of
that which work on what is said, one for each side of the translation:

- `disfluencies`: fillers ("uh", "um"), stutters ("the the") and false starts ("I- I
  think") are taken out of a transcript before it is translated (the mt actor). The
  transcript itself is kept as heard (captions, subtitles).
- `shorten_pauses`: silences inside synthesized speech longer than a bound are cut to it
  (the tts actor, when speech is queued at the player). A pause of 0.15 s still parts two
  clauses; what goes is the time nobody is waiting for.

The speaking rate that rises with the queue is `TtsConfig.speed`; the order of the steps,
with dropping last, is `actors.lag`.
"""

from __future__ import annotations

import re

import numpy as np

#: Silences inside speech are cut to this while speech is queued at the player.
PAUSE_WHEN_BEHIND_S = 0.15
#: Sounds that fill a pause and mean nothing, per source language. Only sounds no word
#: is spelled as: "like", "well", "you know" can mean something and are kept.
FILLERS = {
    "en": frozenset({"uh", "uhh", "um", "umm", "uhm", "erm", "er", "hmm", "hm", "mm", "ah"}),
    "es": frozenset({"eh", "ehh", "emm", "mm", "hmm"}),
    "pt": frozenset({"hã", "hum", "hmm", "mm", "ahn"}),
    "fr": frozenset({"euh", "heu", "hum", "hmm", "mm", "bah"}),
    "de": frozenset({"äh", "ähm", "öh", "hm", "hmm", "mm"}),
    "it": frozenset({"ehm", "mm", "hmm"}),
}
# Words that may stand twice in a row on purpose ("that that", "had had", "very very").
_MAY_REPEAT = frozenset({"that", "had", "is", "very", "really", "so", "no", "yes", "bye",
                         "many", "more", "far", "ha", "knock", "que", "muito", "très"})
_WORD = re.compile(r"\S+")
# Letters of a word, without the punctuation around it, lower case.
_BARE = re.compile(r"^[^\w]+|[^\w]+$")


def _bare(word: str) -> str:
    return _BARE.sub("", word).lower()


def disfluencies(text: str, lang: str) -> tuple[str, int]:
    """`text` without fillers, stutters and false starts; and how many words went.

    - a filler (`FILLERS[lang]`) goes, its punctuation with it unless it ends a sentence
      ("So, uh, we" -> "So, we"; "It works. Um." -> "It works.");
    - a word said again right after itself goes once ("the the cat" -> "the cat"), except
      words that are doubled on purpose (`_MAY_REPEAT`);
    - a cut-off word ("I- I think", "chan- change") goes.
    Nothing else changes: the text that is left is the speaker's own words, in order.
    """
    fillers = FILLERS.get(lang, frozenset())
    words = _WORD.findall(text)
    kept: list[str] = []
    for i, word in enumerate(words):
        bare = _bare(word)
        if bare in fillers:
            mark = word[len(word.rstrip(".!?…")):]
            if mark and kept and not kept[-1].endswith((".", "!", "?", "…")):
                kept[-1] = kept[-1].rstrip(",;:") + mark   # the sentence ends here still
            continue
        if word.endswith("-") and len(word) > 1 and i + 1 < len(words):
            continue   # a false start: the speaker began a word and took it back
        if kept and bare and bare == _bare(kept[-1]) and bare not in _MAY_REPEAT \
                and not kept[-1].endswith((".", "!", "?", "…", ",", ";", ":")):
            kept[-1] = word   # a stutter: keep the second one (it has the punctuation)
            continue
        kept.append(word)
    if kept and kept[0][:1].islower() and words and words[0][:1].isupper():
        kept[0] = kept[0][:1].upper() + kept[0][1:]   # "Um, the plan" -> "The plan"
    if kept and kept[0][:1] in ",;:":
        kept[0] = kept[0].lstrip(",;:")
    return " ".join(w for w in kept if w), len(words) - len(kept)


def shorten_pauses(audio: np.ndarray, sample_rate: int, max_pause_s: float,
                   threshold: float = 0.01, window_s: float = 0.01) -> np.ndarray:
    """`audio` with every silence inside it longer than `max_pause_s` cut to that length.

    Silence is a run of `window_s` windows whose RMS is below `threshold` (about -40 dBFS);
    the middle of a long pause is taken out, so the speech on both sides keeps its fade.
    Silence at the ends is left alone (`engines.tts.trim` sets those).
    """
    audio = np.asarray(audio, np.float32)
    win = max(1, int(window_s * sample_rate))
    n = len(audio) // win
    keep_windows = max(1, int(round(max_pause_s / window_s)))
    if n <= keep_windows:
        return audio
    rms = np.sqrt(np.mean(audio[:n * win].reshape(n, win) ** 2, axis=1))
    quiet = rms < threshold
    loud = np.flatnonzero(~quiet)
    if loud.size < 2:
        return audio
    cuts: list[tuple[int, int]] = []   # sample ranges to take out
    run_start = None
    for i in range(int(loud[0]), int(loud[-1]) + 1):
        if quiet[i] and run_start is None:
            run_start = i
        elif not quiet[i] and run_start is not None:
            length = i - run_start
            if length > keep_windows:
                half = keep_windows // 2
                cuts.append(((run_start + half) * win,
                             (run_start + half + length - keep_windows) * win))
            run_start = None
    if not cuts:
        return audio
    parts, at = [], 0
    for a, b in cuts:
        parts.append(audio[at:a])
        at = b
    parts.append(audio[at:])
    return np.concatenate(parts)
