"""`voxweft models fetch` with the real huggingface_hub client against a hub on loopback.

The hub here is two real HTTP servers on 127.0.0.1: the "hub" answers
`/{repo}/resolve/{revision}/{file}` as the real one does (X-Repo-Commit, ETag, and for
LFS files a 302 to a second origin, the "CDN", with X-Linked-Etag / X-Linked-Size), the "CDN"
serves the bytes. The CLI runs as a subprocess pointed at it by HF_ENDPOINT; the catalogue
entry of the tiny model is injected with VOXWEFT_MODELS_CATALOGUE.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, VOXWEFT

pytestmark = pytest.mark.timeout(120)

REPO = "voxweft-test/whisper-tiny-random"
REVISION = "3f1c2a9be0d4c7e8f9a0b1c2d3e4f5a6b7c8d9e0"
NAME = "tiny-random-whisper"


def safetensors(tensors: dict[str, np.ndarray]) -> bytes:
    """A real safetensors file (8-byte header length, JSON header, raw data)."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": {"float16": "F16", "float32": "F32"}[str(array.dtype)],
                        "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def tiny_model() -> dict[str, bytes]:
    rng = np.random.default_rng(7)
    return {
        "config.json": json.dumps({"n_mels": 80, "n_audio_ctx": 8, "n_audio_state": 16,
                                   "n_audio_head": 2, "n_audio_layer": 1, "n_vocab": 64,
                                   "n_text_ctx": 8, "n_text_state": 16, "n_text_head": 2,
                                   "n_text_layer": 1}).encode(),
        "weights.safetensors": safetensors({
            "encoder.conv1.weight": rng.standard_normal((16, 3, 80)).astype(np.float16),
            "decoder.token_embedding.weight": rng.standard_normal((64, 16)).astype(np.float16),
        }),
    }


LFS = {"weights.safetensors"}


