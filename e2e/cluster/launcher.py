"""Start and stop the local control plane: etcd → kube-apiserver → kube-controller-manager →
kube-scheduler → fake kubelet, on free loopback ports in a temp dir.

``Cluster.start()`` returns once every component answers its health endpoint and the fake kubelet's
nodes are Ready; ``Cluster.stop()`` tears everything down (also registered with ``atexit``). Logs
stay in ``<workdir>/logs/<component>.log``; a failed start raises ``ClusterError`` with the tail of
the failing component's log.

The API server is ready for aggregated APIs (front-proxy client certificate, ``--requestheader-*``,
``--enable-aggregator-routing=true``: it dials an endpoint of an APIService's Service, there being no kube-proxy)
and the controller-manager runs the HPA controller every :data:`HPA_SYNC_PERIOD`; :mod:`e2e.cluster.keda`
registers KEDA's metrics API server (docs/autoscaling.md, "KEDA on the local control plane").
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import ssl
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from e2e.cluster.certs import FRONT_PROXY_CLIENT, PKI, make_front_proxy, make_pki
from e2e.cluster.procs import MARKER, Component, free_port, kill_pids, marked_pids, wait_http

REPO = Path(__file__).resolve().parents[2]
ADVERTISE = "192.0.2.10"  # TEST-NET-1: never routed, never contacted (--endpoint-reconciler-type=none)
SERVICE_CIDR = "10.0.0.0/16"  # room for benchmarks of 500+ SGLangServers (a /24 holds 254 Services)
CONTROLLERS = (
    "deployment-controller", "replicaset-controller", "garbage-collector-controller",
    "namespace-controller", "serviceaccount-controller", "serviceaccount-token-controller",
    "endpointslice-controller", "root-ca-certificate-publisher-controller",
    "pod-garbage-collector-controller",
    "statefulset-controller",  # LeaderWorkerSet groups are StatefulSets (e2e/cluster/lws.py)
    "horizontal-pod-autoscaler-controller",  # KEDA's HPAs (e2e/cluster/keda.py)
)
HPA_SYNC_PERIOD = "5s"  # kube-controller-manager's default 15 s; the scaling tests wait on it
ALWAYS_ALLOW = "/healthz,/readyz,/livez,/metrics"
# The API server's audit log (``Cluster.audit_log``, JSON lines): every write at Metadata level, except the fake
# kubelet's pod/node status and node leases, so tests can count who wrote what (e2e/audit.py); SGLangServer status
# patches at Request level, so a test sees each patch's resourceVersion precondition (``Write.resource_version``).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "resources": [{"group": "", "resources": ["pods", "pods/status", "nodes", "nodes/status"]}]},
        {"level": "None", "namespaces": ["kube-node-lease"]},
        {"level": "Request", "verbs": ["patch"],
         "resources": [{"group": "sglang-operator.io", "resources": ["sglangservers/status"]}]},
        {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
        {"level": "None"},
    ],
}
AUDIT_SERVICE_ACCOUNT_READS = {"level": "Metadata", "userGroups": ["system:serviceaccounts"]}
"""With ``Cluster.audit_reads``: every request of a ServiceAccount token (reads and watches too), ahead of the
rules above, so a benchmark counts an operator's requests per object (``e2e.audit.requests``)."""


class ClusterError(RuntimeError):
    """A component failed to start; the message holds its log tail."""


@dataclass
class NodeOptions:
    """Fake kubelet settings: ``count`` nodes with ``gpus`` ``nvidia.com/gpu`` each."""

    count: int = 2
    gpus: int = 8
    gpu_product: str = "NVIDIA-RTX-A6000"
    cpu: str = "64"
    memory: str = "512Gi"
    backoff_base: float = 10.0  # seconds, CrashLoopBackOff start (kubelet: 10 s, doubling, cap 300 s)
    pod_cidr: str = field(default_factory=lambda: worker_pod_cidr())


