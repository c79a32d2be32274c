"""The rollback analysis' state holds the status keys it owns with the status model's own names and models."""

from __future__ import annotations

from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions.rollback_state import ROLLBACK_KEYS, RollbackState


def test_each_key_is_the_status_models_field_of_that_name_and_type() -> None:
    assert ROLLBACK_KEYS == ("stable_revision", "baseline", "analysis", "rejected_revisions", "rollbacks", "canary")
    for name, field in RollbackState.model_fields.items():
        theirs = SGLangServerStatus.model_fields[name]
        assert (field.annotation, field.alias) == (theirs.annotation, theirs.alias), name


def test_the_patch_round_trips_through_the_status() -> None:
    status = SGLangServerStatus.model_validate({"stableRevision": "abc", "rollbacks": [], "canary": None})
    patch = RollbackState.from_status(status).status_patch()
    assert list(patch) == ["stableRevision", "baseline", "analysis", "rejectedRevisions", "rollbacks", "canary"]
    assert patch["stableRevision"] == "abc" and patch["baseline"] is None
