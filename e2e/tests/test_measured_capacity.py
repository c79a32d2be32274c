"""``spec.autoscaling.metric: measuredCapacity`` on the local control plane (issue 30 item 4): the published regressed
case (1/1/2 on 2 × RTX A6000, the simulator at real speed) autoscaled with an SLO of 22 output tok/s per request.

Until something was measured, the ScaledObject's threshold is the configured ``target``. A Shadow tuning (Grid over
1/1/2 and 3/1/4 at concurrency 3, 4, 8 and 12) measures both settings; the serving revision's capacity (the highest
concurrency keeping 22 tok/s per request, interpolated between the levels) becomes the threshold. The server is then
changed to 3/1/4 (which batches at most 2 requests on these GPUs, so its capacity is lower although it is faster per
request); while that revision is judged the threshold stays, and once it is promoted it becomes 3/1/4's. Each
capacity is within 10 % of the crossing of the simulator's noise-free per-request curve (perf model without noise,
integer concurrencies, the trials' own prompts: ``e2e.tuning_truth.noise_free_per_request``). Only KEDA's CRD is
installed: the threshold is what the operator writes, KEDA's scaling on it is ``test_keda_scaling.py``'s.
``kubectl get sgls -o wide`` shows the capacity in use.

An InPlace tuning of a 2-replica server (issue 41 item 1) spreads each level's streams over both pods
(``io/trialbench.py``): its capacity is per pod, within 10 % of the one-pod truth (a figure summed over the pods would
be twice it). It runs 3/1/4, whose per-request curve is steep at the SLO (a light load: 4-12 streams in all), so the
figure checks the division, not the machine's speed under load."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import build_keda
from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.policies import BAD, ROOT, sample
from e2e.tuning_truth import noise_free_per_request
from sglang_operator.api import tuning as api
from sglang_operator.api.tuning_status import TrialSettings
from sglang_operator.builders import autoscaling as so
from sglang_operator.decisions import capacity as cap
from sglang_operator.decisions.tuning import known_best as kb
from sglang_operator.decisions.tuning import trials as plan

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]

SERVER = "qwen36-27b"
TUNING = "capacity"
SLO = 22.0
LEVELS = (3, 4, 8, 12)
AUTOSCALING = {"minReplicas": 1, "maxReplicas": 3, "metric": "measuredCapacity", "target": 4,
               "slo": {"minTokensPerSecondPerRequest": SLO},
               "prometheus": {"address": "http://prometheus.monitoring.svc:9090"}}
TOLERANCE = 0.10


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    k8s_cluster.install_crd(build_keda.require_crds() / build_keda.SCALED_OBJECT_CRD, name=so.CRD_NAME)
    k8s_cluster.install_crd(ROOT / "crds" / "sglangtunings.yaml", "sglangtunings.sglang-operator.io")
    # Each server's own 5 s interval: a 2 s override caps the regressed revision's 64-token probe at 2 s, which a busy
    # machine misses (MeasurementErrors; it is never promoted).
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("capacity"), sample_interval=None) as op:
        yield op


def chain(steps: int) -> TrialSettings:
    return TrialSettings(num_steps=steps, eagle_topk=1, num_draft_tokens=steps + 1)


def truth(server: dict[str, Any], steps: int) -> float:
    """The noise-free capacity of ``steps``/1/``steps + 1`` for the SLO: the crossing of the per-request curve,
    every integer concurrency 1-16."""
    levels = [kb.MeanLevelFigures(concurrency=c, decode_tokens_per_second=0.0, output_tokens_per_second=v * c)
              for c in range(1, 17) if (v := noise_free_per_request(server, chain(steps), c)) is not None]
    got = cap.capacity_of(levels, SLO)
    assert got is not None and got.met, levels
    return got.requests


def autoscaling_status(k8s: K8sCluster, ns: str) -> dict[str, Any]:
    return dict(k8s.get("sglangserver", SERVER, "-n", ns).get("status", {}).get("autoscaling") or {})


def threshold(k8s: K8sCluster, ns: str) -> str | None:
    proc = k8s.run("get", "scaledobject", SERVER, "-n", ns, "-o", "json", check=False)
    if proc.returncode != 0:
        return None
    return str(json.loads(proc.stdout)["spec"]["triggers"][0]["metadata"]["threshold"])


def capacity_of(k8s: K8sCluster, ns: str, settings: str) -> dict[str, Any] | None:
    """``status.autoscaling.capacity`` once it is of ``settings`` and the ScaledObject's threshold follows it."""
    got = autoscaling_status(k8s, ns).get("capacity") or {}
    if not str(got.get("settings", "")).startswith(settings):
        return None
    return got if threshold(k8s, ns) == so.threshold(got["requestsPerReplica"]) else None


