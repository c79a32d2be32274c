"""``spec.autoscaling`` in the server's loop, on the fake API without a cluster: the tick applies the KEDA ScaledObject
(owned by the SGLangServer, never over another owner's object, written only when its rendering changes), its pause
annotations follow what the tick decided (a revision judged: ``paused-scale-in``; an InPlace trial:
``paused-replicas`` at the current count; lifted after), it is deleted when autoscaling is removed or External, and
without KEDA's CRD or a Prometheus address the ``Autoscaling`` condition says so while the server serves; a scale
(KEDA writing ``spec.replicas`` through ``/scale``) starts no revision and the operator's writes keep its count."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest
from fakekube import FakeKube
from test_tuning_in_place import SAMPLE, TUNING, World, deployment, logger

from sglang_operator.api.server import parse_status
from sglang_operator.api.view import ServerView
from sglang_operator.builders import autoscaling as so
from sglang_operator.control import handlers, restore
from sglang_operator.control.observer import Observer
from sglang_operator.decisions import autoscaling as scaling
from sglang_operator.io import keda

PROM = "http://prometheus.monitoring.svc:9090"
AUTO = {"maxReplicas": 3, "target": 4}


class Scaled(World):
    """The tuning tests' world, its server autoscaled."""

    autoscaling: dict[str, Any] | None = AUTO

    async def create_server(self, replicas: int = 2) -> str:
        obj = copy.deepcopy(SAMPLE)
        obj["metadata"] = {"name": "s", "namespace": "ns"}
        obj["spec"]["replicas"] = replicas
        if self.autoscaling is not None:
            obj["spec"]["autoscaling"] = copy.deepcopy(self.autoscaling)
        body = self.fk.put(obj)
        await handlers.reconcile(body=body, meta=body["metadata"], status={}, patch={}, reason="create",
                                 logger=logger(), memo=self.memo)
        self.obs.track("MODIFIED", self.fk.server("s"))
        return str(self.fk.server("s")["status"]["revision"])

    async def update(self, **spec: Any) -> dict[str, Any]:
        """The user's (or KEDA's ``/scale``) update of the spec, reconciled by the handler."""
        new = copy.deepcopy(self.fk.server("s")["spec"])
        for key, value in spec.items():
            if value is None:
                new.pop(key, None)
            else:
                new[key] = value
        updated = self.fk.update_spec("s", new)
        await handlers.reconcile(body=updated, meta=updated["metadata"], status=updated["status"], patch={},
                                 reason="update", logger=logger(), memo=self.memo)
        return self.fk.server("s")

    def scaled_object(self) -> dict[str, Any] | None:
        return self.fk.get(so.KIND, "ns", "s")

    def writes(self) -> list[tuple[str, str, str, str | None]]:
        return [w for w in self.fk.writes if w[1] == so.KIND]

    def pauses(self) -> dict[str, str]:
        obj = self.scaled_object()
        assert obj is not None
        return dict(obj["metadata"].get("annotations") or {})

    def condition(self) -> dict[str, Any] | None:
        return next((c for c in self.fk.server("s")["status"].get("conditions") or [] if c["type"] == "Autoscaling"),
                    None)


@pytest.fixture
def discovery(monkeypatch: pytest.MonkeyPatch) -> keda.ScaledObjects:
    found = keda.ScaledObjects(PROM)
    monkeypatch.setattr(keda, "SCALED_OBJECTS", found)
    return found


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, discovery: keda.ScaledObjects) -> Scaled:
    fk = FakeKube().install()
    fk.put(copy.deepcopy(TUNING))
    from sglang_operator.control import tuning as ctl

    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(ctl, "WAIT_SECONDS", 0.0)
    return Scaled(fk)


def promoted(world: Scaled) -> None:
    """The revision that runs promoted, as the analysis writes it (``Stable``, the stable revision)."""
    obj = world.fk.objects[("SGLangServer", "ns", "s")]
    status = obj["status"]
    status["analysis"]["phase"] = "Stable"
    status["stableRevision"] = status["revision"]
    world.fk._bump(obj)


