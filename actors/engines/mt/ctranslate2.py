"""ctranslate2: a converted NLLB-200, M2M100 or OPUS-MT model folder, with its tokenizer."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field, field_validator

from voxweft.actors.engines import importing, models
from voxweft.actors.engines.mt import MtEngine
from voxweft.actors.engines.resources import weights_mb
from voxweft.actors.settings.base import Settings, StartupError

# ISO 639-1 -> FLORES-200 codes NLLB uses (the common ones; M2M100 uses `__xx__`).
NLLB_CODES: dict[str, str] = {
    "af": "afr_Latn", "ar": "arb_Arab", "bg": "bul_Cyrl", "bn": "ben_Beng", "ca": "cat_Latn",
    "cs": "ces_Latn", "da": "dan_Latn", "de": "deu_Latn", "el": "ell_Grek", "en": "eng_Latn",
    "es": "spa_Latn", "et": "est_Latn", "fa": "pes_Arab", "fi": "fin_Latn", "fr": "fra_Latn",
    "gl": "glg_Latn", "he": "heb_Hebr", "hi": "hin_Deva", "hr": "hrv_Latn", "hu": "hun_Latn",
    "id": "ind_Latn", "it": "ita_Latn", "ja": "jpn_Jpan", "ko": "kor_Hang", "lt": "lit_Latn",
    "lv": "lvs_Latn", "nl": "nld_Latn", "no": "nob_Latn", "pl": "pol_Latn", "pt": "por_Latn",
    "ro": "ron_Latn", "ru": "rus_Cyrl", "sk": "slk_Latn", "sl": "slv_Latn", "sr": "srp_Cyrl",
    "sv": "swe_Latn", "sw": "swh_Latn", "th": "tha_Thai", "tr": "tur_Latn", "uk": "ukr_Cyrl",
    "ur": "urd_Arab", "vi": "vie_Latn", "zh": "zho_Hans",
}


class CTranslate2Engine(MtEngine):
    """A converted NLLB-200, M2M100 or OPUS-MT (Marian) model in a CTranslate2 folder.

    Settings: `model_path` (the folder), `model_type` (nllb | m2m100 | marian),
    `compute_type` (int8), `beam_size` (2), `pair` ("en-de": the one direction of a Marian
    model; default from an `opus-mt-en-de` folder name). Tokenizer: a sentencepiece model in
    the folder (NLLB/M2M100 `sentencepiece.bpe.model`/`*.model`, Marian `source.spm` and
    `target.spm`), else the Hugging Face `tokenizer.json` (read with `tokenizers`, not
    transformers, which stays out of the runtime). Multilingual models are steered with a
    source language token and a target-language prefix token (`por_Latn`, `__pt__`).
    """

    name = "ctranslate2"

    def memory_mb(self) -> int:
        """The runtime and the actor (~250 MB) plus the model's files (int8 as stored)."""
        return 250 + weights_mb(models.weights_bytes(self.settings.model_path), 600)

    class Settings(Settings):
        """The model folder and how to run it."""

        model_path: str = ""
        model_type: Literal["nllb", "m2m100", "marian"] = "nllb"
        compute_type: Literal["int8", "int8_float32", "float32", "default"] = "int8"
        beam_size: int = Field(2, ge=1, le=10)
        threads: int = Field(1, ge=1, le=64)
        pair: str = ""

        @field_validator("model_path")
        @classmethod
        def _folder(cls, path: str) -> str:
            if models.resolve(path) is None:
                raise ValueError(f"model_path = {path!r} must be a CTranslate2 model folder "
                                 "(ct2-transformers-converter output) or a catalogue name "
                                 "(`voxweft models`)")
            return path

    def __init__(self, **settings) -> None:
        self.settings = self.Settings.check(settings)
        s = self.settings
        self.folder = models.resolve(s.model_path)
        self.marian_pair = self._marian_pair() if s.model_type == "marian" else None
        self.translator = None
        self.encoders: dict[str, object] = {}   # "source"/"target" -> tokenizer
        self._pairs: frozenset[tuple[str, str]] | None = None

    def _marian_pair(self) -> tuple[str, str]:
        pair = self.settings.pair or "-".join(self.folder.name.split("-")[-2:])
        parts = pair.split("-")
        if len(parts) != 2 or not all(len(p) == 2 and p.isalpha() for p in parts):
            raise ValueError(f"pair = {self.settings.pair!r}: a marian model translates one "
                             "direction; name it, e.g. pair = \"en-de\"")
        return parts[0], parts[1]

    def lang_token(self, code: str) -> str:
        """The model's token for an ISO 639-1 code (KeyError when it has none)."""
        if self.settings.model_type == "nllb":
            return NLLB_CODES[code]
        return f"__{code}__"

    def pairs(self) -> frozenset[tuple[str, str]]:
        """Every pair of mapped codes whose language token is in the model's vocabulary."""
        if self.marian_pair is not None:
            return frozenset({self.marian_pair})
        if self._pairs is None and not self.folder.is_dir() and \
                self.settings.model_type == "nllb":   # a catalogue NLLB not fetched yet
            self._pairs = frozenset((a, b) for a in NLLB_CODES for b in NLLB_CODES if a != b)
        if self._pairs is None:
            vocab = self._vocabulary()
            codes = NLLB_CODES if self.settings.model_type == "nllb" else \
                {t[2:-2]: t for t in vocab if len(t) == 6 and t[:2] == t[-2:] == "__"}
            known = sorted(c for c in codes if self.lang_token(c) in vocab)
            self._pairs = frozenset((a, b) for a in known for b in known if a != b)
        return self._pairs

    def _vocabulary(self) -> set[str]:
        """Target vocabulary tokens as the converter wrote them (json or one per line)."""
        for name in ("shared_vocabulary.json", "target_vocabulary.json"):
            if (self.folder / name).is_file():
                return set(json.loads((self.folder / name).read_text(encoding="utf-8")))
        for name in ("shared_vocabulary.txt", "target_vocabulary.txt"):
            if (self.folder / name).is_file():
                return set((self.folder / name).read_text(encoding="utf-8").splitlines())
        return set()

    def load(self) -> None:
        """Open the model and its tokenizer(s)."""
        with importing("mt", "ctranslate2"):
            import ctranslate2
        if not self.folder.is_dir():
            raise StartupError(models.not_fetched(self.folder))
        if not (self.folder / "model.bin").is_file():
            raise StartupError(f"{self.folder} has no model.bin: not a CTranslate2 model")
        for side in ("source", "target"):
            self.encoders[side] = self._tokenizer(side)
        self.translator = ctranslate2.Translator(
            str(self.folder), device="cpu", compute_type=self.settings.compute_type,
            intra_threads=int(self.settings.threads), inter_threads=1)

    def _tokenizer(self, side: str):
        spm_files = ([self.folder / f"{side}.spm"] if self.settings.model_type == "marian"
                     else []) + sorted(self.folder.glob("*.model")) + \
            sorted(self.folder.glob("*.spm"))
        for path in spm_files:
            if path.is_file():
                import sentencepiece

                return _SpmTokenizer(sentencepiece.SentencePieceProcessor(model_file=str(path)))
        if (self.folder / "tokenizer.json").is_file():
            from tokenizers import Tokenizer

            return _HfTokenizer(Tokenizer.from_file(str(self.folder / "tokenizer.json")))
        raise StartupError(f"{self.folder}: no tokenizer (sentencepiece *.model / *.spm or "
                           "tokenizer.json); copy it in when converting (--copy_files)")

    def translate(self, text: str, src: str, tgt: str) -> str:
        """One sentence: source tokens, target prefix, best hypothesis detokenized."""
        if not text.strip():
            return ""
        out = self.hypothesis(text, src, tgt)
        specials = {"<s>", "</s>", "<pad>", "<unk>"}
        # Drop the forced prefix and any language or special token the model emits.
        words = [t for t in out[0 if self.marian_pair else 1:]
                 if t not in specials and not _is_lang_token(t)]
        return self.encoders["target"].decode(words).strip()

    def hypothesis(self, text: str, src: str, tgt: str) -> list[str]:
        """The best output tokens, target-language prefix included (multilingual models)."""
        tokens = [*self.encoders["source"].encode(text), "</s>"]
        prefix = None
        if self.marian_pair is None:
            # NLLB (non-legacy) and M2M100 both put the source language token first and
            # force the first target token to the target language.
            tokens = [self.lang_token(src), *tokens]
            prefix = [[self.lang_token(tgt)]]
        result = self.translator.translate_batch(
            [tokens], target_prefix=prefix, beam_size=int(self.settings.beam_size),
            max_decoding_length=min(512, 3 * len(tokens) + 10))
        return result[0].hypotheses[0]


def _is_lang_token(token: str) -> bool:
    return (len(token) == 8 and token[3] == "_" and token[:3].isalpha()
            and token[4:].isalpha() and token[4].isupper()) \
        or (len(token) == 6 and token[:2] == token[-2:] == "__")


class _SpmTokenizer:
    """sentencepiece pieces in, text out."""

    def __init__(self, processor) -> None:
        self.sp = processor

    def encode(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def decode(self, pieces: list[str]) -> str:
        return self.sp.decode_pieces(pieces)


class _HfTokenizer:
    """A Hugging Face tokenizer.json through the `tokenizers` library (no transformers)."""

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer

    def encode(self, text: str) -> list[str]:
        return self.tok.encode(text, add_special_tokens=False).tokens

    def decode(self, pieces: list[str]) -> str:
        ids = [i for i in (self.tok.token_to_id(p) for p in pieces) if i is not None]
        return self.tok.decode(ids)


