"""Canary rollouts end to end (issue 18), on the local control plane with the simulator at real speed and the fast
policy (5 s intervals, 5 s warm-up, 3 samples per step). One server of 4 replicas is shared by the module (its first
revision promoted once, in the module fixture) and each test starts from where the previous one left it, so the
module pays one first promotion and no namespace or operator start per scenario; the tests run in file order:

(b) the known-good spec applied as a canary over a slower (regressed) stable revision is promoted step by step and
    ends with every replica on it, its baseline set, served by ``NAME-canary`` with no pod restarted; the status never
    reads PHASE Stopped or AVAILABLE False on the way (the end of a promotion did for about 10 s); both revisions keep
    their accept length and rate (0.5.10: gauges only) within 10 % of the simulator's in the ledger and the baseline
    (``test_accept_figures.py`` does the same on 0.5.23, with ``history``).
(a) the regressed spec applied with the default canary (one step of one replica, maxSurge 0) over the known-good
    stable: only one pod ever runs the regressed revision, it is judged against the stable pods in the same
    intervals and removed; a watcher records the ready capacity, never below 3; the spec is unchanged; ``history``
    shows the canary. (The canary runs in ``NAME`` now: ``NAME-canary`` serves since (b).)
(c) load drift: the simulator's fault ``throughput_drop_pct`` slows EVERY pod (both revisions) by 25 % during the
    canary of a same-speed revision: no rollback, the canary is promoted (the same-interval comparison), although the
    stable revision's figures of those intervals are below 0.85 of the stored baseline (what a baseline comparison
    without canary would have judged: a failure at the relative criterion 0.85).
(d) a ``maxSurge: 1`` canary that cannot be scheduled (16 GPUs: no node has them free) is aborted at its
    ``progressDeadlineSeconds`` with the scheduler's message in the ``Canary`` condition and the rejection; the stable
    pods were never touched (same uids, restart counts, Deployment generation).
(e) the operator killed at each canary phase (``SGLANG_OPERATOR_EXIT_AT``, ``control/testhooks.py``) resumes to the
    same end, within (a) and (c) so it costs no canary of its own: killed as (a)'s canary starts (``CanaryStepping``)
    and as its removal starts (``CanaryRemoving``), and as (c)'s promotion starts (``CanaryPromoting``); the
    watchers' assertions (one regressed pod, no canary pod recreated, capacity) hold through the restarts.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.accept_figures import off_by
from e2e.conftest import BackgroundPoll, K8sCluster, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.policies import BAD, GOOD, sample
from e2e.tests.objects import server_status, wait_server_status

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
NAME = "qwen36-27b"
REVISION = "sglang-operator.io/revision"
EXIT_CODE = 86  # sglang_operator.control.testhooks.EXIT_CODE
QUICK = {"samples": 2, "judgeSeconds": 10}
"""A step judged on 2 intervals (the fast policy's 3 and 15 s are the default canary's, kept in (a))."""


class Operator:
    """The module's operator: one process at a time, restartable (``start``) with extra environment (a test hook)."""

    def __init__(self, k8s: K8sCluster, log: Path) -> None:
        self.k8s, self.log = k8s, log
        self.proc: OperatorProcess | None = None

    def start(self, **env: str) -> OperatorProcess:
        self.stop()
        self.proc = OperatorProcess(self.k8s.kubeconfig, self.log, status_interval=1.0, sample_interval=None,
                                    env=env)
        self.proc.start()
        return self.proc

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


@pytest.fixture(scope="module")
def ns(k8s_cluster: K8sCluster) -> Iterator[str]:
    with k8s_cluster.fresh_namespace(f"e2e-canary-{uuid.uuid4().hex[:5]}") as name:
        yield name


