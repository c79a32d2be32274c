"""The canary companion of step() (decisions/canary.py), driven through step() against a small model of the two
workloads: pods follow PlaceCanary / PromoteCanary and become Ready ``boot`` seconds after they were created, each
interval brings one sample per revision (the same interval), and every tick records the ready capacity.

Figures as the rollback tests': the known-good revision ≈ 51.6 tok/s, accept length 2.725; the regressed 36 tok/s,
1.75 (../shared/published-case.yaml)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from sglang_operator.api.analysis import CanaryPhase
from sglang_operator.api.rollback import RollbackAction, RollbackPolicy
from sglang_operator.api.spec import CanaryStep, CanaryStrategy, OnInconclusive
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.builders.leaderworkerset import GROUP_INDEX_LABEL, SET_NAME_LABEL, WORKER_INDEX_LABEL
from sglang_operator.decisions import groups, judging
from sglang_operator.decisions.actions import Action, Apply, Event, PlaceCanary, PromoteCanary, RecordVerdict
from sglang_operator.decisions.canary import CanaryObservation, stable_replicas
from sglang_operator.decisions.rollback import step
from sglang_operator.decisions.rollback_state import Observation, RollbackState
from sglang_operator.decisions.sampling.model import Figures, PodView, Sample, SampleKind
from tests.decisions.rollback_driver import BAD, BAD_LEN, BAD_TPS, FAST, GOOD, GOOD_LEN, GOOD_TPS, SETUP, T0

STABLE_REV = "1111111111"
NAME = "qwen"


@dataclass
class Pod:
    name: str
    revision: str
    ready_at: dt.datetime | None  # None: never (Pending)
    restarts: int = 0


@dataclass
class World:
    """SGLangServer NAME with the canary policy ``strategy``; the stable revision STABLE_REV is promoted and serves
    ``replicas`` pods of NAME when it starts."""

    strategy: CanaryStrategy | None = field(default_factory=CanaryStrategy)
    replicas: int = 4
    policy: RollbackPolicy = field(default_factory=lambda: FAST)
    now: dt.datetime = T0
    boot: float = 5.0
    revision: str = STABLE_REV
    spec: str = STABLE_REV
    serving_workload: str | None = None
    speed: dict[str, float] = field(default_factory=lambda: {STABLE_REV: GOOD_TPS, GOOD: GOOD_TPS, BAD: BAD_TPS})
    length: dict[str, float] = field(default_factory=lambda: {STABLE_REV: GOOD_LEN, GOOD: GOOD_LEN, BAD: BAD_LEN})
    rate: dict[str, float] = field(default_factory=lambda: {STABLE_REV: 0.69, GOOD: 0.69, BAD: 0.88})
    drift: float = 1.0  # every pod's speed times this (load drift: both revisions alike)
    schedulable: bool = True
    crashing: bool = False
    promote_token: str | None = None
    abort_token: str | None = None
    retry_token: str | None = None
    roundtrip: bool = False  # every tick's state read back from status (an operator restarted at every tick)
    state: RollbackState = field(default_factory=RollbackState)
    workloads: dict[str, list[Pod]] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    capacity: list[int] = field(default_factory=list)
    canary_pods_seen: set[str] = field(default_factory=set)
    serial: int = 0

    def __post_init__(self) -> None:
        self.workloads[NAME] = [self.pod(STABLE_REV, ready=True) for _ in range(self.replicas)]
        self.state.stable_revision = STABLE_REV
        # the stable revision's analysis warmed up and Stable
        for _ in range(3):
            self.tick(self.policy.warmup_seconds)

    # --- the model of the cluster ------------------------------------------------------------------------------

    def pod(self, revision: str, ready: bool = False) -> Pod:
        self.serial += 1
        never = not self.schedulable and revision != self.revision
        at = self.now if ready else (None if never else self.now + dt.timedelta(seconds=self.boot))
        return Pod(f"pod-{self.serial}", revision, at)

    def scale(self, workload: str, revision: str, n: int) -> None:
        pods = self.workloads.setdefault(workload, [])
        if pods and pods[0].revision != revision:
            pods.clear()
        while len(pods) > n:
            pods.pop()
        while len(pods) < n:
            pods.append(self.pod(revision))
        if n == 0:
            self.workloads.pop(workload, None)

    def serving(self) -> str:
        return self.serving_workload or NAME

    def views(self, revision: str) -> tuple[PodView, ...]:
        out = []
        for pods in self.workloads.values():
            for p in pods:
                if p.revision == revision:
                    ready = p.ready_at is not None and p.ready_at <= self.now and not (
                        self.crashing and p.revision != STABLE_REV)
                    restarts = p.restarts + (int((self.now - T0).total_seconds() // 10) if self.crashing
                                             and p.revision != STABLE_REV else 0)
                    out.append(PodView(p.name, ready, restarts))
        return tuple(sorted(out, key=lambda v: v.name))

    def sample(self, revision: str, start: dt.datetime) -> Sample | None:
        views = self.views(revision)
        if not any(v.ready for v in views):
            return None
        tps = self.speed[revision] * self.drift
        return Sample(kind=SampleKind.MEASURED, revision=revision, start=start, end=self.now,
                      figures=Figures(decode_tokens_per_second=tps, accept_length=self.length[revision],
                                      accept_rate=self.rate.get(revision)),
                      pods=tuple(v.name for v in views if v.ready), revision_pods=views)

    # --- one tick -----------------------------------------------------------------------------------------------

    def observation(self, canary_sample: Sample | None) -> Observation:
        c = self.state.canary
        canary_rev = c.revision if c is not None else None
        canary_pods = self.views(canary_rev) if canary_rev else ()
        pending = None
        if canary_rev and not self.schedulable and any(not v.ready for v in canary_pods):
            pending = "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu"
        stable = self.views(self.revision)
        canary_obs = None
        if self.strategy is not None or c is not None:
            canary_obs = CanaryObservation(
                policy=self.strategy, replicas=self.replicas, name=NAME, serving_workload=self.serving_workload,
                pods=canary_pods, stable_ready=sum(v.ready for v in stable),
                sample=canary_sample if canary_sample is not None and canary_sample.revision == canary_rev else None,
                pending=pending, promote_token=self.promote_token, abort_token=self.abort_token)
        return Observation(revision=self.revision, desired_pods=self.replicas, setup=SETUP, pods=stable,
                           spec_revision=self.spec, retry_token=self.retry_token, canary=canary_obs)

    def tick(self, seconds: float = 5.0, *, sample: bool = True) -> list[Action]:
        start = self.now
        self.now += dt.timedelta(seconds=seconds)
        c = self.state.canary
        stable_sample = self.sample(self.revision, start) if sample else None
        canary_sample = self.sample(c.revision, start) if sample and c is not None else None
        state = RollbackState.from_status(SGLangServerStatus.model_validate(self.state.status_patch())) \
            if self.roundtrip else self.state
        self.state, actions = step(state, stable_sample, self.policy, self.now,
                                   observed=self.observation(canary_sample))
        if self.roundtrip:
            self.state = RollbackState.from_status(SGLangServerStatus.model_validate(
                {k: v for k, v in self.state.status_patch().items() if v is not None}))
        self.actions += actions
        for a in actions:
            if isinstance(a, PlaceCanary):
                self.scale(self.serving(), self.revision, a.stable_replicas)
                self.scale(a.workload, a.revision, a.canary_replicas)
            elif isinstance(a, PromoteCanary):
                self.workloads.pop(self.serving(), None)
                self.serving_workload = None if a.workload == NAME else a.workload
                self.revision = a.revision
            elif isinstance(a, Apply):
                self.revision = a.revision
                self.workloads[self.serving()] = [self.pod(a.revision) for _ in range(self.replicas)]
        ready = sum(1 for pods in self.workloads.values() for p in pods
                    if p.ready_at is not None and p.ready_at <= self.now
                    and not (self.crashing and p.revision != STABLE_REV))
        self.capacity.append(ready)
        for pods in self.workloads.values():
            self.canary_pods_seen |= {p.name for p in pods if p.revision != STABLE_REV}
        return actions

    def run_until(self, done: object, limit: int = 200) -> None:
        for _ in range(limit):
            self.tick()
            if callable(done) and done():
                return
        raise AssertionError(f"not done after {limit} ticks: {self.state.canary}")

    def events(self, reason: str) -> list[Event]:
        return [a for a in self.actions if isinstance(a, Event) and a.reason == reason]

    def verdicts(self, revision: str) -> list[RecordVerdict]:
        return [a for a in self.actions if isinstance(a, RecordVerdict) and a.revision == revision]

    def apply_spec(self, revision: str) -> None:
        self.spec = revision  # the reconcile handler holds the stable revision back for a canary (restore.target)


def test_stable_replicas_keeps_capacity() -> None:
    assert [stable_replicas(4, 0, c) for c in range(5)] == [4, 3, 2, 1, 0]
    assert [stable_replicas(4, 1, c) for c in range(5)] == [4, 4, 3, 2, 1]


@pytest.mark.parametrize("roundtrip", [False, True])
def test_a_regressed_canary_runs_on_one_pod_is_judged_against_the_same_interval_and_removed(roundtrip: bool) -> None:
    w = World(roundtrip=roundtrip)
    w.capacity.clear()
    w.apply_spec(BAD)
    w.run_until(lambda: w.state.canary is None and w.state.rejection(BAD) is not None)
    assert len(w.canary_pods_seen) == 1, "only one pod ever ran the regressed revision"
    assert min(w.capacity) >= 3 and w.capacity[-1] <= 4
    assert w.revision == STABLE_REV and w.state.stable_revision == STABLE_REV
    rejection = w.state.rejection(BAD)
    assert rejection is not None and "canary" in rejection.reason and "51.6 tok/s" in rejection.reason, rejection
    [failed] = w.events("CanaryFailed")
    assert "36.0 tok/s" in failed.message
    [verdict] = [v for v in w.verdicts(BAD) if v.verdict.value == "Rejected"]
    assert verdict.canary_steps and verdict.canary_steps[0]["verdict"] == "Failed"
    # the canary's own figures, never the stable revision's sampled in the same intervals
    assert (verdict.accept_length, verdict.accept_rate) == (pytest.approx(BAD_LEN), pytest.approx(0.88))
    assert verdict.canary_steps[0]["tokensPerSecond"] == pytest.approx(BAD_TPS)
    assert verdict.canary_steps[0]["stableTokensPerSecond"] == pytest.approx(GOOD_TPS)
    assert w.events("CanaryRemoved") and not w.workloads.get(f"{NAME}-canary")
    assert len(w.workloads[NAME]) == 4
    # the rejected revision is not tried again while the retry annotation stays
    seen = len(w.actions)
    for _ in range(5):
        w.tick()
    assert w.state.canary is None and not [a for a in w.actions[seen:] if isinstance(a, PlaceCanary | Apply)]


@pytest.mark.parametrize("roundtrip", [False, True])
def test_a_good_canary_over_a_slower_stable_is_promoted_step_by_step(roundtrip: bool) -> None:
    strategy = CanaryStrategy(steps=[CanaryStep(replicas="25%"), CanaryStep(replicas="50%")])
    w = World(strategy=strategy, roundtrip=roundtrip)
    w.speed[STABLE_REV] = BAD_TPS  # the stable is the slower one
    w.length[STABLE_REV] = BAD_LEN
    w.rate[STABLE_REV] = 0.88
    w.capacity.clear()
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.stable_revision == GOOD)
    assert w.revision == GOOD and w.serving_workload == f"{NAME}-canary"
    assert len(w.workloads[f"{NAME}-canary"]) == 4 and NAME not in w.workloads
    assert min(w.capacity) >= 3
    assert w.state.baseline is not None and w.state.baseline.revision == GOOD
    assert w.state.baseline.tokens_per_second == pytest.approx(GOOD_TPS)
    [promoted] = [v for v in w.verdicts(GOOD) if v.verdict.value == "Promoted"]
    assert [s["verdict"] for s in promoted.canary_steps or ()] == ["Passed", "Passed"]
    assert (promoted.accept_length, promoted.accept_rate) == (pytest.approx(GOOD_LEN), pytest.approx(0.69))
    assert [s["replicas"] for s in promoted.canary_steps or ()] == [1, 2]
    splits = [a.reason.split(": ")[-1].split(" ")[0] for a in w.actions if isinstance(a, PlaceCanary)]
    assert "3+1" in splits and "2+2" in splits and "1+3" in splits
    # the new stable is judged as the stable revision from here (no canary for its own revision)
    for _ in range(5):
        w.tick()
    assert w.state.canary is None and w.state.analysis is not None and w.state.analysis.revision == GOOD
    assert w.state.analysis.phase == "Stable"
    # the next canary runs in NAME
    w.speed["2222222222"], w.length["2222222222"] = GOOD_TPS, GOOD_LEN
    w.apply_spec("2222222222")
    w.tick()
    assert w.state.canary is not None and w.state.canary.workload == NAME


def test_load_drift_on_every_pod_does_not_fail_the_canary() -> None:
    w = World()
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.canary is not None and w.state.canary.warmed_up_at is not None)
    w.drift = 0.75  # every pod 25 % slower: the stored baseline would say "regressed", the same interval does not
    w.run_until(lambda: w.state.stable_revision == GOOD)
    assert w.state.rejection(GOOD) is None and not w.events("CanaryFailed")


def test_max_surge_1_keeps_every_replica_ready() -> None:
    w = World(strategy=CanaryStrategy(max_surge=1, steps=[CanaryStep(replicas=2)]))
    w.capacity.clear()
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.stable_revision == GOOD)
    assert min(w.capacity) >= 4
    assert max(len(p) for p in w.workloads.values()) == 4


def test_max_surge_1_unschedulable_canary_is_aborted_at_its_deadline_without_touching_the_stable() -> None:
    policy = FAST.model_copy(update={"progress_deadline_seconds": 60})
    w = World(strategy=CanaryStrategy(max_surge=1), policy=policy)
    w.schedulable = False
    w.apply_spec(GOOD)
    stable_names = {p.name for p in w.workloads[NAME]}
    w.run_until(lambda: w.state.canary is None)
    assert {p.name for p in w.workloads[NAME]} == stable_names  # never touched
    rejection = w.state.rejection(GOOD)
    assert rejection is not None
    assert "progressDeadlineSeconds" in rejection.reason and "Insufficient nvidia.com/gpu" in rejection.reason
    assert min(w.capacity) >= 4


def test_pending_canary_shows_the_schedulers_message_in_the_canary_condition() -> None:
    w = World(strategy=CanaryStrategy(max_surge=1))
    w.schedulable = False
    w.apply_spec(GOOD)
    w.tick()
    w.tick()
    judged = judging.judge(SGLangServerStatus.model_validate(w.state.status_patch()), None, w.policy, w.now,
                           w.observation(None), [], 1)
    cond = next(c for c in judged.conditions if c["type"] == "Canary")
    assert cond["status"] == "True" and cond["reason"] == "Pending" and "Insufficient" in cond["message"]


def test_a_crash_looping_canary_fails_at_once() -> None:
    w = World()
    w.crashing = True
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.rejection(GOOD) is not None, limit=40)
    assert "maxRestartsBeforeReady" in (w.state.rejection(GOOD) or w.state).reason  # type: ignore[union-attr]
    assert (w.now - T0).total_seconds() < FAST.progress_deadline_seconds


def test_a_new_spec_during_a_canary_removes_it_and_starts_again_at_step_1() -> None:
    w = World(strategy=CanaryStrategy(steps=[CanaryStep(replicas=1), CanaryStep(replicas=2)]))
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.canary is not None and w.state.canary.step == 1)
    other = "3333333333"
    w.speed[other], w.length[other] = GOOD_TPS, GOOD_LEN
    w.apply_spec(other)
    w.tick()
    assert w.state.canary is not None and w.state.canary.phase is CanaryPhase.REMOVING
    assert [v.verdict.value for v in w.verdicts(GOOD)][-1] == "Superseded"
    w.run_until(lambda: w.state.canary is not None and w.state.canary.revision == other)
    assert w.state.canary.step == 0 and w.state.rejection(GOOD) is None


def test_promote_skips_the_remaining_analysis_and_abort_rejects() -> None:
    w = World(strategy=CanaryStrategy(steps=[CanaryStep(replicas=1, samples=50)]))
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.canary is not None and w.state.canary.judged >= 1)
    w.promote_token = GOOD
    w.run_until(lambda: w.state.stable_revision == GOOD)
    assert [s["verdict"] for s in w.verdicts(GOOD)[-1].canary_steps or ()] == ["Promoted"]

    w2 = World()
    w2.apply_spec(GOOD)
    w2.run_until(lambda: w2.state.canary is not None and w2.state.canary.canary_replicas == 1)
    w2.abort_token = "1"
    w2.run_until(lambda: w2.state.canary is None)
    rejection = w2.state.rejection(GOOD)
    assert rejection is not None and "aborted by the user" in rejection.reason
    assert len(w2.workloads[NAME]) == 4
    w2.retry_token = "again"  # sglang-operator retry: one new attempt, as a canary again
    w2.tick()
    assert w2.state.canary is not None and w2.state.canary.revision == GOOD


@pytest.mark.parametrize(("mode", "removed"), [(OnInconclusive.HOLD, False), (OnInconclusive.ROLLBACK, True)])
def test_inconclusive_intervals_follow_on_inconclusive(mode: OnInconclusive, removed: bool) -> None:
    w = World(strategy=CanaryStrategy(on_inconclusive=mode))
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.canary is not None and w.state.canary.warmed_up_at is not None)
    for _ in range(10):
        w.tick(sample=False)  # no sample at all: nothing happens
    assert w.state.canary is not None and w.state.canary.judged == 0
    w.speed[STABLE_REV] = float("nan")  # the stable side is not measured: inconclusive
    for _ in range(10):
        w.tick()
    assert (w.state.rejection(GOOD) is not None) is removed
    if not removed:
        assert w.state.canary is not None and w.state.canary.phase is CanaryPhase.STEPPING
        assert w.state.canary.last_sample is not None and "inconclusive" in w.state.canary.last_sample.reason


def test_scaling_during_a_canary_changes_the_stable_only() -> None:
    w = World(strategy=CanaryStrategy(steps=[CanaryStep(replicas=1, samples=50)]))
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.canary is not None and w.state.canary.warmed_up_at is not None)
    w.replicas = 6
    w.tick()
    assert w.state.canary is not None and (w.state.canary.stable_replicas, w.state.canary.canary_replicas) == (5, 1)
    assert w.state.canary.split == "5+1" and w.revision == STABLE_REV


def test_no_canary_without_a_stable_revision_serving() -> None:
    w = World()
    w.state.stable_revision = None
    w.apply_spec(GOOD)
    actions = w.tick()
    assert any(isinstance(a, Apply) and a.revision == GOOD for a in actions) and w.state.canary is None


def test_no_canary_policy_converges_as_before() -> None:
    w = World(strategy=None)
    w.apply_spec(GOOD)
    actions = w.tick()
    assert any(isinstance(a, Apply) and a.revision == GOOD for a in actions)


def test_switching_away_from_canary_supersedes_it() -> None:
    w = World()
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.canary is not None and w.state.canary.canary_replicas == 1)
    w.strategy = None
    w.run_until(lambda: w.state.canary is None)
    assert w.state.rejection(GOOD) is None
    assert any(isinstance(a, Apply) and a.revision == GOOD for a in w.tick())  # replaced as with Recreate


@dataclass
class GroupWorld(World):
    """The same cluster model with each replica a LeaderWorkerSet group of 2 pods (leader and worker, both with the
    set's name label: ``NAME`` or ``NAME-canary``, both numbering groups from 0): the decision sees the groups
    through :func:`sglang_operator.decisions.groups.pod_views`, as the observer does (one view per group)."""

    replicas: int = 2

    def group_pods(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for workload, pods in self.workloads.items():
            for g, p in enumerate(pods):
                ready = p.ready_at is not None and p.ready_at <= self.now
                for i in range(2):
                    out.append({"metadata": {
                        "name": f"{workload}-{g}" if i == 0 else f"{workload}-{g}-{i}", "uid": f"{p.name}/{i}",
                        "labels": {"sglang-operator.io/revision": p.revision, SET_NAME_LABEL: workload,
                                   GROUP_INDEX_LABEL: str(g), WORKER_INDEX_LABEL: str(i)}},
                        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})
        return out

    def views(self, revision: str) -> tuple[PodView, ...]:
        return groups.pod_views(self.group_pods(), SimpleNamespace(parallelism=SimpleNamespace(nodes=2)), revision)


@pytest.mark.parametrize("roundtrip", [False, True])
def test_a_two_group_server_canaries_one_group_and_removes_a_regressed_one(roundtrip: bool) -> None:
    w = GroupWorld(roundtrip=roundtrip)
    assert [v.name for v in w.views(STABLE_REV)] == [f"{NAME}-0", f"{NAME}-1"]
    group_0 = w.workloads[NAME][0]
    w.capacity.clear()
    w.apply_spec(BAD)
    w.run_until(lambda: w.state.canary is not None and w.views(BAD))
    assert [v.name for v in w.views(BAD)] == [f"{NAME}-canary-0"]  # one group, beside the stable's group 0
    assert [v.name for v in w.views(STABLE_REV)] == [f"{NAME}-0"]
    w.run_until(lambda: w.state.canary is None and w.state.rejection(BAD) is not None)
    assert len(w.canary_pods_seen) == 1, "only one group ever ran the regressed revision"
    assert min(w.capacity) >= 1 and w.workloads[NAME][0] is group_0  # group 0 of NAME served throughout
    assert not w.workloads.get(f"{NAME}-canary") and len(w.workloads[NAME]) == 2
    assert w.revision == w.state.stable_revision == STABLE_REV


def test_a_two_group_canary_is_promoted_to_every_group() -> None:
    w = GroupWorld()
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.stable_revision == GOOD)
    assert w.serving_workload == f"{NAME}-canary" and NAME not in w.workloads
    assert [v.name for v in w.views(GOOD)] == [f"{NAME}-canary-0", f"{NAME}-canary-1"]
    splits = [a.reason.split(": ")[-1].split(" ")[0] for a in w.actions if isinstance(a, PlaceCanary)]
    assert "1+1" in splits and min(w.capacity) >= 1


@pytest.mark.parametrize("action", [RollbackAction.ALERT, RollbackAction.DRY_RUN])
@pytest.mark.parametrize("roundtrip", [False, True])
def test_with_action_alert_or_dry_run_a_failed_canary_is_held_until_aborted(action: RollbackAction,
                                                                             roundtrip: bool) -> None:
    """``rollback.action`` Alert/DryRun reports a failed canary and leaves it running at its split (no rejection,
    no removal), as a failed revision without a canary is left running Paused; an abort then removes it."""
    w = World(policy=FAST.model_copy(update={"action": action}), roundtrip=roundtrip)
    w.apply_spec(BAD)
    w.run_until(lambda: w.state.canary is not None and w.state.canary.phase is CanaryPhase.HELD)
    for _ in range(10):  # it stays: judged no more, the split kept, no rejection
        w.tick()
    c = w.state.canary
    assert c is not None and c.phase is CanaryPhase.HELD and c.canary_replicas == 1 and c.split == "3+1"
    assert w.state.rejection(BAD) is None and not w.state.rollbacks
    assert len(w.workloads[f"{NAME}-canary"]) == 1 and len(w.workloads[NAME]) == 3
    assert [v.verdict.value for v in w.verdicts(BAD)][-1] == "Failed"
    held = w.events("CanaryFailed")
    if action is RollbackAction.DRY_RUN:
        assert not held  # DryRun posts no events
    else:
        assert len(held) == 1 and "left running at 3+1" in held[0].message and "36.0 tok/s" in held[0].message
    w.abort_token = "1"
    w.run_until(lambda: w.state.canary is None)
    assert w.state.rejection(BAD) is not None and len(w.workloads[NAME]) == 4 and f"{NAME}-canary" not in w.workloads


def test_a_held_canary_is_promoted_on_request_and_removed_once_it_serves_nothing() -> None:
    w = World(policy=FAST.model_copy(update={"action": RollbackAction.ALERT}))
    w.apply_spec(BAD)
    w.run_until(lambda: w.state.canary is not None and w.state.canary.phase is CanaryPhase.HELD)
    w.promote_token = BAD  # the user overrides the analysis
    w.run_until(lambda: w.state.stable_revision == BAD)
    assert w.revision == BAD and len(w.workloads[f"{NAME}-canary"]) == 4

    w2 = World(policy=FAST.model_copy(update={"action": RollbackAction.ALERT}))
    w2.apply_spec(BAD)
    w2.run_until(lambda: w2.state.canary is not None and w2.state.canary.phase is CanaryPhase.HELD)
    w2.crashing = True  # its pod leaves Ready for good: a held canary that serves nothing is removed
    w2.run_until(lambda: w2.state.canary is None)
    rejection = w2.state.rejection(BAD)
    assert rejection is not None and "serving nothing" in rejection.reason
    assert len(w2.workloads[NAME]) == 4 and f"{NAME}-canary" not in w2.workloads


def test_with_action_alert_a_crash_looping_canary_is_still_removed() -> None:
    w = World(policy=FAST.model_copy(update={"action": RollbackAction.ALERT}))
    w.crashing = True
    w.apply_spec(BAD)
    w.run_until(lambda: w.state.rejection(BAD) is not None and w.state.canary is None)
    assert len(w.workloads[NAME]) == 4
