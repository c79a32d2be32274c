"""Issue 18 (the core's known risk): during a canary the stable share is placed from a full render of the stable
revision (its ledger entry), and any pod-template difference of that render from the live Deployment (an upgraded
operator renders the entry under its recorded hash) would roll every stable pod. The write of the stable workload
while a canary runs therefore changes ``spec.replicas`` only when the live Deployment runs the revision already
(``builders/canary.replicas_only``, ``control/apply.py``)."""

from __future__ import annotations

import copy
import datetime as dt
import logging
from typing import Any

import pytest
from fakekube import FakeKube
from test_worker import server

from sglang_operator import builders
from sglang_operator.api.analysis import CanaryPhase, CanaryState
from sglang_operator.api.server import parse
from sglang_operator.api.view import ServerView
from sglang_operator.builders import canary, workload
from sglang_operator.control import handlers, restore
from sglang_operator.control.observer import Observer
from sglang_operator.decisions.actions import PlaceCanary, PromoteCanary

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)


async def _create(kube: FakeKube, replicas: int = 4) -> dict[str, Any]:
    obj = server("a")
    obj["spec"]["replicas"] = replicas
    obj["spec"]["strategy"] = {"type": "Canary"}
    body = kube.put(obj)
    await handlers.reconcile(body=body, meta=body["metadata"], status={}, patch={}, reason="create",
                             logger=logging.getLogger("test"), memo=type("Memo", (), {"observer": Observer(1.0)})())
    return kube.server("a")


