"""`voxweft doctor`: what this machine is and has, and whether each topology fits it.

The command a Mac user runs first: OS, chip, cores, memory, Metal and the versions of the
packages the engines use; which engines and models are installed; and for every topology in
deploy/, per host, whether its engines can run here and the memory verdict (estimates: nothing
loads). `--measure` also loads and times each engine here, as the actors do at warm-up
(`budget.warm_*`), and prints the budget verdict `voxweft up` would print: the numbers we
cannot measure without the machine.

Each engine is measured in a process of its own, one at a time: its memory is freed when it
ends, a native crash or a runtime that clashes with another engine's (two OpenMP libraries,
torch beside CTranslate2 on macOS) cannot take the report with it, and its peak memory is
the actor's. An engine shared by two topologies is measured once.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from voxweft.actors import budget
from voxweft.actors.devices import echo_pairing, open_sounddevice
from voxweft.actors.engines import label, languages_report, memory_check
from voxweft.actors.engines.echo import canceller
from voxweft.actors.settings import topology as settings_topology
from voxweft.actors.settings.base import StartupError
from voxweft.actors.settings.manifest import ENGINE_NEEDS, ENGINES, STAGES
from voxweft.deploy import topology as topo_mod
from voxweft.deploy.topology import TopologyError
from voxweft.tools import models
from voxweft.tools.languages import format_report

#: Distributions whose versions the report names ("-" when absent).
PACKAGES = ("voxweft", "mlx", "mlx-metal", "mlx-whisper", "mlx-audio", "voxcpm", "torch",
            "ctranslate2", "faster-whisper", "onnxruntime")
#: How long one engine may take to load and warm up before it is given up on.
MEASURE_TIMEOUT_S = 1800
MEASURE_HINT = "run `voxweft doctor --measure` to time the engines here (loads each model once; " \
               "minutes)"
PASTE_HINT = "voxweft doctor: paste this whole output into an issue"


# --- the machine ---------------------------------------------------------------------------

def _command(*argv: str) -> str:
    """A command's output, stripped; "" when it fails or is missing."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _sysctl(name: str) -> str:
    """A macOS sysctl value ("" when the name does not exist here)."""
    return _command(shutil.which("sysctl") or "/usr/sbin/sysctl", "-n", name)


