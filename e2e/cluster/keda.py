"""KEDA v2.21.0 on the local control plane: its operator and its metrics API server (``python -m e2e.build_keda``)
as host processes, the metrics API server registered with the API server as ``v1beta1.external.metrics.k8s.io``, so
the kube-controller-manager's HPA controller reads KEDA's metrics through aggregation and scales for real.

:meth:`KedaStack.start`:

- installs KEDA's CRDs (``config/crds/`` of the build) and the ``keda`` namespace;
- writes one CA and one certificate for serving and client authentication (:func:`e2e.cluster.certs.make_mutual_tls`)
  into a cert dir both processes read (``ca.crt``, ``tls.crt``, ``tls.key``): the operator's gRPC metrics service
  and the adapter's gRPC client authenticate each other with it (``--enable-cert-rotation=false``: nobody rewrites
  them), and the adapter serves HTTPS with it (its DNS names include ``keda-metrics-apiserver.keda.svc``, the name the
  API server checks; the CA is the APIService's ``caBundle``);
- starts the operator (gRPC on 127.0.0.1, webhook and APIService patching off) and the adapter bound to
  :func:`host_address` (``--bind-address``, ``--secure-port``), which authenticates the API server's proxied requests
  by the front-proxy CA (``--requestheader-client-ca-file``, ``--requestheader-allowed-names``) and checks them with
  TokenReview/SubjectAccessReview through the cluster's admin kubeconfig (``--authentication-kubeconfig``,
  ``--authorization-kubeconfig``);
- registers a Service **without selector** ``keda/keda-metrics-apiserver``, an EndpointSlice for it at
  ``host_address():<secure port>`` and the APIService; waits until the APIService is Available and
  ``/apis/external.metrics.k8s.io/v1beta1`` answers through the API server.

Why the EndpointSlice and the host address: the local cluster has no kube-proxy (a Service's ClusterIP leads
nowhere), so the API server runs with ``--enable-aggregator-routing=true`` and dials an endpoint of the Service
(it resolves it from the Service's EndpointSlices); the API server refuses loopback endpoint addresses
(``127.0.0.0/8``: "may not be in the loopback range"), so the endpoint is a non-loopback address of this machine.

:meth:`KedaStack.stop` deletes every ScaledObject and ScaledJob while the operator still runs (their finalizer would
keep their namespaces Terminating), then the APIService (an unavailable aggregated API breaks discovery, and with it
namespace deletion, for every later test), the Service, and stops both processes; KEDA's CRDs stay (empty).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e import build_keda
from e2e.cluster.certs import FRONT_PROXY_CLIENT, make_mutual_tls
from e2e.cluster.launcher import Cluster, ClusterError
from e2e.cluster.procs import Component, free_port, wait_http

NAMESPACE = "keda"
SERVICE = "keda-metrics-apiserver"
API_SERVICE = "v1beta1.external.metrics.k8s.io"
EXTERNAL_METRICS = "/apis/external.metrics.k8s.io/v1beta1"
SERVICE_PORT = 443


def host_address() -> str:
    """A non-loopback IPv4 address of this machine that its own processes can bind and dial (e.g. eth0's): the
    first global-scope address ``ip -4 -o addr show scope global`` lists, else the source address of the default
    route (a UDP ``connect``, which sends nothing). Raises :class:`ClusterError` when the machine has none (the
    API server takes no loopback endpoint; docs/autoscaling.md "KEDA on the local control plane")."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            addr = fields[fields.index("inet") + 1].split("/")[0]
            if _usable(addr):
                return addr
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route is looked up
            addr = str(s.getsockname()[0])
        except OSError:
            addr = ""
    if _usable(addr):
        return addr
    raise ClusterError("this machine has no non-loopback IPv4 address: the API server refuses loopback endpoints, "
                       "so KEDA's metrics API server cannot be registered (docs/autoscaling.md)")


def _usable(addr: str) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast)


