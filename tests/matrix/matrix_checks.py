"""The stages every combination of the neighbour matrix goes through. The expected figures come from the fake
world's physics (:mod:`matrix_world`), never from the code under test.

A wrong or missing figure is a finding (:meth:`matrix_loop.World.note`), not the end of the combination: the stages
go on, so one run names every figure a combination loses; :func:`no_findings` fails with all of them at the end.
What makes the rest meaningless (never promoted, the tuning not Succeeded) fails at once. Between the stages,
:func:`watch` holds after every tick: the promoted revision's ledger entry and ``status.baseline`` never lose or
change a figure, and the status' own figures, while the stable revision serves, are the pods' or absent (not measured
yet), never another value."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from matrix_loop import PROM, TUNING, World
from matrix_world import NS, accept_length, accept_rate, decode_speed

from sglang_operator import builders
from sglang_operator.api.server import SpecError, parse
from sglang_operator.api.tuning import parse_tuning
from sglang_operator.api.tuning_status import TrialSettings
from sglang_operator.api.view import ObjectRef, ServerView
from sglang_operator.builders import admission
from sglang_operator.builders import autoscaling as scaled
from sglang_operator.builders.admission_kinds import Params
from sglang_operator.builders.labels import REVISION_LABEL
from sglang_operator.decisions import capacity
from sglang_operator.decisions.tuning import lifecycle
from sglang_operator.decisions.tuning import trials as plan

SERVER_STEPS = 3
"""The sample's ``spec.speculative.numSteps`` (3/1/4): the settings the server serves with."""
FIGURES = {"tokensPerSecond": decode_speed(SERVER_STEPS), "acceptLength": accept_length(SERVER_STEPS),
           "acceptRate": accept_rate(SERVER_STEPS)}
"""What the server's pods give: the probe's decode speed, the accept length and rate of their gauges."""
CAPACITY = 6.0
"""Requests per replica at the SLO of 20 tok/s per request: the physics' ``(44 − 4 k) × L / 2.8`` with the server's
own settings (L = 2.8) is 20 at k = 6, whatever the replicas or nodes the trials ran on."""
SLO = 20
LEVELS = (1, 4, 8, 16, 32)
TRIAL_SETTINGS = (TrialSettings(speculative=False), TrialSettings(num_steps=1, eagle_topk=1, num_draft_tokens=2),
                  TrialSettings(num_steps=3, eagle_topk=1, num_draft_tokens=4))
"""The control trial and the two points of :data:`TUNING_SPEC`'s space (chains: numDraftTokens = numSteps + 1)."""
TUNING_SPEC: dict[str, Any] = {
    "serverRef": {"name": "s"}, "disruption": "Allowed",
    "parameters": {"numSteps": {"list": [1, 3]}, "eagleTopk": {"list": [1]}},
    "workload": {"concurrency": [{"level": c} for c in LEVELS]},
    "budget": {"maxTrialCount": 3}}


def tuning_body(mode: str) -> dict[str, Any]:
    return {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning",
            "metadata": {"name": TUNING, "namespace": NS, "generation": 1},
            "spec": {**copy.deepcopy(TUNING_SPEC), "mode": mode}}


def close(got: Any, want: float | None) -> bool:
    return want is not None and isinstance(got, int | float) and abs(got - want) < 1e-6


def no_findings(world: World, combination: str) -> None:
    assert not world.findings, f"{combination}:\n  " + "\n  ".join(world.findings.values())


# --- admission -----------------------------------------------------------------------------------------------------

def refused(body: Mapping[str, Any], fragments: Sequence[str]) -> None:
    """The API refuses ``body`` (its schema and CEL rules, as ``parse`` checks them), with every fragment."""
    with pytest.raises(SpecError) as err:
        parse(body)
    text = "\n".join(err.value.messages)
    missing = [f for f in fragments if f not in text]
    assert not missing, f"refused, but without {missing}: {text}"


def admitted(body: Mapping[str, Any], mode: str | None) -> None:
    """The API, the tenant boundary (:func:`builders.admission.check` at level baseline, the chart's
    ``autoscaling.prometheusAddress`` :data:`PROM`) and, with ``mode``, the SGLangTuning's own rules admit the
    combination."""
    try:
        parse(body)
    except SpecError as err:
        pytest.fail(f"the API refuses the server: {err.messages}")
    verdict = admission.check(body, Params(allowed_prometheus_addresses=(PROM,)))
    assert verdict.refusals == (), f"the admission policy refuses the server: {verdict.refusals}"
    if mode is not None:
        try:
            parse_tuning(tuning_body(mode))
        except SpecError as err:
            pytest.fail(f"the API refuses the SGLangTuning: {err.messages}")


