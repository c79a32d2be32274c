"""The SGLangTuning controller on the local control plane (issue 17 items 1-4). A Shadow tuning of the published
regressed case (1/1/2 on 2 × RTX A6000, the simulator at real speed) searches numSteps 1-5 of chains (and eagleTopk
2, which ``specV2`` refuses: those points are Invalid, never started) at concurrency 1 and 16 with the default
search, whose noise-free optima differ (3/1/4 by 12 % at 1, 1/1/2 by 19 % at 16: far beyond the noise). At each level
it recommends a point whose noise-free objective (the simulator's perf model, ``sglang_sim.measure`` with
``noise=False``, evaluated here from the command line each trial renders under the trials' own load:
``e2e.tuning_truth``) is at least 0.98 × the best over every valid point; the points that run out of memory are
Failed with SGLang's message and never recommended. Each trial is a Deployment ``<tuning>-trial-<n>`` owned by the
SGLangTuning and not selected by the server's Service; none is left at the end; the server kept serving throughout (a
poller sent a short request every half second and saw none fail); the operator's ``/metrics`` has the trials. Then
two InPlace tunings (trials on the server's own pods): one deleted mid-trial, one whose operator is SIGKILLed during
a trial, which resumes without repeating a finished trial (each trial the one the default search asks for after those
before it; the Shadow resume is the same replay, unit-tested in ``tests/decisions/tuning``); both end with the stable
revision serving. A Shadow tuning of a 4-replica Canary server runs its control trial and recommends (issue 38).
Quick: 32-token requests, 5 s per level, one repetition, a one-second model load."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.conftest import BackgroundPoll, K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.policies import BAD, GOOD, ROOT, sample
from e2e.tests.objects import pods
from e2e.tuning_truth import noise_free
from sglang_operator import builders
from sglang_operator.api import tuning as api
from sglang_operator.api.server import parse
from sglang_operator.api.tuning_spec import Parameters
from sglang_operator.api.tuning_status import SGLangTuningStatus, TrialSettings
from sglang_operator.decisions.tuning import trials as plan

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]

SERVER = "qwen36-27b"
TUNING = "qwen36-shadow"
PORT = 30000
GPU = "NVIDIA RTX A6000"
"""The published case's GPU (the sample's node selector; the simulator's default profile)."""
LEVELS = (1, 16)


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    k8s_cluster.install_crd(ROOT / "crds" / "sglangtunings.yaml", "sglangtunings.sglang-operator.io")
    # Each server's own 5 s interval: the default 2 s override caps the 64-token probe at 2 s, which the regressed
    # revision (about 36 tok/s) misses on a busy machine (MeasurementErrors, never promoted: a CI failure).
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("operator"), sample_interval=None) as op:
        yield op


def tuning(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name},
            "spec": {"serverRef": {"name": SERVER},
                     "workload": {"maxOutputTokens": 32, "secondsPerLevel": 5, "warmupSeconds": 1, "repetitions": 1,
                                  "concurrency": [{"level": c} for c in LEVELS]},
                     **spec}}


class Poller(BackgroundPoll):
    """Sends a short chat completion to the server's pods every half second in a thread (to the pods there when
    the thread starts); counts failures."""

    poll_at_start = False
    join_timeout = 15.0

    def __init__(self, k8s: K8sCluster, ns: str) -> None:
        super().__init__()
        self.k8s, self.ns = k8s, ns
        self.sent = self.failed = 0
        self.errors: list[str] = []
        self.ips: list[str] | None = None
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.body = json.dumps({"model": "Qwen/Qwen3.6-27B", "max_tokens": 8,
                                "messages": [{"role": "user", "content": "Say hello."}]}).encode()

    def _ips(self) -> list[str]:
        return [p["status"]["podIP"] for p in pods(self.k8s, self.ns, f"app.kubernetes.io/instance={SERVER}")
                if p.get("status", {}).get("podIP") and not p["metadata"].get("deletionTimestamp")]

    def _run(self) -> None:
        self.ips = self._ips()
        super()._run()

    def poll(self) -> None:
        for ip in self.ips or []:
            assert ip.startswith("127."), ip
            self.sent += 1
            try:
                req = urllib.request.Request(f"http://{ip}:{PORT}/v1/chat/completions", data=self.body,
                                             headers={"Content-Type": "application/json"})
                with self.opener.open(req, timeout=10) as resp:
                    json.loads(resp.read())
            except Exception as exc:
                self.failed += 1
                self.errors.append(f"{ip}: {exc}")