class FakeHub:
    """The hub and its CDN on two loopback ports; counts requests; can corrupt a file."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.corrupt: set[str] = set()
        self.requests: list[str] = []
        hub = self

        class Hub(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                self.answer(body=False)

            def do_GET(self) -> None:
                self.answer(body=True)

            def answer(self, body: bool) -> None:
                hub.requests.append(f"{self.command} {self.path}")
                m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self.path.split("?")[0])
                if not m:
                    return self.send_error(404)
                repo, rev, name = (urllib.parse.unquote(g) for g in m.groups())
                if repo != REPO:
                    return self.reply(401, b"", {"X-Error-Code": "RepoNotFound"}, body)
                if rev != REVISION:
                    return self.reply(404, b"", {"X-Error-Code": "RevisionNotFound"}, body)
                if name not in hub.files:
                    return self.reply(404, b"", {"X-Error-Code": "EntryNotFound",
                                                 "X-Repo-Commit": REVISION}, body)
                data = hub.files[name]
                if name in LFS:   # the real hub: 302 to a CDN, the LFS facts on the redirect
                    sha = hashlib.sha256(data).hexdigest()
                    return self.reply(302, b"", {
                        "Location": f"{hub.cdn_url}/{sha}/{name}", "X-Repo-Commit": REVISION,
                        "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data)),
                        "ETag": f'"{sha}"'}, body)
                blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # git's id
                self.reply(200, data, {"X-Repo-Commit": REVISION, "ETag": f'"{blob}"'}, body)

            def reply(self, code: int, data: bytes, headers: dict, body: bool) -> None:
                self.send_response(code)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

        class Cdn(Hub):
            def answer(self, body: bool) -> None:
                hub.requests.append(f"CDN {self.command} {self.path}")
                sha, name = self.path.split("?")[0].strip("/").split("/", 1)
                data = hub.files[name]
                if name in hub.corrupt:   # same size, one byte changed: only sha256 can tell
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                self.reply(200, data, {"ETag": f'"{sha}"'}, body)

        self.servers = [ThreadingHTTPServer(("127.0.0.1", 0), Hub),
                        ThreadingHTTPServer(("127.0.0.1", 0), Cdn)]
        self.url, self.cdn_url = (f"http://127.0.0.1:{s.server_address[1]}" for s in self.servers)
        for server in self.servers:
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def hub():
    server = FakeHub(tiny_model())
    yield server
    server.close()


@pytest.fixture
def home(tmp_path):
    """A catalogue naming the tiny model, an empty models folder and hf home; the env to use."""
    files = tiny_model()
    entries = "\n".join(f'  {{ path = "{name}", size = {len(data)}, '
                        f'sha256 = "{hashlib.sha256(data).hexdigest()}" }},'
                        for name, data in files.items())
    catalogue = tmp_path / "catalogue.toml"
    catalogue.write_text(f'[models.{NAME}]\nstage = "asr"\nengine = "mlx-whisper"\n'
                         f'repo = "{REPO}"\nrevision = "{REVISION}"\nfiles = [\n{entries}\n]\n'
                         f'[models.unpinned]\nstage = "asr"\nengine = "mlx-whisper"\n'
                         f'repo = "{REPO}"\nfiles = [{{ path = "config.json" }}]\n'
                         + "".join(f'[models.{name}]\nstage = "asr"\nengine = "mlx-whisper"\n'
                                   f'repo = "{REPO}"\nrevision = "{REVISION}"\n{size}files = [\n'
                                   + "\n".join(f'  {{ path = "{path}", sha256 = '
                                               f'"{hashlib.sha256(data).hexdigest()}" }},'
                                               for path, data in files.items()) + "\n]\n"
                                   for name, size in (
                                       ("sizeless", "approx_size = "
                                        f"{sum(len(d) for d in files.values())}\n"),
                                       ("boundless", ""))))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(VOXWEFT_MODELS=str(tmp_path / "models"), VOXWEFT_MODELS_CATALOGUE=str(catalogue),
               HF_HOME=str(tmp_path / "hf"), HF_HUB_DISABLE_PROGRESS_BARS="1",
               HF_HUB_DISABLE_TELEMETRY="1")
    return tmp_path, env


def voxweft(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*VOXWEFT, "models", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=90)


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The failure's only line on stderr (no traceback, no warnings)."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_fetch_takes_an_entry_whose_sizes_are_unknown_by_its_sha256(hub, home):
    """Its files' sizes unknown, its whole size known (approx_size, as VoxCPM2 4-bit):
    fetched, each file bounded by it and checked by its sha256 (issue 48)."""
    tmp, env = home
    env["HF_ENDPOINT"] = hub.url
    proc = voxweft(env, "fetch", "sizeless")
    assert proc.returncode == 0, proc.stderr
    for name, data in tiny_model().items():
        assert (tmp / "models" / "sizeless" / name).read_bytes() == data
    again = voxweft(env, "fetch", "sizeless")   # present and checked: nothing downloaded
    assert again.returncode == 0 and "already in" in again.stdout, again.stdout + again.stderr
    # With no size at all (no file's, no approx_size) a download could not be bounded.
    refused = voxweft(env, "fetch", "boundless")
    assert refused.returncode != 0 and "could not be bounded" in refused.stderr, refused.stderr
    assert not (tmp / "models" / "boundless").exists()


def test_fetch_puts_checked_files_in_place_and_lists_them(hub, home):
    tmp, env = home
    env["HF_ENDPOINT"] = hub.url
    before = json.loads(voxweft(env, "--json").stdout)
    row = next(r for r in before["models"] if r["name"] == NAME)
    assert row["status"] == "missing" and row["get"] == f"voxweft models fetch {NAME}"

    proc = voxweft(env, "fetch", NAME)
    assert proc.returncode == 0, proc.stderr
    folder = tmp / "models" / NAME
    for name, data in tiny_model().items():
        assert (folder / name).read_bytes() == data
    # the bytes came through the hub's redirect, from the CDN
    assert any(r.startswith("CDN GET") for r in hub.requests)

    listing = voxweft(env, "--verify")
    assert listing.returncode == 0, listing.stderr
    line = next(x for x in listing.stdout.splitlines() if x.startswith(NAME))
    assert "verified" in line and str(folder) in line

    # a topology naming the installed folder is listed as needing it
    topo = (ROOT / "deploy" / "default.toml").read_text().replace(
        'engine = "faster-whisper"\nsettings = { model = "base"',
        f'engine = "mlx-whisper"\nsettings = {{ model = "{folder}"')
    (tmp / "mac.toml").write_text(topo)
    rows = json.loads(voxweft(env, "--json", "--topology", str(tmp / "mac.toml")).stdout)
    row = next(r for r in rows["models"] if r["name"] == NAME)
    assert row["status"] == "present" and row["needed_by"] == ["mac.toml:asr"]

    # fetched again: nothing is asked of the hub
    hub.requests.clear()
    again = voxweft(env, "fetch", NAME)
    assert again.returncode == 0 and "already" in again.stdout and hub.requests == []


def test_a_corrupted_download_is_refused_and_removed(hub, home):
    tmp, env = home
    env["HF_ENDPOINT"] = hub.url
    hub.corrupt.add("weights.safetensors")
    line = one_line(voxweft(env, "fetch", NAME))
    assert "weights.safetensors" in line and "sha256" in line and "deleted" in line
    folder = tmp / "models" / NAME
    assert not (folder / "weights.safetensors").exists()
    # huggingface_hub's own note of the file is gone too, so the next fetch downloads again
    assert not list(folder.rglob("weights.safetensors.metadata"))
    assert not list(folder.rglob("*.incomplete"))

    hub.corrupt.clear()
    assert voxweft(env, "fetch", NAME).returncode == 0
    data = tiny_model()["weights.safetensors"]
    assert (folder / "weights.safetensors").read_bytes() == data


def test_hub_unreachable_says_what_to_copy_where(hub, home):
    tmp, env = home
    env["HF_ENDPOINT"] = hub.url
    hub.close()   # nothing listens there now: connection refused
    proc = voxweft(env, "fetch", NAME)
    line = one_line(proc)
    folder = tmp / "models" / NAME
    assert "cannot reach" in line and str(folder) in line
    assert "config.json" in line and "weights.safetensors" in line
    assert REPO in line and REVISION in line
    assert not folder.exists()


def test_hf_hub_offline_says_what_to_copy_where_without_asking(hub, home):
    tmp, env = home
    env.update(HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="1")
    line = one_line(voxweft(env, "fetch", NAME))
    assert "HF_HUB_OFFLINE" in line and str(tmp / "models" / NAME) in line
    assert hub.requests == []


def test_unpinned_entry_and_unknown_name_are_refused_in_one_line(hub, home):
    _tmp, env = home
    env["HF_ENDPOINT"] = hub.url
    line = one_line(voxweft(env, "fetch", "unpinned"))
    assert "not pinned" in line and "revision" in line and "sha256" in line
    line = one_line(voxweft(env, "fetch", "no-such-model"))
    assert "no model 'no-such-model'" in line and "mlx-whisper-large-v3-turbo" in line
    assert hub.requests == []


def test_wrong_revision_on_the_hub_is_one_line(hub, home):
    tmp, env = home
    env["HF_ENDPOINT"] = hub.url
    catalogue = Path(env["VOXWEFT_MODELS_CATALOGUE"])
    catalogue.write_text(catalogue.read_text().replace(REVISION, "0" * 40, 1))
    line = one_line(voxweft(env, "fetch", NAME))
    assert "refused" in line and "RevisionNotFound" in line and "0000000000" in line
    assert not list((tmp / "models").rglob("*.safetensors"))


@pytest.mark.parametrize("packaged, text_layers", [("base", 6), ("tiny.en", 4)])
def test_convert_whisper_writes_the_mlx_layout_of_a_packaged_model(home, packaged, text_layers):
    tmp, env = home
    out = tmp / f"whisper-{packaged}-mlx"
    proc = voxweft(env, "convert-whisper", packaged, str(out), "--dtype", "float16")
    assert proc.returncode == 0, proc.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["n_text_layer"] == text_layers and config["model_type"] == "whisper"
    with (out / "weights.safetensors").open("rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    assert header["decoder.token_embedding.weight"]["dtype"] == "F16"
