"""Canary rollouts end to end (issue 18), on the local control plane with the simulator at real speed and the fast
policy (5 s intervals, 5 s warm-up, 3 samples per step):

(a) 4 replicas of the known-good revision, the regressed spec applied with the default canary (one step of one
    replica, maxSurge 0): only one pod ever runs the regressed revision, it is judged against the stable pods in the
    same intervals and removed; a watcher records the ready capacity, never below 3; the spec is unchanged;
    ``history`` shows the canary.
(b) the known-good spec applied as a canary over a slower (regressed) stable revision is promoted step by step and
    ends with every replica on it, its baseline set, served by ``NAME-canary`` with no pod restarted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.policies import BAD, GOOD, sample

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
NAME = "qwen36-27b"
REVISION = "sglang-operator.io/revision"


@pytest.fixture
def operator(k8s_cluster: K8sCluster, tmp_path: Path) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path, status_interval=1.0, sample_interval=None) as op:
        yield op


def status(k8s: K8sCluster, ns: str) -> dict[str, Any]:
    out: dict[str, Any] = k8s.get("sglangserver", NAME, "-n", ns).get("status") or {}
    return out


def wait_status(k8s: K8sCluster, ns: str, what: str, pred: Any, timeout: float = 180) -> dict[str, Any]:
    try:
        return wait_for(what, lambda: (s := status(k8s, ns)) and pred(s) and s, timeout=timeout, interval=1)
    except AssertionError:
        print(json.dumps(status(k8s, ns), indent=1)[:8000])
        raise


def canary_spec(name: str, replicas: int = 4, **canary: Any) -> dict[str, Any]:
    obj = sample(name)
    obj["spec"]["replicas"] = replicas
    obj["spec"]["strategy"] = {"type": "Canary", **({"canary": canary} if canary else {})}
    return obj


class Watcher:
    """Polls the server's pods every 0.5 s: the Ready pods (capacity) and every pod name seen per revision."""

    def __init__(self, k8s: K8sCluster, ns: str) -> None:
        self.k8s, self.ns = k8s, ns
        self.capacity: list[int] = []
        self.pods: dict[str, set[str]] = {}
        self.uids: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            out = self.k8s.run("get", "pods", "-n", self.ns, "-l", f"app.kubernetes.io/instance={NAME}", "-o",
                               "json", check=False)
            if out.returncode == 0:
                items = json.loads(out.stdout)["items"]
                ready = 0
                for p in items:
                    rev = p["metadata"]["labels"].get(REVISION, "")
                    self.pods.setdefault(rev, set()).add(p["metadata"]["name"])
                    self.uids[p["metadata"]["name"]] = p["metadata"]["uid"]
                    conds = p["status"].get("conditions") or []
                    if not p["metadata"].get("deletionTimestamp") and any(
                            c["type"] == "Ready" and c["status"] == "True" for c in conds):
                        ready += 1
                self.capacity.append(ready)
            self._stop.wait(0.5)


def promoted(k8s: K8sCluster, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
    k8s.apply(obj, ns)
    return wait_status(k8s, ns, "the first revision promoted on every replica",
                       lambda s: s.get("stableRevision") and s.get("stableRevision") == s.get("revision")
                       and s.get("readyReplicas") == obj["spec"]["replicas"]
                       and (s.get("analysis") or {}).get("phase") == "Stable")


def history(k8s: K8sCluster, ns: str) -> str:
    out = subprocess.run([sys.executable, "-m", "sglang_operator.entry.cli", "history", NAME, "-n", ns],
                         capture_output=True, text=True, env={**os.environ, "KUBECONFIG": str(k8s.kubeconfig)},
                         check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_regressed_canary_runs_on_one_pod_and_is_removed(k8s_cluster: K8sCluster, namespace: str,
                                                           operator: OperatorProcess) -> None:
    k8s, ns = k8s_cluster, namespace
    good = promoted(k8s, ns, canary_spec(GOOD))
    stable = good["revision"]
    bad = canary_spec(BAD)
    with Watcher(k8s, ns) as watch:
        started = time.monotonic()
        k8s.apply(bad, ns)
        s = wait_status(k8s, ns, "the regressed canary rejected and removed",
                        lambda s: any(r["revision"] != stable for r in s.get("rejectedRevisions") or [])
                        and not s.get("canary") and s.get("readyReplicas") == 4, timeout=240)
        elapsed = time.monotonic() - started
        time.sleep(3)
    rejected = next(r for r in s["rejectedRevisions"] if r["revision"] != stable)
    regressed = rejected["revision"]
    print(f"canary rejected and removed {elapsed:.0f} s after the apply; capacity min {min(watch.capacity)}")
    assert s["revision"] == stable and s["stableRevision"] == stable
    assert len(watch.pods.get(regressed, set())) == 1, watch.pods  # only one pod ever ran the regressed revision
    assert min(watch.capacity) >= 3, watch.capacity
    assert "canary" in rejected["reason"] and "tok/s" in rejected["reason"], rejected
    record = next(r for r in s["revisions"] if r["revision"] == regressed)
    assert record["verdict"] == "Rejected" and record["canarySteps"][0]["verdict"] == "Failed", record
    assert record["canarySteps"][0]["stableTokensPerSecond"] > record["canarySteps"][0]["tokensPerSecond"]
    spec = k8s.get("sglangserver", NAME, "-n", ns)["spec"]
    assert spec["speculative"] == bad["spec"]["speculative"]  # the spec is unchanged
    assert k8s.run("get", "deployment", f"{NAME}-canary", "-n", ns, check=False).returncode != 0
    shown = history(k8s, ns)
    assert f"{regressed}: canary step 1 at 3+1 (stable+canary): Failed" in shown, shown


def test_a_good_canary_over_a_slower_stable_is_promoted_step_by_step(k8s_cluster: K8sCluster, namespace: str,
                                                                     operator: OperatorProcess) -> None:
    k8s, ns = k8s_cluster, namespace
    slow = promoted(k8s, ns, canary_spec(BAD))
    stable = slow["revision"]
    good = canary_spec(GOOD, steps=[{"replicas": "25%"}, {"replicas": "50%"}])
    with Watcher(k8s, ns) as watch:
        k8s.apply(good, ns)
        s = wait_status(k8s, ns, "the canary promoted to every replica",
                        lambda s: s.get("stableRevision") not in (None, stable) and not s.get("canary")
                        and s.get("revision") == s.get("stableRevision") and s.get("readyReplicas") == 4,
                        timeout=300)
    new = s["revision"]
    assert s["servingWorkload"] == f"{NAME}-canary" and s["baseline"]["revision"] == new
    assert s["baseline"]["tokensPerSecond"] > 45, s["baseline"]
    assert min(watch.capacity) >= 3, watch.capacity
    assert k8s.run("get", "deployment", NAME, "-n", ns, check=False).returncode != 0  # retired
    dep = k8s.get("deployment", f"{NAME}-canary", "-n", ns)
    assert dep["spec"]["replicas"] == 4
    record = next(r for r in s["revisions"] if r["revision"] == new)
    assert [st["verdict"] for st in record["canarySteps"]] == ["Passed", "Passed"], record
    assert [st["replicas"] for st in record["canarySteps"]] == [1, 2]
    # no pod of the new revision was restarted for the promotion: 4 pods ever ran it
    assert len(watch.pods.get(new, set())) == 4, watch.pods
