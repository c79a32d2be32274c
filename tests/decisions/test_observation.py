"""decide(): one observation decided without I/O (issue 15, item 2) — the ApplyFailed override, which events are
posted, what the server's job applied merged into the one patch, and the apply that converges a lost update. Each
tick as the observer runs it (:func:`tick`): decided from the view's typed status, what differs from the stored one
written."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from rollback_driver import FAST, GOOD, OTHER, SETUP, T0, Run

from sglang_operator.api.rollback import RollbackPolicy
from sglang_operator.api.view import ServerView
from sglang_operator.decisions.observation import ObservationDecision, Observed, decide
from sglang_operator.decisions.pods import pod_health
from sglang_operator.decisions.rollback_state import Observation
from sglang_operator.decisions.sampling.model import PodView
from sglang_operator.decisions.status import changed


def ready_pod(revision: str = GOOD) -> dict[str, Any]:
    return {"metadata": {"name": "p0", "labels": {"sglang-operator.io/revision": revision}},
            "status": {"podIP": "10.0.0.1", "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "sglang", "ready": True, "restartCount": 0,
                                              "state": {"running": {}}}]}}


def observed(now: dt.datetime = T0, revision: str = GOOD, spec_revision: str | None = None,
             **kw: Any) -> Observed:
    health = pod_health([ready_pod(revision)], 1, revision, 1, now)
    obs = Observation(revision=revision, desired_pods=1, setup=SETUP, pods=(PodView("p0", True, 0),),
                      spec_revision=spec_revision or revision)
    return Observed(now=now, generation=1, health=health, observation=obs, **kw)


def view(stored: dict[str, Any], applied: dict[str, Any] | None = None) -> ServerView:
    """The server's view with status ``stored`` and what its job applied (``applied``) merged in."""
    return ServerView.of({"metadata": {"name": "s", "namespace": "ns"}, "status": stored}).with_status(applied or {})


@dataclasses.dataclass(frozen=True)
class Ticked(ObservationDecision):
    """A decision with ``delta``: what of its status differs from the status as stored (the one patch)."""

    delta: dict[str, Any] = dataclasses.field(default_factory=dict)


def tick(v: ServerView, o: Observed, policy: RollbackPolicy) -> Ticked:
    """One tick of the server of ``v`` as the observer runs it: decided from the view's typed status and what its job
    applied (:func:`decide`), the decided status diffed against the one stored (``server_status.write_changed``)."""
    d = decide(v.status, o, policy, v.applied)
    return Ticked(**{f.name: getattr(d, f.name) for f in dataclasses.fields(d)},
                  delta=changed(v.status_data, d.status_json))


def persisted(stored: dict[str, Any], d: Ticked) -> dict[str, Any]:
    """The stored status after the decision's one patch."""
    return {**stored, **d.delta}


def test_an_apply_failure_is_degraded_and_posted_once() -> None:
    stored = {"revision": GOOD}
    first = tick(view(stored), observed(apply_failure="applying the Deployment failed (HTTP 500): x"), FAST)
    degraded = first.status.condition("Degraded")
    assert degraded is not None and (degraded.status, degraded.reason) == ("True", "ApplyFailed")
    assert [e.reason for e in first.events if e.type == "Warning"] == ["ApplyFailed"]  # and the analysis's own
    again = tick(view(persisted(stored, first)), observed(T0 + dt.timedelta(seconds=1),
                                                          apply_failure="applying the Deployment failed"), FAST)
    assert [e.reason for e in again.events if e.reason == "ApplyFailed"] == []  # the same reason: no second event
    healed = tick(view(persisted(stored, first)), observed(T0 + dt.timedelta(seconds=2)), FAST)
    healed_degraded = healed.status.condition("Degraded")
    assert healed_degraded is not None and healed_degraded.status == "False"


def test_settings_differ_is_posted_when_the_differences_change_only() -> None:
    stored = {"revision": GOOD, "effective": {"numSteps": 3}}
    diffs = ["numSteps: spec 3, SGLang runs 1"]
    first = tick(view(stored), observed(diffs=diffs), FAST)
    assert "SettingsDiffer" in [e.reason for e in first.events]
    same = tick(view(persisted(stored, first)), observed(T0 + dt.timedelta(seconds=1), diffs=diffs,
                                                         previous_diffs=diffs), FAST)
    assert "SettingsDiffer" not in [e.reason for e in same.events] and same.diffs == diffs


def test_what_the_job_applied_is_written_by_the_one_patch_and_judged() -> None:
    stored = {"revision": GOOD}
    applied = {"revision": OTHER, "command": "sglang serve ...", "phase": "Progressing"}
    d = tick(view(stored, applied), observed(revision=OTHER), FAST)
    assert d.delta["revision"] == OTHER and d.delta["command"] == "sglang serve ..."
    assert d.state.analysis is not None and d.state.analysis.revision == OTHER


def test_a_spec_revision_not_running_and_not_rejected_is_applied() -> None:
    run = Run(auto_apply=False)
    run.promote_good()
    stored = run.state.status_patch() | {"revision": GOOD}
    d = tick(view(stored), observed(run.now, spec_revision=OTHER), FAST)
    assert d.apply is not None and d.apply.revision == OTHER, d.events
    kept = tick(view(stored), observed(run.now), FAST)  # the spec asks for what runs: nothing to apply
    assert kept.apply is None and kept.delta.keys() <= {"conditions", "phase", "replicas", "readyReplicas",
                                                         "updatedReplicas", "observedGeneration", "analysis", "summary"}