def _int(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def chip() -> str:
    """The processor's name: "Apple M2" on a Mac, /proc/cpuinfo's model name on Linux."""
    if sys.platform == "darwin":
        return _sysctl("machdep.cpu.brand_string") or platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def metal() -> dict:
    """MLX's Metal: available, and the GPU's device_info when it is; mlx may be missing."""
    if importlib.util.find_spec("mlx") is None:
        return {"available": False, "detail": "mlx is not installed"}
    try:
        import mlx.core as mx

        if not mx.metal.is_available():
            return {"available": False, "detail": "mlx runs on the CPU here"}
        info = (getattr(mx, "device_info", None) or mx.metal.device_info)()
    except Exception as exc:  # noqa: BLE001 - a broken mlx is a finding, not a crash
        return {"available": False, "detail": _one_line(exc)}
    return {"available": True, **{k: v for k, v in dict(info).items()
                                  if isinstance(v, str | int | float)}}


def torch_devices() -> dict:
    """MPS and CUDA as torch sees them, asked in a process of its own (its import is slow)."""
    if importlib.util.find_spec("torch") is None:
        return {"mps": False, "cuda": False, "detail": "torch is not installed"}
    code = ("import json, torch; print(json.dumps({'mps': torch.backends.mps.is_available(), "
            "'cuda': torch.cuda.is_available()}))")
    out = _command(sys.executable, "-c", code)
    try:
        return json.loads(out.splitlines()[-1])
    except (IndexError, ValueError):
        return {"mps": False, "cuda": False, "detail": "torch does not import here"}


def versions() -> dict[str, str]:
    """The installed version of each of PACKAGES, "-" when absent."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "-"
    return found


def machine() -> dict:
    """OS, chip, cores, memory, Python, Rosetta, Metal, torch's devices, package versions."""
    mac = sys.platform == "darwin"
    release, _, arch = platform.mac_ver()
    total, available = budget.host_memory_mb()
    return {
        "os": f"macOS {release} ({arch})" if mac else platform.platform(),
        "chip": chip(),
        "cores": os.cpu_count(),
        "performance_cores": _int(_sysctl("hw.perflevel0.physicalcpu")) if mac else None,
        "efficiency_cores": _int(_sysctl("hw.perflevel1.physicalcpu")) if mac else None,
        "busy_cores": round(budget.others_busy_cores([os.getpid()]), 2),
        "memory_mb": round(total), "available_mb": round(available),
        "python": f"{platform.python_version()} ({platform.machine()})",
        "rosetta": _sysctl("sysctl.proc_translated") == "1" if mac else None,
        "metal": metal(),
        "torch": torch_devices(),
        "versions": versions(),
    }


# --- engines and models --------------------------------------------------------------------

def _missing(packages: tuple[str, ...], programs: tuple[str, ...] = ()) -> list[str]:
    """Which of these Python packages (looked up, not imported) and programs are missing."""
    gone = []
    for package in packages:
        try:
            if importlib.util.find_spec(package) is None:
                gone.append(package)
        except (ImportError, ValueError):
            gone.append(package)
    return gone + [f"{p} (program)" for p in programs if not shutil.which(p)]


def engines_installed() -> list[dict]:
    """Every engine of the manifest: installed here or not, and what it misses."""
    rows = []
    for stage, table in ENGINES.items():
        for name in table:   # every engine has its needs (tests/unit/test_doctor.py)
            missing = min((_missing(*needs) for needs in ENGINE_NEEDS[(stage, name)]), key=len)
            rows.append({"stage": stage, "engine": name, "installed": not missing,
                         "missing": missing})
    return rows


def models_inventory(topologies: list[Path]) -> dict:
    """`voxweft models`'s inventory: every model, present or missing, and who needs it."""
    try:
        rows, _read = models.inventory(topologies)
    except models.ModelsError as exc:
        return {"error": str(exc), "models": []}
    return {"root": str(models.models_root()),
            "models": [dataclasses.asdict(row) for row in rows]}


# --- measuring one engine ------------------------------------------------------------------

def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def measure_here(stage: str, engine: str, settings: dict, src: str, tgt: str) -> dict:
    """Build, load and warm one engine in this process; its budget, or one line of error.

    What the actor does at start (`budget.warm_*`), plus how long it took to load, its
    memory estimate and this process's peak memory (MLX's too on Metal).
    """
    import resource

    from voxweft.actors.engines import build
    from voxweft.actors.engines.tts import warmup_voice
    from voxweft.actors.settings.base import StartupError

    warm = {"asr": lambda e: budget.warm_asr(e, src), "mt": lambda e: budget.warm_mt(e, src, tgt),
            "tts": lambda e: budget.warm_tts(e, tgt, warmup_voice(e))}[stage]
    try:
        built = build(stage, engine, settings)
        estimate = built.memory_mb()
        t0 = time.perf_counter()
        built.load()
        t1 = time.perf_counter()
        measured = warm(built)
    except StartupError as exc:   # a model not fetched, a package missing: its own words
        return {"error": _one_line(exc)}
    except Exception as exc:  # noqa: BLE001 - one line for the report, never a traceback
        return {"error": f"{type(exc).__name__}: {_one_line(exc)}"}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # bytes on macOS, KiB on Linux
    result = {"budget": measured, "load_s": round(t1 - t0, 2),
              "warm_s": round(time.perf_counter() - t1, 2), "estimate_mb": estimate,
              "peak_mb": round(peak / (1e6 if sys.platform == "darwin" else 1e3)),
              "on_gpu": bool(built.on_gpu())}
    mx = sys.modules.get("mlx.core")
    if mx is not None and hasattr(mx, "get_peak_memory"):
        result["mlx_peak_mb"] = round(mx.get_peak_memory() / 1e6)
        # What stays after warm-up: arrays in use (weights, compiled traces' constants) and
        # the cache of freed buffers (bounded by cache_limit_mb).
        result["mlx_active_mb"] = round(mx.get_active_memory() / 1e6)
        result["mlx_cache_mb"] = round(mx.get_cache_memory() / 1e6)
    if getattr(built, "compiled", False):
        result["compiled"] = True
    if getattr(built, "pace", None) is not None:
        result["pace"] = pace_report(built.pace, tgt, built.plan)
    return result


#: Sentences whose plans `pace_report` shows, by language (else the budget's one).
PLANNED = {
    "pt": ("Não.", "Sim, e vale a pena mencionar de passagem que, como exemplo de tipografia "
           "fina, o verdadeiro livro impresso nunca foi superado.",
           "Produziram os livros de blocos, que foram os antecessores imediatos do verdadeiro "
           "livro impresso, a invenção que depois mudou o mundo inteiro."),
    "en": ("No.", "And it is worth mentioning in passing that, as an example of fine "
           "typography, the true printed book has never been surpassed.",
           "They produced the block books, which were the immediate predecessors of the true "
           "printed book, the invention that later changed the whole world."),
}


def pace_report(pace, lang: str, plan: Callable[[str], list[str]]) -> dict:
    """What a voice that learns its pace (VoxCPM2 on a Mac) must tell us from its first run.

    The raw pieces it learnt from (seconds to make, seconds of speech, characters), the fit
    and whether it is one, and the plan `plan` makes of a few sentences at that pace: its
    pieces, those under three words, the holes heard inside and the first audio (s).
    """
    rows = []
    for text in PLANNED.get(lang, (budget.SPOKEN.get(lang, budget.SPOKEN["en"]),)):
        pieces = plan(text)
        first, holes = pace.timeline(pieces)
        rows.append({"chars": len(text), "pieces": len(pieces),
                     "short": sum(len(p.split()) < 3 for p in pieces) if len(pieces) > 1 else 0,
                     "holes_s": [round(h, 3) for h in holes], "first_s": round(first, 3)})
    return {"prefill_s": round(pace.prefill_s, 3), "rate": round(pace.rate, 3),
            "s_per_char": round(pace.s_per_char, 4), "fitted": pace.fitted,
            "pieces": [[round(w, 3), round(sp, 3), c] for w, sp, c in pace.pieces],
            "plans": rows}


def measure_engine(stage: str, engine: str, settings: dict, src: str, tgt: str,
            timeout_s: float = MEASURE_TIMEOUT_S) -> dict:
    """`measure_here` in a process of its own; a crash or a timeout becomes its one line."""
    job = json.dumps({"stage": stage, "engine": engine, "settings": settings, "src": src,
                      "tgt": tgt})
    with tempfile.TemporaryDirectory(prefix="voxweft-doctor-") as tmp:
        out = Path(tmp) / "result.json"
        try:
            done = subprocess.run([sys.executable, "-m", "voxweft.tools.doctor", job, str(out)],
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"no budget after {timeout_s:.0f} s (loading and warming up)"}
        if out.is_file():
            return json.loads(out.read_text(encoding="utf-8"))
    tail = (done.stderr.strip().splitlines() or [""])[-1]
    return {"error": f"its process ended with code {done.returncode}" + (f": {tail}" if tail
                                                                          else "")}


def _measured(stage: str, config, src: str, tgt: str, cache: dict,
              say: Callable[[str], None]) -> dict:
    """One actor's engine measured, or taken from `cache` if measured already."""
    settings = config.engine_settings()
    name = label(config.engine, settings)
    key = (stage, config.engine, json.dumps(settings, sort_keys=True, default=str),
           src if stage != "tts" else "", tgt if stage != "asr" else "")
    if key in cache:
        return {"engine": name, **cache[key], "cached": True}
    say(f"voxweft doctor: measuring {stage} {name} (loads the model) ...")
    t0 = time.monotonic()
    cache[key] = measure_engine(stage, config.engine, settings, src, tgt)
    if cache[key].get("compiled"):   # what compiling saves, and what it keeps: measured off
        say(f"voxweft doctor: measuring {stage} {name} again with compile = false ...")
        cache[key]["compile_off"] = measure_engine(stage, config.engine,
                                                   {**settings, "compile": False}, src, tgt)
    say(f"voxweft doctor: {stage} {name}: {time.monotonic() - t0:.1f} s")
    return {"engine": name, **cache[key], "cached": False}


# --- the topologies ------------------------------------------------------------------------

def local_addresses() -> set[str]:
    """The IP addresses of this machine's interfaces."""
    import psutil

    return {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values()
            for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)}