def _upgraded_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here the operator renders every pod template with one more annotation (an upgrade's new default)."""
    real = workload.pod_template

    def upgraded(name: str, spec: Any, cmd: Any) -> dict[str, Any]:
        t = real(name, spec, cmd)
        t["metadata"].setdefault("annotations", {})["example.com/new-default"] = "1"
        return t

    monkeypatch.setattr(workload, "pod_template", upgraded)


async def _canary_running(kube: FakeKube, stable: str) -> tuple[dict[str, Any], str]:
    """A new spec and ``status.canary`` of its revision beside ``stable`` (step 1, nothing placed yet)."""
    spec = copy.deepcopy(kube.server("a")["spec"])
    spec["memory"]["maxRunningRequests"] = 8
    updated = kube.update_spec("a", spec)
    new = builders.render(parse(updated)).revision
    state = CanaryState(revision=new, stable_revision=stable, workload="a-canary", phase=CanaryPhase.STEPPING,
                        stable_replicas=4, started_at=NOW, moved_at=NOW)
    patched = await kube.patch_status("ns", "a", None, {"stableRevision": stable,
                                                        "canary": state.model_dump(mode="json", by_alias=True)})
    assert patched is not None
    return patched, new


async def test_the_stable_share_is_scaled_and_its_template_never_rewritten(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    body = await _create(kube)
    stable = body["status"]["revision"]
    before = kube.get("Deployment", "ns", "a")
    assert before is not None and before["spec"]["replicas"] == 4
    _upgraded_render(monkeypatch)
    body, new = await _canary_running(kube, stable)
    rendered, _ = await restore.render_for(ServerView.of(body), stable)
    assert rendered.workload["spec"]["template"] != before["spec"]["template"]  # a full write WOULD roll the pods
    writes = len(kube.writes)

    await restore.place_canary(ServerView.of(body), PlaceCanary(revision=new, workload="a-canary", canary_replicas=1,
                                                 stable_replicas=3, reason="step 1"), NOW)

    after = kube.get("Deployment", "ns", "a")
    assert after is not None and after["spec"]["replicas"] == 3
    assert after["spec"]["template"] == before["spec"]["template"]  # the stable pods keep their template
    assert {k: v for k, v in after["spec"].items() if k != "replicas"} == \
        {k: v for k, v in before["spec"].items() if k != "replicas"}
    done = [(verb, kind, name) for verb, kind, name, _ in kube.writes[writes:]]
    assert ("patch_replicas", "Deployment", "a") in done and ("apply", "Deployment", "a") not in done, done
    c = kube.get("Deployment", "ns", "a-canary")  # the canary is written in full: its new template
    assert c is not None and c["spec"]["replicas"] == 1
    assert c["spec"]["template"]["metadata"]["labels"][builders.REVISION_LABEL] == new

    writes = len(kube.writes)  # the next tick, nothing moved: nothing written to the stable workload
    await restore.place_canary(ServerView.of(kube.server("a")), PlaceCanary(
        revision=new, workload="a-canary", canary_replicas=1, stable_replicas=3, reason="step 1"), NOW)
    assert [w for w in kube.writes[writes:] if w[2] == "a"] == []


def test_replicas_only_needs_the_same_deployment_running_the_same_revision() -> None:
    def dep(name: str, revision: str, kind: str = "Deployment") -> dict[str, Any]:
        return {"kind": kind, "metadata": {"name": name}, "spec": {
            "replicas": 2, "template": {"metadata": {"labels": {builders.REVISION_LABEL: revision}}}}}

    assert canary.replicas_only(dep("a", "r1"), dep("a", "r1"))
    assert not canary.replicas_only(None, dep("a", "r1"))  # absent: created as rendered
    assert not canary.replicas_only(dep("a", "r0"), dep("a", "r1"))  # another revision runs: the full write
    assert not canary.replicas_only(dep("a-canary", "r1"), dep("a", "r1"))
    assert not canary.replicas_only(dep("a", "r1", "LeaderWorkerSet"), dep("a", "r1", "LeaderWorkerSet"))  # no lwt


async def _create_two_groups(kube: FakeKube) -> dict[str, Any]:
    obj = server("a")
    obj["spec"].update(replicas=2, strategy={"type": "Canary"}, parallelism={"tensor": 2, "nodes": 2})
    obj["spec"].get("resources", {}).pop("gpu", None)
    body = kube.put(obj)
    await handlers.reconcile(body=body, meta=body["metadata"], status={}, patch={}, reason="create",
                             logger=logging.getLogger("test"), memo=type("Memo", (), {"observer": Observer(1.0)})())
    return kube.server("a")


async def test_a_leaderworkerset_stable_share_is_scaled_the_canary_set_created_then_deleted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Multi-node: the stable LeaderWorkerSet ``a`` is scaled alone (its groups keep their templates) and the canary
    runs as LeaderWorkerSet ``a-canary`` with the track label; removal (0 groups) deletes it."""
    kube = FakeKube().install()
    body = await _create_two_groups(kube)
    stable = body["status"]["revision"]
    before = kube.get("LeaderWorkerSet", "ns", "a")
    assert before is not None and before["spec"]["replicas"] == 2 and kube.get("Deployment", "ns", "a") is None
    _upgraded_render(monkeypatch)
    body, new = await _canary_running(kube, stable)
    writes = len(kube.writes)

    await restore.place_canary(ServerView.of(body), PlaceCanary(revision=new, workload="a-canary", canary_replicas=1,
                                                 stable_replicas=1, reason="step 1"), NOW)

    after = kube.get("LeaderWorkerSet", "ns", "a")
    assert after is not None and after["spec"]["replicas"] == 1
    assert after["spec"]["leaderWorkerTemplate"] == before["spec"]["leaderWorkerTemplate"]
    done = [(verb, kind, name) for verb, kind, name, _ in kube.writes[writes:]]
    assert ("patch_replicas", "LeaderWorkerSet", "a") in done and ("apply", "LeaderWorkerSet", "a") not in done, done
    c = kube.get("LeaderWorkerSet", "ns", "a-canary")
    assert c is not None and c["spec"]["replicas"] == 1 and c["metadata"]["labels"][canary.TRACK_LABEL] == "canary"
    lwt = c["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        assert lwt[key]["metadata"]["labels"][builders.REVISION_LABEL] == new
        assert lwt[key]["metadata"]["labels"][canary.TRACK_LABEL] == "canary"
    assert kube.server("a")["status"].get("servingWorkload") is None

    await restore.place_canary(ServerView.of(kube.server("a")), PlaceCanary(
        revision=new, workload="a-canary", canary_replicas=0, stable_replicas=2, reason="removed"), NOW)
    assert kube.get("LeaderWorkerSet", "ns", "a-canary") is None
    scaled = kube.get("LeaderWorkerSet", "ns", "a")
    assert scaled is not None and scaled["spec"]["replicas"] == 2
    assert scaled["spec"]["leaderWorkerTemplate"] == before["spec"]["leaderWorkerTemplate"]


async def test_a_new_spec_holding_the_stable_for_a_canary_rewrites_no_stable_template(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the observer's tick starts the canary (no ``status.canary`` yet) the reconcile handler holds the stable
    revision in the serving workload: that write, too, is the scale only (seen end to end: a full write of the
    ledger's render rolled every stable pod)."""
    kube = FakeKube().install()
    body = await _create(kube)
    stable = body["status"]["revision"]
    assert await kube.patch_status("ns", "a", None, {"stableRevision": stable}) is not None
    before = kube.get("Deployment", "ns", "a")
    assert before is not None
    _upgraded_render(monkeypatch)
    spec = copy.deepcopy(kube.server("a")["spec"])
    spec["memory"]["maxRunningRequests"] = 8
    spec["replicas"] = 5  # and a scale in the same change: the stable share follows it
    updated = kube.update_spec("a", spec)
    writes = len(kube.writes)
    await handlers.reconcile(body=updated, meta=updated["metadata"], status=updated["status"], patch={},
                             reason="update", logger=logging.getLogger("test"),
                             memo=type("Memo", (), {"observer": Observer(1.0)})())
    after = kube.get("Deployment", "ns", "a")
    assert after is not None and after["spec"]["replicas"] == 5
    assert after["spec"]["template"] == before["spec"]["template"]
    done = [(verb, kind, name) for verb, kind, name, _ in kube.writes[writes:]]
    assert ("apply", "Deployment", "a") not in done, done
    assert kube.server("a")["status"]["revision"] == stable  # held: the canary starts at the observer's tick


async def test_a_promoted_leaderworkerset_canary_serves_every_group_and_the_old_set_is_deleted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    body = await _create_two_groups(kube)
    body, new = await _canary_running(kube, body["status"]["revision"])
    await restore.place_canary(ServerView.of(body), PlaceCanary(revision=new, workload="a-canary", canary_replicas=1,
                                                 stable_replicas=1, reason="step 1"), NOW)
    placed = kube.get("LeaderWorkerSet", "ns", "a-canary")
    assert placed is not None

    out = await restore.place_canary(ServerView.of(kube.server("a")), PromoteCanary(revision=new, workload="a-canary",
                                                                     reason="promoted"), NOW)

    assert out["servingWorkload"] == "a-canary" and out["revision"] == new
    assert kube.get("LeaderWorkerSet", "ns", "a") is None  # retired
    serving = kube.get("LeaderWorkerSet", "ns", "a-canary")
    assert serving is not None and serving["spec"]["replicas"] == 2
    # the group already serving keeps its templates: promotion restarts no group
    assert serving["spec"]["leaderWorkerTemplate"] == placed["spec"]["leaderWorkerTemplate"]


async def test_a_canary_never_takes_over_nor_deletes_another_servers_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    """Server ``a``'s canary workload is ``a-canary``; a server named ``a-canary`` owns a Deployment of that name.
    Placing the canary and removing it (an abort) both refuse, naming the owner; the other server's Deployment is
    left exactly as it was."""
    kube = FakeKube().install()
    body = await _create(kube)
    stable = body["status"]["revision"]
    kube.put({"kind": "Deployment", "metadata": {"name": "a-canary", "namespace": "ns", "ownerReferences": [
        {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "name": "a-canary",
         "uid": "uid-a-canary", "controller": True}]}, "spec": {"replicas": 2}})
    victim = kube.get("Deployment", "ns", "a-canary")
    body, new = await _canary_running(kube, stable)
    for action in (PlaceCanary(revision=new, workload="a-canary", canary_replicas=1, stable_replicas=3,
                               reason="step 1"),
                   PlaceCanary(revision=new, workload="a-canary", canary_replicas=0, stable_replicas=4,
                               reason="aborted")):
        with pytest.raises(Exception, match="owned by SGLangServer a-canary: not taken over"):
            await restore.place_canary(ServerView.of(body), action, NOW)
    assert kube.get("Deployment", "ns", "a-canary") == victim
    assert not [w for w in kube.writes if w[2] == "a-canary"]