def succeeded(k8s: K8sCluster, ns: str) -> dict[str, Any]:
    """The finished tuning :data:`TUNING`, each trial printed (per-request tok/s per level, its reason); asserts it
    Succeeded."""
    tuning = k8s.get("sglangtuning", TUNING, "-n", ns)
    for t in tuning["status"]["trials"]:
        print(f"  {t['name']} {t['settings']} {t['verdict']} "
              f"{[(f['concurrency'], round(f['outputTokensPerSecond'] / f['concurrency'], 1)) for f in t['levels']]}"
              f" {(t.get('reason') or '')[-400:]}")
    assert tuning["status"]["phase"] == "Succeeded", json.dumps(tuning["status"], indent=1)
    return dict(tuning)


def test_measured_capacity_gives_each_revision_its_own_target_near_the_noise_free_truth(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    ns = namespace
    server = sample(BAD)
    server["spec"]["autoscaling"] = copy.deepcopy(AUTOSCALING)
    expected = {1: truth(server, 1), 3: truth(server, 3)}
    assert abs(expected[1] - expected[3]) > TOLERANCE * 2 * max(expected.values()), expected  # they differ
    k8s_cluster.apply(server, ns)
    wait_for("the server Ready", lambda: k8s_cluster.get("sglangserver", SERVER, "-n", ns).get("status", {})
             .get("phase") == "Ready", timeout=120, interval=1)
    assert wait_for("the configured target", lambda: threshold(k8s_cluster, ns) == "4", timeout=60)
    assert "capacity" not in autoscaling_status(k8s_cluster, ns)

    k8s_cluster.apply({
        "apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": TUNING},
        "spec": {"serverRef": {"name": SERVER}, "algorithm": {"algorithmName": "Grid"},
                 "objective": {"objectiveMetricName": "outputTokensPerSecond", "concurrency": 4},
                 "parameters": {"numSteps": {"list": [1, 3]}, "eagleTopk": {"list": [1]}},
                 "budget": {"maxTrialCount": 3},
                 "workload": {"maxOutputTokens": 32, "secondsPerLevel": 5, "warmupSeconds": 1, "repetitions": 1,
                              "concurrency": [{"level": c} for c in LEVELS]}}}, ns)
    done = wait_for("the tuning finished", lambda: k8s_cluster.get("sglangtuning", TUNING, "-n", ns)
                    .get("status", {}).get("phase") in plan.TERMINAL_PHASES, timeout=300, interval=1)
    assert done
    succeeded(k8s_cluster, ns)

    first = wait_for("1/1/2's capacity as the target", lambda: capacity_of(k8s_cluster, ns, "1/1/2"), timeout=60)
    print(f"1/1/2: {first['requestsPerReplica']} requests per replica ({first['basis']}); noise-free "
          f"{expected[1]:.2f}")
    assert first["tunings"] == [TUNING]
    assert first["requestsPerReplica"] == pytest.approx(expected[1], rel=TOLERANCE)
    wide = k8s_cluster.run("get", "sgls", SERVER, "-n", ns, "-o", "wide").stdout
    assert "CAPACITY" in wide.splitlines()[0] and so.threshold(first["requestsPerReplica"]) in wide, wide

    revision = k8s_cluster.get("sglangserver", SERVER, "-n", ns)["status"]["revision"]
    k8s_cluster.run("patch", "sglangserver", SERVER, "-n", ns, "--type", "merge", "-p",
                    json.dumps({"spec": {"speculative": {"numSteps": 3, "numDraftTokens": 4}}}))

    def judged() -> dict[str, Any] | None:
        status = k8s_cluster.get("sglangserver", SERVER, "-n", ns)["status"]
        return status if status["revision"] != revision and status.get("autoscaling", {}).get("judging") else None

    status = wait_for("the new revision judged", judged, timeout=60)
    assert status["autoscaling"]["target"] == first["requestsPerReplica"]  # held while judged
    second = wait_for("3/1/4's capacity after the promotion", lambda: capacity_of(k8s_cluster, ns, "3/1/4"),
                      timeout=180, interval=1)
    print(f"3/1/4: {second['requestsPerReplica']} requests per replica ({second['basis']}); noise-free "
          f"{expected[3]:.2f}")
    assert second["requestsPerReplica"] == pytest.approx(expected[3], rel=TOLERANCE)
    assert second["requestsPerReplica"] != first["requestsPerReplica"]
    final = k8s_cluster.get("sglangserver", SERVER, "-n", ns)["status"]
    assert final["stableRevision"] == final["revision"] != revision