def addresses_of(address: str, timeout_s: float = 2.0) -> set[str]:
    """The IP addresses `address` names.

    Itself when it is one, else what it resolves to (a name such as "m2.local"); empty
    when it does not resolve within `timeout_s`.
    """
    import ipaddress
    import threading

    try:
        return {str(ipaddress.ip_address(address.split("%")[0]))}
    except ValueError:
        pass
    found: set[str] = set()

    def resolve() -> None:
        try:
            found.update(info[4][0].split("%")[0] for info in socket.getaddrinfo(address, None))
        except (OSError, UnicodeError):
            pass

    looker = threading.Thread(target=resolve, daemon=True)   # mDNS may take its time
    looker.start()
    looker.join(timeout_s)
    return set(found)


def is_this_machine(address: str, mine: set[str] | None = None) -> bool | None:
    """Whether a host's `address` is this machine.

    One of its addresses, or its own name (with or without ".local"); None when the name
    does not resolve (nothing to tell).
    """
    own = socket.gethostname().lower().removesuffix(".local")
    if address.lower().removesuffix(".local") == own:
        return True
    ips = addresses_of(address)
    if not ips:
        return None
    return bool(ips & (local_addresses() if mine is None else mine))


def hosts_here(base, host: str | None = None) -> tuple[set[str], str]:
    """The hosts of a topology this machine is, which doctor judges, and a word on them.

    The only host in use (a one-machine topology); else `host` if named (the word says so
    when its address is plainly another machine's: the figures are this one's all the
    same); else those whose address (an IP, or a name such as "m2.local") is this
    machine's (the word says to name one when none is). Another machine's timings and
    memory say nothing of this one: a two-host topology is judged host by host.
    """
    in_use = base.hosts_in_use()
    if len(in_use) == 1:   # a topology for one machine: this one
        return set(in_use), ""
    mine = local_addresses()
    if host is not None:
        address = base.hosts[host].address if host in base.hosts else ""
        if host in in_use and is_this_machine(address, mine) is False:
            return {host}, (f"--host {host}: its address {address} is not this machine's "
                            f"({', '.join(sorted(mine)) or 'none'}): these figures are this "
                            "machine's; fix the address before `up`")
        return {host} & set(in_use), ""
    here = {h for h in in_use if is_this_machine(base.hosts[h].address, mine)}
    return here, "" if here else ("this machine has none of the hosts' addresses: pass "
                                  "--host NAME to say which it is")


