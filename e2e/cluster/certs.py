"""Certificates and keys for the local control plane, made with the ``cryptography`` package.

One self-signed CA signs the kube-apiserver serving certificate and the admin client certificate
(``CN=admin, O=system:masters``); a separate EC P-256 key pair signs service-account tokens
(``--service-account-signing-key-file`` / ``--service-account-key-file``); a front-proxy CA signs the client
certificate the API server presents to aggregated API servers (:func:`make_front_proxy`). All keys are EC P-256:
fast to generate and accepted by every component.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = dt.timedelta(days=30)


@dataclass(frozen=True)
class PKI:
    """Paths of the PEM files written by :func:`make_pki`."""

    ca_crt: Path
    ca_key: Path
    serving_crt: Path
    serving_key: Path
    admin_crt: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _cert(subject: x509.Name, pub: ec.EllipticCurvePublicKey, issuer: x509.Name,
          signer: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(pub)
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + _VALID))


def make_pki(directory: Path, ips: list[str], dns: list[str]) -> PKI:
    """Write a CA, a serving certificate for ``ips``/``dns``, an admin client certificate and the
    service-account key pair into ``directory``; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("sglang-operator-e2e-ca")
    ca = (_cert(ca_name, ca_key.public_key(), ca_name, ca_key)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))
    pki = PKI(*(directory / n for n in ("ca.crt", "ca.key", "apiserver.crt", "apiserver.key",
                                         "admin.crt", "admin.key", "sa.key", "sa.pub")))
    pki.ca_crt.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.ca_key, ca_key)

    leaf_usage = x509.KeyUsage(True, False, True, False, False, False, False, False, False)
    srv_key = _key()
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    sans += [x509.DNSName(d) for d in dns]
    srv = (_cert(_name("kube-apiserver"), srv_key.public_key(), ca_name, ca_key)
           .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
           .add_extension(leaf_usage, critical=True)
           .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
           .add_extension(x509.SubjectAlternativeName(sans), critical=False)
           .sign(ca_key, hashes.SHA256()))
    pki.serving_crt.write_bytes(srv.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.serving_key, srv_key)

    adm_key = _key()
    adm = (_cert(_name("admin", "system:masters"), adm_key.public_key(), ca_name, ca_key)
           .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
           .add_extension(leaf_usage, critical=True)
           .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
           .sign(ca_key, hashes.SHA256()))
    pki.admin_crt.write_bytes(adm.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.admin_key, adm_key)

    sa = _key()
    _write_key(pki.sa_key, sa)
    pki.sa_pub.write_bytes(sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki


@dataclass(frozen=True)
class ServingCert:
    """Paths of a serving certificate (``tls.crt``/``tls.key``, the names controller-runtime's webhook server
    reads from its cert dir) and of the CA that signed it (``ca.crt``, for a webhook's ``caBundle``)."""

    ca_crt: Path
    crt: Path
    key: Path


def make_serving_cert(directory: Path, common_name: str, ips: list[str]) -> ServingCert:
    """Write a fresh CA and a serving certificate for ``ips`` signed by it into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name(f"{common_name}-ca")
    ca = (_cert(ca_name, ca_key.public_key(), ca_name, ca_key)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    out = ServingCert(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    out.ca_crt.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    key = _key()
    leaf = (_cert(_name(common_name), key.public_key(), ca_name, ca_key)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(i)) for i in ips]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    out.crt.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    _write_key(out.key, key)
    return out


@dataclass(frozen=True)
class FrontProxy:
    """The API server's aggregation credentials (:func:`make_front_proxy`): ``ca_crt`` (its own CA, for
    ``--requestheader-client-ca-file`` on the API server and on every aggregated API server) and the client
    certificate the API server presents when it proxies a request (``--proxy-client-cert-file``/``-key-file``,
    common name :data:`FRONT_PROXY_CLIENT`, the one ``--requestheader-allowed-names`` allows)."""

    ca_crt: Path
    client_crt: Path
    client_key: Path


FRONT_PROXY_CLIENT = "front-proxy-client"


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    name = _name(common_name)
    cert = (_cert(name, key.public_key(), name, key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(common_name: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
          usages: list[x509.ObjectIdentifier],
          sans: list[x509.GeneralName]) -> tuple[bytes, ec.EllipticCurvePrivateKey]:
    key = _key()
    builder = (_cert(_name(common_name), key.public_key(), ca.subject, ca_key)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM), key


def make_front_proxy(directory: Path) -> FrontProxy:
    """Write a front-proxy CA and its client certificate (CN :data:`FRONT_PROXY_CLIENT`) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("sglang-operator-e2e-front-proxy-ca")
    out = FrontProxy(directory / "front-proxy-ca.crt", directory / "front-proxy-client.crt",
                     directory / "front-proxy-client.key")
    out.ca_crt.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    crt, key = _leaf(FRONT_PROXY_CLIENT, ca, ca_key, [ExtendedKeyUsageOID.CLIENT_AUTH], [])
    out.client_crt.write_bytes(crt)
    _write_key(out.client_key, key)
    return out


def make_mutual_tls(directory: Path, common_name: str, ips: list[str], dns: list[str]) -> ServingCert:
    """Write a fresh CA and one certificate signed by it, for serving and for client authentication both (KEDA's
    operator and metrics API server read the same ``ca.crt``/``tls.crt``/``tls.key`` for their mutual-TLS gRPC
    link), valid for ``ips`` and ``dns``, into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca(f"{common_name}-ca")
    out = ServingCert(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    out.ca_crt.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    sans += [x509.DNSName(d) for d in dns]
    crt, key = _leaf(common_name, ca, ca_key, [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], sans)
    out.crt.write_bytes(crt)
    _write_key(out.key, key)
    return out