def api_objects(address: str, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The selector-less Service, its EndpointSlice at ``address:port`` and the APIService (``caBundle``: the CA
    of the adapter's serving certificate). The Service's and the slice's port share the name ``https``: the API
    server matches them by name."""
    labels = {"app.kubernetes.io/name": SERVICE, "app.kubernetes.io/part-of": "keda-operator"}
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NAMESPACE, "labels": labels},
         "spec": {"ports": [{"name": "https", "port": SERVICE_PORT, "targetPort": port, "protocol": "TCP"}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": f"{SERVICE}-host", "namespace": NAMESPACE,
                      "labels": {**labels, "kubernetes.io/service-name": SERVICE}},
         "addressType": "IPv4", "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
         "endpoints": [{"addresses": [address], "conditions": {"ready": True}}]},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": API_SERVICE},
         "spec": {"group": "external.metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                  "versionPriority": 100, "caBundle": base64.b64encode(ca_bundle).decode(),
                  "service": {"name": SERVICE, "namespace": NAMESPACE, "port": SERVICE_PORT}}},
    ]


@dataclass
class KedaStack:
    """KEDA's operator and metrics API server for ``cluster`` (a started local
    :class:`~e2e.cluster.launcher.Cluster`); ``home``: the build's cache directory (default: the built one, or
    ``pytest.fail`` naming ``python -m e2e.build_keda``). ``crds_established_at``: when KEDA's CRDs were all
    Established (``time.monotonic()``), what an operator started before can notice from then on."""

    cluster: Cluster
    home: Path | None = None
    operator: Component | None = None
    adapter: Component | None = None
    address: str = ""
    startup_seconds: float = 0.0
    crds_established_at: float = 0.0

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.cluster.kubectl), f"--kubeconfig={self.cluster.kubeconfig}", *args],
                              input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def start(self, timeout: float = 120.0) -> KedaStack:
        """Install, start and register KEDA (module docstring); return once the external metrics API answers
        through the API server. Raises :class:`ClusterError` with both logs' tails on failure; ``pytest.fail``
        naming ``python -m e2e.build_keda`` when the binaries are missing."""
        t0 = time.monotonic()
        home = self.home or build_keda.require()
        assert self.cluster.workdir is not None
        wd = self.cluster.workdir / "keda"
        self.address = host_address()
        dns = [f"{name}.{NAMESPACE}.svc{suffix}" for name in ("keda-operator", SERVICE)
               for suffix in ("", ".cluster.local")]
        certs = make_mutual_tls(wd / "certs", "keda", ["127.0.0.1", self.address], ["localhost", *dns])
        crds = sorted((home / "config" / "crds").glob("*.yaml"))
        for crd in crds:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
        self._wait_established([yaml.safe_load(c.read_text())["metadata"]["name"] for c in crds], timeout)
        self.crds_established_at = time.monotonic()
        if self.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0:
            self.kubectl("create", "namespace", NAMESPACE)
        env = {"KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE, "WATCH_NAMESPACE": "", "POD_NAMESPACE": NAMESPACE}
        grpc, health = free_port(), free_port()
        kubeconfig = f"--kubeconfig={self.cluster.kubeconfig}"
        self.operator = self.cluster.start_component("keda-operator", [
            str(home / "bin" / "operator"), kubeconfig, f"--cert-dir={certs.crt.parent}",
            "--enable-cert-rotation=false", "--enable-webhook-patching=false", "--enable-apiservice-patching=false",
            "--leader-elect=false", f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{health}", f"--metrics-service-bind-address=127.0.0.1:{grpc}",
            "--zap-log-level=info"], env=env)
        secure = free_port()
        self.adapter = self.cluster.start_component("keda-adapter", [
            str(home / "bin" / "adapter"), kubeconfig, f"--authentication-kubeconfig={self.cluster.kubeconfig}",
            f"--authorization-kubeconfig={self.cluster.kubeconfig}", f"--lister-kubeconfig={self.cluster.kubeconfig}",
            f"--bind-address={self.address}",
            f"--secure-port={secure}", f"--cert-dir={certs.crt.parent}", f"--tls-cert-file={certs.crt}",
            f"--tls-private-key-file={certs.key}", f"--requestheader-client-ca-file={self.cluster.front_proxy_ca}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}", "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--metrics-service-address=127.0.0.1:{grpc}", f"--port={free_port()}", "--profiling=false",
            "--zap-log-level=info"], env=env)
        try:
            wait_http(f"http://127.0.0.1:{health}/readyz", self.operator, timeout)
            docs = api_objects(self.address, secure, certs.ca_crt.read_bytes())
            self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
            self._wait_available(timeout)
        except (RuntimeError, ClusterError) as exc:
            tails = f"keda-operator log:\n{self.operator.tail(20)}\nkeda-adapter log:\n{self.adapter.tail(30)}"
            self.stop()
            raise ClusterError(f"KEDA did not start: {exc}\n{tails}") from exc
        self.startup_seconds = time.monotonic() - t0
        return self

    def _wait_established(self, names: list[str], timeout: float) -> None:
        """Wait until every CRD of ``names`` (``scaledobjects.keda.sh``) is Established: KEDA's controllers start
        their watches once, at start."""
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending and time.monotonic() < deadline:
            proc = self.kubectl("get", "crd", *pending, "-o", "json", check=False)
            if proc.returncode == 0:
                done = {i["metadata"]["name"] for i in json.loads(proc.stdout)["items"]
                        if any(c["type"] == "Established" and c["status"] == "True"
                               for c in i.get("status", {}).get("conditions") or [])}
                pending = [n for n in pending if n not in done]
            if pending:
                time.sleep(0.3)
        if pending:
            raise ClusterError(f"KEDA's CRDs {', '.join(pending)} not Established after {timeout:.0f} s")

    def _wait_available(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for comp in (self.operator, self.adapter):
                if comp is not None and not comp.alive():
                    raise ClusterError(f"{comp.name} exited with {comp.proc.returncode}")
            proc = self.kubectl("get", "apiservice", API_SERVICE, "-o", "json", check=False)
            if proc.returncode == 0:
                conds: list[dict[str, Any]] = json.loads(proc.stdout).get("status", {}).get("conditions") or []
                available: dict[str, Any] = next((c for c in conds if c.get("type") == "Available"), {})
                last = f"Available={available.get('status')} {available.get('reason')}: {available.get('message')}"
                if available.get("status") == "True":
                    raw = self.kubectl("get", "--raw", EXTERNAL_METRICS, check=False)
                    if raw.returncode == 0:
                        return
                    last = raw.stderr.strip()
            time.sleep(0.5)
        raise ClusterError(f"APIService {API_SERVICE} not serving after {timeout:.0f} s ({last})")

    def stop(self) -> None:
        """Delete KEDA's objects and its registration, stop both processes (module docstring). Idempotent."""
        if self.operator is not None and self.operator.alive():
            self.kubectl("delete", "scaledobjects.keda.sh,scaledjobs.keda.sh", "--all", "--all-namespaces",
                         "--wait=true", "--timeout=60s", check=False)
        self.kubectl("delete", "apiservice", API_SERVICE, "--ignore-not-found", check=False)
        self.kubectl("delete", "service,endpointslice", "-n", NAMESPACE, "-l",
                     f"app.kubernetes.io/name={SERVICE}", "--ignore-not-found", check=False)
        for comp in (self.adapter, self.operator):
            if comp is not None:
                self.cluster.stop_component(comp)
        self.adapter = self.operator = None

    def log_tail(self, lines: int = 30) -> str:
        """Both processes' log tails."""
        return "\n".join(f"--- {c.name}\n{c.tail(lines)}" for c in (self.operator, self.adapter) if c is not None)
