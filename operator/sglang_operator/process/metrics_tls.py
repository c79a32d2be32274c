"""The TLS certificate of the metrics port with ``--metrics-secure`` (:mod:`sglang_operator.process.metrics_http`),
as controller-runtime's secure metrics server chooses it (``pkg/metrics/server/server.go``, ``createListener``):

- with a certificate directory (``--metrics-cert-dir``: ``tls.crt`` and ``tls.key``, PEM; controller-runtime's
  ``CertDir``, ``CertName``, ``KeyName`` defaults; the keys of a ``kubernetes.io/tls`` Secret and of cert-manager's
  Certificate Secrets), that certificate, read again when the files change (:data:`RELOAD_SECONDS`; controller-runtime's
  ``pkg/certwatcher``). Unlike controller-runtime, which falls back to a self-signed certificate when either file is
  missing, a directory that is given but cannot serve (missing, unreadable, not PEM, a key that is not the
  certificate's) is an error at start naming the file (:class:`CertError`): a typo must not silently downgrade
  verified TLS;
- without one, a self-signed certificate made in memory at start (:func:`self_signed`: ECDSA P-256, one year, for
  the pod's hostname and IP, ``localhost`` and ``127.0.0.1``; controller-runtime calls client-go's
  ``util/cert/cert.go`` ``GenerateSelfSignedCertKeyWithFixtures("localhost", [127.0.0.1])``, one year too). It only
  encrypts: clients skip verification (the chart's ServiceMonitor ``insecureSkipVerify``; the kubelet's HTTPS
  probes never verify).

The context (:func:`server_context`) accepts TLS 1.2 and later with Python's default ciphers and offers ALPN
``http/1.1`` (the server speaks HTTP/1.1 only). Python's ``ssl`` loads a key from a file only: the chain and the
key, encrypted with a random password kept in memory, are written to a temporary file (``$TMPDIR``, mode 0600) that
is removed once loaded.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import os
import secrets
import socket
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

CERT_FILE = "tls.crt"
"""The certificate chain's file in a cert dir (PEM, the serving certificate first)."""
KEY_FILE = "tls.key"
"""The private key's file in a cert dir (PEM, unencrypted: PKCS#8, or PKCS#1 / SEC1)."""
SELF_SIGNED_DAYS = 365
"""Days a self-signed certificate is valid, from its start."""
RELOAD_SECONDS = 10.0
"""Seconds between two looks at a cert dir's files (:meth:`ServingCert.reload_if_changed`)."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class CertError(ValueError):
    """A certificate directory that cannot serve TLS; the message names the file and what is wrong with it."""


@dataclass(frozen=True)
class KeyPair:
    """A serving certificate: ``chain`` its certificates, the serving one first; ``key`` that one's private key."""

    chain: tuple[x509.Certificate, ...]
    key: PrivateKeyTypes

    @property
    def leaf(self) -> x509.Certificate:
        """The serving certificate."""
        return self.chain[0]

    def describe(self) -> str:
        """One line for the log: the certificate's names and the end of its validity (UTC)."""
        try:
            names = self.leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            shown = ", ".join(str(n.value) for n in names)
        except x509.ExtensionNotFound:
            shown = self.leaf.subject.rfc4514_string()
        return f"{shown}, valid until {self.leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"


def subject_names(hostname: str | None = None, pod_ip: str | None = None) -> tuple[list[str], list[IPAddress]]:
    """The names a self-signed certificate is made for: DNS names (``hostname``, default ``socket.gethostname()``:
    the pod's name in a pod; then ``localhost``) and IP addresses (``pod_ip``, default ``$POD_IP``, which the chart
    sets from ``status.podIP``, when it parses; then ``127.0.0.1``). Duplicates are dropped; a hostname that is an IP
    address counts as one."""
    host = socket.gethostname() if hostname is None else hostname
    ip = os.environ.get("POD_IP", "") if pod_ip is None else pod_ip
    dns: list[str] = []
    ips: list[IPAddress] = []
    for candidate in (host, ip, "localhost", "127.0.0.1"):
        candidate = candidate.strip()
        if not candidate:
            continue
        try:
            address = ipaddress.ip_address(candidate)
        except ValueError:
            if candidate == ip:  # $POD_IP that is not an address
                continue
            if candidate.lower() not in dns:
                dns.append(candidate.lower())
            continue
        if address not in ips:
            ips.append(address)
    return dns, ips


def self_signed(dns_names: Sequence[str], ips: Sequence[IPAddress], days: int = SELF_SIGNED_DAYS,
                now: dt.datetime | None = None) -> KeyPair:
    """A new ECDSA P-256 key and a certificate it signs for ``dns_names`` and ``ips`` (subjectAltName; the common
    name is the first DNS name, else ``localhost``), valid from a minute before ``now`` (default: the current time,
    UTC) for ``days`` days, serverAuth, not a CA. Raises ``ValueError`` when neither a name nor an address is
    given."""
    if not dns_names and not ips:
        raise ValueError("a certificate needs at least one DNS name or IP address")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0] if dns_names else "localhost")])
    start = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(minutes=1)
    alt: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    alt += [x509.IPAddress(a) for a in ips]
    public = key.public_key()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
            .sign(key, hashes.SHA256()))
    return KeyPair((cert,), key)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CertError(f"{path}: no such file (a metrics cert dir holds {CERT_FILE} and {KEY_FILE}, PEM)") from None
    except OSError as exc:
        raise CertError(f"{path}: cannot read it: {exc.strerror or exc}") from None


