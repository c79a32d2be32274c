"""The metrics port's server (:mod:`sglang_operator.process.metrics_http`): idle and slow clients cannot hold it
(read timeout, connection cap, no thread per connection), and ``--metrics-secure`` answers as controller-runtime's
``WithAuthenticationAndAuthorization`` does, with TokenReview and SubjectAccessReview answered by a fake. Real
sockets on loopback; the bounds asserted are generous (the machine may be busy)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest

from sglang_operator.process import metrics_http
from sglang_operator.process.metrics_http import MetricsServerConfig
from sglang_operator.process.readiness import Readiness

STANDBY = Readiness(lambda: False)  # /readyz: 200 "standby: waiting for the Lease"


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _closed_within(sock: socket.socket, seconds: float, dribble: bytes = b"") -> bool:
    """Whether the server closes ``sock`` within ``seconds`` (a byte of ``dribble`` sent every 0.1 s meanwhile)."""
    deadline = time.monotonic() + seconds
    sock.settimeout(0.1)
    sent = 0
    while time.monotonic() < deadline:
        try:
            if sent < len(dribble):
                sock.send(dribble[sent:sent + 1])
                sent += 1
            data = sock.recv(4096)
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
        if data == b"" or b"503" in data:
            return True
    return False


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[metrics_http.MetricsServer] = []

    def start(config: MetricsServerConfig, **kw: Any) -> metrics_http.MetricsServer:
        server = metrics_http.serve(0, "127.0.0.1", readiness=kw.pop("readiness", STANDBY), config=config, **kw)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()


def test_idle_connections_hold_no_thread_and_do_not_delay_a_real_request(serve: Any) -> None:
    server = serve(MetricsServerConfig(read_timeout=60, max_connections=400))
    threads = threading.active_count()
    idle = [_connect(server.port) for _ in range(300)]
    try:
        time.sleep(0.2)  # let the server accept them all
        assert threading.active_count() <= threads + 1  # (a thread the runtime may start), not one per connection
        started = time.monotonic()
        r = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
        assert r.status_code == 200 and "process_resident_memory_bytes" in r.text
        assert time.monotonic() - started < 1.0
        assert httpx.get(f"http://127.0.0.1:{server.port}/readyz", timeout=5).text == "standby: waiting for the Lease\n"
    finally:
        for s in idle:
            s.close()


def test_a_connection_silent_or_dribbling_its_head_is_closed_after_the_read_timeout(serve: Any) -> None:
    server = serve(MetricsServerConfig(read_timeout=0.5))
    with _connect(server.port) as silent, _connect(server.port) as slowloris:
        head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200  # never finished
        assert _closed_within(slowloris, 10.0, dribble=head)  # well before the 200 bytes are sent (20 s)
        assert _closed_within(silent, 10.0)
    with _connect(server.port) as kept:  # a keep-alive connection idle after an answer: closed too
        kept.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        kept.settimeout(5)
        assert b"200 OK" in kept.recv(4096)
        assert _closed_within(kept, 10.0)


def test_connections_beyond_the_cap_are_refused_and_the_server_recovers(serve: Any) -> None:
    server = serve(MetricsServerConfig(read_timeout=60, max_connections=5))
    idle = [_connect(server.port) for _ in range(5)]
    time.sleep(0.2)
    with _connect(server.port) as extra:
        extra.settimeout(5)
        try:
            answer = extra.recv(4096)
        except ConnectionResetError:
            answer = b""
        assert answer == b"" or answer.startswith(b"HTTP/1.1 503")
    for s in idle:
        s.close()
    deadline = time.monotonic() + 5
    while True:  # the server sees the closes within a loop iteration or two
        try:
            r = httpx.get(f"http://127.0.0.1:{server.port}/readyz", timeout=5)
            if r.status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.05)


class FakeReviews:
    """TokenReview and SubjectAccessReview as an API server answers them, for three tokens."""

    USERS: ClassVar[dict[str, dict[str, Any]]] = {
        "prom-token": {"username": "system:serviceaccount:monitoring:prometheus", "uid": "u-1",
                       "groups": ["system:serviceaccounts", "system:authenticated"]},
        "alice-token": {"username": "alice", "groups": ["system:authenticated"]}}
    ALLOWED: ClassVar[set[tuple[str, str, str]]] = {("system:serviceaccount:monitoring:prometheus", "/metrics", "get")}

    def __init__(self, hang: bool = False) -> None:
        self.posted: list[dict[str, Any]] = []
        self.hang = hang

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        self.posted.append(body)
        if self.hang:
            await asyncio.sleep(3600)
        spec = body["spec"]
        if body["kind"] == "TokenReview":
            if spec["token"] == "broken-token":
                raise ConnectionError("API server unreachable")
            user = self.USERS.get(spec["token"])
            return {**body, "status": {"authenticated": True, "user": user} if user else {"authenticated": False}}
        attributes = spec["nonResourceAttributes"]
        allowed = (spec["user"], attributes["path"], attributes["verb"]) in self.ALLOWED
        return {**body, "status": {"allowed": allowed}}


def _get(port: int, path: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"http://127.0.0.1:{port}{path}", headers=headers, timeout=5)


def test_secure_metrics_need_a_token_whose_user_may_get_metrics(serve: Any) -> None:
    reviews = FakeReviews()
    port = serve(MetricsServerConfig(secure=True), reviews=reviews).port
    assert (_get(port, "/metrics").status_code, _get(port, "/metrics").text) == (401, "Unauthorized\n")
    assert reviews.posted == []  # no token: nothing to review
    assert _get(port, "/metrics", "stranger-token").status_code == 401
    r = _get(port, "/metrics", "alice-token")
    assert (r.status_code, r.text) == (403, "Authorization denied for user alice\n")
    assert _get(port, "/metrics", "broken-token").text == "Authentication failed\n"
    r = _get(port, "/metrics", "prom-token")
    assert r.status_code == 200 and "process_resident_memory_bytes" in r.text
    sar = reviews.posted[-1]
    assert sar["kind"] == "SubjectAccessReview" and sar["apiVersion"] == "authorization.k8s.io/v1"
    assert sar["spec"] == {"user": "system:serviceaccount:monitoring:prometheus", "uid": "u-1",
                           "groups": ["system:serviceaccounts", "system:authenticated"],
                           "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    assert reviews.posted[-2] == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                  "spec": {"token": "prom-token"}}
    posted = len(reviews.posted)
    assert _get(port, "/metrics", "prom-token").status_code == 200  # the decision is remembered
    assert _get(port, "/metrics", "alice-token").status_code == 403
    assert len(reviews.posted) == posted
    assert _get(port, "/other", "prom-token").status_code == 403  # another non-resource URL: reviewed on its own
    for token in (None, "stranger-token", "alice-token"):  # the kubelet's probe sends no token
        r = _get(port, "/readyz", token)
        assert (r.status_code, r.text) == (200, "standby: waiting for the Lease\n")


def test_plain_metrics_need_no_token(serve: Any) -> None:
    reviews = FakeReviews()
    port = serve(MetricsServerConfig(), reviews=reviews).port
    assert _get(port, "/metrics").status_code == 200 and reviews.posted == []


def test_an_answer_not_written_within_the_write_timeout_aborts_the_connection(serve: Any) -> None:
    port = serve(MetricsServerConfig(secure=True, write_timeout=0.5), reviews=FakeReviews(hang=True)).port
    started = time.monotonic()
    with pytest.raises(httpx.TransportError):
        _get(port, "/metrics", "prom-token")
    assert time.monotonic() - started < 4.5
    assert _get(port, "/readyz").status_code == 200  # the server itself is fine


def test_the_bearer_token_of_an_authorization_header() -> None:
    assert metrics_http.bearer_token("Bearer abc") == "abc"
    assert metrics_http.bearer_token("bearer  abc ") == "abc"
    for header in (None, "", "Bearer", "Bearer ", "Basic abc"):
        assert metrics_http.bearer_token(header) is None


def test_the_config_refuses_nonsense() -> None:
    for kw in ({"read_timeout": 0}, {"write_timeout": -1}, {"max_connections": 0}):
        with pytest.raises(ValueError):
            MetricsServerConfig(**kw)