# --- render --------------------------------------------------------------------------------------------------------

def rendered(body: Mapping[str, Any], replicas: int, nodes: int, strategy: str, keda: bool, prom: str) -> None:
    """The workload, its replicas and rollout, the revision label, and the ScaledObject with KEDA."""
    server = parse(body)
    out = builders.render(server)
    work = out.workload
    assert out.revision and out.selector
    if nodes > 1:  # docs/multinode.md: replicas = groups of ``nodes`` pods, rolled one group at a time
        assert work["kind"] == "LeaderWorkerSet" and work["spec"]["replicas"] == replicas
        assert work["spec"]["leaderWorkerTemplate"]["size"] == nodes
        assert work["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxUnavailable": 1, "maxSurge": 0}
    else:
        assert work["kind"] == "Deployment" and work["spec"]["replicas"] == replicas
        assert work["spec"]["template"]["metadata"]["labels"][REVISION_LABEL] == out.revision
        if strategy == "RollingUpdate":  # no extra pod (maxSurge 0), maxUnavailable default 1
            assert work["spec"]["strategy"] == {"type": "RollingUpdate",
                                                "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
        elif strategy == "Recreate":
            assert work["spec"]["strategy"] == {"type": "Recreate"}
    obj = scaled.scaled_object(server, prom)
    if not keda:
        assert obj is None
        return
    assert obj is not None
    assert obj["spec"]["scaleTargetRef"] == {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
                                             "name": "s"}
    assert obj["spec"]["maxReplicaCount"] == body["spec"]["autoscaling"]["maxReplicas"]
    assert obj["spec"]["triggers"][0]["metadata"]["serverAddress"] == prom


# --- the server's loop ---------------------------------------------------------------------------------------------

def _entry(status: Mapping[str, Any], revision: str | None) -> dict[str, Any] | None:
    return next((r for r in status.get("revisions") or [] if revision and r.get("revision") == revision), None)


def watch(world: World) -> None:
    """The invariants of every tick (module docstring)."""
    status = world.status()
    stable = status.get("stableRevision")
    entry = _entry(status, stable)
    if entry is not None:
        for key, want in FIGURES.items():
            if not close(entry.get(key), want):
                world.note(f"ledger {key}", f"the ledger entry status.revisions[{stable}].{key} is {entry.get(key)}, "
                           f"the pods gave {want}")
    baseline = status.get("baseline")
    if baseline is not None:
        for key in FIGURES:
            if not close(baseline.get(key), FIGURES[key]):
                world.note(f"baseline {key}", f"status.baseline.{key} is {baseline.get(key)}, the pods gave "
                           f"{FIGURES[key]}")
    if status.get("tuningHold") is None and (stable is None or status.get("revision") == stable):
        for key, want in FIGURES.items():
            if status.get(key) is not None and not close(status.get(key), want):
                world.note(f"status {key}", f"status.{key} is {status.get(key)}, the pods gave {want}")


def figures_recorded(world: World, revision: str, where: str) -> None:
    """The ledger entry of ``revision`` Promoted, ``status.baseline`` and the status' figures all there (their
    values are :func:`watch`'s)."""
    status = world.status()
    entry = _entry(status, revision)
    if entry is None or entry.get("verdict") != "Promoted":
        world.note(f"{where} ledger", f"{where}: the ledger entry of {revision} is {entry}")
        return
    for key in FIGURES:
        if entry.get(key) is None:
            world.note(f"ledger {key}", f"{where}: the ledger entry status.revisions[{revision}].{key} is null")
        if status.get(key) is None:
            world.note(f"{where} status {key}", f"{where}: status.{key} is not recorded")
    if (status.get("baseline") or {}).get("revision") != revision:
        world.note(f"{where} baseline", f"{where}: status.baseline is {status.get('baseline')}")


async def served(world: World, body: dict[str, Any], pods: int, keda: bool) -> str:
    """The server created, its pods Ready, sampled until its first verdict: promoted with every figure recorded.
    Returns the promoted (stable) revision."""
    world.watch = watch
    await world.create(body)
    await world.until(lambda: (world.status().get("analysis") or {}).get("phase") == "Stable",
                      "the first revision promoted (analysis Stable)")
    status = world.status()
    revision = str(status["revision"])
    assert status.get("stableRevision") == revision
    assert world.kubelet.seen.get(revision) == pods, f"pods of {revision}: {world.kubelet.seen}"
    figures_recorded(world, revision, "at the promotion")
    auto = status.get("autoscaling")
    if not keda:
        assert auto is None, f"status.autoscaling without spec.autoscaling: {auto}"
        return revision
    assert auto is not None and auto.get("scaledObject") == "s", f"status.autoscaling: {auto}"
    assert world.kube.get("ScaledObject", NS, "s") is not None
    if auto.get("target") != body["spec"]["autoscaling"]["target"] or "capacity" in auto:
        world.note("target", f"nothing measured yet, yet status.autoscaling is {auto}")
    return revision


# --- a tuning ------------------------------------------------------------------------------------------------------

def trial_specs(world: World, mode: str, replicas: int, nodes: int) -> None:
    """Every trial the tuning will run has a spec the API accepts (``trials.trial_spec``) and renders
    (``lifecycle.render_trial``): a Shadow trial's own Deployment on one pod, an InPlace trial on every replica."""
    in_place = mode == "InPlace"
    view = ServerView.of(world.server())
    ref = ObjectRef.of({**tuning_body(mode), "metadata": {"name": TUNING, "namespace": NS, "uid": "uid-tune"}})
    for i, settings in enumerate(TRIAL_SETTINGS):
        spec = plan.trial_spec(view.spec_data, settings, replicas=replicas if in_place else 1)
        what = f"trial spec of {settings.summary()} ({mode})"
        try:
            parse({"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
                   "metadata": {"name": "s", "namespace": NS}, "spec": spec})
            manifest, out = lifecycle.render_trial(ref, view, f"{TUNING}-trial-{i}", settings, in_place)
        except SpecError as err:
            world.note(f"trial spec {i}", f"{what}: the API refuses it: {err.messages}")
            continue
        except (builders.InvalidSpec, ValueError) as err:
            world.note(f"trial spec {i}", f"{what}: not rendered: {err}")
            continue
        if in_place:
            assert manifest is None and out.workload["spec"]["replicas"] == replicas, what
            assert out.workload["kind"] == ("LeaderWorkerSet" if nodes > 1 else "Deployment"), what
        else:
            assert manifest is not None and manifest["kind"] == "Deployment", what
            assert manifest["spec"]["replicas"] == 1 and manifest["metadata"]["name"] == f"{TUNING}-trial-{i}", what


async def tuned(world: World, mode: str, stable: str, pods: int) -> None:
    """The tuning run to its end beside the server's loop: every trial started Completed at every level with no
    failed request, the server's own settings among them, a recommendation; InPlace: each trial on every pod, then
    the stable revision again, the hold gone and the stable revision measured again."""
    final = await world.tune(tuning_body(mode))
    status = final.get("status") or {}
    trials = status.get("trials") or []
    if status.get("phase") != "Succeeded":
        no_findings(world, "before the tuning's end")
        pytest.fail(f"the tuning ended {status.get('phase')}: {world.state()}")
    for t in trials:
        if t.get("verdict") != "Completed":
            world.note(f"trial {t['name']}", f"{t['name']} {t['settings']}: {t.get('verdict')} {t.get('reason')}")
            continue
        levels = {f["concurrency"]: f for f in t.get("levels") or []}
        if set(levels) != set(LEVELS):
            world.note(f"trial {t['name']} levels", f"{t['name']} measured levels {sorted(levels)}")
        lost = {c: f.get("failedRequests") for c, f in levels.items() if f.get("failedRequests")}
        if lost:
            world.note("failed requests", f"{t['name']}: requests failed at concurrency {lost} (the load went to "
                       f"pods that serve no HTTP)")
        if mode == "InPlace" and world.kubelet.seen.get(t["revision"]) != pods:
            world.note(f"trial {t['name']} pods", f"{t['name']} ran on {world.kubelet.seen.get(t['revision'])} "
                       f"pods, not {pods}")
    ran = {plan.point_of(TrialSettings.model_validate(t["settings"])) for t in trials if t.get("startedAt")}
    assert ran == {plan.point_of(s) for s in TRIAL_SETTINGS}, f"trials run: {ran}"
    best = status.get("best") or {}
    assert (best.get("settings") or {}).get("numSteps") == SERVER_STEPS, f"recommendation: {best}"
    if mode == "InPlace":
        await world.until(lambda: world.status().get("tuningHold") is None and world.status().get("revision")
                          == stable, "the stable revision applied again and the hold released", 20)

        def measured_again() -> bool:
            return all(world.status().get(k) is not None for k in FIGURES)

        try:
            await world.until(measured_again, "the stable revision measured again after the tuning", 20)
        except AssertionError:
            world.note("measured again", "after the InPlace tuning the stable revision's status figures are "
                       f"{ {k: world.status().get(k) for k in FIGURES} } 20 ticks on")
    assert world.status().get("stableRevision") == stable
    figures_recorded(world, stable, f"after the {mode} tuning")


async def known_capacity(world: World, keda: bool) -> None:
    """The capacity the finished tuning's figures give the serving revision: the pure decision over the namespace's
    known best (for a copy of the server with ``metric: measuredCapacity`` when it has none); without KEDA, the
    server's ``SpeculativeSettings`` condition from the same known best."""
    body = world.server()
    if not keda:
        body = {**body, "spec": {**body["spec"], "autoscaling": {
            "minReplicas": 2, "maxReplicas": 8, "target": 4, "metric": "measuredCapacity",
            "slo": {"minTokensPerSecondPerRequest": SLO}}}}
    server = parse(body)
    got = capacity.capacity(world.obs.tunings.known_best(NS), server, server.spec, world.status().get("revision"))
    if got is None:
        world.note("capacity", "no capacity from the finished tuning (decisions.capacity.capacity)")
    elif not close(got.requests_per_replica, CAPACITY):
        world.note("capacity", f"decisions.capacity gives {got.requests_per_replica} requests per replica "
                   f"({got.basis}); the pods give {CAPACITY}")
    if keda:
        return

    def condition() -> dict[str, Any] | None:
        return next((c for c in world.status().get("conditions") or [] if c["type"] == "SpeculativeSettings"), None)

    await world.until(lambda: condition() is not None, "condition SpeculativeSettings from the known best", 5)
    cond = condition()
    if cond is None or (cond["status"], cond["reason"]) != ("True", "AtKnownBest"):
        world.note("known best", f"condition SpeculativeSettings: {cond}")


async def recorded_capacity(world: World) -> None:
    """``status.autoscaling.capacity`` and the target in force from the finished tuning, and the ScaledObject's
    threshold."""
    await world.until(lambda: "capacity" in (world.status().get("autoscaling") or {}),
                      "status.autoscaling.capacity recorded", 20)
    auto = world.status()["autoscaling"]
    got = auto["capacity"]
    if not str(got.get("settings", "")).startswith("3/1/4"):
        world.note("capacity settings", f"status.autoscaling.capacity of settings {got.get('settings')}")
    if not close(got.get("requestsPerReplica"), CAPACITY) or not close(auto.get("target"), CAPACITY):
        world.note("recorded capacity", f"status.autoscaling.capacity.requestsPerReplica "
                   f"{got.get('requestsPerReplica')} ({got.get('basis')}), target {auto.get('target')}; the pods give "
                   f"{CAPACITY}")
    obj = world.kube.get("ScaledObject", NS, "s")
    threshold = obj["spec"]["triggers"][0]["metadata"]["threshold"] if obj is not None else None
    if threshold != scaled.threshold(auto.get("target")):
        world.note("threshold", f"the ScaledObject's threshold {threshold}, status.autoscaling.target "
                   f"{auto.get('target')}")


async def tuning_refused(world: World, mode: str, stable: str, fragment: str) -> None:
    """The tuning is refused before anything runs: phase Failed with ``fragment`` in its message, no trial started
    nor recorded, no trial workload written, the server never held, its figures kept."""
    final = await world.tune(tuning_body(mode), ticks=10)
    status = final.get("status") or {}
    conds = status.get("conditions") or []
    if status.get("phase") != "Failed" or not any(fragment in str(c.get("message")) for c in conds):
        world.note("tuning refusal", f"the tuning ended {status.get('phase')} with "
                   f"{[(c.get('reason'), c.get('message')) for c in conds]}")
    records = [(t["name"], t.get("verdict"), t.get("reason")) for t in status.get("trials") or []]
    if records:
        world.note("trial records", f"{len(records)} trial records instead of one refusal, e.g. {records[:2]}")
    writes = [w for w in world.kube.writes if w[1] == "Deployment" and w[2].startswith(f"{TUNING}-trial")]
    if writes:
        world.note("trial workloads", f"trial workloads written: {writes[:3]}")
    if world.status().get("tuningHold") is not None:
        world.note("hold", f"the server is held: {world.status().get('tuningHold')}")
    figures_recorded(world, stable, f"after the refused {mode} tuning")
