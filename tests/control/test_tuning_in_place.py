"""An InPlace SGLangTuning in the control layer without a cluster (issue 17): the hold written into the server's
status in its worker, a trial applied on every replica through the one apply path, the stable revision applied
again at the release (the end, a deletion), and a spec change releasing without applying the stable revision."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakekube import FakeKube

from sglang_operator import builders
from sglang_operator.api import tuning as api
from sglang_operator.api.server import parse, parse_status
from sglang_operator.control import tuning as ctl
from sglang_operator.control.apply import apply_placement, placement
from sglang_operator.io import kube

SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
TRIAL = api.Trial(name="tune-trial-1", settings=api.TrialSettings(num_steps=1, eagle_topk=1, num_draft_tokens=2))


@pytest.fixture
def fk(monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    fake = FakeKube().install(monkeypatch)
    tuning = {"apiVersion": "sglang.io/v1alpha1", "kind": "SGLangTuning",
              "metadata": {"name": "tune", "namespace": "ns", "resourceVersion": "1"}}

    async def get_sglangtuning(namespace: str, name: str) -> dict[str, Any]:
        return tuning

    monkeypatch.setattr(kube, "get_sglangtuning", get_sglangtuning)
    return fake


async def served(fk: FakeKube, replicas: int = 2) -> tuple[str, dict[str, Any]]:
    """A server at its spec's revision (applied through the one apply path, as the reconcile handler does)."""
    obj = copy.deepcopy(SAMPLE)
    obj["metadata"] = {"name": "s", "namespace": "ns"}
    obj["spec"]["replicas"] = replicas
    body = fk.put(obj)
    rendered = builders.render(parse(body))
    new = await apply_placement(body, [placement(body, rendered)], dt.datetime.now(dt.UTC), drain=False)
    await kube.patch_status("ns", "s", None, {**new, "stableRevision": rendered.revision})
    return rendered.revision, fk.server("s")


def deployment_revision(fk: FakeKube) -> tuple[str, int]:
    dep = fk.get("Deployment", "ns", "s")
    assert dep is not None
    return dep["spec"]["template"]["metadata"]["labels"][builders.REVISION_LABEL], dep["spec"]["replicas"]


async def test_a_trial_runs_on_every_replica_and_the_release_applies_the_stable_revision(fk: FakeKube) -> None:
    stable, body = await served(fk)
    runner = ctl.TuningRunner("ns", "tune")
    got = await runner._acquire(body)
    assert got.hold is not None and got.hold.stable_revision == stable
    assert parse_status(fk.server("s")).tuning_hold == got.hold
    rendered, _ = await runner._apply_in_place("s", TRIAL)
    assert rendered.revision != stable
    status = parse_status(fk.server("s"))
    assert status.revision == rendered.revision and status.tuning_hold is not None
    assert (status.tuning_hold.trial, status.tuning_hold.trial_revision) == (TRIAL.name, rendered.revision)
    assert deployment_revision(fk) == (rendered.revision, 2)  # the server's own Deployment, every replica
    assert "--speculative-num-steps 1" in (status.command or "")
    writes = len(fk.writes)
    await runner._apply_in_place("s", TRIAL)  # a resumed step: it runs already, nothing is written
    assert len(fk.writes) == writes
    assert await runner.release("s", "finished") == stable
    status = parse_status(fk.server("s"))
    assert status.revision == stable and status.tuning_hold is None and status.stable_revision == stable
    assert deployment_revision(fk) == (stable, 2)
    assert await runner.release("s", "again") is None  # idempotent


async def test_a_spec_change_ends_the_hold_without_applying_the_stable_revision(fk: FakeKube) -> None:
    _stable, body = await served(fk)
    runner = ctl.TuningRunner("ns", "tune")
    await runner._acquire(body)
    rendered, _ = await runner._apply_in_place("s", TRIAL)
    spec = copy.deepcopy(fk.server("s")["spec"])
    spec["replicas"] = 3
    fk.update_spec("s", spec)
    with pytest.raises(ctl.TrialFailure, match="no longer held"):
        await runner._apply_in_place("s", TRIAL)
    assert await runner.release("s", "the server's spec changed") is None
    status = parse_status(fk.server("s"))
    assert status.tuning_hold is None and status.revision == rendered.revision  # the reconcile handler's to apply


async def test_another_tuning_waits_and_the_deletion_handler_releases(fk: FakeKube) -> None:
    stable, body = await served(fk)
    runner = ctl.TuningRunner("ns", "tune")
    await runner._acquire(body)
    await runner._apply_in_place("s", TRIAL)
    other = await ctl.TuningRunner("ns", "other")._acquire(fk.server("s"))
    assert other.hold is None and other.reason == "HeldByTuning"
    await ctl.tuning_deleted(meta={"name": "tune", "namespace": "ns"},
                             spec={"mode": "InPlace", "serverRef": {"name": "s"}})
    status = parse_status(fk.server("s"))
    assert status.revision == stable and status.tuning_hold is None
    assert deployment_revision(fk)[0] == stable


async def test_a_restarted_operator_leaves_the_trial_running_and_a_spec_change_is_applied(fk: FakeKube) -> None:
    """kopf's resume of a held server writes nothing (the trial runs until the tuning's end applies the stable
    revision); an update of its spec (another generation) is applied as ever, and the tuning's release then applies
    nothing."""
    from sglang_operator.control import handlers
    from sglang_operator.control.observer import Observer

    stable, body = await served(fk)
    memo = type("Memo", (), {"observer": Observer(1.0)})()
    runner = ctl.TuningRunner("ns", "tune", observer=memo.observer)  # the server's worker lock of that observer
    await runner._acquire(body)
    rendered, _ = await runner._apply_in_place("s", TRIAL)
    held = fk.server("s")
    writes = len(fk.writes)
    await handlers.reconcile(body=held, meta=held["metadata"], status=held["status"], patch={}, reason="resume",
                             logger=handlers.logging.getLogger("test"), memo=memo)
    assert fk.writes[writes:] == [] and deployment_revision(fk)[0] == rendered.revision
    spec = copy.deepcopy(held["spec"])
    spec["replicas"] = 3
    updated = fk.update_spec("s", spec)
    await handlers.reconcile(body=updated, meta=updated["metadata"], status=updated["status"], patch={},
                             reason="update", logger=handlers.logging.getLogger("test"), memo=memo)
    assert deployment_revision(fk) == (stable, 3)  # the spec's revision (the stable one here), 3 replicas
    assert await runner.release("s", "the server's spec changed") is None
    assert parse_status(fk.server("s")).tuning_hold is None
