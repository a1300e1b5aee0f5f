"""`voxweft captions`: the page for the room, served from a bus subscriber.

One process: a thread reads the bus (a SUB socket like the tap's: the pipeline never waits
for it) and hands each message to the asyncio loop, where `Room` turns it into page events
that go to every browser by server-sent events (aiohttp). Each browser has a bounded queue;
one that does not keep up is dropped (its connection closed), never waited for, and its
EventSource reconnects by itself and gets the whole state again.

Read-only: only GET. Bound to loopback by default; bound beyond it, every request needs the
access token in the URL (`?token=...`), and the bus side uses the host's CURVE keys as every
client of a bus beyond loopback does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
from pathlib import Path

from aiohttp import web

from voxweft.deploy.topology import Topology
from voxweft.protocol.client import BusClient
from voxweft.protocol.security import loopback
from voxweft.tools.captions import url
from voxweft.tools.captions.room import Room
from voxweft.tools.subtitles import FORMATS

STATIC = Path(__file__).with_name("static")
#: Page events a browser may have waiting before it is dropped as too slow.
QUEUE = 512
KEEPALIVE_S = 15.0
TOPICS = [b"transcript.", b"translation.", b"playback.", b"status."]

log = logging.getLogger("voxweft.captions")


def sse(event: str, data: dict) -> bytes:
    """One server-sent event."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class Captions:
    """The server: the room, the browsers connected, the bus thread."""

    def __init__(self, topology: Topology, host: str | None, token: str | None,
                 curve=None) -> None:
        self.topology = topology
        self.host = host
        self.token = token
        self.curve = curve
        self.room = Room({a: c.host for a, c in topology.actors.items()},
                         topology.src_lang, topology.tgt_lang)
        self.clients: dict[asyncio.Queue, web.Request] = {}
        self.dropped = 0
        self.stop = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- the bus side -------------------------------------------------------------------------
    def _bus_thread(self) -> None:
        bus = BusClient([self.topology.pub_connect(a) for a in self.topology.actors], TOPICS,
                        self.curve)
        bus.listen([self.topology.events_connect(h) for h in self.topology.hosts_in_use()],
                   [b"supervision."])
        try:
            while not self.stop.is_set():
                msg = bus.recv(0.5)
                if msg is not None and self.loop is not None:
                    self.loop.call_soon_threadsafe(self._publish, self.room.apply(msg))
        finally:
            bus.close()

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self._publish(self.room.tick())

    def _publish(self, events: list) -> None:
        """Queue `events` for every browser; drop a browser whose queue is full."""
        for event in events:
            for queue, request in list(self.clients.items()):
                try:
                    queue.put_nowait(event)
                except asyncio.QueueFull:
                    self.dropped += 1
                    del self.clients[queue]
                    log.warning("captions: dropped %s: it did not keep up (%d page events "
                                "waiting); it reconnects by itself", request.remote, QUEUE)
                    if request.transport is not None:
                        request.transport.close()

    # -- the web side -------------------------------------------------------------------------
    def _allowed(self, request: web.Request) -> None:
        if self.token and not secrets.compare_digest(request.query.get("token", ""),
                                                     self.token):
            raise web.HTTPForbidden(text="voxweft captions: open the URL with its ?token=... "
                                         "as `voxweft captions` printed it\n")

    async def page(self, request: web.Request) -> web.StreamResponse:
        """The page (its scripts and styles are under /static)."""
        self._allowed(request)
        return web.FileResponse(STATIC / "index.html",
                                headers={"Cache-Control": "no-store"})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: the whole state, then every change, until dropped."""
        self._allowed(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-store"})
        await response.prepare(request)
        queue: asyncio.Queue = asyncio.Queue(QUEUE)
        self.clients[queue] = request
        try:
            await response.write(b"retry: 1000\n\n" +
                                 b"".join(sse(*e) for e in self.room.snapshot()))
            while queue in self.clients:
                try:
                    event = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                await response.write(sse(*event))
        except ConnectionError:   # the browser went away
            pass
        finally:
            self.clients.pop(queue, None)
        return response

    async def subtitles(self, request: web.Request) -> web.Response:
        """subtitles.<lang>.<srt|vtt>: the page's final texts on the input's timeline."""
        self._allowed(request)
        lang, fmt = request.match_info["lang"], request.match_info["fmt"]
        sides = {self.topology.src_lang: "source", self.topology.tgt_lang: "target"}
        if lang not in sides or fmt not in FORMATS:
            raise web.HTTPNotFound(text=f"subtitles are subtitles.{{{','.join(sides)}}}."
                                        f"{{{','.join(FORMATS)}}}\n")
        return web.Response(text=self.room.subtitles(sides[lang], fmt),
                            content_type="text/vtt" if fmt == "vtt" else "application/x-subrip",
                            charset="utf-8")

    def app(self) -> web.Application:
        """The aiohttp application: GET only."""
        app = web.Application()
        app.router.add_get("/", self.page)
        app.router.add_get("/events", self.events)
        app.router.add_get(r"/subtitles.{lang:[a-z]{2,3}}.{fmt:[a-z]{3}}", self.subtitles)
        app.router.add_static("/static", STATIC)
        app.on_startup.append(self._started)
        app.on_shutdown.append(self._closing)
        return app

    async def _started(self, _app) -> None:
        self.loop = asyncio.get_running_loop()
        threading.Thread(target=self._bus_thread, name="bus", daemon=True).start()
        self.tick_task = asyncio.create_task(self._ticker())

    async def _closing(self, _app) -> None:
        self.stop.set()
        self.tick_task.cancel()
        for request in list(self.clients.values()):
            if request.transport is not None:
                request.transport.close()
        self.clients.clear()


def serve(topology: Topology, host: str | None, bind: str, port: int,
          token: str | None = None, curve=None) -> int:
    """Serve the page until SIGTERM or Ctrl-C."""
    if not loopback(bind) and not token:
        token = secrets.token_urlsafe(16)
    captions = Captions(topology, host, token, curve)
    print(f"voxweft captions: {url(bind, port, token)}", flush=True)
    try:
        web.run_app(captions.app(), host=bind, port=port, print=None, shutdown_timeout=1.0,
                    handle_signals=True)
    except OSError as exc:
        print(f"voxweft captions: cannot listen on {bind}:{port} ({exc.strerror}); choose "
              "another --port", flush=True)
        return 1
    return 0
