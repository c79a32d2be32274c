"""The kubelet's HTTPS endpoint, so ``kubectl logs`` works: the API server proxies
``pods/<name>/log`` to ``https://<node InternalIP>:<daemonEndpoints port>/containerLogs/<ns>/<pod>/<container>``.

Serves ``tailLines``, ``limitBytes`` and ``follow`` (one log file per container, all restarts
appended; ``previous`` returns the same file). Self-signed certificate: kube-apiserver does not
verify kubelet certificates unless ``--kubelet-certificate-authority`` is set. No authentication:
it listens on the node's loopback address only.
"""

from __future__ import annotations

import datetime as dt
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

LogLookup = Callable[[str, str, str], "tuple[Path, Callable[[], bool]] | None"]


def _tls_context(directory: Path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kubelet")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30)).sign(key, hashes.SHA256()))
    crt, pem = directory / "kubelet.crt", directory / "kubelet.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, pem)
    return ctx


def _tail(data: bytes, lines: int | None, limit: int | None) -> bytes:
    if lines is not None:
        data = b"".join(data.splitlines(keepends=True)[-lines:]) if lines > 0 else b""
    if limit is not None:
        data = data[:limit]
    return data


def serve(ips: list[str], lookup: LogLookup, stop: threading.Event, tls_dir: Path) -> int:
    """Listen on one port (the same on every IP of ``ips``); return the port. ``lookup(ns, pod,
    container)`` gives the log path and a "still running" callable, or None for an unknown container."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            parts = url.path.strip("/").split("/")
            found = lookup(*parts[1:4]) if len(parts) == 4 and parts[0] == "containerLogs" else None
            if found is None:
                self.send_error(404, "container not found")
                return
            path, running = found
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            lines = int(q["tailLines"]) if "tailLines" in q else None
            limit = int(q["limitBytes"]) if "limitBytes" in q else None
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            data = path.read_bytes() if path.exists() else b""
            self.wfile.write(_tail(data, lines, limit))
            self.wfile.flush()
            pos = len(data)
            while q.get("follow") == "true" and running() and not stop.is_set():
                time.sleep(0.3)
                with path.open("rb") as f:
                    f.seek(pos)
                    chunk = f.read()
                if chunk:
                    pos += len(chunk)
                    self.wfile.write(chunk)
                    self.wfile.flush()

        def log_message(self, format: str, *args: object) -> None:
            return

    ctx = _tls_context(tls_dir)
    port = 0
    for ip in ips:
        srv = ThreadingHTTPServer((ip, port), Handler)
        srv.daemon_threads = True
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        port = int(srv.server_address[1])
        threading.Thread(target=srv.serve_forever, name=f"kubelet-https-{ip}", daemon=True).start()
    return port
