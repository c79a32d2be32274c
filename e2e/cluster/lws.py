"""The real LeaderWorkerSet controller (``sigs.k8s.io/lws`` v0.7.0, built by ``python -m e2e.build_lws``) on
the local control plane, started per test module (other tests keep the fast cluster start).

:meth:`LWSController.start` installs the module's CRD (server-side apply: it is 1.2 MB), writes a
``Configuration`` (``config.lws.x-k8s.io/v1alpha1``: ``internalCertManagement.enable: false``, no leader
election, no metrics server, webhook and health on loopback ports), makes a CA and a serving certificate for
127.0.0.1 (:func:`e2e.cluster.certs.make_serving_cert`), registers the module's webhooks
(``config/webhook/manifests.yaml``, first: their ``failurePolicy: Fail`` keeps every LeaderWorkerSet and LWS pod out
until the manager answers) with ``clientConfig.url`` on a loopback port and the CA as ``caBundle`` (on the local
cluster Services have no endpoints, so the webhook Service of the real install cannot be used), and runs
``lws-manager`` with the cluster's kubeconfig. The two pod webhooks get the ``objectSelector`` of the module's
kustomize patches (``config/webhook/{mutating,validating}-patch.yaml``: only pods labelled
``leaderworkerset.sigs.k8s.io/name``).
The pod webhook is what sets ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE``, ``LWS_WORKER_INDEX`` (plain env values)
and the group/worker index labels.

:meth:`LWSController.stop` stops the manager and removes the webhook configurations and the CRD (its objects go
with it), so the cluster is as before. The kube-controller-manager runs the StatefulSet controller
(``e2e.cluster.launcher.CONTROLLERS``): LWS groups are StatefulSets.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.build_lws import binary_path, crd_path, webhooks_path
from e2e.cluster.certs import make_serving_cert
from e2e.cluster.launcher import Cluster, ClusterError
from e2e.cluster.procs import Component, free_port, wait_http

CRD_NAME = "leaderworkersets.leaderworkerset.x-k8s.io"
WEBHOOK_PREFIX = "lws-"  # the module's kustomize namePrefix
POD_WEBHOOKS = ("mpod.kb.io", "vpod.kb.io")
POD_SELECTOR = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}


def webhook_configurations(manifests: str, url_base: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The module's webhook configurations, renamed ``lws-…``, each webhook pointed at ``url_base + path``
    with ``caBundle``, the pod webhooks limited to LWS pods (the kustomize patches' ``objectSelector``)."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        doc["metadata"]["name"] = WEBHOOK_PREFIX + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": url_base + path, "caBundle": base64.b64encode(ca_bundle).decode()}
            if hook["name"] in POD_WEBHOOKS:
                hook["objectSelector"] = POD_SELECTOR
        out.append(doc)
    return out


def manager_config(webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """The ``--config`` of lws-manager (``api/config/v1alpha1`` Configuration)."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "clientConnection": {"qps": 200, "burst": 400},
    }