def worker_pod_cidr() -> str:
    """The loopback network this process's clusters take pod IPs from: 127.1.0.0/16, or 127.(2 + N).0.0/16 for the
    pytest-xdist worker ``gwN`` (``PYTEST_XDIST_WORKER``), so clusters of parallel test workers never hand out the
    same address (their pods' ports would collide)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker.removeprefix("gw")) + 2 if worker.startswith("gw") and worker[2:].isdigit() else 1
    if index > 254:
        raise ClusterError(f"no pod network for xdist worker {worker} (at most 253 workers)")
    return f"127.{index}.0.0/16"


@dataclass
class Cluster:
    """A local control plane. ``bin_dir`` holds etcd, kube-apiserver, kube-controller-manager,
    kube-scheduler and kubectl (see ``python -m e2e.build_k8s``)."""

    bin_dir: Path
    nodes: NodeOptions = field(default_factory=NodeOptions)
    workdir: Path | None = None
    images: Path = REPO / "e2e" / "images.yaml"
    cluster_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    components: list[Component] = field(default_factory=list)
    server: str = ""
    startup_seconds: float = 0.0
    audit_reads: bool = False  # also log every read of ServiceAccount users (AUDIT_SERVICE_ACCOUNT_READS)
    _keep_workdir: bool = False

    @property
    def kubeconfig(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (JSON lines; see ``AUDIT_POLICY``)."""
        assert self.workdir is not None
        return self.workdir / "audit.log"

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    def _env(self) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        return {**os.environ, MARKER: self.cluster_id, "KUBECONFIG": str(self.kubeconfig), "PYTHONPATH": path}

    def _start(self, name: str, argv: list[str], death_signal: int = signal.SIGKILL,
               env: dict[str, str] | None = None) -> Component:
        assert self.workdir is not None
        comp = Component(name, argv, self.workdir / "logs", {**self._env(), **(env or {})}, cwd=self.workdir,
                         death_signal=death_signal)
        self.components.append(comp)
        return comp

    def start_component(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
        """Start one more process with this cluster's environment (``KUBECONFIG``, marker) plus ``env``, stopped
        with the cluster or by :meth:`stop_component` (e.g. the LeaderWorkerSet controller, :mod:`e2e.cluster.lws`)."""
        return self._start(name, argv, env=env)

    def stop_component(self, comp: Component) -> None:
        """Stop a process started by :meth:`start_component`."""
        comp.stop()
        if comp in self.components:
            self.components.remove(comp)

    def start(self, timeout: float = 120.0) -> Cluster:
        """Start every component and wait for readiness; raise ClusterError on failure (after
        stopping whatever had started)."""
        t0 = time.monotonic()
        missing = [b for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                               "kubectl") if not (self.bin_dir / b).is_file()]
        if missing:
            raise ClusterError(f"missing binaries in {self.bin_dir}: {', '.join(missing)}; "
                               "run `python -m e2e.build_k8s`")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="sglang-e2e-cluster-"))
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            self._start_all(timeout)
        except RuntimeError as exc:  # ClusterError or a component that did not become ready
            self.stop(keep_workdir=True)
            raise ClusterError(f"{exc}\n(logs kept in {self.workdir}/logs)") from exc
        except BaseException:
            self.stop(keep_workdir=True)
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _start_all(self, timeout: float) -> None:
        assert self.workdir is not None
        wd = self.workdir
        pki = make_pki(wd / "pki", ["127.0.0.1", "10.0.0.1", ADVERTISE],
                       ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                        "kubernetes.default.svc.cluster.local"])
        front = make_front_proxy(wd / "pki")
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        etcd = self._start("etcd", [
            str(self.bin_dir / "etcd"), "--name=e2e", f"--data-dir={wd / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=e2e=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--watch-progress-notify-interval=5s", "--log-level=warn",
        ])
        wait_http(f"{etcd_url}/health", etcd, timeout)
        self.server = f"https://127.0.0.1:{api_port}"
        reads = [AUDIT_SERVICE_ACCOUNT_READS] if self.audit_reads else []
        policy = {**AUDIT_POLICY, "rules": [*reads, *AUDIT_POLICY["rules"]]}
        (wd / "audit-policy.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
        api = self._start("kube-apiserver", [
            str(self.bin_dir / "kube-apiserver"), f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", f"--secure-port={api_port}",
            f"--advertise-address={ADVERTISE}", "--endpoint-reconciler-type=none",
            f"--cert-dir={wd / 'apiserver-certs'}",
            f"--tls-cert-file={pki.serving_crt}", f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_crt}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
            "--kubelet-preferred-address-types=InternalIP",  # fake nodes: 127.0.1.N (kubectl logs)
            f"--audit-policy-file={wd / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json", "--audit-log-mode=blocking",  # written before the response
            # aggregation (KEDA's metrics API server, e2e/cluster/keda.py): the API server proxies with the
            # front-proxy client certificate and names the user in X-Remote-* headers; with no kube-proxy it dials
            # an endpoint of the APIService's Service, never its ClusterIP
            f"--requestheader-client-ca-file={front.ca_crt}", f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={front.client_crt}", f"--proxy-client-key-file={front.client_key}",
            "--enable-aggregator-routing=true",
            "--profiling=false", "--v=1",
        ])
        ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
        wait_http(f"{self.server}/readyz", api, timeout, ctx)
        self._write_kubeconfig(pki)
        kcm_port, sched_port = free_port(), free_port()
        kcm = self._start("kube-controller-manager", [
            str(self.bin_dir / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
            f"--controllers={','.join(CONTROLLERS)}", "--leader-elect=false",
            f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca_crt}",
            "--use-service-account-credentials=false", "--bind-address=127.0.0.1",
            f"--secure-port={kcm_port}", f"--authorization-always-allow-paths={ALWAYS_ALLOW}",
            f"--cert-dir={wd / 'kcm-certs'}", "--kube-api-qps=200", "--kube-api-burst=400",
            f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_PERIOD}",
            "--profiling=false", "--v=1",
        ])
        sched = self._start("kube-scheduler", [
            str(self.bin_dir / "kube-scheduler"), f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={sched_port}",
            f"--authorization-always-allow-paths={ALWAYS_ALLOW}", f"--cert-dir={wd / 'sched-certs'}",
            "--kube-api-qps=200", "--kube-api-burst=400", "--profiling=false", "--v=1",
        ])
        n = self.nodes
        kubelet = self._start("kubelet", [
            sys.executable, "-m", "e2e.kubelet", f"--kubeconfig={self.kubeconfig}",
            f"--nodes={n.count}", f"--gpus={n.gpus}", f"--gpu-product={n.gpu_product}",
            f"--cpu={n.cpu}", f"--memory={n.memory}", f"--backoff-base={n.backoff_base}",
            f"--pod-cidr={n.pod_cidr}", f"--images={self.images}", f"--workdir={wd / 'pods'}",
        ], death_signal=signal.SIGTERM)
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # KCM/scheduler serve self-signed certs on loopback
        wait_http(f"https://127.0.0.1:{kcm_port}/healthz", kcm, timeout, insecure)
        wait_http(f"https://127.0.0.1:{sched_port}/readyz", sched, timeout, insecure)
        self._wait_nodes(kubelet, timeout)

    @property
    def front_proxy_ca(self) -> Path:
        """The CA of the API server's front-proxy client certificate (``--requestheader-client-ca-file``): an
        aggregated API server trusts the X-Remote-* headers of requests signed by it."""
        assert self.workdir is not None
        return self.workdir / "pki" / "front-proxy-ca.crt"

    def _write_kubeconfig(self, pki: PKI) -> None:
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {
                "server": self.server, "certificate-authority": str(pki.ca_crt)}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": str(pki.admin_crt), "client-key": str(pki.admin_key)}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
        }
        self.kubeconfig.write_text(yaml.safe_dump(cfg, sort_keys=False))

    def _wait_nodes(self, kubelet: Component, timeout: float) -> None:
        import subprocess

        deadline = time.monotonic() + timeout
        ready = 0
        while time.monotonic() < deadline:
            if not kubelet.alive():
                raise ClusterError(f"kubelet exited; log {kubelet.log_path}:\n{kubelet.tail()}")
            out = subprocess.run([str(self.kubectl), "get", "nodes", "-o", "json"], env=self._env(),
                                 capture_output=True, text=True)
            if out.returncode == 0:
                items = json.loads(out.stdout)["items"]
                ready = sum(any(c["type"] == "Ready" and c["status"] == "True"
                                for c in i.get("status", {}).get("conditions", [])) for i in items)
                if ready >= self.nodes.count:
                    return
            time.sleep(0.3)
        raise ClusterError(f"{ready}/{self.nodes.count} nodes Ready after {timeout:.0f} s; "
                           f"kubelet log {kubelet.log_path}:\n{kubelet.tail()}")

    def stop(self, keep_workdir: bool = False) -> list[int]:
        """Stop every component (kubelet first, etcd last) and kill any process still carrying
        this cluster's marker; return the PIDs that had to be killed that way (should be empty).
        Removes the workdir unless ``keep_workdir`` (or a failed start) asks to keep the logs."""
        atexit.unregister(self.stop)
        for comp in reversed(self.components):
            comp.stop()
        self.components = []
        stragglers = marked_pids(self.cluster_id)
        kill_pids(stragglers)
        if self.workdir is not None and not (keep_workdir or self._keep_workdir):
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._keep_workdir = self._keep_workdir or keep_workdir
        return stragglers