def topology_report(path: Path, measure_engines: bool, cache: dict | None = None,
                    say: Callable[[str], None] = print, host: str | None = None) -> dict:
    """Per host in use: runs here (its engines construct), memory line, and measured budgets.

    Only the hosts this machine is (`hosts_here`, `host`: its name) are judged; another
    host's entry says where to run doctor for it. With `measure_engines`, `verdict` holds
    budget.verdict's lines (`voxweft up`'s) for every judged host whose engines were all
    measured. `cache` shares measures between topologies.
    """
    cache = {} if cache is None else cache
    report: dict = {"file": path.name, "path": str(path), "error": "", "hosts": []}
    try:
        base = settings_topology.load(path)   # the tables only: no engine constructed
    except TopologyError as exc:
        report["error"] = str(exc)
        return report
    here, word = hosts_here(base, host)
    budgets = {}
    for name in base.hosts_in_use():
        if name not in here:
            report["hosts"].append({
                "host": name, "actors": base.actors_on(name), "judged": False,
                "why": f"run `voxweft doctor --host {name}` on that machine" + (
                    f"; {word}" if word and not here else "")})
            continue
        entry: dict = {"host": name, "actors": base.actors_on(name), "judged": True,
                       "runs_here": True, "error": "", "warning": word}
        try:
            topology = topo_mod.load(path, name)   # constructs this host's engines
        except TopologyError as exc:
            topology = base
            entry.update(runs_here=False, error=str(exc))
        try:
            fits, line = memory_check(topology, name)
        except (ImportError, KeyError, ValueError, TypeError) as exc:
            fits, line = None, f"memory on {name}: cannot estimate here ({_one_line(exc)})"
        entry["memory"] = {"fits": fits, "line": line}
        echo = echo_check(topology, name)
        if echo:
            entry["echo"] = echo
        if measure_engines and entry["runs_here"]:
            entry["measured"] = {
                stage: _measured(stage, topology.actors[stage], base.src_lang, base.tgt_lang,
                                 cache, say)
                for stage in STAGES if topology.actors[stage].host == name}
            budgets.update({stage: result["budget"] for stage, result
                            in entry["measured"].items() if "budget" in result})
        report["hosts"].append(entry)
    if measure_engines:
        ok, lines = budget.verdict(base, budgets)
        report["verdict"] = {"ok": ok if lines else None, "lines": lines}
    return report