IN_PLACE_REPLICAS = 2
IN_PLACE_PER_POD = (2, 3, 4, 6)


def test_an_in_place_tuning_of_two_replicas_gives_the_capacity_per_pod(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    ns = namespace
    server = sample(BAD)
    server["spec"]["replicas"] = IN_PLACE_REPLICAS
    server["spec"]["speculative"].update({"numSteps": 3, "numDraftTokens": 4})
    server["spec"]["autoscaling"] = {**copy.deepcopy(AUTOSCALING), "minReplicas": IN_PLACE_REPLICAS}
    expected = truth(server, 3)
    k8s_cluster.apply(server, ns)
    wait_for("the server Ready", lambda: k8s_cluster.get("sglangserver", SERVER, "-n", ns).get("status", {})
             .get("phase") == "Ready", timeout=180, interval=1)
    levels = [IN_PLACE_REPLICAS * c for c in IN_PLACE_PER_POD]
    k8s_cluster.apply({
        "apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": TUNING},
        "spec": {"serverRef": {"name": SERVER}, "mode": "InPlace", "disruption": "Allowed",
                 "algorithm": {"algorithmName": "Grid"},
                 "objective": {"objectiveMetricName": "outputTokensPerSecond", "concurrency": levels[1]},
                 "parameters": {"numSteps": {"list": [3]}, "eagleTopk": {"list": [1]}},
                 "budget": {"maxTrialCount": 2, "maxFailedTrialCount": 1},
                 "workload": {"maxOutputTokens": 32, "secondsPerLevel": 5, "warmupSeconds": 1, "repetitions": 1,
                              "concurrency": [{"level": c} for c in levels]}}}, ns)
    wait_for("the tuning finished", lambda: k8s_cluster.get("sglangtuning", TUNING, "-n", ns)
             .get("status", {}).get("phase") in plan.TERMINAL_PHASES, timeout=600, interval=1)
    succeeded(k8s_cluster, ns)
    got = wait_for("3/1/4's capacity as the target", lambda: capacity_of(k8s_cluster, ns, "3/1/4"), timeout=120,
                   interval=1)
    print(f"InPlace on {IN_PLACE_REPLICAS} pods, 3/1/4: {got['requestsPerReplica']} requests per replica "
          f"({got['basis']}); noise-free per pod {expected:.2f}")
    assert got["tunings"] == [TUNING]
    assert got["requestsPerReplica"] == pytest.approx(expected, rel=TOLERANCE)
