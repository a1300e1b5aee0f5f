"""`voxweft captions`: the page for the room, served from a bus subscriber.

One process: a thread reads the bus (a SUB socket like the tap's: the pipeline never waits
for it) and hands each message to the asyncio loop, where `Room` turns it into page events
that go to every browser by server-sent events (aiohttp). Each browser has a bounded queue;
one that does not keep up is dropped (its connection closed), never waited for, and its
EventSource reconnects by itself and gets the whole state again.

Read-only: only GET. Bound to loopback by default; bound beyond it, every request needs the
access token in the URL (`?token=...`), and the bus side uses the host's CURVE keys as every
client of a bus beyond loopback does. A request that calls the server by another name (its
Host header) is refused: a web page whose own name an attacker points at this address (DNS
rebinding) would otherwise read the page, token or none. At most MAX_STREAMS browsers are
served at once; more are turned away (503) and their page retries by itself. At most
MAX_CONNECTIONS connections are open at once (one more is closed as it comes), and a request
whose headers have not come within HEADERS_S is dropped: a stranger's thousand idle
connections, or headers sent a byte a minute, cannot take the server's descriptors.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
import threading
from pathlib import Path

from aiohttp import web

from voxweft.deploy.topology import Topology
from voxweft.protocol import bus as wire
from voxweft.protocol.client import BusClient
from voxweft.protocol.security import loopback
from voxweft.tools.captions import url
from voxweft.tools.captions.room import Room
from voxweft.tools.subtitles import FORMATS

STATIC = Path(__file__).with_name("static")
#: Page events a browser may have waiting before it is dropped as too slow.
QUEUE = 512
KEEPALIVE_S = 15.0
#: Event streams served at once (each holds a connection and a queue): a room's phones, not
#: whatever a stranger on the network opens.
MAX_STREAMS = 32
#: Connections open at once, at most: the room's streams, their pages loading, and room to
#: spare. One more is closed as soon as it is accepted.
MAX_CONNECTIONS = 4 * MAX_STREAMS
#: A request's headers must have come within this long of its connection's start (or of the
#: answer before it on that connection); an idle connection closes after it too (aiohttp's
#: keep-alive timeout, which also runs from the connection's start). An event stream, being
#: answered, is not idle.
HEADERS_S = 10.0
#: aiohttp's server options. A browser that goes away cancels its handler at once, which frees
#: its event stream's slot (by default aiohttp waits for a write to fail: up to KEEPALIVE_S).
RUNNER = {"handler_cancellation": True, "keepalive_timeout": HEADERS_S,
          "shutdown_timeout": 1.0}
#: On every answer: the browser runs only this server's own files, never guesses a type,
#: sends no address (the URL may hold the token) to another site, and shows the page in no
#: other site's frame.
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; object-src 'none'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
}
TOPICS = wire.watched("captions")

log = logging.getLogger("voxweft.captions")


def sse(event: str, data: dict) -> bytes:
    """One server-sent event."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def names(bind: str) -> frozenset[str] | None:
    """The names a browser may call a server bound to `bind` by (Host, less its port).

    None when bound to every address: it is not on loopback, so the token guards it.
    """
    if loopback(bind):
        return frozenset({"127.0.0.1", "localhost", "[::1]"})
    if bind in ("0.0.0.0", "::"):
        return None
    return frozenset({f"[{bind}]" if ":" in bind else bind})


