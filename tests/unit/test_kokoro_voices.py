"""Kokoro's own voices for pt, es, fr, it: carried in the repository, checked, spoken natively."""

import hashlib

import numpy as np
import pytest

from voxweft.actors.engines.tts import kokoro as K
from voxweft.actors.settings.base import StartupError

# The files of kokoro-js 1.2.1 (voices/), unchanged: see kokoro_voices/NOTICE.md.
SHA256 = {
    "ef_dora": "f66ec66bd295acb18372e37008533a9a3228483ccd294e7538d5d9294ac9a532",
    "em_alex": "27809e9eafdcbcfff90a3016c697568676531de2a2c39cee29c96c7bd6b83e95",
    "em_santa": "ad43b774e1ca24d05c6161297d8aeb770ac3d29bb95daf516727af5f7d543683",
    "ff_siwis": "a35f5675ad08948e326ae75fd0ea16ba5d0042e4f76b5f3d1df77d0a48c54861",
    "if_sara": "409b69248798fcdc2542330c76953d230710f19b057e59cb82fdc3c4cf71265c",
    "im_nicola": "bc578e510d52a96d6940d46f12e96d7b3df00905dbea075113226d100e6e1ab0",
    "pf_dora": "3da7b5b2d91847ebf5646f57631af6ececae3c29a89cd300f06edf9aa6cfe9ee",
    "pm_alex": "0175c753f59c54e7fd5a995bedef0c5ff2fb67e0043dd3dcb2ae74ec2acbeb2a",
    "pm_santa": "8b012db3185778afe2e45a62cbad69db73021774fe68dda634bcc748a982eede",
}


def test_every_native_voice_is_carried_unchanged():
    assert set(K.NATIVE_VOICES) == set(SHA256)
    for name, digest in SHA256.items():
        data = (K.VOICES_DIR / f"{name}.bin").read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, name
        assert len(data) == 510 * 256 * 4
    assert (K.VOICES_DIR / "LICENSE").is_file() and (K.VOICES_DIR / "NOTICE.md").is_file()


def test_auto_speaks_each_language_in_its_own_voice():
    engine = K.KokoroEngine()
    assert engine.settings.voice == "auto"
    assert {lang: engine.voice_for(lang) for lang in ("pt", "es", "fr", "it", "en")} == \
        {"pt": "pf_dora", "es": "ef_dora", "fr": "ff_siwis", "it": "if_sara", "en": "jm_kumo"}
    assert K.KokoroEngine(voice="pm_alex").voice_for("es") == "pm_alex"   # one voice for all


def test_a_damaged_voice_file_stops_the_start_with_what_to_do(tmp_path, monkeypatch):
    (tmp_path / "pf_dora.bin").write_bytes(b"\0" * 1000)
    monkeypatch.setattr(K, "VOICES_DIR", tmp_path)
    with pytest.raises(StartupError, match="damaged .* reinstall voxweft"):
        K.KokoroEngine(voice="pf_dora", precision="int8").load()


def test_the_native_voice_says_the_same_in_less_time():
    """pf_dora says a Portuguese sentence in less time than the Japanese jm_kumo."""
    text = "A reunião terminou sem acordo, e as duas partes voltarão a conversar amanhã."
    made = {}
    for voice in ("pf_dora", "jm_kumo"):
        engine = K.KokoroEngine(voice=voice, precision="int8", threads=2)
        engine.load()
        made[voice] = sum(len(c) for c in engine.synthesize(text, "pt", eager=False))
    assert made["pf_dora"] < 0.92 * made["jm_kumo"]
    assert np.isfinite(made["pf_dora"])
