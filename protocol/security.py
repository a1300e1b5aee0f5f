"""CURVE on the bus: encrypted and authenticated links wherever a socket binds beyond loopback.

Each host has a key pair (`voxweft keys --host NAME`: the secret in a 0600 file outside the
repository, the public key printed for the topology's `[hosts.NAME] public_key`). A socket
bound on a non-loopback address is a CURVE server with its host's keys; a ZAP handler (pyzmq's
`ThreadAuthenticator`) in the same process lets in only the public keys the topology lists:
every host's and the `[clients]` (a tap, a captions page), and, when `[hosts.NAME] allow`
names them, only those source addresses. A socket connecting to such an address is a CURVE
client that knows the server's public key, so a peer pretending to be that host cannot
complete the handshake. Such a server refuses every client while no ZAP handler runs
(ZAP_ENFORCE_DOMAIN), rather than admitting any key. Refusals are counted (`peers_refused`) and
logged once per REFUSED_LOG_S. Loopback-only topologies use no keys at all.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
import zmq.utils.z85

KEYS_ENV = "VOXWEFT_KEYS"
ZAP_DOMAIN = "voxweft"
#: The work queue's sockets (PUSH): only hosts' keys, never a client's (a tap that connected
#: a PULL there would take utterances from the ASR).
WORK_DOMAIN = "voxweft-work"
#: A refused peer may retry its handshake many times a second: said once per this many seconds.
REFUSED_LOG_S = 10.0
_log = logging.getLogger("voxweft.security")


def keys_dir() -> Path:
    """Where `voxweft keys` keeps key pairs: `$VOXWEFT_KEYS` or ~/.config/voxweft/keys."""
    root = os.environ.get(KEYS_ENV)
    return Path(root).expanduser() if root else Path.home() / ".config" / "voxweft" / "keys"


def loopback(address: str) -> bool:
    """Whether `address` (an IP or "localhost") is this machine's loopback."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def endpoint_address(endpoint: str) -> str:
    """The address part of "tcp://ADDRESS:PORT"."""
    rest = endpoint.split("://", 1)[-1]
    return rest.rsplit(":", 1)[0].strip("[]")


def create_keys(name: str, directory: Path | None = None) -> tuple[Path, Path, str]:
    """Make key pair `name` in `directory`: (public file, secret file (0600), public key)."""
    directory = directory or keys_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if directory.is_symlink() or not directory.is_dir():
        raise FileExistsError(f"{directory} is not a folder of its own: give VOXWEFT_KEYS a "
                              "real folder")
    os.chmod(directory, 0o700)
    for path in (directory / f"{name}.key_secret", directory / f"{name}.key"):
        if os.path.lexists(path):   # a link too, even one to nowhere: never written through
            raise FileExistsError(f"{path} exists: a host keeps its keys (delete it first "
                                  "to make new ones, then update every topology that lists it)")
    # Private from the first byte (no window between writing and chmod); the public file is
    # made 0644 after.
    old_umask = os.umask(0o077)
    try:
        public, secret = zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(old_umask)
    os.chmod(public, 0o644)
    key, _ = zmq.auth.load_certificate(public)
    return Path(public), Path(secret), key.decode("ascii")


#: A key file `voxweft keys` writes is ~300 bytes.
MAX_KEY_FILE_BYTES = 64 * 1024


