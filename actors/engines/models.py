"""The model catalogue: downloadable models, each pinned to one hub commit.

Every file's size and sha256 is pinned; `voxweft models fetch NAME` (tools/models.py)
installs a model into `$VOXWEFT_MODELS/NAME` (default `~/.cache/voxweft/models/NAME`), and an
engine whose `model` setting names a catalogue entry loads it from there (`install_dir`).
`VOXWEFT_MODELS_CATALOGUE` may name a TOML file of further entries (same fields, under
`[models.NAME]`); it adds, never replaces.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from voxweft.actors.settings.actors import Settings

_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


class ModelsError(Exception):
    """A models command that cannot go on; the message is the one line the user sees."""


@dataclass(frozen=True)
class ModelFile:
    """One file of a catalogue model: its path in the repo (and in the install folder)."""

    path: str
    size: int | None      # bytes; None = not known yet
    sha256: str | None    # None = not known yet: `fetch` refuses the entry


@dataclass(frozen=True)
class CatalogueEntry:
    """A downloadable model pinned to one commit of a hub repository."""

    name: str
    stage: str             # asr | mt | tts
    engine: str            # the engine that loads it
    repo: str
    revision: str | None   # a full commit hash; None = not known yet: `fetch` refuses
    files: tuple[ModelFile, ...]
    about: str = ""
    #: Bytes of all its files as published, where a file's exact size is not pinned yet.
    approx_size: int | None = None

    def unknown_pins(self) -> list[str]:
        """What is not pinned yet, so that `fetch` cannot check it: a revision or a sha256.

        A file's size may be unknown: its sha256 checks it all the same.
        """
        missing = [] if self.revision else ["revision"]
        missing += [f"{f.path} sha256" for f in self.files if not f.sha256]
        return missing

    def cap(self, f: ModelFile) -> int | None:
        """The most bytes a download of `f` may bring.

        Its pinned size; unpinned, what the entry's `approx_size` leaves beyond its pinned
        files; None when neither is known.
        """
        if f.size is not None:
            return f.size
        if self.approx_size is None:
            return None
        return max(0, self.approx_size - sum(g.size or 0 for g in self.files))

    def need(self, todo) -> int:
        """Bytes a download of the files `todo` brings at most, for the disk check.

        Their pinned sizes, and once (not per file) what `approx_size` leaves beyond the
        pinned files when some of `todo` are unpinned: two unpinned files share that rest.
        """
        pinned = sum(f.size for f in todo if f.size is not None)
        if all(f.size is not None for f in todo):
            return pinned
        return pinned + (self.cap(next(f for f in todo if f.size is None)) or 0)

    def size(self) -> int | None:
        """Bytes of all its files, when every size is known."""
        sizes = [f.size for f in self.files]
        return None if None in sizes else sum(sizes)   # type: ignore[arg-type]


# The pins below are the hub's own listing for each commit (file size, and the LFS sha256 of
# the weights), each recorded alike by several independent public projects that pin the same
# commit; config.json's sha256 is of its raw bytes at that commit. They were not downloaded
# again here (this project's build machine has no hub access): `fetch` checks them instead.
# The NLLB entry's four files and their sum (630,477,782 bytes) are pinned alike by several
# public projects that download that commit and check each file's sha256 after download.
#: VoxCPM2's tokenizer files: the same bytes in the torch and both MLX repositories.
_VOXCPM2_TOKENIZER = (
    ModelFile("special_tokens_map.json", 1_632,
              "068594063e37662c02b21acf42ebb334ef6a74fb810e68a2368f88f08351de76"),
    ModelFile("tokenizer.json", 3_676_772,
              "f8984687e4a92a3503d521396d454b7d68e9fdaab2a0288eb3536c7c1aa4bc20"),
)
_VOXCPM2_MLX_TOKENIZER_CONFIG = ModelFile(
    "tokenizer_config.json", 4_952,
    "466575c55f0cf49530666c2e46ed14f26237dbd227ba7f4bb3bbec93df90edfc")

CATALOGUE: tuple[CatalogueEntry, ...] = (
    CatalogueEntry(
        name="mlx-whisper-large-v3-turbo", stage="asr", engine="mlx-whisper",
        repo="mlx-community/whisper-large-v3-turbo",
        revision="a4aaeec0636e6fef84abdcbe3544cb2bf7e9f6fb",
        files=(
            ModelFile("config.json", 268,
                      "b34fc29e4e11e0a25e812775dd67f4dd16fc2c8eb43d28ae25ff7d660ecb6379"),
            ModelFile("weights.safetensors", 1_613_977_612,
                      "951ed3fc1203e6a62467abb2144a96ce7eafca8fa77e3704fdb8635ff3e7f8a6"),
        ),
        about="Whisper large-v3-turbo, float16 MLX, 99 languages (Apple Silicon)"),
    CatalogueEntry(
        name="mlx-whisper-small", stage="asr", engine="mlx-whisper",
        repo="mlx-community/whisper-small-mlx",
        revision="45f3915923c7a79a5a5b5a7d909d39aeb0e5630e",
        files=(
            ModelFile("config.json", 266,
                      "e8f58e638208af66d5d5d67801259dc7a12d199e971967a9f9d33a8e3635668e"),
            ModelFile("weights.npz", 481_307_592,
                      "55b6674c9b339702d486e2b1573839a66f8ec8f821ed2886993ef717a86b09f5"),
        ),
        about="Whisper small, float16 MLX, 99 languages (Apple Silicon; smaller, faster)"),
    CatalogueEntry(
        name="mlx-whisper-base", stage="asr", engine="mlx-whisper",
        repo="mlx-community/whisper-base-mlx",
        revision="1e3e249fb8d01c655324bd6841b1deadffd6d04c",
        files=(
            ModelFile("config.json", 262,
                      "737220a6d958b3ad48e78f840fa991556266983c84ea2ca40e413389c62e4c2f"),
            ModelFile("weights.npz", 143_724_204,
                      "2f57d5f3ef473054c638961f90716f4ee415e8108de81313eccb2c5fd62eff0b"),
        ),
        about="Whisper base, float16 MLX, 99 languages (Apple Silicon; the smallest here)"),
    CatalogueEntry(
        name="nllb-200-distilled-600m-ct2", stage="mt", engine="ctranslate2",
        repo="osa911/nllb-200-distilled-600M-ct2-int8",
        revision="46858753dbaf8eb5e21bb6f0037c3b90851e090a",
        files=(
            ModelFile("config.json", 223,
                      "8f6496adfc930cbfecbe8281112197705c488fab47d34b4829b06d7f478909af"),
            ModelFile("model.bin", 619_704_329,
                      "ca3362e6e81906c0cf9c33bd6917674222c71d69617d0afb18507ce0b6c2e2e8"),
            ModelFile("shared_vocabulary.json", 5_921_176,
                      "af53bfd0e6f726209e7325e45b87ab3b14e5856f7d42d7b9be91de3287c45267"),
            ModelFile("sentencepiece.bpe.model", 4_852_054,
                      "14bb8dfb35c0ffdea7bc01e56cea38b9e3d5efcdcb9c251d6b40538e1aab555a"),
        ),
        about="NLLB-200 distilled 600M, CTranslate2 int8, 200 languages (CC-BY-NC-4.0)"),
    # VoxCPM2. The 4-bit entry's config.json and model.safetensors sizes were found nowhere
    # (together 2,297,220,661 bytes; the five files 2,300,904,017, its approx_size): their
    # sha256 checks them, and each download stops past what the other files leave of it.
    CatalogueEntry(
        name="voxcpm2", stage="tts", engine="voxcpm2",
        repo="openbmb/VoxCPM2",
        revision="bffb3df5a29440629464e5e839f4d214c8714c3d",
        files=(
            ModelFile("config.json", 4_336,
                      "405f0dcd92f7feba6011ed4eac5c8d4f74cba9712f07fd5cfa3063bbdd95402c"),
            *_VOXCPM2_TOKENIZER,
            ModelFile("tokenizer_config.json", 5_059,
                      "e78a3ebb48a0b9437efd1823b6b726c823da89e49dd8bcc90c02419d9baa772b"),
            ModelFile("model.safetensors", 4_580_080_592,
                      "f7f964cfa9da23653baec6e6f7750719977ad944ed9f95fe52fe3a620506891d"),
            ModelFile("audiovae.pth", 376_951_122,
                      "94b5d51e107e0507d4acc976cfdadb64edd6fd06d1f751dadbf2fd1594274bf1"),
        ),
        about="VoxCPM2 2B, PyTorch bfloat16, 48 kHz, 30 languages (Apache-2.0; backend torch)"),
    CatalogueEntry(
        name="voxcpm2-mlx-4bit", stage="tts", engine="voxcpm2",
        repo="mlx-community/VoxCPM2-4bit",
        revision="dc9e5c187858da5f4a13dc4c247e297339216381",
        files=(
            ModelFile("config.json", None,
                      "91bff6db1be27bc0f4f2a287cca7a8fbb8b1d7a0b026a5dc4a71bc5f2f1ddcfb"),
            ModelFile("model.safetensors", None,
                      "25bddc99a7cc6d28214f12dd676ed0afa9b0a805d6477f85c275bb113cb8acee"),
            *_VOXCPM2_TOKENIZER, _VOXCPM2_MLX_TOKENIZER_CONFIG,
        ),
        about="VoxCPM2 2B, MLX 4-bit, 2.3 GB (Apple Silicon; Apache-2.0; backend mlx)",
        approx_size=2_300_904_017),
    CatalogueEntry(
        name="voxcpm2-mlx-8bit", stage="tts", engine="voxcpm2",
        repo="mlx-community/VoxCPM2-8bit",
        revision="d52725898a0675703f7f9ddc5a4d1a3cdbb99032",
        files=(
            ModelFile("config.json", 5_332,
                      "005406ee534a26bc1821055f8c38ffa46fa6c3d3362bd04af5673a44689d92b8"),
            ModelFile("model.safetensors", 3_221_772_935,
                      "c07c59aca742fe8f53384a3da4d8a3b3fd98ddc77066dd4bd35b51e08c34a72f"),
            *_VOXCPM2_TOKENIZER, _VOXCPM2_MLX_TOKENIZER_CONFIG,
        ),
        about="VoxCPM2 2B, MLX 8-bit, 3.2 GB (Apple Silicon; Apache-2.0; backend mlx)"),
)

CATALOGUE_ENV = "VOXWEFT_MODELS_CATALOGUE"
MODELS_ENV = "VOXWEFT_MODELS"


class FileTable(Settings):
    """One file of a catalogue entry as a catalogue TOML gives it (pins may be unknown)."""

    path: str
    size: int | None = Field(None, ge=0)      # bytes
    sha256: str | None = None

    @field_validator("path")
    @classmethod
    def _relative(cls, path: str) -> str:
        if not path or Path(path).is_absolute() or ".." in Path(path).parts:
            raise ValueError(f"file {path!r} must be a relative path in the repo")
        return path

    @field_validator("sha256")
    @classmethod
    def _hex64(cls, sha256: str | None) -> str | None:
        if sha256 and not _HEX64.fullmatch(sha256):
            raise ValueError(f"sha256 {sha256!r} must be 64 lowercase hex digits")
        return sha256 or None


class EntryTable(Settings):
    """A catalogue entry as a catalogue TOML gives it: checked like every other table."""

    name: str
    stage: Literal["asr", "mt", "tts"]
    engine: str
    repo: str
    revision: str | None = None
    files: list[FileTable]
    about: str = ""
    approx_size: int | None = Field(None, ge=0)   # bytes as published, while sizes are unpinned

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise ValueError(f"name {name!r}: a name is letters, digits, '.', '_' and '-'")
        return name

    @field_validator("revision")
    @classmethod
    def _commit(cls, revision: str | None) -> str | None:
        if revision and not _HEX40.fullmatch(revision):
            raise ValueError(f"revision {revision!r} must be a full 40-hex commit hash, "
                             "not a branch")
        return revision or None

    @field_validator("files")
    @classmethod
    def _some(cls, files: list[FileTable]) -> list[FileTable]:
        if not files:
            raise ValueError("no files")
        return files

    def entry(self) -> CatalogueEntry:
        """The catalogue entry."""
        return CatalogueEntry(
            name=self.name, stage=self.stage, engine=self.engine, repo=self.repo,
            revision=self.revision, about=self.about, approx_size=self.approx_size,
            files=tuple(ModelFile(f.path, f.size, f.sha256) for f in self.files))


def _entry_table(values: dict, where: str) -> EntryTable:
    try:
        return EntryTable.check(values)
    except ValueError as exc:
        raise ModelsError(f"{where}: {exc}") from None


def check_entry(entry: CatalogueEntry) -> None:
    """Raise ModelsError when a pin that is given is malformed (unknown pins are allowed)."""
    values = {**dataclasses.asdict(entry), "files": [dataclasses.asdict(f) for f in entry.files]}
    _entry_table(values, f"catalogue entry {entry.name!r}")


def catalogue() -> dict[str, CatalogueEntry]:
    """The built-in catalogue plus the entries of `$VOXWEFT_MODELS_CATALOGUE`, by name."""
    entries = {e.name: e for e in CATALOGUE}
    extra = os.environ.get(CATALOGUE_ENV)
    if extra:
        try:
            raw = tomllib.loads(Path(extra).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ModelsError(f"{CATALOGUE_ENV}={extra}: cannot read it ({exc})") from None
        for name, table in raw.get("models", {}).items():
            if name in entries:
                raise ModelsError(f"{extra}: models.{name} is already in the built-in catalogue")
            entries[name] = _entry_table({"name": name, **table},
                                         f"{extra}: models.{name}").entry()
    for entry in entries.values():
        check_entry(entry)
    return entries


def models_root() -> Path:
    """Where catalogue models are installed: `$VOXWEFT_MODELS` or ~/.cache/voxweft/models."""
    root = os.environ.get(MODELS_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "voxweft" / "models"


def install_dir(entry: CatalogueEntry) -> Path:
    """The folder a catalogue model is installed in (what a topology's model setting names)."""
    return models_root() / entry.name


def find(name: str) -> Path | None:
    """The install folder of catalogue model `name`, or None when no entry has that name."""
    entry = catalogue().get(name)
    return None if entry is None else install_dir(entry)


def resolve(setting: str) -> Path | None:
    """The folder a `model`/`model_path` setting names.

    An existing folder, else the install folder of the catalogue entry of that name (present
    or not yet fetched); None if neither.
    """
    if setting and Path(setting).expanduser().is_dir():
        return Path(setting).expanduser()
    return find(setting) if setting else None


def weights_bytes(setting: str) -> int | None:
    """Bytes of the model a setting names; None when unknown.

    Its folder's files when it is there, else the catalogue's size (exact, or as published).
    """
    folder = resolve(setting)
    if folder is not None and folder.is_dir():
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        if size:
            return size
    entry = catalogue().get(setting) or (catalogue().get(folder.name) if folder else None)
    if entry is None:
        return None
    return entry.size() or entry.approx_size


def not_fetched(folder: Path) -> str:
    """The one line for a catalogue model whose folder is not there yet."""
    return (f"model {folder.name!r} is not installed: run `voxweft models fetch {folder.name}`"
            f" (offline: copy its files into {folder})")
