"""``sglang-operator run --metrics-secure`` against a real API server: the metrics port speaks HTTPS only (a
self-signed certificate for 127.0.0.1, made at start), and ``/metrics`` answers as controller-runtime's
``WithAuthenticationAndAuthorization`` does, with real TokenReviews and SubjectAccessReviews of real ServiceAccount
tokens (``kubectl create token``): the reader bound to a ClusterRole allowing ``get`` on the non-resource URL
``/metrics`` gets 200, a ServiceAccount without the binding 403, no token 401; ``/readyz`` answers without a token
over the same TLS; plain HTTP gets no answer. The operator runs with the cluster's admin kubeconfig (the chart's
RBAC for the reviews is pinned by ``tests/chart/test_chart.py``). About 5 s beside the cluster's start.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from e2e.conftest import K8sCluster, running_operator, wait_for

pytestmark = pytest.mark.cluster


def test_secure_metrics_are_https_and_need_a_token_allowed_to_get_metrics(
        k8s_cluster: K8sCluster, namespace: str, tmp_path: Path) -> None:
    role = f"{namespace}-metrics-reader"  # cluster-scoped: unique per test namespace
    for sa in ("reader", "stranger"):
        k8s_cluster.run("create", "serviceaccount", sa, "-n", namespace)
    k8s_cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
                       "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]})
    k8s_cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                       "metadata": {"name": role},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                       "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]})
    try:
        reader = f"system:serviceaccount:{namespace}:reader"
        wait_for("the binding in the API server's RBAC cache", lambda: k8s_cluster.run(
            "auth", "can-i", "get", "/metrics", f"--as={reader}", check=False).stdout.strip() == "yes",
            timeout=30, interval=0.2)
        tokens = {sa: k8s_cluster.run("create", "token", sa, "-n", namespace, "--duration=10m").stdout.strip()
                  for sa in ("reader", "stranger")}
        with running_operator(k8s_cluster, tmp_path, args=["--metrics-secure", "--namespace", namespace],
                              sample_interval=None) as op:
            assert op.metrics_scheme == "https"
            answers, _, _ = op.wait_ready(30)  # /readyz over HTTPS, no token
            assert answers[-1][0] == 200

            # the served certificate verifies for 127.0.0.1 (its subjectAltName) when trusted as it is
            pem = ssl.get_server_certificate(("127.0.0.1", op.metrics_port), timeout=5)
            trust = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            trust.load_verify_locations(cadata=pem)

            def get(path: str, token: str | None = None) -> httpx.Response:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                return httpx.get(op.metrics_url(path), headers=headers, verify=trust, timeout=10)

            r = get("/metrics", tokens["reader"])
            assert r.status_code == 200 and "process_resident_memory_bytes" in r.text, (r.status_code, r.text)
            r = get("/metrics", tokens["stranger"])
            assert (r.status_code, r.text) == (
                403, f"Authorization denied for user system:serviceaccount:{namespace}:stranger\n")
            assert (get("/metrics").status_code, get("/metrics").text) == (401, "Unauthorized\n")
            assert get("/metrics", "not-a-token").status_code == 401  # the TokenReview says unauthenticated
            r = get("/readyz")
            assert r.status_code == 200 and r.text.startswith("ok:"), r.text
            with pytest.raises(httpx.TransportError):  # plain HTTP to the TLS port: no answer
                httpx.get(f"http://127.0.0.1:{op.metrics_port}/readyz", timeout=5)
            assert "metrics: serving HTTPS on port" in op.log_text()
    finally:
        for kind in ("clusterrolebinding", "clusterrole"):
            k8s_cluster.run("delete", kind, role, "--ignore-not-found", check=False)
