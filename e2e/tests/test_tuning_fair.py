"""Two tenants' tunings share the operator (issue 42 item 1, "Done when": two namespaces' tunings with
``--max-running-tunings 2`` both run within one trial boundary of each other). alice's two Shadow tunings take both
slots; bob's arrives and waits ``Queued`` (its message names no other tenant); alice's younger tuning finishes the
trial it was running and yields at that boundary, and bob's starts then — before alice's yielded tuning starts any
other trial, and within a few seconds of that boundary. The simulator at real speed, 32-token requests, 5 s per
level, one repetition, a one-second model load (as ``test_tuning.py``)."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.policies import GOOD, ROOT, sample
from sglang_operator.api import tuning as api
from sglang_operator.decisions.tuning.queue import QUEUED

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]

BOUNDARY_SLACK_SECONDS = 15.0
"""Seconds between alice's trial boundary and bob's start at most: the runner stops as its trial's record is
written, the queue decides at that event (5 s at the latest) and bob's runner writes ``startedAt`` at its first step."""


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    k8s_cluster.install_crd(ROOT / "crds" / "sglangtunings.yaml", "sglangtunings.sglang-operator.io")
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("operator"), sample_interval=None) as op:
        yield op


def tuning(name: str, server: str) -> dict[str, Any]:
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name},
            "spec": {"serverRef": {"name": server}, "parameters": {"numSteps": {"min": 1, "max": 3}},
                     "workload": {"maxOutputTokens": 32, "secondsPerLevel": 5, "warmupSeconds": 1, "repetitions": 1,
                                  "concurrency": [{"level": 1}]},
                     "budget": {"maxTrialCount": 6}}}


def server(name: str) -> dict[str, Any]:
    obj = sample(GOOD)
    obj["metadata"]["name"] = name
    return obj


def status(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any]:
    return dict(k8s.get("sglangtuning", name, "-n", ns).get("status") or {})


def when(stamp: str | None) -> float:
    return dt.datetime.fromisoformat(stamp).timestamp() if stamp else float("inf")


def test_two_namespaces_tunings_both_run_within_one_trial_boundary(
    k8s_cluster: K8sCluster, operator: OperatorProcess
) -> None:
    suffix = uuid.uuid4().hex[:5]
    alice, bob = f"e2e-fair-alice-{suffix}", f"e2e-fair-bob-{suffix}"
    with ExitStack() as stack:
        for ns in (alice, bob):
            stack.enter_context(k8s_cluster.fresh_namespace(ns))
        for ns, name in ((alice, "s1"), (alice, "s2"), (bob, "s1")):
            k8s_cluster.apply(server(name), ns)
        for ns, name in ((alice, "s1"), (alice, "s2"), (bob, "s1")):
            wait_for(f"{ns}/{name} Ready", lambda ns=ns, name=name: k8s_cluster.get(  # type: ignore[misc]
                "sglangserver", name, "-n", ns).get("status", {}).get("phase") == "Ready", timeout=120, interval=1)
        k8s_cluster.apply(tuning("a1", "s1"), alice)
        k8s_cluster.apply(tuning("a2", "s2"), alice)
        wait_for("both of alice's tunings running a trial", lambda: all(
            any(not t.get("verdict") for t in status(k8s_cluster, alice, n).get("trials") or [])
            for n in ("a1", "a2")), timeout=120, interval=0.5)

        k8s_cluster.apply(tuning("b1", "s1"), bob)
        arrived = time.time()
        queued = wait_for("bob's tuning Queued", lambda: next(
            (c for c in status(k8s_cluster, bob, "b1").get("conditions") or []
             if c["type"] == "Running" and c["status"] == "False" and c["reason"] == QUEUED), None),
            timeout=30, interval=0.5)
        assert "alice" not in queued["message"] and "a1" not in queued["message"], queued
        began = wait_for("bob's tuning started", lambda: status(k8s_cluster, bob, "b1").get("startedAt"),
                         timeout=240, interval=0.5)
        started = when(began)

        # alice's younger tuning yielded: the trial it ran when bob arrived ended (its boundary), no trial of it
        # started after bob arrived and before bob's start, and bob started within the slack of that boundary
        a2 = status(k8s_cluster, alice, "a2")
        trials = a2.get("trials") or []
        boundary = max(when(t.get("finishedAt")) for t in trials if when(t.get("startedAt")) <= arrived)
        assert boundary < float("inf"), trials
        boundary = max(boundary, arrived)  # bob arrived between two of its trials: that was the boundary
        assert not [t for t in trials if arrived < when(t.get("startedAt")) < started], trials
        assert started - boundary <= BOUNDARY_SLACK_SECONDS, (began, trials)
        cond = next(c for c in a2.get("conditions") or [] if c["type"] == "Running")
        assert (cond["status"], cond["reason"]) == ("False", QUEUED) and "bob" not in cond["message"], cond
        # alice's older tuning kept its slot throughout
        a1 = status(k8s_cluster, alice, "a1")
        assert a1.get("phase") in ("Running", "Succeeded"), a1
        print(f"bob waited {started - arrived:.1f} s; started {started - boundary:.1f} s after alice's boundary")
        for ns, name in ((alice, "a1"), (alice, "a2"), (bob, "b1")):
            k8s_cluster.run("delete", "sglangtuning", name, "-n", ns, "--wait=false")