def _public(key: PrivateKeyTypes) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def read_cert_dir(cert_dir: Path) -> KeyPair:
    """The key pair of ``cert_dir``/:data:`CERT_FILE` (one or more PEM certificates, the serving one first) and
    ``cert_dir``/:data:`KEY_FILE` (its unencrypted PEM private key). Raises :class:`CertError` naming the file: the
    directory or a file missing or unreadable, no PEM certificate, no (or an encrypted) PEM private key, a key that
    is not the first certificate's. An expired certificate is served, with a warning in the log."""
    if not cert_dir.is_dir():
        raise CertError(f"{cert_dir}: not a directory (the metrics cert dir must hold {CERT_FILE} and {KEY_FILE})")
    cert_path, key_path = cert_dir / CERT_FILE, cert_dir / KEY_FILE
    cert_pem, key_pem = _read(cert_path), _read(key_path)
    try:
        chain = tuple(x509.load_pem_x509_certificates(cert_pem))
    except ValueError as exc:
        raise CertError(f"{cert_path}: not a PEM certificate ({exc})") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise CertError(f"{key_path}: the private key is encrypted; give it unencrypted") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise CertError(f"{key_path}: not a PEM private key ({exc})") from None
    if _public(key) != chain[0].public_key().public_bytes(serialization.Encoding.DER,
                                                          serialization.PublicFormat.SubjectPublicKeyInfo):
        raise CertError(f"{key_path}: not the private key of the first certificate of {cert_path}")
    pair = KeyPair(chain, key)
    if pair.leaf.not_valid_after_utc < dt.datetime.now(dt.UTC):
        log.warning("metrics: the certificate of %s expired on %s", cert_path, pair.leaf.not_valid_after_utc)
    return pair


def load_into(context: ssl.SSLContext, pair: KeyPair) -> None:
    """Make ``pair`` the certificate and key of ``context`` (for the handshakes that start afterwards; those under
    way keep theirs). Raises ``ssl.SSLError`` when OpenSSL refuses them (e.g. a key type TLS cannot use),
    ``OSError`` when no temporary file can be written."""
    password = secrets.token_bytes(32)
    pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in pair.chain)
    pem += pair.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(password))
    with tempfile.NamedTemporaryFile(prefix="sglang-operator-metrics-", suffix=".pem") as f:
        f.write(pem)
        f.flush()
        context.load_cert_chain(f.name, password=password)


def server_context(pair: KeyPair) -> ssl.SSLContext:
    """A server-side ``ssl.SSLContext`` serving ``pair``: TLS 1.2 at least, ALPN ``http/1.1``, no client
    certificate asked. Raises as :func:`load_into`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    load_into(context, pair)
    return context


def _signature(cert_dir: Path) -> tuple[tuple[int, int, int, int], ...] | None:
    """What changes when a file of ``cert_dir`` is replaced (a Secret volume swaps a symlink; stat follows it);
    None while one is missing."""
    try:
        stats = [os.stat(cert_dir / name) for name in (CERT_FILE, KEY_FILE)]
    except OSError:
        return None
    return tuple((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) for s in stats)


class ServingCert:
    """The TLS context of the metrics port: the certificate of ``cert_dir`` (reloaded by
    :meth:`reload_if_changed`), or, when None, a self-signed one for :func:`subject_names`. Raises
    :class:`CertError` for a ``cert_dir`` that cannot serve, ``ssl.SSLError`` / ``OSError`` as :func:`load_into`."""

    def __init__(self, cert_dir: str | Path | None) -> None:
        self.cert_dir = Path(cert_dir) if cert_dir is not None else None
        self._failed: tuple[tuple[int, int, int, int], ...] | None = None
        if self.cert_dir is None:
            self.pair = self_signed(*subject_names())
            self.source = "a self-signed certificate made at start"
            self._loaded = None
        else:
            self._loaded = _signature(self.cert_dir)
            self.pair = read_cert_dir(self.cert_dir)
            self.source = f"the certificate of {self.cert_dir / CERT_FILE}"
        try:
            self.context = server_context(self.pair)
        except ssl.SSLError as exc:
            raise CertError(f"{self.source}: OpenSSL refuses it ({exc})") from None

    def describe(self) -> str:
        """One line for the log: where the certificate comes from, its names, its end."""
        return f"{self.source} ({self.pair.describe()})"

    def reload_if_changed(self) -> bool:
        """With a cert dir: when its files changed since they were last loaded, load them into :attr:`context`
        (new handshakes use them). A change that cannot be loaded (a file half-written, a key of another
        certificate) is logged once and the previous certificate kept; the next change is tried again. Returns
        whether a new certificate was loaded. Never raises."""
        if self.cert_dir is None:
            return False
        signature = _signature(self.cert_dir)
        if signature is None or signature in (self._loaded, self._failed):
            return False
        try:
            pair = read_cert_dir(self.cert_dir)
            server_context(pair)  # OpenSSL takes it: only then into the live context
            load_into(self.context, pair)
        except (CertError, ssl.SSLError, OSError) as exc:
            self._failed = signature
            log.warning("metrics: the changed certificate of %s is not loaded, still serving the previous one: %s",
                        self.cert_dir, exc)
            return False
        self.pair, self._loaded, self._failed = pair, signature, None
        log.info("metrics: serving %s", self.describe())
        return True
