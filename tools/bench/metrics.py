"""Benchmark metrics for ``voxweft bench``: pure functions, no I/O.

These docstrings are the documented definitions of the figures in a bench report:

- ASR quality: corpus word error rate after :func:`normalize_text` (:func:`wer`); the
  reference words whose translation was spoken, by the same alignment (:func:`matched_words`).
- MT quality: sacrebleu corpus BLEU and chrF with default settings (:func:`mt_scores`).
- Long-form latency of the spoken output, as SimulEval defines it for speech output
  (facebookresearch/SimulEval, ``simuleval/evaluator/instance.py``, ``SpeechOutputInstance``,
  and ``simuleval/evaluator/scorers/latency_scorer.py``): :func:`playback_schedule`,
  :func:`start_offset`, :func:`end_offset`, :func:`word_delays`, :func:`laal`, :func:`atd`,
  :func:`longform`. Times are in seconds (SimulEval uses milliseconds; the definitions are
  the same).
- Drift over a soak run: :func:`slope_per_10min`.

An output speech segment is a tuple ``(emit_s, duration_s, words)``: ``emit_s`` is the time
(seconds since the source started) at which the segment became available to play,
``duration_s`` its audio length and ``words`` the number of target words it speaks. Segments
are played in the order given. Computation aware (SimulEval's ``_CA`` figures, its
``elapsed``) when ``emit_s`` is wall clock; not (SimulEval's ``delays``) when ``emit_s`` is
how much of the source the system had read when it emitted the segment, as if computing
took no time.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence

import numpy as np

#: Apostrophe look-alikes mapped to ASCII "'" before anything else.
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'", "\u02bc": "'",
                              "\u00b4": "'", "\u2032": "'"})

#: Word-boundary conventions for word delays (SimulEval's SpeechAlign scorers use the same three).
BOUNDARIES = ("BOW", "COW", "EOW")

#: ATD's unit of speech, source and output alike (SimulEval's ``ATDScorer``: 300 ms a token).
ATD_TOKEN_S = 0.3

#: Two-sided 95 % Student t critical values, t_{0.975, df}, df = 1..30.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

Segment = tuple[float, float, int]


# --------------------------------------------------------------------------------------------
# Text quality


def _is_word_char(c: str) -> bool:
    return unicodedata.category(c)[0] in "LNM"


def normalize_text(text: str) -> str:
    """Normalise a transcript for WER.

    Definition, applied in this order:

    1. Unicode NFKC, then ``str.casefold`` (lower case; "ß" becomes "ss").
    2. Apostrophe variants (U+2019 ’, U+2018 ‘, backtick, U+02BC ʼ, U+00B4 ´, U+2032 ′)
       become ASCII ``'``.
    3. An apostrophe is kept only inside a word (a letter, digit or combining mark on both
       sides: "don't", "l'été"); elsewhere it becomes a space ("'quoted'" -> "quoted").
    4. Every other punctuation character (Unicode category P*, which includes hyphens and
       dashes), every symbol (category S*: "+", "$", "€", "°", "−" ...) and every control
       or format character becomes a space: "well-known" -> "well known".
    5. Whitespace runs collapse to one space; leading and trailing whitespace is stripped.

    Letters keep their accents ("não", "está"). Numbers are left as written: "1850" and
    "eighteen fifty" are different words and count as an error, and "3.5" becomes "3 5".
    """
    text = unicodedata.normalize("NFKC", text).casefold().translate(_APOSTROPHES)
    out = []
    for i, c in enumerate(text):
        if c == "'":
            inside = (0 < i < len(text) - 1 and _is_word_char(text[i - 1])
                      and _is_word_char(text[i + 1]))
            out.append(c if inside else " ")
        elif unicodedata.category(c)[0] in "PSC":
            out.append(" ")
        else:
            out.append(c)
    return " ".join("".join(out).split())


def _aligned(references: Sequence[str], hypotheses: Sequence[str]):
    """Both sides normalised, the pairs whose reference has words, and jiwer's alignment.

    Returns ``(refs, output)``; ``output`` is None when no reference has words.
    """
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    refs, hyps = [], []
    for ref, hyp in zip(references, hypotheses, strict=True):
        ref_n = normalize_text(ref or "")
        if ref_n:
            refs.append(ref_n)
            hyps.append(normalize_text(hyp or ""))
    if not refs:
        return refs, None
    import jiwer

    return refs, jiwer.process_words(refs, hyps)


def wer(references: Sequence[str], hypotheses: Sequence[str]) -> dict:
    """Corpus word error rate (jiwer) after :func:`normalize_text`.

    Definition: both sides are normalised; pairs whose reference normalises to empty are
    skipped (they have no words to get wrong); a missing or empty hypothesis counts as the
    deletion of every reference word. With S substitutions, D deletions, I insertions and N
    reference words summed over the corpus (minimum edit alignment per pair),
    ``WER = (S + D + I) / N``, rounded to 4 decimals. Returns ``{"wer", "substitutions",
    "deletions", "insertions", "reference_words"}``; ``wer`` is None when no reference has
    words.
    """
    refs, out = _aligned(references, hypotheses)
    result = {"wer": None, "substitutions": 0, "deletions": 0, "insertions": 0,
              "reference_words": sum(len(r.split()) for r in refs)}
    if out is not None:
        result.update(wer=round(float(out.wer), 4), substitutions=out.substitutions,
                      deletions=out.deletions, insertions=out.insertions)
    return result


def matched_words(references: Sequence[str], hypotheses: Sequence[str]) -> tuple[int, int]:
    """``(matched, words)``: the reference words the alignment matches to a hypothesis word.

    Definition: the same normalisation and minimum edit alignment as :func:`wer`, pair by
    pair; a reference word is matched when it aligns to a hypothesis word, the same (a hit)
    or another (a substitution: it was heard, maybe misheard, which the WER counts);
    a deleted one is not. ``matched = H + S`` of the ``words = H + S + D`` reference words.
    """
    refs, out = _aligned(references, hypotheses)
    words = sum(len(r.split()) for r in refs)
    return (0, words) if out is None else (out.hits + out.substitutions, words)


def inserted_words(reference: str, hypothesis: str) -> list[str]:
    """The hypothesis's words that the minimum edit alignment to the reference inserts.

    Both sides normalised (:func:`normalize_text`); a word heard in place of a reference word
    (a substitution) is not one of them.
    """
    ref, hyp = normalize_text(reference or ""), normalize_text(hypothesis or "")
    if not hyp:
        return []
    words = hyp.split()
    if not ref:
        return words
    import jiwer

    chunks = jiwer.process_words(ref, hyp).alignments[0]
    return [w for c in chunks if c.type == "insert" for w in words[c.hyp_start_idx:c.hyp_end_idx]]


def mt_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Corpus BLEU and chrF with sacrebleu's default settings (one reference per segment).

    Definition: ``sacrebleu.metrics.BLEU()`` (13a tokenisation, exponential smoothing, mixed
    case) and ``sacrebleu.metrics.CHRF()`` (chrF2: character 6-grams, beta 2, no word
    n-grams) over the whole corpus, on the raw text (no :func:`normalize_text`). Scores are
    0..100, rounded to 2 decimals; the signatures say exactly what was computed. Missing
    texts count as empty. Returns ``{"bleu", "chrf", "signature_bleu", "signature_chrf"}``,
    all None for an empty corpus.
    """
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        return {"bleu": None, "chrf": None, "signature_bleu": None, "signature_chrf": None}
    from sacrebleu.metrics import BLEU, CHRF

    hyps = [h or "" for h in hypotheses]
    refs = [[r or "" for r in references]]
    bleu, chrf = BLEU(), CHRF()
    b, c = bleu.corpus_score(hyps, refs), chrf.corpus_score(hyps, refs)
    return {"bleu": round(b.score, 2), "chrf": round(c.score, 2),
            "signature_bleu": str(bleu.get_signature()),
            "signature_chrf": str(chrf.get_signature())}