@dataclass
class LWSController:
    """The LeaderWorkerSet controller of ``cluster`` (a started local :class:`~e2e.cluster.launcher.Cluster`)."""

    cluster: Cluster
    component: Component | None = None
    webhooks: list[str] = field(default_factory=list)
    startup_seconds: float = 0.0

    @property
    def running(self) -> bool:
        return self.component is not None and self.component.alive()

    def _kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.cluster.kubectl), f"--kubeconfig={self.cluster.kubeconfig}", *args],
                              input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def start(self, timeout: float = 90.0) -> LWSController:
        """Install the CRD, start lws-manager, register its webhooks and wait until it admits LeaderWorkerSets.
        Idempotent. Raises :class:`ClusterError` (with the manager's log tail) on failure; ``FileNotFoundError``
        naming ``python -m e2e.build_lws`` when the binary is missing."""
        if self.running:
            return self
        binary = binary_path()
        if not binary.is_file():
            raise FileNotFoundError(f"{binary} missing: run `python -m e2e.build_lws`")
        t0 = time.monotonic()
        assert self.cluster.workdir is not None
        wd = self.cluster.workdir / "lws"
        cert = make_serving_cert(wd / "certs", "lws-webhook", ["127.0.0.1"])
        webhook_port, health_port = free_port(), free_port()
        config = wd / "config.yaml"
        config.write_text(yaml.safe_dump(manager_config(webhook_port, health_port, cert.crt.parent)))
        # webhooks first (failurePolicy Fail): no LeaderWorkerSet and no LWS pod is admitted before lws-manager
        # answers, so no pod misses the pod webhook's env and labels (as with a real install's manifests)
        docs = webhook_configurations(webhooks_path().read_text(), f"https://127.0.0.1:{webhook_port}",
                                      cert.ca_crt.read_bytes())
        self._kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        self.webhooks = [f"{d['kind'].lower()}/{d['metadata']['name']}" for d in docs]
        self._kubectl("apply", "--server-side", "-f", str(crd_path()))
        self._wait_established(timeout)
        self.component = self.cluster.start_component("lws-manager", [
            str(binary), f"--config={config}", f"--kubeconfig={self.cluster.kubeconfig}", "--leader-elect=false",
            "--zap-log-level=info"])
        try:
            wait_http(f"http://127.0.0.1:{health_port}/readyz", self.component, timeout)
            ctx = ssl.create_default_context(cafile=str(cert.ca_crt))
            self._wait_webhook_port(webhook_port, ctx, timeout)
            self._wait_admits(timeout)
        except (RuntimeError, ClusterError) as exc:
            tail = self.component.tail() if self.component else ""
            self.stop()
            raise ClusterError(f"LeaderWorkerSet controller did not start: {exc}\nlws-manager log:\n{tail}") from exc
        self.startup_seconds = time.monotonic() - t0
        return self

    def _wait_established(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            proc = self._kubectl("get", f"crd/{CRD_NAME}", "-o", "json", check=False)
            if proc.returncode == 0 and any(c.get("type") == "Established" and c.get("status") == "True" for c in
                                            json.loads(proc.stdout).get("status", {}).get("conditions") or []):
                return
            time.sleep(0.2)
        raise ClusterError(f"CRD {CRD_NAME} not Established after {timeout:.0f} s")

    def _wait_webhook_port(self, port: int, ctx: ssl.SSLContext, timeout: float) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.component is not None
            if not self.component.alive():
                raise RuntimeError(f"lws-manager exited with {self.component.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as raw, \
                        ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"lws-manager's webhook server not serving TLS on 127.0.0.1:{port} after {timeout:.0f} s")

    def _wait_admits(self, timeout: float) -> None:
        """A server-side dry-run create of a LeaderWorkerSet passes the (defaulting and validating) webhooks."""
        probe = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                 "metadata": {"name": "webhook-probe", "namespace": "default"},
                 "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": {"containers": [
                     {"name": "c", "image": "example.com/idle"}]}}}}}
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            proc = self._kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe),
                                 check=False)
            if proc.returncode == 0:
                defaulted = json.loads(proc.stdout)
                if defaulted["spec"].get("startupPolicy"):  # set by the API server's defaults / the webhook
                    return
            last = proc.stderr.strip()
            time.sleep(0.5)
        raise RuntimeError(f"LeaderWorkerSet webhooks not answering after {timeout:.0f} s: {last}")

    def stop(self) -> None:
        """Delete every LeaderWorkerSet (while the controller runs, so the garbage collector still resolves their
        StatefulSets' owner), stop lws-manager, remove its webhook configurations and the CRD."""
        if self.running:
            self._kubectl("delete", f"{CRD_NAME.split('.', 1)[0]}.{CRD_NAME.split('.', 1)[1]}", "--all",
                          "--all-namespaces", "--cascade=foreground", "--wait=true", "--timeout=90s", check=False)
        for name in self.webhooks:
            self._kubectl("delete", name, "--ignore-not-found", check=False)
        self.webhooks = []
        if self.component is not None:
            self.cluster.stop_component(self.component)
            self.component = None
        self._kubectl("delete", f"crd/{CRD_NAME}", "--ignore-not-found", "--wait=true", "--timeout=60s", check=False)

    def log_tail(self, lines: int = 40) -> str:
        return self.component.tail(lines) if self.component else ""