def finished(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any] | None:
    obj: dict[str, Any] = k8s.get("sglangtuning", name, "-n", ns)
    return obj if obj.get("status", {}).get("phase") in plan.TERMINAL_PHASES else None


def test_a_shadow_tuning_recommends_the_best_point_per_level_and_leaves_nothing_behind(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    ns = namespace
    server = sample(BAD)
    k8s_cluster.apply(server, ns)
    wait_for("the server Ready", lambda: k8s_cluster.get("sglangserver", SERVER, "-n", ns).get("status", {})
             .get("phase") == "Ready", timeout=120, interval=1)
    params = {"numSteps": {"min": 1, "max": 5}, "eagleTopk": {"list": [1, 2]}, "numDraftTokens": {"list": [3, 4]}}
    valid, invalid = plan.points(Parameters.model_validate(params), parse({**server, "metadata": {
        "name": SERVER, "namespace": ns}}).spec)
    truth = {c: {p.label: noise_free(server, plan.settings_of(p), c) for p in valid} for c in LEVELS}
    optimum = {c: max(v for v in truth[c].values() if v is not None) for c in LEVELS}
    argmax = {c: next(k for k, v in truth[c].items() if v == optimum[c]) for c in LEVELS}
    assert argmax[1] != argmax[16], truth  # the noise-free optima differ between the levels, beyond the noise:
    for c in LEVELS:
        runner_up = max(v for k, v in truth[c].items() if v is not None and k != argmax[c])
        assert runner_up < 0.95 * optimum[c], (c, truth[c])
    assert any(v is None for v in truth[1].values()), truth  # and some valid point runs out of memory
    seen_trials: set[str] = set()
    started = time.monotonic()
    with Poller(k8s_cluster, ns) as poller:
        # the default search (its repeats as its noise rule asks), within the grid's 6 trials plus 3 repeats
        k8s_cluster.apply(tuning(TUNING, parameters=params, budget={"maxTrialCount": 9}), ns)

        def done() -> dict[str, Any] | None:
            for d in k8s_cluster.get("deployments", "-n", ns, "-l", f"sglang-operator.io/tuning={TUNING}")["items"]:
                seen_trials.add(d["metadata"]["name"])
                labels = d["spec"]["template"]["metadata"]["labels"]
                assert labels["app.kubernetes.io/instance"] != SERVER  # never selected by the server's Service
                assert d["metadata"]["ownerReferences"][0]["kind"] == api.KIND
            return finished(k8s_cluster, ns, TUNING)

        try:
            obj = wait_for("the tuning finished", done, timeout=420, interval=1)
        except AssertionError:
            print(json.dumps(k8s_cluster.get("sglangtuning", TUNING, "-n", ns).get("status"), indent=1))
            raise
    took = time.monotonic() - started
    status = SGLangTuningStatus.model_validate(obj["status"])
    print(f"tuning took {took:.0f} s; noise-free optima {argmax} {optimum}")
    for t in status.trials:
        print(f"  {t.name} {t.settings.summary()} {t.verdict} {t.objective} {(t.reason or '')[-120:]}")
    for b in [status.best, *status.best_per_level]:
        print(f"  best {b}")
    assert status.phase == "Succeeded", json.dumps(obj["status"], indent=1)
    assert poller.sent > 20 and poller.failed == 0, poller.errors[:5]

    # no invalid point ran; a point out of memory failed with SGLang's message, as the perf model says
    assert status.trials_invalid == len(invalid) > 0
    started_trials = [t for t in status.trials if t.verdict != "Invalid"]
    assert status.control_trial and any(not t.settings.speculative for t in started_trials)
    assert {t.name for t in started_trials} >= seen_trials and seen_trials
    failed = set()
    for t in started_trials:
        if not t.settings.speculative:
            assert t.verdict == "Completed", t
            continue
        label = plan.point_of(t.settings).label  # type: ignore[union-attr]
        assert label in truth[1], label
        if t.verdict == "Failed":
            assert truth[1][label] is None and "Not enough memory" in (t.reason or ""), t
            failed.add(label)
        else:
            assert t.verdict == "Completed" and truth[1][label] is not None, t
    assert failed

    # the recommendations are within 2 % of the noise-free optimum of their level, never a failed point
    assert status.best is not None and status.best.settings.speculative
    per_level = {b.concurrency or 0: b for b in status.best_per_level}
    assert sorted(per_level) == list(LEVELS)
    for c, b in per_level.items():
        label = b.summary if b.settings.speculative else None
        value = truth[c][label] if label is not None else None
        assert label not in failed and value is not None and value >= 0.98 * optimum[c], (c, b, truth[c])
    # overall: the weighted mean (equal weights) of each level's figure over the control trial's at that level
    base = {c: noise_free(server, TrialSettings(speculative=False), c) for c in LEVELS}
    overall = {p: sum(truth[c][p] / base[c] for c in LEVELS) / len(LEVELS)  # type: ignore[operator]
               for p in truth[1] if all(truth[c][p] is not None for c in LEVELS)}
    assert status.best.summary in overall and overall[status.best.summary] >= 0.98 * max(overall.values()), (
        status.best, overall)
    assert per_level[1].summary != per_level[16].summary
    assert status.best.speedup is not None and status.best.speedup > 1.5

    # nothing left behind; the operator exports the trials; Events per trial
    wait_for("no trial workload left", lambda: not k8s_cluster.get(
        "deployments", "-n", ns, "-l", f"sglang-operator.io/tuning={TUNING}")["items"] and not pods(
        k8s_cluster, ns, f"sglang-operator.io/tuning={TUNING}"), timeout=60, interval=1)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(operator.metrics_url("/metrics"), timeout=5) as resp:
        text = resp.read().decode()
    assert f'sglang_operator_tuning_trials_total{{namespace="{ns}",sglang_tuning="{TUNING}",verdict="Completed"}}' \
        in text
    assert "sglang_operator_tuning_best_speedup" in text
    wanted = {"TuningStarted", "TrialStarted", "TrialCompleted", "TrialFailed", "TuningSucceeded"}

    def reasons() -> set[str]:
        return {e["reason"] for e in k8s_cluster.get(
            "events", "-n", ns, "--field-selector", f"involvedObject.name={TUNING}")["items"]}

    # the final Event is written after the status patch that ends the tuning: wait for it, do not race it
    try:
        wait_for("the tuning's Events", lambda: wanted <= reasons(), timeout=30, interval=1)
    except AssertionError as err:
        raise AssertionError(f"{err}: missing {sorted(wanted - reasons())}") from err


# --- a Canary server: its trials are single workloads (issue 38 item 1) -------------------------------------------

CANARY_REPLICAS = 4


def test_a_shadow_tuning_of_a_canary_server_runs_its_control_trial_and_recommends(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    """A Shadow tuning of the regressed server on 4 replicas with ``strategy: Canary``: every trial, the control
    trial first, runs on one pod as a plain Deployment (the trial's spec drops what applies to no trial: the
    canary, the autoscaler), where it used to be refused ("spec.strategy.type is Canary but spec.replicas is 1")
    until ``status.trials`` was full. Grid over 3/1/4 alone: the control trial and one point, about a minute."""
    ns, name = namespace, "qwen36-canary"
    server = sample(BAD)
    server["spec"]["replicas"] = CANARY_REPLICAS
    server["spec"]["strategy"] = {"type": "Canary", "canary": {"steps": [{"replicas": 1}, {"replicas": "50%"}]}}
    k8s_cluster.apply(server, ns)
    wait_for("the server Ready", lambda: k8s_cluster.get("sglangserver", SERVER, "-n", ns).get("status", {})
             .get("phase") == "Ready", timeout=180, interval=1)
    body = tuning(name, parameters={"numSteps": {"list": [3]}}, budget={"maxTrialCount": 2, "maxFailedTrialCount": 1},
                  algorithm={"algorithmName": "Grid"})
    body["spec"]["workload"]["concurrency"] = [{"level": 1}]
    k8s_cluster.apply(body, ns)
    try:
        obj = wait_for("the tuning finished", lambda: finished(k8s_cluster, ns, name), timeout=240, interval=1)
    except AssertionError:
        print(json.dumps(k8s_cluster.get("sglangtuning", name, "-n", ns).get("status"), indent=1)[:6000])
        raise
    status = SGLangTuningStatus.model_validate(obj["status"])
    for t in status.trials:
        print(f"  {t.name} {t.settings.summary()} {t.verdict} {t.objective} {(t.reason or '')[-140:]}")
    assert status.phase == "Succeeded", obj["status"]
    assert not status.trials_invalid and all(t.verdict != "Invalid" for t in status.trials), obj["status"]
    control = status.trials[0]
    assert status.control_trial == control.name == f"{name}-trial-0"
    assert not control.settings.speculative and control.verdict == "Completed" and control.levels
    assert status.best is not None and status.best.summary == "3/1/4" and status.best.speedup is not None
    st = k8s_cluster.get("sglangserver", SERVER, "-n", ns)  # the server as it was: 4 replicas, no canary started
    assert st["spec"]["strategy"]["type"] == "Canary" and st["spec"]["replicas"] == CANARY_REPLICAS
    assert "canary" not in (st.get("status") or {})
    assert len(server_pods(k8s_cluster, ns)) == CANARY_REPLICAS
    wait_for("no trial workload left", lambda: not k8s_cluster.get(
        "deployments", "-n", ns, "-l", f"sglang-operator.io/tuning={name}")["items"], timeout=60, interval=1)


# --- InPlace: trials on the server's own pods, the stable revision applied again at the end -----------------------

IN_PLACE_REPLICAS = 2


def in_place_server(k8s: K8sCluster, ns: str) -> str:
    """The regressed server on :data:`IN_PLACE_REPLICAS` replicas, Ready and promoted; returns its stable revision."""
    server = sample(BAD)
    server["spec"]["replicas"] = IN_PLACE_REPLICAS
    k8s.apply(server, ns)
    seen: list[dict[str, Any]] = [{}]

    def promoted() -> dict[str, Any] | None:
        seen[0] = k8s.get("sglangserver", SERVER, "-n", ns).get("status") or {}
        s = seen[0]
        return s if s.get("phase") == "Ready" and s.get("stableRevision") == s.get("revision") else None

    try:
        st = wait_for("the server Ready and promoted", promoted, timeout=180, interval=1)
    except AssertionError as e:
        raise AssertionError(f"{e}; its last status: {json.dumps(seen[0])[-3000:]}") from None
    return str(st["stableRevision"])


def in_place_tuning(k8s: K8sCluster, ns: str, name: str) -> str:
    """:func:`in_place_server`, then the InPlace tuning ``name`` of it applied; the server's stable revision."""
    stable = in_place_server(k8s, ns)
    k8s.apply(in_place(name), ns)
    return stable


def server_pods(k8s: K8sCluster, ns: str) -> list[dict[str, Any]]:
    return [p for p in pods(k8s, ns, f"app.kubernetes.io/instance={SERVER}")
            if not p["metadata"].get("deletionTimestamp")]


def serving(k8s: K8sCluster, ns: str, revision: str) -> bool:
    """Every pod of the server runs ``revision`` and is Ready, ``IN_PLACE_REPLICAS`` of them."""
    live = server_pods(k8s, ns)
    ready = [p for p in live if p["metadata"]["labels"].get(builders.REVISION_LABEL) == revision
             and any(c.get("type") == "Ready" and c.get("status") == "True"
                     for c in (p.get("status") or {}).get("conditions") or [])]
    return len(live) == len(ready) == IN_PLACE_REPLICAS


def in_place(name: str) -> dict[str, Any]:
    body = tuning(name, mode="InPlace", disruption="Allowed", parameters={"numSteps": {"min": 1, "max": 3}},
                  budget={"maxTrialCount": 4})  # the control trial counts too (Katib)
    body["spec"]["workload"]["concurrency"] = [{"level": 1}]
    return body


def trial_serving(k8s: K8sCluster, ns: str) -> dict[str, Any] | None:
    """The server's hold once a trial's revision runs Ready on every replica (None before)."""
    st = k8s.get("sglangserver", SERVER, "-n", ns).get("status") or {}
    hold = st.get("tuningHold") or {}
    rev = hold.get("trialRevision")
    return hold if rev and rev != hold.get("stableRevision") and serving(k8s, ns, rev) else None


def released(st: dict[str, Any], stable: str) -> bool:
    held = next((c for c in st.get("conditions") or [] if c["type"] == "TuningHeld"), {})
    return st.get("revision") == stable and "tuningHold" not in st and held.get("status") == "False"


def assert_stable_again(k8s: K8sCluster, ns: str, stable: str) -> dict[str, Any]:
    st: dict[str, Any] = wait_for("the stable revision serving on every replica, the hold gone", lambda: (
        lambda s: s if released(s, stable) and serving(k8s, ns, stable) else None)(
        k8s.get("sglangserver", SERVER, "-n", ns).get("status") or {}), timeout=120, interval=1)
    assert st["stableRevision"] == stable
    assert not st.get("rejectedRevisions") and not st.get("rollbacks"), st  # trials got no verdicts
    assert all(r.get("verdict") not in ("Rejected", "Failed") for r in st.get("revisions") or []), st["revisions"]
    return st


def test_an_in_place_tuning_deleted_mid_trial_ends_with_the_stable_revision_serving(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    ns, name = namespace, "qwen36-inplace-delete"
    stable = in_place_tuning(k8s_cluster, ns, name)
    hold = wait_for("a trial on every replica", lambda: trial_serving(k8s_cluster, ns), timeout=120, interval=0.5)
    assert hold["name"] == name and hold["stableRevision"] == stable
    st = k8s_cluster.get("sglangserver", SERVER, "-n", ns)["status"]
    assert next(c for c in st["conditions"] if c["type"] == "TuningHeld")["status"] == "True"
    assert k8s_cluster.get("sglangtuning", name, "-n", ns)["status"]["stableRevision"] == stable
    k8s_cluster.run("delete", "sglangtuning", name, "-n", ns, "--timeout=60s")
    assert_stable_again(k8s_cluster, ns, stable)


def test_an_in_place_tuning_resumed_after_the_operator_is_killed_ends_with_the_stable_revision(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    import os
    import signal

    ns, name = namespace, "qwen36-inplace-kill"
    stable = in_place_tuning(k8s_cluster, ns, name)

    def one_done_one_running() -> dict[str, Any] | None:
        st = k8s_cluster.get("sglangtuning", name, "-n", ns).get("status") or {}
        trials = st.get("trials") or []
        done = [t for t in trials if t.get("verdict") == "Completed"]
        return st if done and any(not t.get("verdict") for t in trials) and trial_serving(k8s_cluster, ns) else None

    before = SGLangTuningStatus.model_validate(wait_for("a trial done, the next on every replica",
                                                            one_done_one_running, timeout=180, interval=0.5))
    assert operator.proc is not None
    os.killpg(operator.proc.pid, signal.SIGKILL)  # the test's own operator process
    operator.proc.wait(10)
    time.sleep(2)
    operator.start()
    obj = wait_for("the resumed tuning finished", lambda: finished(k8s_cluster, ns, name), timeout=240, interval=1)
    after = SGLangTuningStatus.model_validate(obj["status"])
    for t in after.trials:
        print(f"  {t.name} {t.settings.summary()} {t.verdict} {t.objective} {t.started_at}")
    assert after.phase == "Succeeded", obj["status"]
    assert after.stable_revision == stable
    finished_before = [t for t in before.trials if t.verdict]
    assert after.trials[:len(finished_before)] == finished_before  # no completed trial repeated
    running = next(t for t in before.trials if not t.verdict)
    again = after.trials[len(finished_before)]  # the interrupted one, measured again under its own record
    assert (again.name, again.settings, again.started_at) == (running.name, running.settings, running.started_at)
    names = [t.name for t in after.trials]
    assert len(names) == len(set(names))
    spec = api.parse_tuning(obj).spec
    server = sample(BAD)
    server["spec"]["replicas"] = IN_PLACE_REPLICAS
    valid, _ = plan.points(spec.parameters, parse({**server, "metadata": {"name": SERVER, "namespace": ns}}).spec)
    for i, t in enumerate(after.trials):  # each trial is what the search asked for after the ones before it
        step = plan.next_step(spec, after.model_copy(update={"trials": after.trials[:i]}), valid, 0)
        assert step.kind == "start" and step.settings == t.settings, (i, step, t)
    assert plan.next_step(spec, after, valid, 0).kind == "finish"
    assert_stable_again(k8s_cluster, ns, stable)


# --- the known best across servers ----------------------------------------------------------------------------------

SECOND = "qwen36-second"


def settings_condition(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any]:
    st = k8s.get("sglangserver", name, "-n", ns).get("status") or {}
    return next((c for c in st.get("conditions") or [] if c["type"] == "SpeculativeSettings"), {})


def test_a_second_server_deployed_below_the_known_best_is_told_so_and_at_it_is_not(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    """A Grid tuning of the regressed server over 1/1/2 and 3/1/4 at concurrency 1 finishes; a second server of the
    namespace deployed with the regressed 1/1/2 gets SpeculativeSettings=False, reason BelowKnownBest, naming 3/1/4,
    both figures and the tuning; the same server set to 3/1/4 gets no such condition; ``tune best`` lists 3/1/4."""
    import subprocess
    import sys

    ns, name = namespace, "qwen36-known"
    k8s_cluster.apply(sample(BAD), ns)
    wait_for("the server Ready", lambda: k8s_cluster.get("sglangserver", SERVER, "-n", ns).get("status", {})
             .get("phase") == "Ready", timeout=120, interval=1)
    body = tuning(name, parameters={"numSteps": {"list": [1, 3]}}, budget={"maxTrialCount": 3},
                  algorithm={"algorithmName": "Grid"})
    body["spec"]["workload"].update(maxOutputTokens=64, concurrency=[{"level": 1}])
    k8s_cluster.apply(body, ns)
    obj = wait_for("the tuning finished", lambda: finished(k8s_cluster, ns, name), timeout=240, interval=1)
    status = SGLangTuningStatus.model_validate(obj["status"])
    assert status.phase == "Succeeded" and status.best is not None and status.best.summary == "3/1/4", obj["status"]
    assert status.setup is not None and status.setup.gpu_product == "NVIDIA-RTX-A6000"
    decode = {t.settings.summary(): t.levels[0].decode_tokens_per_second for t in status.trials
              if t.verdict == "Completed"}
    assert decode["3/1/4"] > 1.2 * decode["1/1/2"], decode

    second = sample(BAD)
    second["metadata"]["name"] = SECOND
    k8s_cluster.apply(second, ns)
    below = wait_for("the second server below the known best", lambda: (lambda c: c if c.get("reason") ==
                     "BelowKnownBest" else None)(settings_condition(k8s_cluster, ns, SECOND)), timeout=60,
                     interval=1)
    print(below["message"])
    assert below["status"] == "False"
    message = below["message"]
    assert message.startswith(f"the spec runs 1/1/2: {decode['1/1/2']:.1f} decode tok/s at concurrency 1"), message
    assert f"3/1/4 measured {decode['3/1/4']:.1f} decode tok/s" in message and f"SGLangTuning {name}" in message
    assert f"kubectl sglang tune apply {name} --server {SECOND}" in message

    second["spec"]["speculative"]["numSteps"] = 3
    k8s_cluster.apply(second, ns)
    at = wait_for("the second server at the known best", lambda: (lambda c: c if c.get("reason") == "AtKnownBest"
                  else None)(settings_condition(k8s_cluster, ns, SECOND)), timeout=60, interval=1)
    assert at["status"] == "True" and "3/1/4" in at["message"]

    out = subprocess.run([sys.executable, "-m", "sglang_operator.entry.cli", "tune", "best", "qwen", "-n", ns],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    print(out)
    assert "3/1/4" in out and f"{decode['3/1/4']:.1f} decode tok/s" in out and name in out


def test_a_trial_that_cannot_win_is_pruned_and_leaves_no_workload(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    """Pruning (issue 29 item 2) in a Shadow tuning of the known-good server (3/1/4, without ``specV2`` so that
    trees run: 21 valid points, noise-free 29-57 tok/s at concurrency 1) at concurrency 1 (weight 4) and 4 (weight
    1): once three speculative points completed, a trial whose first level leaves it below the incumbent beyond the
    rule's margin (its unmeasured level taken at the best ratio seen) stops as ``Pruned`` before its second level,
    its Deployment goes at once, and it is never recommended."""
    ns, name = namespace, "qwen36-prune"
    server = sample(GOOD)
    server["spec"]["speculative"].pop("specV2", None)
    k8s_cluster.apply(server, ns)
    wait_for("the server Ready", lambda: k8s_cluster.get("sglangserver", SERVER, "-n", ns).get("status", {})
             .get("phase") == "Ready", timeout=120, interval=1)
    body = tuning(name, parameters={"numSteps": {"min": 1, "max": 4}, "eagleTopk": {"list": [1, 2]},
                                    "numDraftTokens": {"list": [2, 3, 4, 5, 6, 8]}},
                  budget={"maxTrialCount": 8})
    body["spec"]["workload"]["concurrency"] = [{"level": 1, "weight": 4}, {"level": 4, "weight": 1}]
    k8s_cluster.apply(body, ns)

    def pruned() -> list[dict[str, Any]]:
        trials = (k8s_cluster.get("sglangtuning", name, "-n", ns).get("status") or {}).get("trials") or []
        return [t for t in trials if t.get("verdict") == "Pruned"]

    try:
        first = wait_for("a trial pruned", pruned, timeout=300, interval=1)[0]
    except AssertionError:
        print(json.dumps(k8s_cluster.get("sglangtuning", name, "-n", ns).get("status"), indent=1)[:6000])
        raise
    assert [f["concurrency"] for f in first["levels"]] == [1]  # stopped before its second level
    wait_for(f"{first['name']}'s workload gone", lambda: k8s_cluster.run(
        "get", "deployment", first["name"], "-n", ns, check=False).returncode != 0 and not [
        p for p in pods(k8s_cluster, ns, f"sglang-operator.io/tuning={name}")
        if p["metadata"]["name"].startswith(f"{first['name']}-")], timeout=30, interval=1)
    obj = wait_for("the tuning finished", lambda: finished(k8s_cluster, ns, name), timeout=300, interval=1)
    status = SGLangTuningStatus.model_validate(obj["status"])
    for t in status.trials:
        if t.verdict != "Invalid":
            print(f"  {t.name} {t.settings.summary()} {t.verdict} {t.objective} {(t.reason or '')[-140:]}")
    assert status.phase == "Succeeded", obj["status"]
    gone = [t for t in status.trials if t.verdict == "Pruned"]
    assert status.trials_pruned == len(gone) > 0
    assert status.best is not None and status.best.trial not in {t.name for t in gone}
    assert all(b.trial not in {t.name for t in gone} for b in status.best_per_level)
    assert not k8s_cluster.get("deployments", "-n", ns, "-l", f"sglang-operator.io/tuning={name}")["items"]