def echo_check(topology, host: str) -> dict | None:
    """Whether the echo can be cancelled here, where this host's microphone hears its speaker.

    The canceller's library, and the two devices paired (actors.devices.echo_pairing). None
    where the host has no echo path (a file, a WAV, or capture and player apart).
    """
    mode = topology.echo_handling
    if not mode or not (topology.actors["capture"].host == host
                        or topology.actors["player"].host == host):
        return None
    if mode != "cancel":
        apart = topology.actors["segmenter"].echo_mode == "cancel"
        return {"ok": True, "line": f"echo: {mode}" + (
            " (capture and player on different hosts: no common clock to cancel by)"
            if apart else "")}
    try:
        canceller(topology.actors["capture"].echo_engine).load()
        sd = open_sounddevice("doctor")
    except StartupError as exc:
        return {"ok": False, "line": f"echo: cannot cancel here: {exc}"}
    ok, line = echo_pairing(sd, topology.actors["capture"].device,
                            topology.actors["player"].device)
    return {"ok": ok, "line": f"echo: cancel; {line}"}


def topology_paths(extra: list[str] | None = None) -> list[Path]:
    """Every topology in deploy/, then the `extra` ones, each once."""
    return list(dict.fromkeys(p.resolve() for p in models.deploy_topologies()
                              + [Path(t) for t in extra or []]))


# --- the report ----------------------------------------------------------------------------

def _gb(mb: float | None) -> str:
    return "?" if mb is None else f"{mb / 1000:.1f} GB"


def machine_lines(m: dict) -> list[str]:
    """The machine section, as text."""
    cores = f"{m['cores']} cores"
    if m.get("performance_cores"):
        cores += f": {m['performance_cores']} performance, {m['efficiency_cores'] or 0} " \
                 "efficiency"
    gpu = m["metal"]
    if gpu["available"]:
        metal_line = (f"available: {gpu.get('device_name') or gpu.get('architecture', '?')}, "
                      f"memory {_gb(gpu.get('memory_size', 0) / 1e6)}, recommended working "
                      f"set {_gb(gpu.get('max_recommended_working_set_size', 0) / 1e6)}")
    else:
        metal_line = f"not available ({gpu.get('detail', '')})"
    torch = m["torch"]
    lines = [f"os        {m['os']}",
             f"chip      {m['chip']} ({cores})",
             f"memory    {_gb(m['memory_mb'])}, {_gb(m['available_mb'])} free now",
             f"cpu       {m['busy_cores']:.1f} cores busy with other work now",
             f"python    {m['python']}" + (" UNDER ROSETTA: MLX needs an arm64 Python"
                                          if m["rosetta"] else ""),
             f"metal     {metal_line}",
             f"torch     mps {'yes' if torch['mps'] else 'no'}, cuda "
             f"{'yes' if torch['cuda'] else 'no'}"
             + (f" ({torch['detail']})" if torch.get("detail") else ""),
             "packages  " + ", ".join(f"{k} {v}" for k, v in m["versions"].items())]
    return lines


def engine_lines(rows: list[dict]) -> list[str]:
    """The engines section, as text."""
    return [f"{r['stage']:<4} {r['engine']:<15} " + (
        "installed" if r["installed"] else f"not installed: missing {', '.join(r['missing'])}")
        for r in rows]


def _budget_line(stage: str, r: dict) -> str:
    if "error" in r:
        return f"{stage} {r['engine']}: cannot measure here: {r['error']}"
    if r.get("cached"):
        return f"{stage} {r['engine']}: as measured above"
    b = r["budget"]
    gpu = f", gpu {b['gpu']:.2f} s/s" if "gpu" in b else ""
    mlx = f", MLX peak {_gb(r['mlx_peak_mb'])}" if "mlx_peak_mb" in r else ""
    line = (f"{stage} {r['engine']}: load {r['load_s']:.1f} s, cpu {b['cpu']:.2f} s/s, "
            f"rtf {b['rtf']:.2f}{gpu}, first {b['first_s']:.2f} s; memory peak "
            f"{_gb(r['peak_mb'])}{mlx} (estimate {_gb(r['estimate_mb'])})")
    off = r.get("compile_off")
    if isinstance(off, dict):
        if "error" in off:
            return f"{line}; compile off: cannot measure: {off['error']}"
        line += (f"; compiled: rtf {b['rtf']:.2f}, MLX held {_mb(r)} after warm-up; "
                 f"compile off: rtf {off['budget']['rtf']:.2f}, MLX held {_mb(off)}")
    return line


