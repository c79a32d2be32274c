"""Scaling held still while the server's loop judges, with real KEDA, Prometheus and the controller-manager's HPA
(issue 30 item 3; the stack and the helpers are ``test_keda_scaling.py``'s):

- **A revision verified**: the server scaled to 3 by 12 streams; the load stops as a new revision is applied (a
  verification of 45 s). KEDA's HPA wants 1 from then on, but ``paused-scale-in`` holds 3 for the whole verification
  (more than two scale-down windows); after the promotion the pause is lifted and the HPA scales in again, down to 1.
- **An InPlace tuning's trial**: the server at 1 replica; the same 12 streams start while a trial is measured on the
  server's own pods. ``paused-replicas: "1"`` keeps the count at 1 through the trial (the HPA would make it 3); the
  tuning is not cancelled and ends Succeeded; after it, the pause is lifted and the HPA scales to 3.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.cluster.keda import KedaStack
from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.policies import ROOT
from e2e.prometheus import PrometheusProcess
from e2e.tests.test_keda_scaling import (
    NAME,
    SCALE_DOWN_WINDOW,
    Load,
    Replicas,
    hpa,
    keda,  # noqa: F401  (the module's KEDA stack)
    prometheus,  # noqa: F401  (Prometheus per test)
    ready_urls,
    scale_up,
    scaled_server,
)
from sglang_operator.api import tuning as api
from sglang_operator.builders import autoscaling as so
from sglang_operator.decisions.tuning import trials as plan

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
VERIFY_SECONDS = 45
"""The new revision's ``rollback.verifySeconds``: more than two scale-down windows."""


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, keda: KedaStack,  # noqa: F811
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    k8s_cluster.install_crd(ROOT / "crds" / "sglangtunings.yaml", "sglangtunings.sglang-operator.io")
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("keda-judging")) as op:
        yield op


def server_status(k8s: K8sCluster, ns: str) -> dict[str, Any]:
    return dict(k8s.get("sglangserver", NAME, "-n", ns).get("status") or {})


def pauses(k8s: K8sCluster, ns: str) -> dict[str, str]:
    proc = k8s.run("get", "scaledobject", NAME, "-n", ns, "-o", "json", check=False)
    if proc.returncode != 0:
        return {}
    annotations = json.loads(proc.stdout)["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k.startswith("autoscaling.keda.sh/")}


def test_scale_in_waits_for_the_verification_of_a_new_revision(
        k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess,
        prometheus: PrometheusProcess) -> None:  # noqa: F811
    k8s, ns = k8s_cluster, namespace
    url = scaled_server(k8s, ns, prometheus)
    first = server_status(k8s, ns)["revision"]
    with Replicas(k8s, ns) as replicas:
        with Load(url):
            scale_up(k8s, ns, replicas, time.monotonic())
        # the load has stopped: the HPA wants 1 from now on; a new revision (one more env entry) is verified for
        # VERIFY_SECONDS
        env = copy.deepcopy(k8s.get("sglangserver", NAME, "-n", ns)["spec"]["env"])
        k8s.run("patch", "sglangserver", NAME, "-n", ns, "--type", "merge", "-p", json.dumps({"spec": {
            "env": [*env, {"name": "SGLANG_SIM_NOTE", "value": "second revision"}],
            "rollback": {"verifySeconds": VERIFY_SECONDS}}}))
        t0 = time.monotonic()
        judged = wait_for("the new revision judged, scale-in paused", lambda: (
            (s := server_status(k8s, ns))["revision"] != first and s.get("autoscaling", {}).get("judging")
            and pauses(k8s, ns) == {so.PAUSED_SCALE_IN: "true"} and s), timeout=60, interval=1)
        second = judged["revision"]
        promoted = wait_for("the new revision promoted", lambda: (
            (s := server_status(k8s, ns)).get("stableRevision") == second and not s["autoscaling"]["judging"]
            and time.monotonic()), timeout=VERIFY_SECONDS + 120, interval=1)
        held = promoted - t0
        assert replicas.minimum(since=t0) == 3, replicas.seen  # never scaled in while judged
        assert held >= 2 * SCALE_DOWN_WINDOW, held  # long enough for the HPA to have scaled in twice
        wait_for("the pause lifted", lambda: pauses(k8s, ns) == {}, timeout=30, interval=1)
        down = replicas.wait_count("KEDA's HPA scaling in again, to 1", 1, promoted, 6 * SCALE_DOWN_WINDOW + 120)
    print(f"3 replicas held for {held:.0f} s while revision {second} was judged (the load stopped at its apply); "
          f"after the promotion 3 → 1 in {down:.1f} s (window {SCALE_DOWN_WINDOW} s); counts "
          f"{[r for _, r in replicas.seen]}")


def test_an_in_place_trial_holds_the_count_and_a_scale_cancels_nothing(
        k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess,
        prometheus: PrometheusProcess) -> None:  # noqa: F811
    k8s, ns = k8s_cluster, namespace
    scaled_server(k8s, ns, prometheus)
    k8s.apply({
        "apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": "in-place"},
        "spec": {"serverRef": {"name": NAME}, "mode": "InPlace", "disruption": "Allowed",
                 "parameters": {"numSteps": {"list": [2]}, "eagleTopk": {"list": [1]}},
                 "budget": {"maxTrialCount": 2, "maxFailedTrialCount": 1}, "algorithm": {"algorithmName": "Grid"},
                 "workload": {"maxOutputTokens": 32, "secondsPerLevel": 20, "warmupSeconds": 1, "repetitions": 1,
                              "concurrency": [{"level": 1}]}}}, ns)
    wait_for("a trial measured on the server's pods (paused-replicas)", lambda: (
        ((server_status(k8s, ns).get("tuningHold") or {}).get("trial"))
        and pauses(k8s, ns) == {so.PAUSED_REPLICAS: "1"}), timeout=120, interval=1)
    wait_for("the trial's pod Ready", lambda: ready_urls(k8s, ns), timeout=120, interval=1)
    with Replicas(k8s, ns) as replicas, Load(ready_urls(k8s, ns)[0], follow=lambda: ready_urls(k8s, ns)):
        t0 = time.monotonic()
        done = wait_for("the tuning finished", lambda: (
            (t := k8s.get("sglangtuning", "in-place", "-n", ns).get("status") or {}).get("phase")
            in plan.TERMINAL_PHASES and t), timeout=300, interval=1)
        ended = time.monotonic()
        trials = [(t["settings"], t["verdict"]) for t in done.get("trials") or []]
        assert done["phase"] == "Succeeded", json.dumps(done, indent=1)  # the load and the pause cancelled nothing
        assert replicas.minimum(since=t0) == 1 and max(r for _, r in replicas.seen) == 1, replicas.seen
        hpa_wanted = ((hpa(k8s, ns) or {}).get("status") or {}).get("desiredReplicas")  # KEDA may drop it: paused
        wait_for("the pause lifted after the tuning", lambda: so.PAUSED_REPLICAS not in pauses(k8s, ns),
                 timeout=60, interval=1)
        up = replicas.wait_count("KEDA's HPA scaling to 3 after the trial", 3, ended, 240)
    print(f"12 streams during the InPlace tuning: the count held at 1 for {ended - t0:.0f} s (the HPA's desired "
          f"count at the end: {hpa_wanted}); trials {trials}; after the tuning 1 → 3 in {up:.1f} s")
