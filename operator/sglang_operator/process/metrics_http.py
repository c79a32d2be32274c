"""The HTTP server of the metrics port: ``/metrics`` (prometheus-client's text of a registry) and ``/readyz``
(:mod:`sglang_operator.process.readiness`), with bounds on what clients can hold, and optionally
authenticated and authorized, and served over TLS, like controller-runtime's secure metrics server.

The server is ``aiohttp.web``'s low-level ``web.Server`` (aiohttp is a kopf dependency) on an asyncio loop of its
own, in one daemon thread: connections cost a coroutine, not a thread (prometheus-client's ``ThreadingWSGIServer``
started a thread per connection and never timed a read out: 800 idle connections held 800 threads), and neither a
busy kopf loop nor a standby waiting for the Lease (kopf not running) delays an answer. The bounds
(:class:`MetricsServerConfig`, ``sglang-operator run --metrics-…``):

- **read timeout**: a connection that has not sent a complete request head within ``read_timeout`` seconds of
  opening (with TLS: of its handshake's end) or of its previous answer is closed (aiohttp's ``keepalive_timeout``:
  armed at ``connection_made`` and after every answer, not extended by partial data, and it closes a connection
  still waiting for a request; ``aiohttp/web_protocol.py`` ``RequestHandler.connection_made`` and
  ``_process_keepalive``, aiohttp 3.14). A slow-loris client dribbling a header byte by byte is closed too. With
  TLS the handshake must end within ``read_timeout`` of the connection's opening, and a closing connection's
  ``close_notify`` exchange within ``read_timeout`` too (asyncio's ``ssl_handshake_timeout`` and
  ``ssl_shutdown_timeout``, 60 s and 30 s by default; ``asyncio/sslproto.py``): a client that opens TCP and never
  completes the handshake, or never answers the close, is dropped;
- **write timeout**: one answer (the reviews of a secure request included) must be written within
  ``write_timeout`` seconds, or the connection is aborted (a client that stops reading a large ``/metrics``);
- **connection cap**: beyond ``max_connections`` open TCP connections a new one is closed as it is accepted,
  before a byte is read or a TLS handshake begun (in plain HTTP after writing ``503 Service Unavailable``):
  :class:`_CappedListener`. The kubelet's readiness probe has a port of its own (:func:`serve_readiness`,
  ``--readiness-port``) with its own cap, so idle clients of the metrics port cannot make ``/readyz`` fail.

Request bodies are never read; a request sending one is closed after its answer (``lingering_time`` 0).

With ``secure`` (``--metrics-secure``), every path but ``/readyz`` (the kubelet's readiness probe, which sends no
token) needs ``Authorization: Bearer TOKEN``: the token is checked with a ``TokenReview`` and the user it names with
a ``SubjectAccessReview`` of the non-resource URL (the request's path, e.g. ``/metrics``) and the request's method
in lower case (``get``) — controller-runtime's ``pkg/metrics/filters`` ``WithAuthenticationAndAuthorization``, whose
answers this repeats: no or an unknown token 401 ``Unauthorized``, a TokenReview that cannot be made 401
``Authentication failed``, a SubjectAccessReview that cannot be made 500 ``Authorization for user U failed``, not
allowed 403 ``Authorization denied for user U``. Decisions are cached per token digest, path and verb (allowed
:data:`ALLOW_TTL` s, denied :data:`DENY_TTL` s, at most :data:`CACHE_ENTRIES`; controller-runtime caches a token's
authentication 1 min and allows 5 min, denials 30 s).

With ``secure`` the port also speaks TLS only (HTTPS, TLS 1.2 or later), so the token never crosses the network in
clear: the certificate of ``cert_dir`` (``--metrics-cert-dir``: ``tls.crt``, ``tls.key``), reloaded when its files
change, or a self-signed one made at start (:mod:`sglang_operator.process.metrics_tls`; controller-runtime's
``pkg/metrics/server/server.go`` ``createListener``). ``/readyz`` answers over the same TLS, without a token (the
kubelet's HTTPS probe does not verify the certificate). Without ``secure`` the port speaks plain HTTP, as
controller-runtime's default does.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import logging
import socket
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from sglang_operator.process import metrics_tls
from sglang_operator.process.readiness import READINESS, Readiness

log = logging.getLogger(__name__)

ALLOW_TTL = 60.0
"""Seconds an allowed (token, path, verb) is remembered."""
DENY_TTL = 10.0
"""Seconds a refused (token, path, verb) (401 unknown token, 403 not allowed) is remembered; errors are not."""
CACHE_ENTRIES = 1024
"""Decisions remembered at most (the oldest goes first)."""
OPEN_PATHS = frozenset({"/readyz"})
"""Paths answered without a token when ``secure``."""
_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            b"Content-Length: 20\r\nConnection: close\r\n\r\ntoo many connections")
"""A plain-HTTP connection beyond the cap gets this before it is closed (a TLS one: nothing, it is not yet TLS)."""


@dataclass(frozen=True)
class MetricsServerConfig:
    """The metrics port's bounds, authentication and TLS (``sglang-operator run --metrics-read-timeout``,
    ``--metrics-write-timeout``, ``--metrics-max-connections``, ``--metrics-secure``, ``--metrics-cert-dir``; the
    module docstring says what each does). Seconds, connections, a directory path (None: a self-signed certificate
    when ``secure``). Raises ``ValueError`` for a timeout not above 0, a cap below 1, or a ``cert_dir`` without
    ``secure`` (TLS is part of ``secure``)."""

    read_timeout: float = 10.0
    write_timeout: float = 30.0
    max_connections: int = 128
    secure: bool = False
    cert_dir: str | None = None

    def __post_init__(self) -> None:
        if not (self.read_timeout > 0 and self.write_timeout > 0):
            raise ValueError(f"metrics timeouts must be above 0 s: read {self.read_timeout}, "
                             f"write {self.write_timeout}")
        if self.max_connections < 1:
            raise ValueError(f"metrics connection cap must be at least 1: {self.max_connections}")
        if self.cert_dir is not None and not self.secure:
            raise ValueError(f"a metrics cert dir ({self.cert_dir}) needs secure metrics (--metrics-secure): "
                             "without it the port speaks plain HTTP")


class Reviews(Protocol):
    """Creates a review object (``TokenReview``, ``SubjectAccessReview``, a dict in the API's JSON shape) and returns
    the API server's answer with its ``status`` (:class:`sglang_operator.io.reviews.KubeReviews`; a fake in
    tests). May raise anything: the request is then refused (401 or 500)."""

    async def create(self, body: dict[str, Any]) -> dict[str, Any]: ...


class Gate:
    """Authentication (TokenReview) and authorization (SubjectAccessReview, non-resource URL) of one request, with
    the decision cache of the module docstring. Used from the metrics server's loop only (no lock)."""

    def __init__(self, reviews: Reviews, clock: Callable[[], float] = time.monotonic) -> None:
        self._reviews = reviews
        self._clock = clock
        self._cache: OrderedDict[tuple[str, str, str], tuple[float, int, str]] = OrderedDict()

    async def check(self, token: str | None, path: str, verb: str) -> tuple[int, str]:
        """``(200, "")`` when the token's user may ``verb`` the non-resource URL ``path``, else the HTTP status and
        one line of text (401, 403 or 500, as the module docstring lists). Never raises."""
        if not token:
            return 401, "Unauthorized"
        key = (hashlib.sha256(token.encode()).hexdigest(), path, verb)
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1], cached[2]
        status, text, cacheable = await self._review(token, path, verb)
        if cacheable:
            self._cache[key] = (now + (ALLOW_TTL if status == 200 else DENY_TTL), status, text)
            self._cache.move_to_end(key)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return status, text

    async def _review(self, token: str, path: str, verb: str) -> tuple[int, str, bool]:
        try:
            review = await self._reviews.create({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                                 "spec": {"token": token}})
        except Exception as exc:
            log.warning("metrics: TokenReview failed: %s", exc)
            return 401, "Authentication failed", False
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return 401, "Unauthorized", True
        user = status.get("user") or {}
        name = str(user.get("username") or "")
        spec: dict[str, Any] = {k: user[k] for k in ("uid", "groups", "extra") if user.get(k)}
        spec.update(user=name, nonResourceAttributes={"path": path, "verb": verb})
        try:
            access = await self._reviews.create({"apiVersion": "authorization.k8s.io/v1",
                                                 "kind": "SubjectAccessReview", "spec": spec})
        except Exception as exc:
            log.warning("metrics: SubjectAccessReview for %s failed: %s", name, exc)
            return 500, f"Authorization for user {name} failed", False
        if not (access.get("status") or {}).get("allowed"):
            return 403, f"Authorization denied for user {name}", True
        return 200, "", True


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header (scheme case-insensitive), else None."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class _CappedListener(socket.socket):
    """The listening socket, closing a connection beyond ``limit`` open ones as it is accepted, before asyncio sees
    it: no byte read, no TLS handshake begun, no protocol made (a cap counted by aiohttp's handlers would see a TLS
    connection only after its handshake). ``refusal`` is written first (plain HTTP). asyncio accepts with
    ``sock.accept()`` and closes a connection's socket with ``close()`` (``asyncio/selector_events.py``
    ``_accept_connection``, ``_SelectorTransport._call_connection_lost``); the open ones are those accepted whose
    ``fileno()`` is not -1, held weakly (a socket dropped without ``close()`` no longer counts). Used from the
    server's loop only."""

    def configure(self, limit: int, refusal: bytes) -> None:
        """Set the cap and the refusal (before serving)."""
        self._limit = limit
        self._refusal = refusal
        self._open: weakref.WeakSet[socket.socket] = weakref.WeakSet()

    def open_connections(self) -> int:
        """Connections accepted and not closed yet."""
        return sum(1 for conn in list(self._open) if conn.fileno() != -1)

    def accept(self) -> tuple[socket.socket, Any]:
        """The next waiting connection within the cap; those beyond it are refused and closed on the way. Raises
        ``BlockingIOError`` when none waits (asyncio then waits for the next), ``OSError`` as ``socket.accept``."""
        while True:
            conn, address = super().accept()
            if self.open_connections() < self._limit:
                self._open.add(conn)
                return conn, address
            with contextlib.suppress(OSError):
                conn.setblocking(False)
                if self._refusal:
                    conn.send(self._refusal)
            conn.close()


