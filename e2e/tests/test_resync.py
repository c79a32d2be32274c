"""A pod deleted while the operator's watch could not see it leaves within one resync (issue 15 "Done when").

The watch gap is made for real: the pod is first relabelled out of the managed set (kopf filters its watch by the
managed-by label, so from then on it sees no event of that pod, DELETED included), then deleted; its ReplicaSet
starts a replacement. Until a resync, the operator's pod cache holds the deleted pod as a Ready target: the server
counts two replicas and every sample fails to scrape the dead IP (on 7a75fdc, forever). With ``--resync-seconds 6``
the ghost is gone within one resync: no more scrape errors, one replica.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
FAST_SIM = [{"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"}, {"name": "SGLANG_SIM_TIME_SCALE", "value": "20"}]
RESYNC = 6.0
INTERVAL = 2.0  # --sample-interval of OperatorProcess


@pytest.fixture
def operator(k8s_cluster: K8sCluster, tmp_path: Path) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path, args=["--resync-seconds", str(RESYNC)]) as op:
        yield op


def scrape_errors(op: OperatorProcess) -> dict[str, float]:
    """``sglang_operator_scrape_errors_total{endpoint="metrics"}`` by reason."""
    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=2) as r:
        text = r.read().decode()
    return {s.labels["reason"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "sglang_operator_scrape_errors_total" and s.labels.get("endpoint") == "metrics"}


def status(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = k8s.get("sglangserver", name, "-n", ns).get("status") or {}
    return out


def test_a_pod_deleted_during_a_watch_gap_leaves_within_one_resync(
        k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess) -> None:
    body: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    body["spec"].setdefault("env", []).extend(copy.deepcopy(FAST_SIM))
    name = body["metadata"]["name"]
    k8s_cluster.apply(body, namespace)
    wait_for("Ready with one replica", lambda: (s := status(k8s_cluster, namespace, name)).get("phase") == "Ready"
             and s.get("replicas") == 1, timeout=120)
    [pod] = k8s_cluster.get("pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={name}")["items"]
    ghost = pod["metadata"]["name"]
    k8s_cluster.run("label", "pod", ghost, "-n", namespace, "app.kubernetes.io/managed-by=someone-else",
                    "--overwrite")  # the operator's watch sees nothing of it from now on
    before = sum(scrape_errors(operator).values())
    k8s_cluster.run("delete", "pod", ghost, "-n", namespace, "--grace-period=0", "--force", "--wait=true")
    deleted = time.monotonic()
    # the gap is real: the deleted pod stays a Ready target, and scraping its dead IP fails (unless the resync, at a
    # random point of its period, comes before the next sample: then nothing fails at all)...
    seen = False
    while not seen and time.monotonic() - deleted < RESYNC + 2 * INTERVAL:
        seen = sum(scrape_errors(operator).values()) > before
        time.sleep(0.2)
    # ...until a resync forgets it: then no scrape fails for three sampling intervals (--sample-interval 2); without
    # the resync (7a75fdc) the dead IP fails every interval for ever
    last, count = (time.monotonic() if seen else deleted), sum(scrape_errors(operator).values())
    while time.monotonic() - last < 3 * INTERVAL:
        assert time.monotonic() - deleted < 60, f"still scraping the deleted pod: {scrape_errors(operator)}"
        if (now := sum(scrape_errors(operator).values())) != count:
            last, count = time.monotonic(), now
        time.sleep(0.2)
    gone = last - deleted
    print(f"\nthe deleted pod's last failed scrape {gone:.1f} s after its deletion (resync every {RESYNC:.0f} s); "
          f"errors {scrape_errors(operator)}" + ("" if seen else " (the resync came before any sample of it)"))
    assert gone <= RESYNC + 2 * INTERVAL + 2, gone  # within one resync (plus the sample in flight at it)
    settled = wait_for("one replica (the replacement), the deleted pod forgotten",
                       lambda: (s := status(k8s_cluster, namespace, name)).get("replicas") == 1
                       and s.get("readyReplicas") == 1 and s.get("phase") == "Ready" and s, timeout=30, interval=0.5)
    assert [p["metadata"]["name"] for p in k8s_cluster.get(
        "pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={name}")["items"]] != [ghost], json.dumps(settled)