def _mb(r: dict) -> str:
    """MLX memory held after warm-up: arrays in use + the cache of freed buffers."""
    return f"{r.get('mlx_active_mb', 0)} + {r.get('mlx_cache_mb', 0)} MB cached"


def topology_lines(t: dict) -> list[str]:
    """One topology's section, as text."""
    if t["error"]:
        return [f"{t['file']}: does not load: {t['error']}"]
    lines = [t["file"]]
    verdict = t.get("verdict", {}).get("lines", [])
    for h in t["hosts"]:
        if not h["judged"]:
            lines.append(f"  host {h['host']} ({', '.join(h['actors'])}): not judged here: "
                         f"{h['why']}")
            continue
        here = "runs here" if h["runs_here"] else f"cannot run here: {h['error']}"
        lines += [f"  host {h['host']} ({', '.join(h['actors'])}): {here}"]
        lines += [f"    {h['warning']}"] if h.get("warning") else []
        lines += [f"    {h['memory']['line']}"]
        if "echo" in h:
            lines.append(f"    {h['echo']['line']}")
        measured = h.get("measured", {})
        lines += [f"    {_budget_line(stage, r)}" for stage, r in measured.items()]
        mine = [v for v in verdict if v.startswith((f"budget on {h['host']}:",
                                                    f"GPU on {h['host']}:"))]
        lines += [f"    {v}" for v in mine]
        if "verdict" in t and h["runs_here"] and measured and not mine:
            lines.append(f"    budget on {h['host']}: no verdict: not every engine of it "
                         "could be measured here")
    return lines


def report(measure_engines: bool, topologies: list[str] | None = None,
           say: Callable[[str], None] = print, host: str | None = None) -> dict:
    """The whole report as one JSON-ready dict."""
    paths = topology_paths(topologies)
    cache: dict = {}
    return {"machine": machine(), "engines": engines_installed(),
            "pairs": languages_report(), "models": models_inventory(paths),
            "measured": measure_engines, "host": host,
            "topologies": [topology_report(p, measure_engines, cache, say, host)
                           for p in paths]}


def cmd_doctor(measure: bool, as_json: bool, topologies: list[str] | None = None,
               host: str | None = None) -> int:
    """`voxweft doctor`: print the report (text section by section, or one JSON object)."""
    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if as_json:
        print(json.dumps(report(measure, topologies, progress, host), indent=2))
        print(PASTE_HINT, file=sys.stderr)
        return 0
    paths = topology_paths(topologies)
    print("== machine")
    print("\n".join(machine_lines(machine())), flush=True)
    print("== engines")
    print("\n".join(engine_lines(engines_installed())))
    print(format_report(languages_report()))
    print("== models", flush=True)
    models.cmd_list([str(p) for p in paths])
    print("== topologies", flush=True)
    cache: dict = {}
    reports = []
    for path in paths:
        reports.append(topology_report(path, measure, cache, progress, host))
        print("\n".join(topology_lines(reports[-1])), flush=True)
    if not measure:
        print(MEASURE_HINT)
        print(PASTE_HINT)
        return 0
    # What it measured, in one file to send: everything the verdicts come from.
    out = Path(f"voxweft-doctor-{host or platform.node() or 'this'}.json")
    out.write_text(json.dumps({
        "machine": machine(), "engines": engines_installed(), "pairs": languages_report(),
        "models": models_inventory(paths), "measured": True, "host": host,
        "topologies": reports}, indent=2), encoding="utf-8")
    print(f"voxweft doctor: wrote {out.resolve()}: attach that file to an issue "
          "(it holds every figure above, and the machine's)")
    return 0


def _child(argv: list[str]) -> int:
    """`python -m voxweft.tools.doctor JOB OUT`: measure one engine, write its result to OUT."""
    job, out = json.loads(argv[0]), Path(argv[1])
    result = measure_here(job["stage"], job["engine"], job["settings"], job["src"], job["tgt"])
    out.write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