async def test_the_tick_applies_the_scaled_object_owned_by_the_server_once(world: Scaled) -> None:
    await world.create_server()
    assert world.scaled_object() is None  # the handler writes the children; the ScaledObject is the tick's
    for _ in range(3):
        await world.tick()
    obj = world.scaled_object()
    assert obj is not None
    assert obj["metadata"]["ownerReferences"] == [{
        "apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "name": "s", "uid": "uid-s",
        "controller": True, "blockOwnerDeletion": True}]
    assert obj["spec"]["scaleTargetRef"] == {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
                                             "name": "s"}
    assert obj["spec"]["triggers"][0]["metadata"]["serverAddress"] == PROM
    assert [w[0] for w in world.writes()] == ["apply"]  # three ticks, one write: the rendering did not change
    status = world.fk.server("s")["status"]
    assert status["autoscaling"] == {
        "mode": "KEDA", "scaledObject": "s", "judging": True, "pause": "ScaleIn", "target": 4,
        "scaleTarget": {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "name": "s"}}
    cond = world.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", scaling.APPLIED)


def tick_writes(world: Scaled, mark: int) -> list[tuple[str, str]]:
    """(verb, kind) of the fake API's writes since ``mark`` of the SGLangServer's status and the ScaledObject."""
    return [(w[0], w[1]) for w in world.fk.writes[mark:] if w[1] in ("SGLangServer", so.KIND)]


async def test_the_scaled_object_is_written_after_the_ticks_status_patch(world: Scaled) -> None:
    """Issue 39 item 4: the ScaledObject is a decision of the tick, written by the apply path after its one status
    patch (the fake API's write log shows the order), its pause lifted the same way."""
    await world.create_server()
    mark = len(world.fk.writes)
    await world.tick()
    assert tick_writes(world, mark) == [("patch_status", "SGLangServer"), ("apply", so.KIND)]
    assert world.fk.server("s")["status"]["autoscaling"]["pause"] == "ScaleIn"
    promoted(world)
    mark = len(world.fk.writes)
    await world.tick()  # the pause lifted: status.autoscaling first, then the ScaledObject
    assert tick_writes(world, mark) == [("patch_status", "SGLangServer"), ("apply", so.KIND)]
    assert world.pauses() == {}


async def test_no_scaled_object_goes_out_from_a_view_whose_status_patch_is_refused(world: Scaled) -> None:
    """Issue 39 item 4: a status patch refused as stale (409) writes nothing else: no ScaledObject from that view; the
    next tick, decided again, patches and then writes it."""
    await world.create_server()
    world.fk.refuse_next_status = 1
    mark = len(world.fk.writes)
    await world.tick()
    assert tick_writes(world, mark) == [("patch_status", "SGLangServer")] and world.scaled_object() is None
    mark = len(world.fk.writes)
    await world.tick()
    assert tick_writes(world, mark) == [("patch_status", "SGLangServer"), ("apply", so.KIND)]
    assert world.scaled_object() is not None