# --------------------------------------------------------------------------------------------
# Long-form latency of speech output (SimulEval definitions)


def playback_schedule(segments: Sequence[Segment]) -> list[tuple[float, float]]:
    """When each output segment is heard: ``[(start_s, end_s), ...]``, one per segment.

    Definition (SimulEval ``SpeechOutputInstance.summarize``, its ``intervals``): segments are
    played one after another in emission order and never overlap; the first starts when it is
    emitted and each later one starts at ``max(emit_s, end of the previous one)``, so a
    segment emitted while the previous one is still playing waits for it, and a gap (a
    discontinuity, silence) appears when the output waits for the source.
    ``end_s = start_s + duration_s``.
    """
    schedule: list[tuple[float, float]] = []
    prev_end = None
    for emit, duration, _words in segments:
        if duration < 0:
            raise ValueError(f"negative segment duration {duration}")
        start = emit if prev_end is None else max(emit, prev_end)
        prev_end = start + duration
        schedule.append((start, prev_end))
    return schedule


def start_offset(source_duration_s: float, segments: Sequence[Segment]) -> float | None:
    """StartOffset: when the first output speech starts, in seconds since the source started.

    Definition (SimulEval ``StartOffsetScorer``: ``delays[0]``; for speech output the first
    interval starts at the first delay): the start of the first played segment, which is its
    emission time. Computation aware when ``emit_s`` is wall clock (SimulEval's ``elapsed``).
    None when there is no output (SimulEval skips such an instance). ``source_duration_s`` is
    not used; it is taken for symmetry with :func:`end_offset`.
    """
    del source_duration_s
    schedule = playback_schedule(segments)
    return schedule[0][0] if schedule else None


