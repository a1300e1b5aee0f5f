"""The captions page's state (tools.captions.room) and its server (aiohttp, real sockets).

The page itself, in a real browser over a real pipeline: tests/e2e/test_captions.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import aiohttp
import pytest

from voxweft.deploy.topology import load
from voxweft.protocol.messages import (
    PlaybackEvent,
    Status,
    Supervision,
    Transcript,
    Translation,
    VadEvent,
)
from voxweft.tools.captions import read_token, url
from voxweft.tools.captions.room import KEEP, SILENT_S, Room
from voxweft.tools.captions.server import MAX_STREAMS, QUEUE, Captions, start, stop
from voxweft.tools.subtitles import NOT_SPOKEN
from voxweft.tools.tap import describe, format_line

S = 10**9
ACTORS = {"capture": "m2", "segmenter": "m2", "asr": "m2", "mt": "ultra", "tts": "ultra",
          "player": "m2"}


def room() -> Room:
    return Room(ACTORS, "en", "pt")


def trace(t0: int, speech_s: float = 1.0) -> tuple:
    """A playback trace: 0.4 s endpointing, 0.7 s asr, 0.2 s mt, 0.9 s tts, 0.1 s play.

    After `speech_s` seconds of speech (media time 10 s on).
    """
    points = [("speech_end", 0), ("segment", 0.4), ("asr.ready", 0.4), ("asr.recv", 0.4),
              ("asr.start", 0.4), ("asr.end", 1.1), ("mt.ready", 1.1), ("mt.recv", 1.1),
              ("mt.start", 1.1), ("mt.end", 1.3), ("tts.ready", 1.3), ("tts.recv", 1.3),
              ("tts.start", 1.3), ("tts.first", 2.2), ("play.ready", 2.2),
              ("play.recv", 2.2), ("play.start", 2.3)]
    media = {"speech_end": 10.0 + speech_s}
    return ((("speech_start", t0 - int(speech_s * S), 10.0),)
            + tuple((name, t0 + int(s * S), media.get(name)) for name, s in points))


def test_an_utterance_grows_then_is_final_translated_and_timed():
    r = room()
    (kind, u), = r.apply(Transcript(utt="u1", text="The book", final=False))
    assert kind == "utterance" and u["source"] == "The book" and not u["source_final"]
    assert r.apply(Transcript(utt="u1", text="The book", final=False)) == []   # no change
    (_, u), = r.apply(Transcript(utt="u1", text="The book is here.", media_start_s=1.0,
                                 media_end_s=2.5))
    assert u["source"] == "The book is here." and u["source_final"] and u["order"] == 1
    assert r.apply(Transcript(utt="u1", text="The book", final=False)) == []   # final stays
    (_, u), = r.apply(Translation(utt="u1", text="O livro está aqui.", media_start_s=1.0,
                                  media_end_s=2.5))
    assert u["target"] == "O livro está aqui." and u["target_final"]
    (_, u), stats = r.apply(PlaybackEvent(utt="u1", event="started", trace=trace(100 * S)))
    assert u["spoken"] and u["latency_s"] == 2.3
    assert u["stages"] == {"endpointing": 0.4, "asr": 0.7, "mt": 0.2, "tts": 0.9, "play": 0.1}
    assert stats == ("stats", {"lag_s": 2.3, "utterances": 1, "spoken_share": 1.0,
                               "utterances_spoken": 1, "utterances_not_spoken": 0,
                               "ignored": 0, "ignored_s": 0.0})
    (_, u2), = r.apply(Transcript(utt="u2", text="Next.", media_start_s=4.0, media_end_s=5.0))
    assert u2["order"] == 2
    kinds = [k for k, _ in r.snapshot()]
    assert kinds == ["hello"] + ["actor"] * 6 + ["utterance"] * 2 + ["stats"]


def test_a_sentence_committed_in_pieces_is_one_row_that_grows():
    r = room()
    (_, a), = r.apply(Transcript(utt="p1", text="And it is worth", media_start_s=1.0,
                                 media_end_s=2.2))
    r.apply(Translation(utt="p1", text="E vale a pena", media_start_s=1.0, media_end_s=2.2))
    r.apply(PlaybackEvent(utt="p1", event="started", trace=trace(100 * S)))
    # The next piece starts where the first ended: its draft already shows in the same row.
    (_, b), = r.apply(Transcript(utt="p2", text="mentioning", final=False, media_start_s=2.2,
                                 media_end_s=3.0))
    assert (b["utt"], b["order"]) == ("p1", a["order"])
    assert b["source"] == "And it is worth mentioning" and not b["source_final"]
    r.apply(Transcript(utt="p2", text="mentioning in passing.", media_start_s=2.2,
                       media_end_s=3.5))
    (_, b), = r.apply(Translation(utt="p2", text="mencionar de passagem.", media_start_s=2.2,
                                  media_end_s=3.5))
    assert b["target"] == "E vale a pena mencionar de passagem." and b["target_final"]
    assert b["latency_s"] == 2.3 and not b["spoken"]   # its second piece is still to come
    (_, b), _ = r.apply(PlaybackEvent(utt="p2", event="started", trace=trace(104 * S)))
    assert b["spoken"] and b["latency_s"] == 2.3          # when the sentence was first heard
    # A piece after a sentence's end, and one after a pause, start rows of their own.
    (_, c), = r.apply(Transcript(utt="p3", text="Then in the same", media_start_s=3.5,
                                 media_end_s=4.4))
    (_, d), = r.apply(Transcript(utt="p4", text="Apart.", media_start_s=6.0, media_end_s=7.0))
    assert (c["utt"], d["utt"]) == ("p3", "p4") and c["order"] < d["order"]
    rows = [u for kind, u in r.snapshot() if kind == "utterance"]
    assert [u["source"] for u in rows] == ["And it is worth mentioning in passing.",
                                           "Then in the same", "Apart."]
    assert "00:00:01,000 --> 00:00:02,200\nAnd it is worth" in r.subtitles("source", "srt")


def test_a_translation_not_spoken_is_said_so_on_the_page_and_in_the_subtitles():
    r = room()
    r.apply(Transcript(utt="u1", text="First.", media_start_s=0.5, media_end_s=1.5))
    r.apply(Translation(utt="u1", text="Primeiro.", media_start_s=0.5, media_end_s=1.5))
    r.apply(Transcript(utt="u2", text="Second.", media_start_s=3.0, media_end_s=4.0))
    r.apply(Translation(utt="u2", text="Segundo.", media_start_s=3.0, media_end_s=4.0))
    (_, u), _ = r.apply(PlaybackEvent(utt="u2", event="skipped",
                                      reason="9.1 s behind the speaker, over max_lag_s 8 s"))
    assert u["not_spoken"].startswith("9.1 s behind")
    vtt = r.subtitles("target", "vtt")
    assert "Primeiro." in vtt and f"{NOT_SPOKEN}Segundo." in vtt
    assert vtt.index("Primeiro.") < vtt.index("Segundo.")
    srt = r.subtitles("source", "srt")
    assert "00:00:00,500 --> 00:00:01,500\nFirst." in srt and "Second." in srt


def test_speech_that_is_not_the_speakers_shows_as_ignored_and_why():
    r = room()
    r.apply(Transcript(utt="u1", text="The speaker.", media_start_s=0.5, media_end_s=1.5))
    assert r.apply(VadEvent(utt="u1", event="end", media_s=1.5)) == []   # not a row
    why = "not the speaker: 12 dB under their level"
    rejected = VadEvent(event="rejected", media_s=2.0, end_s=3.4, reason=why, seq=7)
    (kind, u), (_, stats) = r.apply(rejected)
    assert kind == "utterance" and u["ignored"] == f"1.4 s not interpreted: {why}"
    assert u["source_final"] and u["target_final"] and not u["target"]   # no "…" to wait on
    assert not u["source"] and not u["spoken"] and u["order"] == 2
    assert stats["ignored"] == 1 and stats["utterances"] == 1 and stats["ignored_s"] == 1.4
    assert stats["spoken_share"] == 0.0   # speech heard, none of it interpreted
    assert r.apply(rejected) == []                                   # heard twice: once
    assert "not interpreted" not in r.subtitles("source", "srt")
    line = format_line(describe(rejected, rejected.sent_ns))           # and in the tap
    assert f"rejected 2.00-3.40 s not interpreted: {why}" in line, line


def test_the_share_is_of_the_speech_heard_and_what_was_ignored_counts_against_it():
    r = room()
    # 4 s of the speaker's speech, spoken; 1 s ignored: 80 % of the speech heard was spoken
    r.apply(Transcript(utt="u1", text="one two three", trace=trace(S, speech_s=4.0)))
    (_, stats), = r.apply(PlaybackEvent(utt="u1", event="started", trace=trace(S, 4.0)))[1:]
    assert stats["spoken_share"] == 1.0
    (_, stats), = r.apply(VadEvent(event="rejected", media_s=20.0, end_s=21.0,
                                   reason="not the speaker: 11 dB under their level"))[1:]
    assert stats["spoken_share"] == 0.8 and stats["ignored"] == 1 and stats["ignored_s"] == 1.0
    # 5 s more, not spoken (too late): 4 of 10 s
    r.apply(PlaybackEvent(utt="u2", event="skipped", reason="too late", trace=trace(S, 5.0)))
    assert r.stats()[1]["spoken_share"] == 0.4


def test_an_utterance_the_player_cut_off_is_not_counted_as_spoken():
    r = room()
    r.apply(Transcript(utt="u1", text="one two three four"))
    r.apply(PlaybackEvent(utt="u1", event="started", trace=trace(S)))
    assert r.stats()[1]["spoken_share"] == 1.0
    assert r.apply(PlaybackEvent(utt="u1", event="finished", complete=True)) == []
    (_, u), (_, stats) = r.apply(PlaybackEvent(utt="u1", event="finished", complete=False))
    assert u["not_spoken"].startswith("cut off") and stats["spoken_share"] == 0.0
    assert stats["utterances_not_spoken"] == 1


def test_the_share_of_speech_spoken_counts_the_whole_talk():
    r = room()
    assert r.stats()[1]["spoken_share"] is None   # no fate known yet
    # KEEP + 10 utterances of 2 s of speech, every tenth not spoken: the share is over all
    # of them, not over the KEEP the page still holds.
    n = KEEP + 10
    for i in range(n):
        r.apply(Transcript(utt=f"u{i}", text="one two three"))
        event = "skipped" if i % 10 == 0 else "started"
        r.apply(PlaybackEvent(utt=f"u{i}", event=event, reason="too late",
                              trace=trace(i * S, 2.0)))
    skipped = n // 10
    stats = r.stats()[1]
    assert stats["utterances_not_spoken"] == skipped and stats["utterances_spoken"] == n - skipped
    assert stats["spoken_share"] == round((n - skipped) / n, 4)
    # A playback event sent again (a restarted player) counts once.
    r.apply(PlaybackEvent(utt=f"u{n - 1}", event="started", trace=trace(0, 2.0)))
    assert r.stats()[1] == stats
    # A fate that comes without the speech's times counts them when the transcript brings
    # them (its final one: a draft's trace is not the utterance's).
    r.apply(Transcript(utt="late", text="a draft", final=False, trace=trace(0, 9.0)))
    (_, u), (_, late) = r.apply(PlaybackEvent(utt="late", event="skipped", reason="too late"))
    assert late["utterances_not_spoken"] == skipped + 1
    assert late["spoken_share"] == stats["spoken_share"]
    (_, u), (_, final) = r.apply(Transcript(utt="late", text="four more words here",
                                            trace=trace(0, 3.0)))
    assert final["spoken_share"] == round(2 * (n - skipped) / (2 * n + 3), 4)


def test_only_the_last_utterances_are_kept():
    r = room()
    for i in range(KEEP + 5):
        r.apply(Transcript(utt=f"u{i}", text=f"t{i}"))
    assert len(r.utts) == KEEP and next(iter(r.utts)) == "u5"


def test_actor_states_restarts_queue_silence_and_supervision():
    r = room()
    assert r.actors["mt"]["state"] == "down"   # not heard yet
    (_, a), = r.apply(Status(src="mt", epoch=1, state="loading"), now=10.0)
    assert a["state"] == "loading" and a["host"] == "ultra" and a["restarts"] == 0
    (_, a), = r.apply(Status(src="mt", epoch=1, state="ready", outstanding=2,
                             counters={"backlog": 1}), now=10.5)
    assert a["state"] == "ready" and a["queue"] == 3
    assert r.apply(Status(src="mt", epoch=1, state="ready", outstanding=2,
                          counters={"backlog": 1}), now=11.0) == []   # unchanged: nothing sent
    assert r.tick(now=11.0 + SILENT_S - 0.1) == []
    (_, a), = r.tick(now=11.0 + SILENT_S + 0.1)   # killed: no heartbeat
    assert a["state"] == "down" and "no heartbeat" in a["detail"]
    (_, a), = r.apply(Status(src="mt", epoch=2, state="loading"), now=20.0)
    assert a["state"] == "loading" and a["restarts"] == 1
    (_, a), = r.apply(Supervision(actor="mt", state="BACKOFF", exit_status=-1,
                                  expected=False, reason="boom"))
    assert a["state"] == "down" and a["detail"]
    (_, a), = r.apply(Status(src="asr", epoch=5, state="ready", unreachable={"mt": 4.0}))
    assert a["detail"] == "cannot hear mt"
    assert r.apply(Status(src="stranger", epoch=1)) == []
    # Capture cancelling the loudspeaker's echo says how it goes (issue 47).
    (_, a), = r.apply(Status(src="capture", epoch=1, state="ready",
                             echo={"converged": 0.0, "playing_s": 1.0}))
    assert a["detail"].startswith("echo: learning the room")
    (_, a), = r.apply(Status(src="capture", epoch=1, state="ready",
                             echo={"converged": 1.0, "removed_db": 24.0, "delay_ms": 3.0}))
    assert "converged, delay 3 ms" in a["detail"] and "24 dB quieter" in a["detail"]


def test_urls():
    assert url("192.168.1.20", 8750, "abc") == "http://192.168.1.20:8750/?token=abc"
    assert url("::1", 8750, None) == "http://[::1]:8750/"


@pytest.fixture(scope="module")
def topology():
    return load()


async def _serve(captions: Captions, check, **options):
    """Serve the page as `serve` does (its runner's options) on a free loopback port."""
    sock = socket.create_server(("127.0.0.1", 0))
    runner, server = await start(captions.app(), sock=sock, **options)
    try:
        async with aiohttp.ClientSession() as session:
            await check(sock.getsockname()[1], session)
    finally:
        await stop(runner, server)


def test_the_server_asks_for_the_token_and_streams_the_state(topology):
    captions = Captions(topology, None, token="s3cret")
    captions.room.apply(Transcript(utt="u1", text="Hello there."))

    async def check(port, session):
        base = f"http://127.0.0.1:{port}"
        for path in ("/", "/events", "/subtitles.en.vtt"):
            async with session.get(base + path) as resp:
                assert resp.status == 403, path
                assert "?token=" in await resp.text()
        async with session.get(base + "/?token=s3cret") as resp:
            assert resp.status == 200 and "<html" in (await resp.text()).lower()
        async with session.get(base + "/static/page.js") as resp:
            assert resp.status == 200
        for path in ("/?token=s3cret", "/", "/static/page.js", "/nothing"):
            async with session.get(base + path) as resp:   # refusals carry them too
                assert resp.headers["X-Content-Type-Options"] == "nosniff", path
                assert resp.headers["Referrer-Policy"] == "no-referrer", path
                assert "script-src 'self'" in resp.headers["Content-Security-Policy"], path
        async with session.post(base + "/?token=s3cret") as resp:
            assert resp.status == 405   # read-only
        async with session.get(base + "/subtitles.xx.vtt?token=s3cret") as resp:
            assert resp.status == 404
        async with session.get(base + "/events?token=s3cret") as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            events = []
            while len(events) < 9:
                line = (await resp.content.readline()).decode()
                if line.startswith("event: "):
                    events.append(line[7:].strip())
                elif line.startswith("data: ") and events[-1] == "utterance":
                    assert json.loads(line[6:])["source"] == "Hello there."
            assert events[0] == "hello" and events[7] == "utterance"
            # A change reaches a connected browser.
            captions._publish(captions.room.apply(Translation(utt="u1", text="Olá.")))
            while (await resp.content.readline()) != b"event: utterance\n":
                pass
            line = (await resp.content.readline()).decode()
            assert json.loads(line[6:])["target"] == "Olá."

    asyncio.run(_serve(captions, check))


def test_a_browser_that_does_not_keep_up_is_dropped_not_waited_for(topology):
    captions = Captions(topology, None, token=None)

    async def check(port, session):
        base = f"http://127.0.0.1:{port}"
        async with session.get(base + "/events") as resp:
            await resp.content.readline()
            while not captions.clients:
                await asyncio.sleep(0.01)
            # The loop publishes more than a browser may have waiting, without yielding to
            # the browser's writer: its queue overflows and it is dropped at once.
            for i in range(QUEUE + 10):
                captions._publish([("stats", {"lag_s": i, "utterances": 0})])
            assert captions.clients == {} and captions.dropped == 1
            with pytest.raises(aiohttp.ClientPayloadError):   # its connection is cut
                await asyncio.wait_for(resp.content.read(), 10)
        async with session.get(base + "/events") as resp:   # it comes back: all again
            assert (await resp.content.readline()).startswith(b"retry:")

    asyncio.run(_serve(captions, check))


def test_a_request_for_a_name_the_server_is_not_is_refused(topology):
    """DNS rebinding: a web page whose own name now points at 127.0.0.1 reads nothing."""
    local = Captions(topology, None, token=None)

    async def check(port, session):
        base = f"http://127.0.0.1:{port}"
        for host in (f"rebound.example:{port}", "rebound.example", "127.0.0.1:1"):
            for path in ("/", "/events", "/subtitles.en.vtt", "/static/page.js"):
                async with session.get(base + path, headers={"Host": host}) as resp:
                    assert resp.status == 421, (host, path)
                    assert (await resp.text()).count("\n") == 1
        for host in (f"127.0.0.1:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
            async with session.get(base + "/", headers={"Host": host}) as resp:
                assert resp.status == 200, host

    asyncio.run(_serve(local, check))
    lan = Captions(topology, None, token="s3cret", bind="192.168.1.20")

    async def check_lan(port, session):
        base = f"http://127.0.0.1:{port}/?token=s3cret"
        async with session.get(base, headers={"Host": f"192.168.1.20:{port}"}) as resp:
            assert resp.status == 200
        async with session.get(base, headers={"Host": f"localhost:{port}"}) as resp:
            assert resp.status == 421

    asyncio.run(_serve(lan, check_lan))


def test_a_token_that_is_not_ascii_is_refused_not_an_error(topology):
    captions = Captions(topology, None, token="s3cret")

    async def check(port, session):
        base = f"http://127.0.0.1:{port}"
        for path in ("/", "/events", "/subtitles.en.vtt"):
            for token in ("é", "s3crét", "%FF"):
                async with session.get(f"{base}{path}?token={token}") as resp:
                    assert resp.status == 403, (path, token)
        async with session.get(base + "/?token=s3cret") as resp:
            assert resp.status == 200

    asyncio.run(_serve(captions, check))


def test_event_streams_are_capped_and_a_browser_that_goes_away_frees_its_slot(topology):
    captions = Captions(topology, None, token=None)

    async def check(port, session):
        url = f"http://127.0.0.1:{port}/events"
        streams = [await session.get(url) for _ in range(MAX_STREAMS)]
        assert all(s.status == 200 for s in streams) and len(captions.clients) == MAX_STREAMS
        async with session.get(url) as resp:
            assert resp.status == 503 and (await resp.text()).count("\n") == 1
        async with session.get(url.replace("/events", "/")) as resp:
            assert resp.status == 200   # the page itself is not capped
        streams.pop().close()   # a browser goes away: its slot is free at once
        await asyncio.wait_for(_until(lambda: len(captions.clients) < MAX_STREAMS), 5)
        async with session.get(url) as resp:
            assert resp.status == 200
        for s in streams:
            s.close()

    asyncio.run(_serve(captions, check))


def test_connections_are_capped_and_headers_must_come_in_time(topology):
    """A stranger's idle connections, or headers a byte at a time, cannot hold the server."""
    captions = Captions(topology, None, token=None)

    def closed_within(conn, seconds: float) -> bool:
        conn.settimeout(seconds)
        try:
            return conn.recv(1024) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True

    async def check(port, session):
        loop = asyncio.get_running_loop()
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")   # and never the end
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        await asyncio.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", port))   # the fourth: over the cap
        assert await loop.run_in_executor(None, closed_within, extra, 2.0)
        # The headers that never end: dropped once HEADERS_S (here 1 s) has passed.
        started = time.monotonic()
        assert await loop.run_in_executor(None, closed_within, slow, 5.0)
        assert 0.5 < time.monotonic() - started < 3.0
        for conn in idle:   # idle connections go the same way
            assert await loop.run_in_executor(None, closed_within, conn, 3.0)
        async with session.get(f"http://127.0.0.1:{port}/") as resp:   # room again
            assert resp.status == 200
        for conn in (slow, extra, *idle):
            conn.close()

    asyncio.run(_serve(captions, check, cap=3, keepalive_timeout=1.0))


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def test_the_token_comes_from_a_file_or_the_environment_not_the_command_line(tmp_path):
    from voxweft.tools.cli import build_parser

    path = tmp_path / "token"
    path.write_text("s3cret-_.~9\n")
    args = build_parser().parse_args(["captions", "--token-file", str(path)])
    assert read_token(args.token_file, {"VOXWEFT_CAPTIONS_TOKEN": "env"}) == "s3cret-_.~9"
    assert read_token(None, {"VOXWEFT_CAPTIONS_TOKEN": "env"}) == "env"
    assert read_token(None, {}) is None
    for content, error in (("", "is empty"), ("two words", "letters, digits"),
                           ("sécret", "letters, digits"), (None, "cannot read")):
        if content is not None:
            path.write_text(content)
        else:
            path.unlink()
        with pytest.raises(ValueError, match=error) as exc:
            read_token(str(path), {})
        assert str(path) in str(exc.value)
    with pytest.raises(ValueError, match="VOXWEFT_CAPTIONS_TOKEN"):
        read_token(None, {"VOXWEFT_CAPTIONS_TOKEN": "a b"})
    # No option takes the token itself: `ps` shows a command line to every local user.
    assert "token" not in vars(build_parser().parse_args(["captions"]))


def test_up_captions_is_a_supervised_program_with_its_token_out_of_sight(tmp_path, topology):
    from voxweft.deploy.supervisor import CaptionsProgram, Supervisor, render
    from voxweft.tools.cli_common import CAPTIONS_COMMAND

    conf = render(topology, "local", tmp_path,
                  CaptionsProgram(CAPTIONS_COMMAND, "192.168.1.20", 8751, "tok"))
    program = conf[conf.index("[program:captions]"):]
    assert "captions --topology %(here)s/topology.toml --host local --bind 192.168.1.20 " \
           "--port 8751" in program
    assert 'VOXWEFT_CAPTIONS_TOKEN="tok"' in program and "autorestart=true" in program
    assert "tok" not in program.split("\n")[1]   # not on the command line (ps shows it)
    assert "[program:captions]" not in render(topology, "local", tmp_path)
    sup = Supervisor(tmp_path / "run")
    sup.write(topology, "local", CaptionsProgram(CAPTIONS_COMMAND, "127.0.0.1", 8751))
    assert (sup.conf.stat().st_mode & 0o777) == 0o600


def test_the_page_needs_nothing_from_the_internet():
    from voxweft.tools.captions.server import STATIC

    for path in STATIC.iterdir():
        text = path.read_text(encoding="utf-8")
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, path


def test_a_page_bound_beyond_loopback_gets_a_token_on_loopback_none():
    from argparse import Namespace

    from voxweft.tools.cli_common import captions_program

    lan = captions_program(Namespace(captions=True, captions_bind="192.168.1.20",
                                      captions_port=8750))
    local = captions_program(Namespace(captions=True, captions_bind="127.0.0.1",
                                        captions_port=8750))
    assert len(lan.token) >= 20 and local.token == ""
    assert captions_program(Namespace(captions=False)) is None