@pytest.fixture(scope="module")
def op(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    k8s_cluster.install_crd()
    holder = Operator(k8s_cluster, tmp_path_factory.mktemp("canary") / "operator.log")
    holder.start()
    try:
        yield holder
    finally:
        holder.stop()
        if holder.proc is not None:
            print(holder.proc.log_tail(40))


@pytest.fixture(scope="module")
def server(k8s_cluster: K8sCluster, ns: str, op: Operator) -> dict[str, Any]:
    """The module's server: the regressed (slower) revision promoted on 4 replicas as the first revision (no stable
    revision yet: it replaces the pods as with Recreate). Its status."""
    return promoted(k8s_cluster, ns, canary_spec(BAD))


def status(k8s: K8sCluster, ns: str) -> dict[str, Any]:
    return server_status(k8s, ns, NAME)


def wait_status(k8s: K8sCluster, ns: str, what: str, pred: Any, timeout: float = 180) -> dict[str, Any]:
    return wait_server_status(k8s, ns, NAME, what, pred, timeout)


def canary_spec(name: str, replicas: int = 4, tag: str | None = None, **canary: Any) -> dict[str, Any]:
    """Sample ``name`` with ``replicas`` and the Canary strategy (``canary``: its policy); ``tag`` makes it a new
    revision of the same speed (an environment variable the simulator ignores)."""
    obj = sample(name)
    obj["spec"]["replicas"] = replicas
    obj["spec"]["strategy"] = {"type": "Canary", **({"canary": canary} if canary else {})}
    if tag is not None:
        obj["spec"]["env"] = [*copy.deepcopy(obj["spec"].get("env") or []), {"name": "E2E_CANARY", "value": tag}]
    return obj


def pods(k8s: K8sCluster, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = k8s.get("pods", "-n", ns, "-l", f"app.kubernetes.io/instance={NAME}")["items"]
    return items


def is_ready(p: dict[str, Any]) -> bool:
    return not p["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])


class Watcher(BackgroundPoll):
    """Polls the server's pods every 0.5 s: the Ready pods (capacity) and every pod name seen per revision."""

    def __init__(self, k8s: K8sCluster, ns: str) -> None:
        super().__init__()
        self.k8s, self.ns = k8s, ns
        self.capacity: list[int] = []
        self.pods: dict[str, set[str]] = {}
        self.uids: dict[str, str] = {}
        self.timeline: list[tuple[float, list[str], list[str]]] = []
        """(monotonic seconds, the Ready pods, every pod as ``name:revision:phase[:deleting]``) per poll."""

    def below(self, floor: int) -> list[tuple[float, list[str], list[str]]]:
        """The polls (at most 5) that saw fewer than ``floor`` Ready pods: what a failed capacity check shows."""
        return [t for t in self.timeline if len(t[1]) < floor][:5]

    def poll(self) -> None:
        out = self.k8s.run("get", "pods", "-n", self.ns, "-l", f"app.kubernetes.io/instance={NAME}", "-o",
                           "json", check=False)
        if out.returncode == 0:
            items = json.loads(out.stdout)["items"]
            for p in items:
                rev = p["metadata"]["labels"].get(REVISION, "")
                self.pods.setdefault(rev, set()).add(p["metadata"]["name"])
                self.uids[p["metadata"]["name"]] = p["metadata"]["uid"]
            self.capacity.append(sum(1 for p in items if is_ready(p)))
            self.timeline.append((time.monotonic(), [p["metadata"]["name"] for p in items if is_ready(p)], [
                f"{p['metadata']['name']}:{p['metadata']['labels'].get(REVISION, '')}:{p['status'].get('phase')}"
                + (":deleting" if p["metadata"].get("deletionTimestamp") else "") for p in items]))


def sim_faults(ip: str, faults: dict[str, float]) -> bool:
    """POST ``faults`` to the simulator's ``/sim/admin/faults`` on pod ``ip``; whether it answered 200."""
    req = urllib.request.Request(f"http://{ip}:30000/sim/admin/faults", data=json.dumps(faults).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


class Drift(BackgroundPoll):
    """Slows every pod of the server (both revisions, and each new pod as soon as its simulator answers) by ``pct``
    per cent: the simulator's fault ``throughput_drop_pct``, every 0.5 s until the end of the block."""

    poll_at_start = False  # __enter__ slows them all before the thread starts

    def __init__(self, k8s: K8sCluster, ns: str, pct: float) -> None:
        super().__init__()
        self.k8s, self.ns, self.pct = k8s, ns, pct
        self.slowed: set[str] = set()

    def __enter__(self) -> Drift:
        self.slow_all()
        return super().__enter__()

    def poll(self) -> None:
        self.slow_all()

    def slow_all(self) -> None:
        for p in pods(self.k8s, self.ns):
            ip = p["status"].get("podIP")
            if ip and p["metadata"]["uid"] not in self.slowed and not p["metadata"].get("deletionTimestamp") \
                    and sim_faults(ip, {"throughput_drop_pct": self.pct}):
                self.slowed.add(p["metadata"]["uid"])


def promoted(k8s: K8sCluster, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
    k8s.apply(obj, ns)
    return wait_status(k8s, ns, "the first revision promoted on every replica",
                       lambda s: s.get("stableRevision") and s.get("stableRevision") == s.get("revision")
                       and s.get("readyReplicas") == obj["spec"]["replicas"]
                       and (s.get("analysis") or {}).get("phase") == "Stable")


def promoted_over(k8s: K8sCluster, ns: str, stable: str, what: str, timeout: float = 300) -> dict[str, Any]:
    """Wait until a canary over ``stable`` was promoted: a new stable revision serving 4 Ready replicas."""
    return wait_status(k8s, ns, what, lambda s: s.get("stableRevision") not in (None, stable) and not s.get("canary")
                       and s.get("revision") == s.get("stableRevision") and s.get("readyReplicas") == 4,
                       timeout=timeout)


def history(k8s: K8sCluster, ns: str) -> str:
    out = subprocess.run([sys.executable, "-m", "sglang_operator.entry.cli", "history", NAME, "-n", ns],
                         capture_output=True, text=True, env={**os.environ, "KUBECONFIG": str(k8s.kubeconfig)},
                         check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def absent(k8s: K8sCluster, ns: str, deployment: str) -> bool:
    return k8s.run("get", "deployment", deployment, "-n", ns, check=False).returncode != 0


class StatusWatch(BackgroundPoll):
    """Polls the server's status every 0.5 s: ``(phase, Ready, Available)`` as ``kubectl get sgls -o wide`` shows."""

    def __init__(self, k8s: K8sCluster, ns: str) -> None:
        super().__init__()
        self.k8s, self.ns = k8s, ns
        self.seen: list[tuple[str | None, str | None, str | None]] = []

    def poll(self) -> None:
        s = status(self.k8s, self.ns)
        conds = {c["type"]: c["status"] for c in s.get("conditions") or []}
        self.seen.append((s.get("phase"), conds.get("Ready"), conds.get("Available")))


def test_b_a_good_canary_over_a_slower_stable_is_promoted_step_by_step(k8s_cluster: K8sCluster, ns: str,
                                                                       server: dict[str, Any]) -> None:
    k8s = k8s_cluster
    stable = server["revision"]
    good = canary_spec(GOOD, steps=[{"replicas": "25%", **QUICK}, {"replicas": "50%", **QUICK}])
    with Watcher(k8s, ns) as watch, StatusWatch(k8s, ns) as seen:
        started = time.monotonic()
        k8s.apply(good, ns)
        s = promoted_over(k8s, ns, stable, "the canary promoted to every replica")
    print(f"(b) promoted {time.monotonic() - started:.0f} s after the apply; status polled {len(seen.seen)} times")
    # the end of the promotion: every replica on the canary before status.revision shows it reads Ready, not Stopped
    assert not [x for x in seen.seen if x[0] == "Stopped" or x[2] == "False"], seen.seen
    new = s["revision"]
    assert s["servingWorkload"] == f"{NAME}-canary" and s["baseline"]["revision"] == new
    assert s["baseline"]["tokensPerSecond"] > 45, s["baseline"]
    assert min(watch.capacity) >= 3, watch.below(3)
    assert absent(k8s, ns, NAME)  # retired
    dep = k8s.get("deployment", f"{NAME}-canary", "-n", ns)
    assert dep["spec"]["replicas"] == 4
    record = next(r for r in s["revisions"] if r["revision"] == new)
    assert [st["verdict"] for st in record["canarySteps"]] == ["Passed", "Passed"], record
    # both revisions keep accept length and rate (0.5.10: gauges only), in the ledger and the baseline each set
    first = next(r for r in s["revisions"] if r["revision"] == stable)
    for figures, obj in ((first, canary_spec(BAD)), (server["baseline"], canary_spec(BAD)), (record, good),
                         (s["baseline"], good)):
        assert not off_by(figures, obj["spec"], "0.5.10"), (off_by(figures, obj["spec"], "0.5.10"), figures)
    assert [st["replicas"] for st in record["canarySteps"]] == [1, 2]
    # no pod of the new revision was restarted for the promotion: 4 pods ever ran it
    assert len(watch.pods.get(new, set())) == 4, watch.pods


def test_a_regressed_canary_runs_on_one_pod_and_is_removed_through_two_kills(
        k8s_cluster: K8sCluster, ns: str, server: dict[str, Any], op: Operator) -> None:
    k8s = k8s_cluster
    before = status(k8s, ns)
    stable = before["revision"]
    known = {stable, *(r["revision"] for r in before.get("rejectedRevisions") or [])}
    assert before["servingWorkload"] == f"{NAME}-canary", before  # from (b): the canary runs in NAME
    bad = canary_spec(BAD, tag="a")  # a revision never seen (the first revision was the untagged regressed one)
    with Watcher(k8s, ns) as watch:
        started = time.monotonic()
        proc = op.start(SGLANG_OPERATOR_EXIT_AT="CanaryStepping")
        k8s.apply(bad, ns)
        assert proc.wait_exit(60) == EXIT_CODE  # (e) killed as the canary started
        assert (status(k8s, ns).get("canary") or {}).get("phase") == "Stepping"
        proc = op.start(SGLANG_OPERATOR_EXIT_AT="CanaryRemoving")
        assert proc.wait_exit(150) == EXIT_CODE  # (e) killed as the failed canary's removal started
        assert (status(k8s, ns).get("canary") or {}).get("phase") == "Removing"
        op.start()
        s = wait_status(k8s, ns, "the regressed canary rejected and removed",
                        lambda s: any(r["revision"] not in known for r in s.get("rejectedRevisions") or [])
                        and not s.get("canary") and s.get("readyReplicas") == 4, timeout=240)
        elapsed = time.monotonic() - started
        time.sleep(3)
    rejected = next(r for r in s["rejectedRevisions"] if r["revision"] not in known)
    regressed = rejected["revision"]
    print(f"(a) canary rejected and removed {elapsed:.0f} s after the apply (two operator kills); capacity min "
          f"{min(watch.capacity)}")
    assert s["revision"] == stable and s["stableRevision"] == stable
    assert len(watch.pods.get(regressed, set())) == 1, watch.pods  # only one pod ever ran the regressed revision
    assert min(watch.capacity) >= 3, watch.below(3)
    assert "canary" in rejected["reason"] and "tok/s" in rejected["reason"], rejected
    record = next(r for r in s["revisions"] if r["revision"] == regressed)
    assert record["verdict"] == "Rejected" and record["canarySteps"][0]["verdict"] == "Failed", record
    assert record["canarySteps"][0]["stableTokensPerSecond"] > record["canarySteps"][0]["tokensPerSecond"]
    spec = k8s.get("sglangserver", NAME, "-n", ns)["spec"]
    assert spec["speculative"] == bad["spec"]["speculative"]  # the spec is unchanged
    assert absent(k8s, ns, NAME) and s["servingWorkload"] == f"{NAME}-canary"
    shown = history(k8s, ns)
    assert f"{regressed}: canary step 1 at 3+1 (stable+canary): Failed" in shown, shown


def test_c_load_drift_on_every_pod_does_not_roll_a_same_speed_canary_back(
        k8s_cluster: K8sCluster, ns: str, server: dict[str, Any], op: Operator) -> None:
    k8s = k8s_cluster
    before = status(k8s, ns)
    stable, baseline = before["revision"], before["baseline"]["tokensPerSecond"]
    same_speed = canary_spec(GOOD, tag="c", steps=[{"replicas": 1, **QUICK}])
    with Drift(k8s, ns, 25) as drift, Watcher(k8s, ns) as watch:
        started = time.monotonic()
        proc = op.start(SGLANG_OPERATOR_EXIT_AT="CanaryPromoting")
        k8s.apply(same_speed, ns)
        assert proc.wait_exit(150) == EXIT_CODE  # (e) killed as the promotion started
        assert (status(k8s, ns).get("canary") or {}).get("phase") == "Promoting"
        op.start()
        s = promoted_over(k8s, ns, stable, "the same-speed canary promoted under drift", timeout=240)
        elapsed = time.monotonic() - started
    for p in pods(k8s, ns):  # the drift ends with the scenario
        assert sim_faults(p["status"]["podIP"], {"throughput_drop_pct": 0}), p["metadata"]["name"]
    new = s["revision"]
    record = next(r for r in s["revisions"] if r["revision"] == new)
    step = record["canarySteps"][0]
    ratio = step["stableTokensPerSecond"] / baseline
    print(f"(c) promoted {elapsed:.0f} s after the apply (one operator kill) under 25 % drift on "
          f"{len(drift.slowed)} pods; the stable's same-interval {step['stableTokensPerSecond']:.1f} tok/s = "
          f"{ratio:.2f} of the stored baseline {baseline:.1f}; the canary's {step['tokensPerSecond']:.1f}")
    assert not [r for r in s.get("rejectedRevisions") or [] if r["revision"] == new]
    assert [st["verdict"] for st in record["canarySteps"]] == ["Passed"], record
    assert len(drift.slowed) >= 8  # the 4 stable pods and the 4 canary pods
    assert ratio < 0.85  # judged against the stored baseline (no canary), the same drift would have failed
    assert len(watch.pods.get(new, set())) == 4, watch.pods  # no canary pod recreated by the restart
    assert min(watch.capacity) >= 3, watch.below(3)
    assert s["baseline"]["revision"] == new
    assert s.get("servingWorkload") in (None, NAME), s  # the canary ran in NAME


def test_d_an_unschedulable_surge_canary_is_aborted_at_its_deadline_without_touching_the_stable(
        k8s_cluster: K8sCluster, ns: str, server: dict[str, Any]) -> None:
    k8s = k8s_cluster
    before = status(k8s, ns)
    stable = before["revision"]
    known = {stable, *(r["revision"] for r in before.get("rejectedRevisions") or [])}
    serving = before.get("servingWorkload") or NAME
    stable_pods = {p["metadata"]["uid"]: p["status"]["containerStatuses"][0]["restartCount"] for p in pods(k8s, ns)}
    assert len(stable_pods) == 4
    generation = k8s.get("deployment", serving, "-n", ns)["metadata"]["generation"]
    huge = canary_spec(GOOD, tag="d", maxSurge=1)
    huge["spec"]["resources"] = {"gpu": 16}  # no fake node has 16 GPUs free
    huge["spec"]["rollback"]["progressDeadlineSeconds"] = 15
    with Watcher(k8s, ns) as watch:
        started = time.monotonic()
        k8s.apply(huge, ns)
        pending = wait_status(k8s, ns, "the Canary condition quotes the scheduler", lambda s: any(
            c["type"] == "Canary" and c.get("reason") == "Pending" and "Insufficient nvidia.com/gpu" in c["message"]
            for c in s.get("conditions") or []), timeout=60)
        s = wait_status(k8s, ns, "the unschedulable canary aborted at its deadline",
                        lambda s: any(r["revision"] not in known for r in s.get("rejectedRevisions") or [])
                        and not s.get("canary"), timeout=90)
        elapsed = time.monotonic() - started
        wait_for("the canary's pod gone", lambda: len(pods(k8s, ns)) == 4, timeout=30)
    message = next(c["message"] for c in pending["conditions"] if c["type"] == "Canary")
    rejected = next(r for r in s["rejectedRevisions"] if r["revision"] not in known)
    print(f"(d) aborted {elapsed:.0f} s after the apply: {rejected['reason']}")
    assert "Insufficient nvidia.com/gpu" in rejected["reason"], rejected
    assert "0/" in message, message  # the scheduler's own words ("0/N nodes are available: ...")
    assert s["revision"] == stable and s["stableRevision"] == stable
    after = {p["metadata"]["uid"]: p["status"]["containerStatuses"][0]["restartCount"] for p in pods(k8s, ns)}
    assert after == stable_pods  # same pods, no restart
    assert len(watch.pods.get(stable, set())) == 4, watch.pods  # no stable pod ever replaced
    assert min(watch.capacity) == 4, watch.below(4)  # maxSurge 1: never below replicas
    assert k8s.get("deployment", serving, "-n", ns)["metadata"]["generation"] == generation  # never written



def test_f_after_the_drift_a_revision_at_two_thirds_of_the_speed_without_a_canary_is_rolled_back(
        k8s_cluster: K8sCluster, ns: str, server: dict[str, Any]) -> None:
    """(f) (c)'s canary, promoted while every pod ran 25 % slower, got the stable's baseline × the same-interval
    ratio, not its drifted median (``decisions/baseline.py``); once the drift passed, a revision at two thirds of the
    real speed (the simulator's ``throughput_drop_pct`` 33 from its start) applied without a canary is rolled back
    against it. Against the drifted median (0.75 of the real speed) it would have passed: 0.67 / 0.75 = 0.89 ≥ 0.85.
    ``history`` shows where the baseline came from."""
    k8s = k8s_cluster
    before = status(k8s, ns)
    stable, base = before["revision"], before["baseline"]
    known = {r["revision"] for r in before.get("rejectedRevisions") or []}
    record = next(r for r in before["revisions"] if r["revision"] == stable)
    drifted = record["canarySteps"][-1]["tokensPerSecond"]  # (c)'s canary, measured while every pod was slower
    print(f"(f) baseline of {stable}: {base['tokensPerSecond']:.1f} tok/s ({base.get('source')}, ratio "
          f"{base.get('ratio')}); the canary's drifted median {drifted:.1f} tok/s")
    # canaryRatio; or refreshed, when since (c) a full window of the stable's own samples ran more than 3 % above it
    # (decisions/baseline.py: a lighter machine than the one (c)'s baseline was measured on), never the drifted median
    source = base["source"]
    assert base["revision"] == stable and source in ("canaryRatio", "refreshed"), base
    assert base["tokensPerSecond"] > 1.2 * drifted, (base, drifted)
    assert record["baselineSource"] == source, record
    slow = sample(GOOD)
    slow["spec"]["replicas"] = 4
    slow["spec"]["strategy"] = {"type": "Recreate"}
    slow["spec"]["env"] = [*slow["spec"]["env"], {"name": "SGLANG_SIM_FAULT_THROUGHPUT_DROP_PCT", "value": "33"}]
    started = time.monotonic()
    k8s.apply(slow, ns)
    s = wait_status(k8s, ns, "the two-thirds-speed revision rejected and the stable one serving again",
                    lambda s: any(r["revision"] not in known for r in s.get("rejectedRevisions") or [])
                    and s.get("revision") == stable and s.get("readyReplicas") == 4, timeout=240)
    elapsed = time.monotonic() - started
    rejected = next(r for r in s["rejectedRevisions"] if r["revision"] not in known)
    print(f"(f) rolled back {elapsed:.0f} s after the apply: {rejected['reason']}")
    assert f"tok/s of {stable}" in rejected["reason"] and "0.85 ×" in rejected["reason"], rejected
    assert s["stableRevision"] == stable and s["baseline"]["tokensPerSecond"] >= base["tokensPerSecond"]
    shown = history(k8s, ns)
    assert f"baseline: {stable} " in shown and f"({source}" in shown, shown
    # the BASELINE cell: in the ★ row, or (a table too wide for the terminal) on its own line after the table
    assert any(source in line for line in shown.splitlines() if line.startswith("★") or
               line.startswith(f"{stable} baseline:")), shown