def end_offset(source_duration_s: float, segments: Sequence[Segment]) -> float | None:
    """EndOffset: how long after the end of the source the last output speech ends.

    Definition (SimulEval ``EndOffsetScorer`` for ``SpeechOutputInstance``: the end
    ``start + duration`` of the last played interval minus the source length):
    ``end_s`` of the last segment of :func:`playback_schedule` minus ``source_duration_s``.
    Negative if the output finished before the source did. None when there is no output.
    """
    schedule = playback_schedule(segments)
    return schedule[-1][1] - source_duration_s if schedule else None


def word_delays(segments: Sequence[Segment], boundary: str = "BOW") -> list[float]:
    """The delay of every target word: the time it is heard, in seconds since the source began.

    Definition: SimulEval's speech-output scorers (``*_SpeechAlign_{BOW,COW,EOW}``) force-align
    the target text to the output audio (Montreal Forced Aligner) and take, for each word,
    ``offset of the first output + time of the word in the output audio`` (which includes the
    silences inserted while the output waited), at the beginning (BOW), centre (COW) or end
    (EOW) of the word. Here there is no aligner: **approximation**, a segment's ``words``
    words are assumed evenly spread over its played span ``[start_s, end_s)`` from
    :func:`playback_schedule`. Word ``j`` (0-based) of ``k`` in a segment of played span
    ``[s, e)`` has delay ``s + j (e - s) / k`` (BOW, the default), ``s + (j + 1/2) (e - s) / k``
    (COW) or ``s + (j + 1) (e - s) / k`` (EOW). Segments with no words contribute no delay.
    Computation aware when ``emit_s`` is wall clock (SimulEval itself does not support
    computation-aware speech-aligned latency).
    """
    frac = {"BOW": 0.0, "COW": 0.5, "EOW": 1.0}.get(boundary)
    if frac is None:
        raise ValueError(f"boundary must be one of {BOUNDARIES}, not {boundary!r}")
    delays: list[float] = []
    for (start, end), (_emit, _duration, words) in zip(playback_schedule(segments), segments,
                                                       strict=True):
        k = int(words)
        for j in range(k):
            delays.append(start + (j + frac) * (end - start) / k)
    return delays


def laal(delays: Sequence[float], source_duration_s: float, hyp_words: int,
         ref_words: int | None = None) -> float | None:
    """Length-Adaptive Average Lagging (Papi et al. 2022, SimulEval ``LAALScorer``).

    Definition: with delays ``d_1..d_n`` (seconds, one per target word), source duration
    ``|X|`` and ``|Y| = max(hyp_words, ref_words or 0)``,
    ``tau`` = the index of the first delay ``>= |X|`` (``n`` if none) and
    ``LAAL = (1 / tau) * sum_{i=1..tau} (d_i - (i - 1) |X| / |Y|)``.
    So only the words up to the first one heard after the source ended count, and each is
    compared with an ideal interpreter that speaks ``|Y|`` words evenly over the source.
    Taking the longer of hypothesis and reference (instead of AL's reference) stops
    over-generation from being rewarded. (SimulEval returns ``d_1`` when ``d_1 > |X|``; the
    formula gives the same, since then ``tau = 1``.)
    It is computation aware (LAAL_CA) when the delays are wall-clock times, e.g. from
    :func:`word_delays` with wall-clock ``emit_s``; that is the caller's business.
    None when there are no delays (SimulEval skips such an instance).
    """
    if not delays:
        return None
    if source_duration_s <= 0:
        raise ValueError("source duration must be positive")
    target = max(int(hyp_words), int(ref_words or 0), 1)
    step = source_duration_s / target
    total, tau = 0.0, 0
    for i, d in enumerate(delays):
        total += d - i * step
        tau = i + 1
        if d >= source_duration_s:
            break
    return total / tau


