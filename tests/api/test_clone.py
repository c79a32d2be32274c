"""api.base.clone: a deep copy of a model tree without validation, equal to pydantic's deep model_copy."""

from __future__ import annotations

import datetime as dt

from sglang_operator.api.base import clone
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions.rollback_state import RollbackState

AT = "2026-12-01T12:00:00Z"
STATUS = SGLangServerStatus.model_validate({
    "revision": "r2", "stableRevision": "r1",
    "baseline": {"revision": "r1", "tokensPerSecond": 51.6, "acceptLength": 2.73, "samples": 3, "signal": "probe",
                 "at": AT},
    "analysis": {"revision": "r2", "phase": "Verifying", "since": AT, "progressStartedAt": AT,
                 "validFigures": [{"tokensPerSecond": 50.0, "acceptLength": 2.7}], "podRestarts": {"p-1": 0}},
    "rejectedRevisions": [{"revision": "r0", "reason": "slow", "at": AT}],
    "revisions": [{"revision": "r1", "spec": {"replicas": 1, "model": {"path": "m"}}}],
})


def test_a_clone_equals_the_deep_copy_and_shares_nothing_mutable() -> None:
    state = RollbackState.from_status(STATUS)
    copy = clone(state)
    assert copy == state.model_copy(deep=True) and copy is not state
    assert copy.model_fields_set == state.model_fields_set
    assert copy.analysis is not None and state.analysis is not None
    copy.analysis.valid_figures.append(copy.analysis.valid_figures[0])
    copy.analysis.pod_restarts["p-1"] = 3
    copy.analysis.since = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
    copy.rejected_revisions.clear()
    assert len(state.analysis.valid_figures) == 1 and state.analysis.pod_restarts == {"p-1": 0}
    assert state.analysis.since.year == 2026 and len(state.rejected_revisions) == 1
    assert STATUS.analysis is not None and STATUS.analysis.pod_restarts == {"p-1": 0}  # the cached status: untouched


def test_free_form_dicts_are_copied_too() -> None:
    copy = clone(STATUS)
    assert copy.revisions[0].spec is not None and STATUS.revisions[0].spec is not None
    copy.revisions[0].spec["model"]["path"] = "other"
    assert STATUS.revisions[0].spec["model"]["path"] == "m"
    assert copy.dump()["revisions"][0]["spec"]["model"]["path"] == "other"
