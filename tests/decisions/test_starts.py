"""A pod that never starts (an image that cannot be pulled, a missing Secret) fails its revision as a crash loop
does, at once, with the kubelet's reason quoted (decisions/starts.py: the one start-up check of the rollback
analysis and of a canary)."""

from __future__ import annotations

from rollback_driver import BAD, FAST, GOOD, Run

from sglang_operator.api.rollback import RollbackAction, RollbackPolicy
from sglang_operator.api.spec import CanaryStep, CanaryStrategy, SGLangServerSpec
from sglang_operator.decisions import groups
from sglang_operator.decisions.derive import analysis_conditions
from sglang_operator.decisions.pods import never_starts
from sglang_operator.decisions.sampling.model import PodView
from sglang_operator.decisions.starts import NEVER_STARTS_SECONDS

HOUR = RollbackPolicy(**{**FAST.model_dump(), "progress_deadline_seconds": 3600})
PULL = 'ImagePullBackOff: Back-off pulling image "lmsysorg/sglang:v0.5.99-cu129"'


def waiting_pod(reason: str, message: str, name: str = "qwen-abc", init: bool = False) -> dict[str, object]:
    status = {"name": "sglang", "ready": False, "restartCount": 0,
              "state": {"waiting": {"reason": reason, "message": message}}}
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": {"name": name, "uid": "u1", "labels": {"sglang-operator.io/revision": BAD}},
            "status": {"phase": "Pending", key: [status]}}


def test_never_starts_quotes_the_kubelets_reason_and_ignores_a_plain_wait() -> None:
    pod = waiting_pod("ImagePullBackOff", 'Back-off pulling image "lmsysorg/sglang:v0.5.99-cu129"')
    assert never_starts(pod) == PULL
    assert never_starts(waiting_pod("CreateContainerConfigError", 'secret "hf-token" not found', init=True)) \
        == 'CreateContainerConfigError: secret "hf-token" not found'
    assert never_starts(waiting_pod("ContainerCreating", "")) is None
    assert never_starts(waiting_pod("CrashLoopBackOff", "back-off 10s")) is None  # counted as restarts
    spec = SGLangServerSpec.model_validate({"model": {"path": "Qwen/Qwen3.6-27B"},
                                            "sglang": {"image": "lmsysorg/sglang:v0.5.10-cu129"}})
    [view] = groups.pod_views([pod], spec, BAD)
    assert view.waiting == PULL and not view.ready


def test_an_image_that_cannot_be_pulled_is_rolled_back_at_once_with_the_reason_not_at_the_deadline() -> None:
    run = Run(policy=HOUR)
    run.promote_good()
    run.pods = (PodView("p0", False, 0, uid="u1"),)
    run.apply_spec(BAD)
    started = run.now
    run.pods = (PodView("p0", False, 0, uid="u1", waiting=PULL),)
    run.tick(5)
    run.tick(NEVER_STARTS_SECONDS - 10)
    assert run.revision == BAD and run.phase == "WarmingUp"  # an image pull retried within the grace
    run.tick(10)
    assert run.revision == GOOD and (run.now - started).total_seconds() == NEVER_STARTS_SECONDS + 5
    rejection = run.state.rejection(BAD)
    assert rejection is not None and rejection.reason == (
        f"{BAD}: pod p0 never started: {PULL} (for {NEVER_STARTS_SECONDS} s, never Ready)")
    assert run.state.analysis is not None and run.state.analysis.reason == "ImagePullBackOff"
    degraded = analysis_conditions(run.state, RollbackAction.ROLLBACK, 1, run.now)[0]
    assert degraded["reason"] == "RolledBack" and "ImagePullBackOff" in degraded["message"]


def test_a_wait_that_clears_starts_the_grace_over() -> None:
    run = Run(policy=HOUR)
    run.promote_good()
    run.pods = (PodView("p0", False, 0, uid="u1", waiting="ErrImagePull: rpc error: i/o timeout"),)
    run.apply_spec(BAD)
    run.tick(NEVER_STARTS_SECONDS - 5)
    run.pods = (PodView("p0", False, 0, uid="u1"),)  # pulled on the next try: creating
    run.tick(5)
    run.pods = (PodView("p0", False, 0, uid="u1", waiting="ErrImagePull: rpc error: i/o timeout"),)
    run.tick(NEVER_STARTS_SECONDS - 5)
    assert run.revision == BAD and run.state.rejection(BAD) is None


def test_a_canary_pod_that_never_starts_fails_the_canary_at_once() -> None:
    from tests.decisions.test_canary_decision import STABLE_REV, World

    class Stuck(World):
        def views(self, revision: str) -> tuple[PodView, ...]:
            out = super().views(revision)
            if revision == STABLE_REV:
                return out
            return tuple(PodView(v.name, False, 0, waiting=PULL) for v in out)

    w = Stuck(strategy=CanaryStrategy(steps=[CanaryStep(replicas=1)]), policy=HOUR)
    w.apply_spec(BAD)
    w.run_until(lambda: w.state.rejection(BAD) is not None, limit=20)
    rejection = w.state.rejection(BAD)
    assert rejection is not None and "canary pod" in rejection.reason and PULL in rejection.reason, rejection
    assert w.revision == STABLE_REV