def _pieces(start_s: float, duration_s: float, token_s: float) -> list[float]:
    """End times of ``duration_s`` seconds from ``start_s`` cut into ``token_s`` pieces.

    The last piece is what is left (shorter); nothing is cut from a duration <= 0.
    """
    n = math.ceil(duration_s / token_s - 1e-9)   # 0.9 / 0.3 is 3.0000000000000004
    return [start_s + min((k + 1) * token_s, duration_s) for k in range(max(n, 0))]


def atd(read_s: Sequence[float], segments: Sequence[Segment],
        token_s: float = ATD_TOKEN_S) -> float | None:
    """Average Token Delay (Kano et al. 2023, arXiv:2211.13173), as SimulEval's ``ATDScorer``.

    Definition, for speech input and speech output as SimulEval computes it: speech has no
    tokens, so both sides are cut into ``token_s`` (300 ms) pieces, the last piece of a chunk
    shorter. Segment ``k`` was emitted when the source had been read up to ``read_s[k]``;
    segments emitted at the same ``read_s`` make one chunk. Source chunk ``c`` is what was
    read between two emissions, ``(read_{c-1}, read_c]`` (``read_0 = 0``); output chunk ``c``
    is what was emitted at ``read_c``, played as :func:`playback_schedule` says (a chunk
    starts at ``max(emit_s, end of the previous one)``). ``T(x_s)`` is when source piece ``s``
    ends (source time), ``T(y_t)`` when output piece ``t`` ends. For output piece ``t``
    (1-based, over the whole output) of chunk ``c``, with ``X_<c``, ``Y_<c`` the source and
    output pieces of the chunks before ``c`` and ``X_<=c`` the source pieces read up to ``c``:

        f(t) = max(0, Y_<c - X_<c)      (earlier output not matched by earlier source)
        a(t) = min(t - f(t), X_<=c)     (never a source piece not read yet)
        ATD  = (1 / |Y|) sum_t (T(y_t) - T(x_a(t)))

    Not computation aware (SimulEval's ATD) when every segment's ``emit_s`` is its
    ``read_s``; computation aware (ATD_CA) when ``emit_s`` is the wall-clock time it was
    ready: the chunks stay those of ``read_s``, only ``T(y_t)`` moves (SimulEval adds each
    chunk's measured computation time to its pieces instead; here it is measured on the
    wall clock). None when there is no output piece.
    """
    chunks: list[list[float]] = []   # [read_s, emit_s, duration_s]
    for read, (emit, duration, _words) in zip(read_s, segments, strict=True):
        if chunks and chunks[-1][0] == read:
            chunks[-1][2] += duration
        else:
            chunks.append([read, emit, duration])
    source_ends, source_pieces, read_before = [0.0], [], 0.0
    for read, _emit, _duration in chunks:
        ends = _pieces(read_before, read - read_before, token_s)
        source_ends += ends
        source_pieces.append(len(ends))
        read_before = read
    delays: list[float] = []
    x_before = y_before = 0
    schedule = playback_schedule([(emit, duration, 0) for _read, emit, duration in chunks])
    for (start, _end), (_read, _emit, duration), x_chunk in zip(schedule, chunks, source_pieces,
                                                                strict=True):
        ends = _pieces(start, duration, token_s)
        for end in ends:
            t = len(delays) + 1
            a = min(t - max(0, y_before - x_before), x_before + x_chunk)
            delays.append(end - source_ends[a])
        x_before += x_chunk
        y_before += len(ends)
    return sum(delays) / len(delays) if delays else None


