"""Rejections are never forgotten silently (issue 16 item 8): ``status.rejectedRevisions`` keeps the newest
:data:`REJECTIONS_KEPT`, never evicts the rejection of the spec's own revision, and each eviction posts a Warning
event ``RejectionForgotten`` from :func:`step`."""

from __future__ import annotations

import datetime as dt

import pytest
from rollback_driver import BAD, BAD_LEN, BAD_TPS, GOOD, T0, Run

from sglang_operator.api.analysis import Rejection
from sglang_operator.decisions.rollback import Event
from sglang_operator.decisions.rollback_state import REJECTIONS_KEPT, RollbackState, kept_rejections


def rejection(revision: str, minute: int = 0) -> Rejection:
    return Rejection(revision=revision, reason=f"{revision}: 36.0 tok/s < 0.85 × 51.6 tok/s",
                     at=T0 + dt.timedelta(minutes=minute))


def revs(rejections: list[Rejection]) -> list[str]:
    return [r.revision for r in rejections]


OLD = [f"r{i:02d}" for i in range(REJECTIONS_KEPT)]
"""``REJECTIONS_KEPT`` revisions rejected before, oldest first."""


@pytest.mark.parametrize(("given", "wanted", "limit", "kept", "evicted"), [
    # under the limit: nothing evicted
    (["a", "b"], None, 3, ["a", "b"], []),
    (["a", "b", "c"], "a", 3, ["a", "b", "c"], []),
    # over the limit: the oldest go, in order
    (["a", "b", "c", "d"], None, 3, ["b", "c", "d"], ["a"]),
    (["a", "b", "c", "d", "e"], "e", 3, ["c", "d", "e"], ["a", "b"]),
    # the spec's revision is the oldest: kept, the next older ones go in its place
    (["a", "b", "c", "d"], "a", 3, ["a", "c", "d"], ["b"]),
    (["a", "b", "c", "d", "e"], "a", 3, ["a", "d", "e"], ["b", "c"]),
    (["a", "b", "c", "d", "e"], "b", 3, ["b", "d", "e"], ["a", "c"]),
    (["a", "b", "c", "d", "e"], "c", 3, ["c", "d", "e"], ["a", "b"]),
    # the spec's revision not rejected at all (a new spec): the plain limit
    (["a", "b", "c", "d"], "z", 3, ["b", "c", "d"], ["a"]),
    (["a", "b", "c"], "a", 2, ["a", "c"], ["b"]),
])
def test_kept_rejections(given: list[str], wanted: str | None, limit: int, kept: list[str],
                         evicted: list[str]) -> None:
    rejections = [rejection(r, i) for i, r in enumerate(given)]
    out_kept, out_evicted = kept_rejections(rejections, wanted, limit)
    assert (revs(out_kept), revs(out_evicted)) == (kept, evicted)
    assert sorted(revs(out_kept) + revs(out_evicted)) == sorted(given)  # every rejection: kept or reported


def test_kept_rejections_refuses_a_limit_below_two() -> None:
    with pytest.raises(ValueError, match="limit 1 is below 2"):
        kept_rejections([rejection("a")], None, 1)


def _with_old_rejections(spec: str | None = None) -> Run:
    """GOOD promoted; :data:`OLD` rejected before; the spec then asks for BAD (or ``spec``), which is rejected."""
    run = Run()
    run.promote_good()
    run.state = RollbackState.model_validate({**run.state.model_dump(),
                                              "rejected_revisions": [rejection(r, i) for i, r in enumerate(OLD)]})
    return run


def _reject_bad(run: Run) -> list[Event]:
    before = len(run.actions)
    run.tick()
    run.tick(run.policy.warmup_seconds)
    run.intervals(run.policy.failure_threshold, tps=BAD_TPS, accept=BAD_LEN)
    return [a for a in run.actions[before:] if isinstance(a, Event) and a.reason == "RejectionForgotten"]


def test_a_rejection_beyond_the_limit_evicts_the_oldest_with_an_event() -> None:
    run = _with_old_rejections()
    run.apply_spec(BAD)
    forgotten = _reject_bad(run)
    assert run.revision == GOOD and run.state.rejection(BAD) is not None
    assert revs(run.state.rejected_revisions) == [*OLD[1:], BAD]
    assert len(forgotten) == 1 and forgotten[0].type == "Warning"
    message = forgotten[0].message
    assert OLD[0] in message and f"newest {REJECTIONS_KEPT}" in message and "36.0 tok/s" in message


def test_the_rejection_of_the_spec_revision_is_never_evicted() -> None:
    """The spec asks for r00 (the oldest rejection; the stable revision runs in its place) while another revision,
    applied by other means (``kubectl sglang undo``, say), is judged and rejected: r01 goes, r00 stays."""
    run = _with_old_rejections()
    run.spec, run.revision, run.auto_apply = OLD[0], BAD, False  # BAD runs; the glue applies nothing
    forgotten = _reject_bad(run)
    assert run.state.rejection(BAD) is not None and run.state.rejection(OLD[0]) is not None
    assert revs(run.state.rejected_revisions) == [OLD[0], *OLD[2:], BAD]
    assert len(run.state.rejected_revisions) == REJECTIONS_KEPT
    assert [OLD[1] in e.message for e in forgotten] == [True]
    # and what should run for the spec is still the stable revision, not r00
    assert run.applies and run.applies[-1].revision == GOOD


def test_a_dry_run_rejects_nothing_so_forgets_nothing() -> None:
    """A DryRun policy never rejects (the failed revision keeps running, Paused), so nothing is evicted."""
    from sglang_operator.api.rollback import RollbackAction, RollbackPolicy

    run = _with_old_rejections()
    run.policy = RollbackPolicy(**{**run.policy.model_dump(), "action": RollbackAction.DRY_RUN})
    run.apply_spec(BAD)
    assert not _reject_bad(run) and revs(run.state.rejected_revisions) == OLD