def load_keys(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) from a secret key file; ValueError with one line if it is unusable."""
    # What it is, before a byte is read: a FIFO would hang the reader, /dev/zero fill its
    # memory (a file others can read is refused below, once it is known to hold a secret).
    try:
        info = path.stat()
    except OSError:
        raise ValueError(f"no secret key file {path}") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_KEY_FILE_BYTES:
        raise ValueError(f"{path} is not a key file (a regular file of at most "
                         f"{MAX_KEY_FILE_BYTES} bytes, as `voxweft keys` writes)")
    try:
        public, secret = zmq.auth.load_certificate(path)
    except OSError:
        raise ValueError(f"no secret key file {path}") from None
    except (ValueError, zmq.ZMQError) as exc:
        raise ValueError(f"{path} is not a key file ({exc})") from None
    if secret is None:
        raise ValueError(f"{path} holds no secret key (a .key_secret file is needed)")
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"{path} can be read by others: chmod 600 {path}")
    return public, secret


def valid_public_key(key: str) -> bool:
    """Whether `key` is a Z85 CURVE public key (40 characters)."""
    try:
        return len(key) == 40 and len(zmq.utils.z85.decode(key.encode("ascii"))) == 32
    except (ValueError, KeyError, UnicodeEncodeError):   # not Z85
        return False


@dataclass(frozen=True)
class Curve:
    """One process's CURVE: its own key pair, the servers it knows, the clients it admits."""

    public: bytes                      # Z85
    secret: bytes                      # Z85
    servers: dict[str, bytes]          # address -> the public key of the host bound there
    clients: dict[bytes, str]          # admitted public key -> its name
    addresses: tuple[str, ...] = ()    # admitted source addresses (empty: any)
    workers: frozenset[bytes] = frozenset()   # keys admitted to a work queue: hosts' only

    def bind(self, sock: zmq.Socket, endpoint: str, work: bool = False) -> None:
        """Bind `sock`; beyond loopback as a CURVE server whose clients ZAP checks.

        `work`: a work queue, which admits `workers` only.
        """
        if not loopback(endpoint_address(endpoint)):
            sock.curve_secretkey = self.secret
            sock.curve_publickey = self.public
            sock.curve_server = True
            sock.zap_domain = (WORK_DOMAIN if work else ZAP_DOMAIN).encode()
            # Without this libzmq admits any key while no ZAP handler answers (none started,
            # or it stopped): CURVE would encrypt but let strangers in.
            sock.zap_enforce_domain = True
        sock.bind(endpoint)

    def connect(self, sock: zmq.Socket, endpoint: str) -> None:
        """Connect `sock`; to a CURVE host with its public key as the server's."""
        server = self.servers.get(endpoint_address(endpoint))
        if server is not None:
            sock.curve_serverkey = server
            sock.curve_publickey = self.public
            sock.curve_secretkey = self.secret
        sock.connect(endpoint)

    def start(self, ctx: zmq.Context, who: str) -> object:
        """Start the ZAP handler of `ctx` (one per process); returns it (stop() it last)."""
        from zmq.auth.thread import ThreadAuthenticator

        auth = ThreadAuthenticator(ctx, log=_log)
        auth.start()
        if self.addresses:
            auth.allow(*self.addresses)
        auth.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=_Admit(self, who))
        auth.configure_curve_callback(domain=WORK_DOMAIN,
                                      credentials_provider=_Admit(self, who, self.workers))
        return auth


class _Admit:
    """The ZAP decision: a listed key is admitted; any other is refused, counted and said so."""

    def __init__(self, curve: Curve, who: str, only: frozenset[bytes] | None = None) -> None:
        self.curve, self.who, self.only = curve, who, only
        self.refused = 0
        self.said = float("-inf")   # when a refusal was last logged (time.monotonic)

    def callback(self, domain: str, key: bytes) -> bool:
        name = self.curve.clients.get(key)
        admitted = name is not None and (self.only is None or key in self.only)
        if not admitted:
            self.refused += 1
            now = time.monotonic()
            if now - self.said >= REFUSED_LOG_S:
                self.said = now
                why = "an unlisted key" if name is None else f"the key of {name}, no host,"
                _log.warning("%s: refused a peer with %s %s%s; %d refused so far", self.who,
                             why, key.decode("ascii", "replace"),
                             " on the work queue" if self.only is not None else "",
                             self.refused)
        return admitted


def plain_bind(sock: zmq.Socket, endpoint: str) -> None:
    """Bind without CURVE (a loopback-only topology)."""
    sock.bind(endpoint)


def plain_connect(sock: zmq.Socket, endpoint: str) -> None:
    """Connect without CURVE."""
    sock.connect(endpoint)
