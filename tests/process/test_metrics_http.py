"""The metrics port's server (:mod:`sglang_operator.process.metrics_http`): idle and slow clients cannot hold it
(read timeout, connection cap, no thread per connection), and ``--metrics-secure`` answers as controller-runtime's
``WithAuthenticationAndAuthorization`` does, with TokenReview and SubjectAccessReview answered by a fake, over TLS
only: a self-signed certificate or that of ``--metrics-cert-dir`` (read again when it changes; one that cannot serve
is an error naming the file), the timeouts and the cap holding before and after the handshake. Real sockets on
loopback; the bounds asserted are generous (the machine may be busy)."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sglang_operator.process import metrics_http, metrics_tls
from sglang_operator.process.metrics_http import MetricsServerConfig
from sglang_operator.process.readiness import Readiness

STANDBY = Readiness(lambda: False)  # /readyz: 200 "standby: waiting for the Lease"


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _refused(port: int) -> bool:
    """Whether a new connection to ``port`` is refused by a full server: closed or reset at once, or answered 503
    (within 5 s)."""
    with _connect(port) as extra:
        extra.settimeout(5)
        try:
            answer = extra.recv(4096)
        except ConnectionResetError:
            answer = b""
        return answer == b"" or answer.startswith(b"HTTP/1.1 503")


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
    assert _refused(server.port)
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


def _leaf_pem(server: metrics_http.MetricsServer) -> str:
    assert server.tls is not None
    return server.tls.pair.leaf.public_bytes(serialization.Encoding.PEM).decode()


def _verifying(cadata: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the host name
    context.load_verify_locations(cadata=cadata)
    return context


def _https(port: int, path: str, token: str | None = None, verify: ssl.SSLContext | bool = False,
           host: str = "127.0.0.1") -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"https://{host}:{port}{path}", headers=headers, timeout=5, verify=verify)


def test_secure_metrics_need_a_token_whose_user_may_get_metrics(serve: Any) -> None:
    reviews = FakeReviews()
    port = serve(MetricsServerConfig(secure=True), reviews=reviews).port
    assert (_https(port, "/metrics").status_code, _https(port, "/metrics").text) == (401, "Unauthorized\n")
    assert reviews.posted == []  # no token: nothing to review
    assert _https(port, "/metrics", "stranger-token").status_code == 401
    r = _https(port, "/metrics", "alice-token")
    assert (r.status_code, r.text) == (403, "Authorization denied for user alice\n")
    assert _https(port, "/metrics", "broken-token").text == "Authentication failed\n"
    r = _https(port, "/metrics", "prom-token")
    assert r.status_code == 200 and "process_resident_memory_bytes" in r.text
    sar = reviews.posted[-1]
    assert sar["kind"] == "SubjectAccessReview" and sar["apiVersion"] == "authorization.k8s.io/v1"
    assert sar["spec"] == {"user": "system:serviceaccount:monitoring:prometheus", "uid": "u-1",
                           "groups": ["system:serviceaccounts", "system:authenticated"],
                           "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    assert reviews.posted[-2] == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                  "spec": {"token": "prom-token"}}
    posted = len(reviews.posted)
    assert _https(port, "/metrics", "prom-token").status_code == 200  # the decision is remembered
    assert _https(port, "/metrics", "alice-token").status_code == 403
    assert len(reviews.posted) == posted
    assert _https(port, "/other", "prom-token").status_code == 403  # another non-resource URL: reviewed on its own
    for token in (None, "stranger-token", "alice-token"):  # the kubelet's probe sends no token
        r = _https(port, "/readyz", token)
        assert (r.status_code, r.text) == (200, "standby: waiting for the Lease\n")


def test_plain_metrics_need_no_token(serve: Any) -> None:
    reviews = FakeReviews()
    port = serve(MetricsServerConfig(), reviews=reviews).port
    assert _get(port, "/metrics").status_code == 200 and reviews.posted == []


def test_an_answer_not_written_within_the_write_timeout_aborts_the_connection(serve: Any) -> None:
    port = serve(MetricsServerConfig(secure=True, write_timeout=0.5), reviews=FakeReviews(hang=True)).port
    started = time.monotonic()
    with pytest.raises(httpx.TransportError):
        _https(port, "/metrics", "prom-token")
    assert time.monotonic() - started < 4.5
    assert _https(port, "/readyz").status_code == 200  # the server itself is fine


def test_the_bearer_token_of_an_authorization_header() -> None:
    assert metrics_http.bearer_token("Bearer abc") == "abc"
    assert metrics_http.bearer_token("bearer  abc ") == "abc"
    for header in (None, "", "Bearer", "Bearer ", "Basic abc"):
        assert metrics_http.bearer_token(header) is None


def test_the_config_refuses_nonsense() -> None:
    for kw in ({"read_timeout": 0}, {"write_timeout": -1}, {"max_connections": 0}, {"cert_dir": "/certs"}):
        with pytest.raises(ValueError):
            MetricsServerConfig(**kw)
    assert MetricsServerConfig(secure=True, cert_dir="/certs").cert_dir == "/certs"


# --- TLS (--metrics-secure, process/metrics_tls.py) ---------------------------------------------------------------

def test_secure_metrics_speak_https_with_a_self_signed_certificate_and_readyz_stays_open(
        serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_IP", "10.9.8.7")
    reviews = FakeReviews()
    server = serve(MetricsServerConfig(secure=True), reviews=reviews)
    port = server.port
    trust = _verifying(_leaf_pem(server))  # the certificate verifies for each name it is made for
    for host in ("127.0.0.1", "localhost"):
        r = _https(port, "/metrics", "prom-token", verify=trust, host=host)
        assert r.status_code == 200 and "process_resident_memory_bytes" in r.text
    assert (_https(port, "/metrics").status_code, _https(port, "/metrics", "alice-token").status_code) == (401, 403)
    for token in (None, "stranger-token"):  # the kubelet's HTTPS probe: no token, no verification
        r = _https(port, "/readyz", token)
        assert (r.status_code, r.text) == (200, "standby: waiting for the Lease\n")
    with pytest.raises(httpx.TransportError):  # plain HTTP to the TLS port: no answer
        _get(port, "/readyz")
    trust.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            trust.wrap_socket(raw, server_hostname="localhost") as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3") and tls.selected_alpn_protocol() == "http/1.1"
    assert server.tls is not None and server.tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    leaf = server.tls.pair.leaf
    key = leaf.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == [socket.gethostname().lower(), "localhost"]
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["10.9.8.7", "127.0.0.1"]
    days = (leaf.not_valid_after_utc - leaf.not_valid_before_utc).total_seconds() / 86400
    assert 365 <= days <= 365.01
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_the_self_signed_names_drop_duplicates_and_an_unparsable_pod_ip() -> None:
    assert metrics_tls.subject_names("op-7f9c", "not-an-ip") == (["op-7f9c", "localhost"],
                                                                 [ipaddress.ip_address("127.0.0.1")])
    assert metrics_tls.subject_names("LocalHost", "") == (["localhost"], [ipaddress.ip_address("127.0.0.1")])
    assert metrics_tls.subject_names("10.0.0.5", "10.0.0.5")[1] == [ipaddress.ip_address("10.0.0.5"),
                                                                     ipaddress.ip_address("127.0.0.1")]


def _tls_closed_within(sock: ssl.SSLSocket, seconds: float) -> bool:
    """Whether the server ends the TLS connection ``sock`` within ``seconds``."""
    deadline = time.monotonic() + seconds
    sock.settimeout(0.1)
    while time.monotonic() < deadline:
        try:
            if sock.recv(4096) == b"":
                return True
        except TimeoutError:
            continue
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            return True
    return False


def _tls_connect(port: int) -> ssl.SSLSocket:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context.wrap_socket(_connect(port))


def test_over_tls_a_client_that_never_handshakes_or_never_asks_is_closed_after_the_read_timeout(serve: Any) -> None:
    port = serve(MetricsServerConfig(secure=True, read_timeout=0.5), reviews=FakeReviews()).port
    started = time.monotonic()
    with _connect(port) as silent:  # TCP open, no ClientHello ever
        assert _closed_within(silent, 10.0)
    assert time.monotonic() - started >= 0.4  # closed by the timeout, not at once
    with _connect(port) as dribbling:  # a ClientHello that never ends
        assert _closed_within(dribbling, 10.0, dribble=b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"a" * 200)
    with _tls_connect(port) as idle:  # handshaken, then no request head
        assert _tls_closed_within(idle, 10.0)
    with _tls_connect(port) as kept:  # a keep-alive connection idle after its answer
        kept.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        kept.settimeout(5)
        assert b"200 OK" in kept.recv(4096)
        assert _tls_closed_within(kept, 10.0)


def test_over_tls_the_cap_counts_connections_before_their_handshake(serve: Any) -> None:
    port = serve(MetricsServerConfig(secure=True, read_timeout=60, max_connections=3), reviews=FakeReviews()).port
    idle = [_connect(port) for _ in range(3)]  # none of them handshakes
    time.sleep(0.2)
    with _connect(port) as extra:  # closed as it is accepted, without TLS: no 503 to send
        extra.settimeout(5)
        started = time.monotonic()
        try:
            answer = extra.recv(4096)
        except ConnectionResetError:
            answer = b""
        assert answer == b"" and time.monotonic() - started < 4
    for s in idle:
        s.close()
    deadline = time.monotonic() + 5
    while True:
        try:
            if _https(port, "/readyz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _ca() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test metrics CA")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _write_leaf(cert_dir: Path, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
                dns: str = "rel-sglang-operator-metrics.ops.svc") -> x509.Certificate:
    """A certificate for ``dns`` signed by ``ca``, as tls.crt (leaf, then the CA) and tls.key (cert-manager's
    layout), each file replaced at once."""
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    for name, data in (("tls.key", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption())),
                       ("tls.crt", cert.public_bytes(serialization.Encoding.PEM)
                        + ca_cert.public_bytes(serialization.Encoding.PEM))):
        (cert_dir / f".{name}.new").write_bytes(data)
        os.replace(cert_dir / f".{name}.new", cert_dir / name)
    return cert


def _served_serial(port: int, ca: x509.Certificate, host: str = "rel-sglang-operator-metrics.ops.svc") -> int:
    """The serial number of the certificate the server presents for ``host``, verified against ``ca``."""
    context = _verifying(ca.public_bytes(serialization.Encoding.PEM).decode())
    with _connect(port) as raw, context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert b"200 OK" in tls.recv(4096)
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_the_cert_dir_is_served_and_read_again_when_its_files_change(
        serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(metrics_tls, "RELOAD_SECONDS", 0.1)
    ca = _ca()
    first = _write_leaf(tmp_path, ca)
    server = serve(MetricsServerConfig(secure=True, cert_dir=str(tmp_path)), reviews=FakeReviews())
    assert _served_serial(server.port, ca[0]) == first.serial_number  # verified: chain and host name
    second = _write_leaf(tmp_path, ca)  # cert-manager renews it

    def serves(serial: int) -> bool:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if _served_serial(server.port, ca[0]) == serial:
                return True
            time.sleep(0.05)
        return False

    assert serves(second.serial_number)
    with caplog.at_level(logging.WARNING, logger="sglang_operator.process.metrics_tls"):
        (tmp_path / "tls.crt").write_bytes(b"half-written")  # a broken change: the previous one stays
        deadline = time.monotonic() + 5
        while "is not loaded, still serving the previous one" not in caplog.text:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert _served_serial(server.port, ca[0]) == second.serial_number
    third = _write_leaf(tmp_path, ca)  # the next change is tried again
    assert serves(third.serial_number)


def test_a_cert_dir_that_cannot_serve_is_an_error_at_start_naming_the_file(tmp_path: Path) -> None:
    def refused(cert_dir: Path) -> str:
        with pytest.raises(metrics_tls.CertError) as err:
            metrics_http.serve(0, "127.0.0.1", config=MetricsServerConfig(secure=True, cert_dir=str(cert_dir)),
                               reviews=FakeReviews())
        return str(err.value)

    assert refused(tmp_path / "nowhere") == f"{tmp_path / 'nowhere'}: not a directory (the metrics cert dir must " \
                                            "hold tls.crt and tls.key)"
    ca = _ca()
    _write_leaf(tmp_path, ca)
    good_key = (tmp_path / "tls.key").read_bytes()
    (tmp_path / "tls.key").unlink()
    assert refused(tmp_path).startswith(f"{tmp_path / 'tls.key'}: no such file")
    (tmp_path / "tls.key").write_bytes(b"-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    assert refused(tmp_path).startswith(f"{tmp_path / 'tls.key'}: not a PEM private key")
    other = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "tls.key").write_bytes(other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    assert refused(tmp_path) == f"{tmp_path / 'tls.key'}: the private key is encrypted; give it unencrypted"
    (tmp_path / "tls.key").write_bytes(other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    assert refused(tmp_path) == (f"{tmp_path / 'tls.key'}: not the private key of the first certificate of "
                                 f"{tmp_path / 'tls.crt'}")
    (tmp_path / "tls.key").write_bytes(good_key)
    (tmp_path / "tls.crt").write_bytes(b"not a certificate\n")
    assert refused(tmp_path).startswith(f"{tmp_path / 'tls.crt'}: not a PEM certificate")
    (tmp_path / "tls.crt").unlink()
    (tmp_path / "tls.crt").mkdir()
    assert refused(tmp_path).startswith(f"{tmp_path / 'tls.crt'}: cannot read it: ")


def test_readyz_has_a_port_of_its_own_which_idle_metrics_clients_cannot_fill(serve: Any) -> None:
    """200 idle connections opened on the metrics port (its default cap 128 full, the rest refused; its /readyz then
    answers 503 or nothing); the readiness port, apart, still answers the kubelet, and serves nothing but /readyz."""
    metrics = serve(MetricsServerConfig(read_timeout=60))
    assert metrics_http.MetricsServerConfig().max_connections == 128
    ready = metrics_http.serve_readiness(0, "127.0.0.1", readiness=STANDBY,
                                         config=MetricsServerConfig(read_timeout=60))
    idle = [_connect(metrics.port) for _ in range(200)]
    try:
        time.sleep(0.2)
        assert _refused(metrics.port)  # the metrics port is full
        r = httpx.get(f"http://127.0.0.1:{ready.port}/readyz", timeout=5)
        assert r.status_code == 200 and r.text == "standby: waiting for the Lease\n"
        assert httpx.get(f"http://127.0.0.1:{ready.port}/metrics", timeout=5).status_code == 404
    finally:
        for s in idle:
            s.close()
        ready.shutdown()
