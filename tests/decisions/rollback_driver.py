"""A driver for :func:`sglang_operator.decisions.rollback.step` with a fake clock: ticks, samples, pods.

Figures are the published case's (``../shared/published-case.yaml`` and the simulator's calibration): the
known-good revision ≈ 51.6 tok/s decode with accept length 2.725, the regressed one 36 tok/s with 1.75.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from sglang_operator.api.analysis import Setup
from sglang_operator.api.rollback import ProbePolicy, RollbackPolicy
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions.rollback import Action, Apply, Event, step
from sglang_operator.decisions.rollback_state import Observation, RollbackState
from sglang_operator.decisions.sampling.model import Figures, PodView, Sample, SampleKind

T0 = dt.datetime(2026, 5, 1, 10, 0, 0, tzinfo=dt.UTC)
GOOD, BAD, OTHER = "9699b6738c", "9f4c2d9294", "5b7e01aa42"
GOOD_TPS, GOOD_LEN = 51.6, 2.725
BAD_TPS, BAD_LEN = 36.0, 1.75
SETUP = Setup(model_path="Qwen/Qwen3.6-27B", gpu_product="NVIDIA-RTX-A6000", tensor=2)
FAST = RollbackPolicy(warmup_seconds=10, interval_seconds=5, min_samples=3, verify_seconds=15,
                      probe=ProbePolicy(timeout_seconds=4))
"""The fast policy of the e2e tests and the demo."""
DEFAULT = RollbackPolicy()


def pods(n: int = 1, ready: bool = True, restarts: int = 0) -> tuple[PodView, ...]:
    return tuple(PodView(f"p{i}", ready, restarts) for i in range(n))


def roundtrip(state: RollbackState) -> RollbackState:
    """The state as an operator restart reads it back: dumped to the status dict, parsed from it."""
    return RollbackState.from_status(SGLangServerStatus.model_validate(state.status_patch()))


@dataclass
class Run:
    """One SGLangServer under the rollback decision; ``revision`` is what is applied (status.revision)."""

    policy: RollbackPolicy = field(default_factory=lambda: FAST)
    now: dt.datetime = T0
    revision: str = GOOD
    spec: str | None = None
    token: str | None = None
    setup: Setup = field(default_factory=lambda: SETUP)
    pods: tuple[PodView, ...] = field(default_factory=pods)
    desired: int = 1
    state: RollbackState = field(default_factory=RollbackState)
    actions: list[Action] = field(default_factory=list)
    """Every action so far."""
    applies: list[Apply] = field(default_factory=list)
    """Every Apply so far; a test's glue applies it (``revision`` follows) unless ``auto_apply`` is False."""
    auto_apply: bool = True
    last_sample_start: dt.datetime | None = None

    def observation(self) -> Observation:
        return Observation(revision=self.revision, desired_pods=self.desired, setup=self.setup, pods=self.pods,
                           spec_revision=self.spec or self.revision, retry_token=self.token)

    def tick(self, seconds: float = 0.0, sample: Sample | None = None) -> list[Action]:
        self.now += dt.timedelta(seconds=seconds)
        self.state, actions = step(self.state, sample, self.policy, self.now, observed=self.observation())
        self.actions += actions
        applied = False
        for a in actions:
            if isinstance(a, Apply):
                self.applies.append(a)
                if self.auto_apply:
                    self.revision, applied = a.revision, True
        if applied:  # the glue applied it; the next tick (right after) sees the new revision
            self.state, more = step(self.state, None, self.policy, self.now, observed=self.observation())
            self.actions += more
            actions = actions + more
        return actions

    def apply_spec(self, revision: str) -> list[Action]:
        """The user changes the spec and the handler applies it (what_should_run allowing)."""
        self.spec = self.revision = revision
        return self.tick()

    def sample(self, kind: SampleKind = SampleKind.MEASURED, tps: float | None = GOOD_TPS,
               accept: float | None = GOOD_LEN, reason: str = "", revision: str | None = None) -> Sample:
        """The sample of the interval that ends now + intervalSeconds, of the applied revision."""
        start = self.now
        end = start + dt.timedelta(seconds=self.policy.interval_seconds)
        return Sample(kind=kind, revision=revision or self.revision, start=start, end=end,
                      figures=Figures(decode_tokens_per_second=tps, accept_length=accept),
                      pods=tuple(p.name for p in self.pods if p.ready), revision_pods=self.pods, reason=reason)

    def interval(self, kind: SampleKind = SampleKind.MEASURED, tps: float | None = GOOD_TPS,
                 accept: float | None = GOOD_LEN, reason: str = "") -> list[Action]:
        """One interval passes and its sample arrives."""
        s = self.sample(kind, tps, accept, reason)
        return self.tick(self.policy.interval_seconds, s)

    def intervals(self, count: int, kind: SampleKind = SampleKind.MEASURED, tps: float | None = GOOD_TPS,
                  accept: float | None = GOOD_LEN, reason: str = "") -> list[Action]:
        """``count`` intervals pass, each with the same sample (:meth:`interval`); the actions of all of them."""
        actions: list[Action] = []
        for _ in range(count):
            actions += self.interval(kind, tps, accept, reason)
        return actions

    def warm_up(self) -> None:
        """Ticks until the warm-up of the applied revision ends (all pods Ready)."""
        self.tick()
        self.tick(self.policy.warmup_seconds)
        assert self.state.analysis is not None and self.state.analysis.warmed_up_at is not None, self.state

    def promote_good(self, tps: float = GOOD_TPS, accept: float = GOOD_LEN) -> None:
        """The first revision GOOD applied, warmed up, verified and promoted."""
        self.revision = self.spec = GOOD
        self.warm_up()
        while self.phase != "Stable":
            self.interval(tps=tps, accept=accept)
            assert self.now - T0 < dt.timedelta(hours=2), "never promoted"

    @property
    def phase(self) -> str:
        assert self.state.analysis is not None
        return self.state.analysis.phase

    def events(self, reason: str | None = None) -> list[Event]:
        return [a for a in self.actions if isinstance(a, Event) and (reason is None or a.reason == reason)]