async def test_a_refused_scaled_object_is_reported_by_the_next_ticks_patch(world: Scaled,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The status says what the tick's write makes stand; a write the API server refuses is reported by the next
    tick (``Autoscaling=False``, ``ApplyFailed``), as a job's apply is, and not tried again before the retry
    period."""
    from sglang_operator.control import apply

    async def refused(manifest: dict[str, Any], owner: Any) -> bool:
        raise apply.ChildApplyError(apply.apply_failure(so.KIND, ValueError("admission webhook said no")))

    monkeypatch.setattr("sglang_operator.control.autoscaling.apply_scaled_object", refused)
    await world.create_server()
    await world.tick()
    cond = world.condition()
    assert cond is not None and cond["reason"] == scaling.APPLIED  # what the write after the patch was to make stand
    await world.tick()
    cond = world.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", scaling.APPLY_FAILED)
    assert "admission webhook said no" in cond["message"]
    assert "scaledObject" not in world.fk.server("s")["status"]["autoscaling"]


async def test_scale_in_is_paused_while_the_revision_is_judged_and_lifted_after_promotion(world: Scaled) -> None:
    await world.create_server()
    await world.tick()
    assert parse_status(world.fk.server("s")).analysis.phase == "WarmingUp"  # type: ignore[union-attr]
    assert world.pauses() == {so.PAUSED_SCALE_IN: "true"}
    promoted(world)
    await world.tick()
    await world.tick()
    assert world.pauses() == {}  # lifted: the apply left the annotation out
    status = world.fk.server("s")["status"]["autoscaling"]
    assert status["judging"] is False and "pause" not in status
    assert [w[0] for w in world.writes()] == ["apply", "apply"]  # paused, lifted: nothing per tick


async def test_an_in_place_trial_pauses_scaling_at_the_current_count_and_a_scale_cancels_nothing(
        world: Scaled) -> None:
    from test_tuning_in_place import held_with_trial

    _stable, trial = await held_with_trial(world)
    await world.tick()
    assert world.pauses() == {so.PAUSED_REPLICAS: "2"}
    auto = world.fk.server("s")["status"]["autoscaling"]
    assert (auto["pause"], auto["pausedReplicas"], auto["judging"]) == ("Replicas", 2, True)
    await world.update(replicas=3)  # a scale (``/scale`` writes spec.replicas) while the trial measures
    await world.tick()
    status = parse_status(world.fk.server("s"))
    assert status.tuning_hold is not None and status.tuning_hold.trial_revision == trial  # not cancelled
    assert deployment(world.fk) == (trial, 2)  # the trial's pods stay; the scale applies with the stable revision
    assert world.pauses() == {so.PAUSED_REPLICAS: "3"}  # the /scale count, which KEDA then holds


async def test_another_owners_scaled_object_is_never_taken_over(world: Scaled) -> None:
    theirs = {"apiVersion": so.API_VERSION, "kind": so.KIND, "metadata": {
        "name": "s", "namespace": "ns", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "uid-other", "controller": True}]},
        "spec": {"scaleTargetRef": {"name": "elsewhere"}}}
    world.fk.put(theirs)
    await world.create_server()
    await world.tick()
    await world.tick()
    assert world.writes() == []
    obj = world.scaled_object()
    assert obj is not None and obj["spec"]["scaleTargetRef"] == {"name": "elsewhere"}
    cond = world.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", scaling.APPLY_FAILED)
    assert "owned by ConfigMap other" in cond["message"]
    assert "scaledObject" not in world.fk.server("s")["status"]["autoscaling"]
    assert world.fk.server("s")["status"]["phase"] in ("Pending", "Progressing")  # the server is served as before
    await world.update(autoscaling=None)
    await world.tick()
    assert world.scaled_object() is not None and world.writes() == []  # not deleted either


@pytest.mark.parametrize("removal", ["removed", "External"])
async def test_the_scaled_object_is_deleted_when_autoscaling_is_removed_or_external(world: Scaled,
                                                                                    removal: str) -> None:
    await world.create_server()
    await world.tick()
    assert world.scaled_object() is not None
    await world.update(autoscaling=None if removal == "removed" else {"mode": "External"})
    await world.tick()
    await world.tick()
    assert world.scaled_object() is None
    assert [w[0] for w in world.writes()] == ["apply", "delete"]
    status = world.fk.server("s")["status"]
    if removal == "removed":
        assert "autoscaling" not in status and world.condition() is None
    else:  # the user's scaler reads what the loop says
        assert status["autoscaling"] == {
            "mode": "External", "judging": True, "pause": "ScaleIn",
            "scaleTarget": {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "name": "s"}}
        cond = world.condition()
        assert cond is not None and (cond["status"], cond["reason"]) == ("True", scaling.EXTERNAL)


async def test_without_kedas_crd_the_condition_says_so_and_installing_it_needs_no_edit(
        world: Scaled, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    found = keda.ScaledObjects(PROM, clock=lambda: clock[0])
    monkeypatch.setattr(keda, "SCALED_OBJECTS", found)
    world.fk.crds_absent.add(so.CRD_NAME)
    await world.create_server()
    await world.tick()
    await world.tick()
    cond = world.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", scaling.KEDA_NOT_INSTALLED)
    assert world.writes() == [] and world.fk.get("Deployment", "ns", "s") is not None  # serves as before
    assert world.fk.get("Deployment", "ns", "s")["spec"]["replicas"] == 2  # type: ignore[index]
    world.fk.crds_absent.clear()  # KEDA installed; rediscovered at the next re-check
    clock[0] += keda.RECHECK_SECONDS + 1
    await world.tick()
    assert world.scaled_object() is not None
    cond = world.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", scaling.APPLIED)


async def test_without_a_prometheus_address_the_condition_says_so(world: Scaled,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keda, "SCALED_OBJECTS", keda.ScaledObjects(None, allowed_addresses=(PROM,)))
    await world.create_server()
    await world.tick()
    cond = world.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", scaling.NO_PROMETHEUS_ADDRESS)
    assert "--prometheus-address" in cond["message"] and world.writes() == []
    world.autoscaling = None
    await world.update(autoscaling={**AUTO, "prometheus": {"address": PROM}})  # the spec names an allowed one
    await world.tick()
    obj = world.scaled_object()
    assert obj is not None and obj["spec"]["triggers"][0]["metadata"]["serverAddress"] == PROM


async def test_an_address_or_query_the_admin_does_not_allow_gets_no_scaled_object(world: Scaled) -> None:
    """Issue 47 items 1-2 in the operator (a server admitted without the chart's policy, or before it narrowed):
    ``Autoscaling=False`` reason ``NotAllowed`` naming the field and what is allowed, and the ScaledObject written
    before is deleted, so KEDA queries nothing the admin did not allow."""
    await world.create_server()
    await world.tick()
    assert world.scaled_object() is not None
    await world.update(autoscaling={**AUTO, "prometheus": {"address": "http://169.254.169.254"}})
    await world.tick()
    cond = world.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", scaling.NOT_ALLOWED)
    assert cond["message"].startswith("spec.autoscaling.prometheus.address is http://169.254.169.254: KEDA's pod ")
    assert f"prometheusAddress: {PROM}); " in cond["message"]
    assert world.scaled_object() is None and [w[0] for w in world.writes()] == ["apply", "delete"]
    await world.update(autoscaling={**AUTO, "metric": "query", "query": 'sum(x{namespace="$namespace"})'})
    await world.tick()
    cond = world.condition()
    assert cond is not None and cond["reason"] == scaling.NOT_ALLOWED
    assert cond["message"].startswith("spec.autoscaling.metric is query: ")
    assert world.scaled_object() is None


async def test_a_restarted_operator_writes_no_scaled_object_that_stands(world: Scaled) -> None:
    await world.create_server()
    await world.tick()
    world.obs = Observer(1.0)  # a new process: no memory
    world.memo.observer = world.obs  # type: ignore[attr-defined]
    await world.tick()
    await world.tick()
    assert [w[0] for w in world.writes()] == ["apply"]


async def test_a_scale_starts_no_revision_and_the_operators_writes_keep_its_count(world: Scaled) -> None:
    revision = await world.create_server()
    await world.tick()
    before = parse_status(world.fk.server("s"))
    mark = len(world.fk.events)
    await world.update(replicas=3)  # KEDA's HPA through /scale
    await world.tick()
    after = parse_status(world.fk.server("s"))
    assert after.revision == revision and [r.revision for r in after.revisions] == [revision]
    assert after.analysis is not None and before.analysis is not None
    assert (after.analysis.phase, after.analysis.since) == (before.analysis.phase, before.analysis.since)
    assert [e for e in world.fk.events[mark:] if e[2] in ("Created", "Updated")] == []
    assert deployment(world.fk) == (revision, 3)
    # the operator's own applies (a rollback's, a retry's: from the ledger, whose spec says 2) keep KEDA's count
    body = world.fk.server("s")
    new = await restore.apply_revision(ServerView.of(body), revision, "test", dt.datetime.now(dt.UTC),
                                       world.obs.memory(body))
    assert new["revision"] == revision and deployment(world.fk) == (revision, 3)
    assert world.fk.server("s")["spec"]["replicas"] == 3
    assert not any(w[0] == "apply" and w[1] == "SGLangServer" for w in world.fk.writes)  # the spec is never written


async def test_a_scaled_object_deleted_by_hand_is_applied_again_at_the_next_verification(
        world: Scaled, monkeypatch: pytest.MonkeyPatch) -> None:
    await world.create_server()
    await world.tick()
    world.fk.delete(so.KIND, "ns", "s")
    await world.tick()
    assert world.scaled_object() is None  # within the verification period: not read again
    monkeypatch.setattr(scaling, "VERIFY_SECONDS", 0.0)
    await world.tick()
    assert world.scaled_object() is not None and [w[0] for w in world.writes()] == ["apply", "apply"]
    await world.tick()  # read again, found standing: not written
    assert [w[0] for w in world.writes()] == ["apply", "apply"]


def finished_tuning(spec: dict[str, Any], per_request: dict[int, dict[int, float]]) -> dict[str, Any]:
    """A finished SGLangTuning of the namespace that measured, per ``numSteps`` (chains), the tok/s per request of
    each concurrency level (``per_request``), on the setup of the server ``spec``."""
    from sglang_operator.api.server import parse
    from sglang_operator.api.tuning_spec import Workload
    from sglang_operator.decisions.tuning import known_best as kb

    tuned = parse({"apiVersion": SAMPLE["apiVersion"], "kind": SAMPLE["kind"],
                   "metadata": {"name": "s", "namespace": "ns"}, "spec": spec}).spec
    setup = kb.tuning_setup(tuned, Workload.model_validate({"maxOutputTokens": 32}))
    trials = [{"name": f"measure-trial-{steps}", "verdict": "Completed",
               "settings": {"numSteps": steps, "eagleTopk": 1, "numDraftTokens": steps + 1},
               "levels": [{"concurrency": c, "decodeTokensPerSecond": v * 1.2, "outputTokensPerSecond": v * c}
                          for c, v in levels.items()]}
              for steps, levels in per_request.items()]
    return {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning",
            "metadata": {"name": "measure", "namespace": "ns"}, "spec": {"serverRef": {"name": "s"}},
            "status": {"phase": "Succeeded", "setup": setup.model_dump(by_alias=True, exclude_none=True, mode="json"),
                       "trials": trials}}


async def test_measured_capacity_sets_the_target_of_the_serving_revision_held_while_judged(world: Scaled) -> None:
    world.autoscaling = {**AUTO, "metric": "measuredCapacity", "slo": {"minTokensPerSecondPerRequest": 20}}
    await world.create_server()
    await world.tick()
    promoted(world)
    await world.tick()
    trigger = world.scaled_object()["spec"]["triggers"][0]["metadata"]  # type: ignore[index]
    assert trigger["threshold"] == "4"  # nothing measured yet: spec.autoscaling.target
    measured = finished_tuning(world.fk.server("s")["spec"], {3: {2: 37.3, 3: 24.9, 4: 18.7},
                                                              2: {4: 27.2, 6: 22.6, 8: 19.3}})
    world.obs.tuning_event("ADDED", measured)
    await world.tick()
    status = world.fk.server("s")["status"]["autoscaling"]
    assert status["capacity"]["settings"].startswith("3/1/4") and status["capacity"]["tunings"] == ["measure"]
    assert status["target"] == status["capacity"]["requestsPerReplica"] == 3.79  # 3 + (24.9 − 20) ÷ (24.9 − 18.7)
    assert world.scaled_object()["spec"]["triggers"][0]["metadata"]["threshold"] == "3.79"  # type: ignore[index]

    spec = copy.deepcopy(world.fk.server("s")["spec"])
    spec["speculative"].update({"numSteps": 2, "numDraftTokens": 3})
    await world.update(speculative=spec["speculative"])
    await world.tick()
    assert parse_status(world.fk.server("s")).analysis.phase == "WarmingUp"  # type: ignore[union-attr]
    assert world.fk.server("s")["status"]["autoscaling"]["target"] == 3.79  # held while the new revision is judged
    promoted(world)
    await world.tick()
    status = world.fk.server("s")["status"]["autoscaling"]
    assert status["capacity"]["settings"].startswith("2/1/3")
    assert status["target"] == 7.58  # 6 + (22.6 − 20) ÷ (22.6 − 19.3) × 2, rounded
    assert world.scaled_object()["spec"]["triggers"][0]["metadata"]["threshold"] == "7.58"  # type: ignore[index]