def longform(source_duration_s: float, segments: Sequence[Segment],
             ref_words: int | None = None, read_s: Sequence[float] | None = None) -> dict:
    """Long-form latency of one continuous session (the whole corpus played as one source).

    ``segments`` are emitted at wall clock (computation aware), in source order; ``read_s``,
    one per segment, is how much of the source had been read when it was emitted if
    computing took no time (the end of its source segment). Returns, rounded to
    milliseconds (None when there is no output):

    - computation aware: ``start_offset_s``, ``end_offset_s`` (:func:`start_offset`,
      :func:`end_offset`), ``laal_ca_s`` (:func:`laal` over :func:`word_delays`, BOW, with
      ``hyp_words`` = the number of output words) and ``atd_ca_s`` (:func:`atd`);
    - the same not computation aware, the segments emitted at ``read_s``:
      ``start_offset_nca_s``, ``end_offset_nca_s``, ``laal_s``, ``atd_s``;
    - ``source_duration_s``, ``output_words``.

    Without ``read_s`` the non-computation-aware figures and both ATDs are None (ATD's
    chunks are the source read at each emission).
    """
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 3)

    def offsets_and_laal(segs: Sequence[Segment]) -> tuple:
        delays = word_delays(segs)
        return (r(start_offset(source_duration_s, segs)), r(end_offset(source_duration_s, segs)),
                r(laal(delays, source_duration_s, len(delays), ref_words)))

    start_ca, end_ca, laal_ca = offsets_and_laal(segments)
    out = {"start_offset_s": start_ca, "end_offset_s": end_ca, "laal_ca_s": laal_ca,
           "atd_ca_s": None, "start_offset_nca_s": None, "end_offset_nca_s": None,
           "laal_s": None, "atd_s": None, "source_duration_s": r(source_duration_s),
           "output_words": sum(int(words) for _emit, _duration, words in segments)}
    if read_s is not None:
        at_read = [(read, duration, words)
                   for read, (_emit, duration, words) in zip(read_s, segments, strict=True)]
        start, end, laal_nca = offsets_and_laal(at_read)
        out.update(start_offset_nca_s=start, end_offset_nca_s=end, laal_s=laal_nca,
                   atd_s=r(atd(read_s, at_read)), atd_ca_s=r(atd(read_s, segments)))
    return out


# --------------------------------------------------------------------------------------------
# Drift


def _t95(df: int) -> float:
    """Two-sided 95 % critical value of Student's t with ``df`` degrees of freedom."""
    if df <= len(_T95):
        return _T95[df - 1]
    z = 1.959964  # Cornish-Fisher expansion around the normal quantile; < 1e-3 off for df > 30
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def slope_per_10min(times_s: Sequence[float], values: Sequence[float]) -> dict:
    """Drift of a series: ordinary least-squares slope, per 10 minutes, with a 95 % interval.

    Definition: fit ``value = a + b t`` (t in seconds) by least squares over the pairs where
    both are present; ``slope_per_10min = 600 b``. Its standard error is
    ``se(b) = sqrt(SSR / (n - 2) / sum (t - mean t)^2)`` and ``ci95_per_10min`` is the
    half-width ``600 t_{0.975, n-2} se(b)`` (Student t; tabulated up to 30 degrees of freedom,
    a Cornish-Fisher approximation beyond). ``distinguishable_from_zero`` is
    ``|slope| > ci95``: the drift is real at the 95 % level. With ``n < 3`` points (or all at
    the same time) slope and interval are None and the drift is not distinguishable.
    Returns ``{"slope_per_10min", "ci95_per_10min", "n", "distinguishable_from_zero"}``.
    """
    pairs = [(float(t), float(v)) for t, v in zip(times_s, values, strict=False)
             if t is not None and v is not None and math.isfinite(t) and math.isfinite(v)]
    n = len(pairs)
    result = {"slope_per_10min": None, "ci95_per_10min": None, "n": n,
              "distinguishable_from_zero": False}
    if n < 3:
        return result
    t = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    tc = t - t.mean()
    sxx = float(np.dot(tc, tc))
    if sxx <= 0:
        return result
    if float(np.ptp(y)) == 0.0:  # constant: exactly flat (avoid rounding noise in the mean)
        result.update(slope_per_10min=0.0, ci95_per_10min=0.0)
        return result
    b = float(np.dot(tc, y - y.mean()) / sxx)
    residuals = y - y.mean() - b * tc
    ssr = float(np.dot(residuals, residuals))
    se = math.sqrt(ssr / (n - 2) / sxx)
    slope, ci = 600 * b, 600 * _t95(n - 2) * se
    result.update(slope_per_10min=slope, ci95_per_10min=ci,
                  distinguishable_from_zero=bool(abs(slope) > ci))
    return result