class Captions:
    """The server: the room, the browsers connected, the bus thread."""

    def __init__(self, topology: Topology, host: str | None, token: str | None,
                 curve=None, bind: str = "127.0.0.1") -> None:
        self.topology = topology
        self.host = host
        self.token = token
        self.curve = curve
        self.names = names(bind)
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
                   wire.watched("captions", wire.EVENTS))
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
    @web.middleware
    async def _addressed(self, request: web.Request, handler):
        """Refuse a request that calls this server by a name it does not have (DNS rebinding)."""
        if self.names is not None:
            port = request.transport.get_extra_info("sockname")[1] if request.transport else 0
            host = request.headers.get("Host", "").lower().removesuffix(f":{port}")
            if host not in self.names:
                raise web.HTTPMisdirectedRequest(
                    text="voxweft captions: not this server's name; open the URL it printed\n")
        return await handler(request)

    def _allowed(self, request: web.Request) -> None:
        # As bytes: a token that is not ASCII is a wrong token, not an error.
        given = request.query.get("token", "").encode()
        if self.token and not hmac.compare_digest(given, self.token.encode()):
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
        if len(self.clients) >= MAX_STREAMS:
            log.warning("captions: turned %s away: %d pages are open already", request.remote,
                        MAX_STREAMS)
            raise web.HTTPServiceUnavailable(
                text=f"voxweft captions: {MAX_STREAMS} pages are open already; try later\n")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-store"})
        queue: asyncio.Queue = asyncio.Queue(QUEUE)
        self.clients[queue] = request   # before the first await: no two requests share a slot
        try:
            await response.prepare(request)
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
        app = web.Application(middlewares=[self._addressed])
        app.router.add_get("/", self.page)
        app.router.add_get("/events", self.events)
        app.router.add_get(r"/subtitles.{lang:[a-z]{2,3}}.{fmt:[a-z]{3}}", self.subtitles)
        app.router.add_static("/static", STATIC)
        app.on_response_prepare.append(_secure)
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


class _Capped:
    """The server's protocol factory, with at most `cap` connections open at once."""

    def __init__(self, server: web.Server, cap: int) -> None:
        self.server, self.cap = server, cap
        self.turned_away = 0

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.server.connections) < self.cap:
            return self.server()
        self.turned_away += 1
        if self.turned_away in (1, 10, 100) or self.turned_away % 1000 == 0:
            log.warning("captions: closed a connection: %d are open already (%d closed so "
                        "far)", self.cap, self.turned_away)
        return _Closed()


class _Closed(asyncio.Protocol):
    """A connection over the cap: closed as it is accepted."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


async def start(app: web.Application, *, sock=None, host: str | None = None,
                port: int | None = None, cap: int = MAX_CONNECTIONS, handle_signals=False,
                **options) -> tuple[web.AppRunner, asyncio.Server]:
    """Serve `app` on `sock` or host:port, its connections capped; (runner, server) for `stop`.

    `options` replace RUNNER's (a test's shorter timeout).
    """
    runner = web.AppRunner(app, handle_signals=handle_signals, **{**RUNNER, **options})
    await runner.setup()
    try:
        server = await asyncio.get_running_loop().create_server(
            _Capped(runner.server, cap), host=host, port=port, sock=sock)
    except BaseException:
        await runner.cleanup()
        raise
    return runner, server


async def stop(runner: web.AppRunner, server: asyncio.Server) -> None:
    """Stop accepting, close every connection, run the app's shutdown."""
    server.close()
    await runner.cleanup()


async def _forever(app: web.Application, bind: str, port: int) -> None:
    runner, server = await start(app, host=bind, port=port, handle_signals=True)
    try:
        await asyncio.Event().wait()   # until SIGTERM or Ctrl-C (aiohttp's GracefulExit)
    finally:
        await stop(runner, server)


async def _secure(_request: web.Request, response: web.StreamResponse) -> None:
    """HEADERS on every answer, the refusals too."""
    response.headers.update(HEADERS)


def serve(topology: Topology, host: str | None, bind: str, port: int,
          token: str | None = None, curve=None) -> int:
    """Serve the page until SIGTERM or Ctrl-C."""
    if not loopback(bind) and not token:
        token = secrets.token_urlsafe(16)
    captions = Captions(topology, host, token, curve, bind)
    print(f"voxweft captions: {url(bind, port, token)}", flush=True)
    try:
        asyncio.run(_forever(captions.app(), bind, port))
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    except OSError as exc:
        print(f"voxweft captions: cannot listen on {bind}:{port} ({exc.strerror}); choose "
              "another --port", flush=True)
        return 1
    return 0