class MetricsServer:
    """The running server (:func:`serve`): ``port`` it listens on; :meth:`shutdown` stops it."""

    def __init__(self, sock: _CappedListener, readiness: Readiness, registry: CollectorRegistry,
                 config: MetricsServerConfig, reviews: Reviews | None, tls: metrics_tls.ServingCert | None = None,
                 readyz_only: bool = False) -> None:
        self._sock = sock
        self._readyz_only = readyz_only
        self.tls = tls
        """The TLS certificate served (``config.secure``), else None: plain HTTP."""
        self.port: int = sock.getsockname()[1]
        self._readiness = readiness
        self._registry = registry
        self._config = config
        self._reviews = reviews
        self._gate = Gate(reviews) if config.secure and reviews is not None else None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="readyz-http" if readyz_only else "metrics-http",
                                        daemon=True)

    def start(self, timeout: float = 10.0) -> None:
        """Start the thread and wait until it listens. Raises what starting raised (``OSError``), or
        ``TimeoutError``."""
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError(f"the metrics server did not start within {timeout} s")
        if self._error is not None:
            raise self._error

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop serving, close every connection, end the thread (waiting ``timeout`` seconds at most)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by start(), or logged once running
            if not self._started.is_set():
                self._error = exc
                self._started.set()
            else:
                log.exception("the metrics server stopped")

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        low = web.Server(self._handle, handler_cancellation=True, keepalive_timeout=self._config.read_timeout,
                         lingering_time=0.0, access_log=None)
        tls: dict[str, Any] = {}
        if self.tls is not None:
            tls = {"ssl": self.tls.context, "ssl_handshake_timeout": self._config.read_timeout,
                   "ssl_shutdown_timeout": self._config.read_timeout}
        server = await self._loop.create_server(low, sock=self._sock, **tls)
        self._started.set()
        watch = (self._loop.create_task(self._watch_cert(self.tls))
                 if self.tls is not None and self.tls.cert_dir is not None else None)
        try:
            await self._stop.wait()
        finally:
            if watch is not None:
                watch.cancel()
            server.close()
            await low.shutdown(1.0)
            with contextlib.suppress(TimeoutError):  # a TLS handshake under way ends by its timeout only
                await asyncio.wait_for(server.wait_closed(), 1.0)
            close = getattr(self._reviews, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    @staticmethod
    async def _watch_cert(tls: metrics_tls.ServingCert) -> None:
        while True:
            await asyncio.sleep(metrics_tls.RELOAD_SECONDS)
            tls.reload_if_changed()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            async with asyncio.timeout(self._config.write_timeout):
                return await self._answer(request)
        except TimeoutError:
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=503, text="timed out\n")

    async def _answer(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/readyz":
            ready, text = self._readiness.report()
            return await _send(request, 200 if ready else 503, f"{text}\n".encode())
        if self._readyz_only:
            return await _send(request, 404, b"not found: this port serves /readyz only\n")
        if self._gate is not None and request.path not in OPEN_PATHS:
            status, text = await self._gate.check(bearer_token(request.headers.get("Authorization")),
                                                  request.path, request.method.lower())
            if status != 200:
                return await _send(request, status, f"{text}\n".encode())
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        names = request.query.getall("name[]", [])
        registry = self._registry.restricted_registry(names) if names else self._registry
        body = encoder(registry)
        encoding = None
        if gzip_accepted(request.headers.get("Accept-Encoding", "")):
            body, encoding = gzip.compress(body), "gzip"
        return await _send(request, 200, body, content_type, encoding)


async def _send(request: web.BaseRequest, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
                encoding: str | None = None) -> web.StreamResponse:
    """Write the whole answer here, inside the handler's write timeout (not in aiohttp's finish after it)."""
    response = web.StreamResponse(status=status, headers={"Content-Type": content_type})
    if encoding:
        response.headers["Content-Encoding"] = encoding
    response.content_length = len(body)
    await response.prepare(request)
    await response.write(body)
    await response.write_eof()
    return response


def serve(port: int, address: str = "0.0.0.0", readiness: Readiness = READINESS, registry: CollectorRegistry = REGISTRY,
          config: MetricsServerConfig | None = None, reviews: Reviews | None = None) -> MetricsServer:
    """Serve ``/metrics`` of ``registry`` and ``/readyz`` of ``readiness`` on ``http://address:port`` (with
    ``config.secure``: ``https://``; port 0: a free one, :attr:`MetricsServer.port`) with the bounds of ``config``
    (default :class:`MetricsServerConfig`), from a daemon thread. ``config.secure`` needs ``reviews`` (default:
    :class:`sglang_operator.io.reviews.KubeReviews`) and serves the certificate of ``config.cert_dir`` or a
    self-signed one (:class:`sglang_operator.process.metrics_tls.ServingCert`, before the port is bound). Returns the
    running server. Raises :class:`sglang_operator.process.metrics_tls.CertError` (a ``ValueError``) for a cert dir
    that cannot serve, naming the file; ``OSError`` when the port is taken."""
    config = config or MetricsServerConfig()
    tls = metrics_tls.ServingCert(config.cert_dir) if config.secure else None
    if config.secure and reviews is None:
        from sglang_operator.io.reviews import KubeReviews

        reviews = KubeReviews()
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    plain = socket.create_server((address, port), family=family, backlog=min(1024, 2 * config.max_connections))
    sock = _CappedListener(plain.family, plain.type, plain.proto, fileno=plain.detach())
    sock.configure(config.max_connections, b"" if tls is not None else _REFUSAL)
    server = MetricsServer(sock, readiness, registry, config, reviews, tls)
    try:
        server.start()
    except BaseException:
        sock.close()
        raise
    if tls is not None:
        log.info("metrics: serving HTTPS on port %d with %s", server.port, tls.describe())
    return server


READINESS_MAX_CONNECTIONS = 16
"""Open connections at most to the readiness port (the kubelet opens one per probe)."""


def serve_readiness(port: int, address: str = "0.0.0.0", readiness: Readiness = READINESS,
                    config: MetricsServerConfig | None = None,
                    max_connections: int = READINESS_MAX_CONNECTIONS) -> MetricsServer:
    """Serve ``/readyz`` of ``readiness`` alone on ``http://address:port`` (plain HTTP, no token: the kubelet's
    probe), apart from the metrics port: its own listener, connection cap (``max_connections``) and thread, so
    clients holding every connection of the metrics port (``config.max_connections`` idle ones) never turn the
    probe's answer into a 503. ``config``'s read and write timeouts apply (default :class:`MetricsServerConfig`);
    any other path is answered 404. With the chart's NetworkPolicy only the node (the kubelet) reaches this port.
    Returns the running server; raises ``OSError`` when the port is taken."""
    base = config or MetricsServerConfig()
    own = MetricsServerConfig(base.read_timeout, base.write_timeout, max_connections)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    plain = socket.create_server((address, port), family=family, backlog=min(1024, 2 * max_connections))
    sock = _CappedListener(plain.family, plain.type, plain.proto, fileno=plain.detach())
    sock.configure(max_connections, _REFUSAL)
    server = MetricsServer(sock, readiness, REGISTRY, own, None, None, readyz_only=True)
    try:
        server.start()
    except BaseException:
        sock.close()
        raise
    return server
