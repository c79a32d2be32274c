"""The observer's tick of the rollback analysis over the typed status (decisions/judging.py)."""

from __future__ import annotations

import datetime as dt

from sglang_operator.api.analysis import Analysis
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions.judging import warm_up_ends

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def analysis(**fields: object) -> Analysis:
    return Analysis.model_validate({"revision": "r1", "since": "2026-12-01T11:59:00Z",
                                   "progressStartedAt": "2026-12-01T11:59:00Z", **fields})


def test_warm_up_ends_once_the_pods_were_ready_for_the_warm_up() -> None:
    warming = {"phase": "WarmingUp", "readySince": "2026-12-01T11:59:50Z"}
    assert warm_up_ends(analysis(**warming), 10, NOW)
    assert not warm_up_ends(analysis(**warming), 11, NOW)
    assert not warm_up_ends(analysis(**warming, warmedUpAt="2026-12-01T12:00:00Z"), 10, NOW)
    assert not warm_up_ends(analysis(phase="WarmingUp"), 0, NOW)  # not all pods Ready yet
    assert not warm_up_ends(analysis(**{**warming, "phase": "Verifying"}), 0, NOW)
    assert not warm_up_ends(None, 0, NOW)


def _verifying_status(revision: str, valid: list[tuple[float, float]]) -> dict:
    return {"revision": revision, "revisions": [{"revision": revision, "verdict": "Verifying"}],
            "analysis": {"revision": revision, "phase": "Verifying", "since": "2026-12-01T11:58:00Z",
                         "progressStartedAt": "2026-12-01T11:57:00Z", "readySince": "2026-12-01T11:57:10Z",
                         "warmedUpAt": "2026-12-01T11:57:20Z", "validSamples": len(valid),
                         "validFigures": [{"tokensPerSecond": t, "acceptLength": a} for t, a in valid]}}


def _typed(status: dict) -> SGLangServerStatus:
    """A status as stored, parsed as the observer reads it (once per view)."""
    return SGLangServerStatus.model_validate(status)


def _observation(revision: str):  # type: ignore[no-untyped-def]
    from sglang_operator.api.analysis import Setup
    from sglang_operator.decisions.rollback_state import Observation
    from sglang_operator.decisions.sampling.model import PodView

    return Observation(revision=revision, desired_pods=1, setup=Setup(model_path="Qwen/Qwen3.6-27B", tensor=2),
                       pods=(PodView("p0", True, 0),), spec_revision=revision)


def test_a_users_promotion_makes_the_verifying_revision_stable_with_its_median() -> None:
    from sglang_operator.api.rollback import RollbackPolicy
    from sglang_operator.decisions.judging import judge

    status = _verifying_status("9699b6738c", [(50.0, 2.7), (52.0, 2.75), (51.0, 2.72)])
    out = judge(_typed(status), None, RollbackPolicy(), NOW, _observation("9699b6738c"), [], 1,
                promote_token="9699b6738c")
    assert out.state.stable_revision == "9699b6738c"
    assert out.status["baseline"]["tokensPerSecond"] == 51.0 and out.status["baseline"]["acceptLength"] == 2.72
    assert out.status["analysis"]["phase"] == "Stable"
    assert out.status["revisions"][0]["verdict"] == "Promoted"
    assert any(getattr(a, "reason", "") == "Promoted" for a in out.actions)
    # a token naming another revision, or one already acted on, does nothing
    again = judge(_typed({**status, **out.status}), None, RollbackPolicy(), NOW, _observation("9699b6738c"), [], 1,
                  promote_token="9699b6738c")
    assert not [a for a in again.actions if getattr(a, "reason", "") == "Promoted"]
    other = judge(_typed(status), None, RollbackPolicy(), NOW, _observation("9699b6738c"), [], 1, promote_token="abc")
    assert other.state.stable_revision is None


def test_a_promotion_without_a_measured_sample_is_refused_once() -> None:
    from sglang_operator.api.rollback import RollbackPolicy
    from sglang_operator.decisions.judging import judge

    status = _verifying_status("9699b6738c", [])
    out = judge(_typed(status), None, RollbackPolicy(), NOW, _observation("9699b6738c"), [], 1,
                promote_token="9699b6738c")
    assert out.state.stable_revision is None
    assert [getattr(a, "reason", "") for a in out.actions].count("PromoteRefused") == 1
    again = judge(_typed({**status, **out.status}), None, RollbackPolicy(), NOW, _observation("9699b6738c"), [], 1,
                  promote_token="9699b6738c")
    assert not [a for a in again.actions if getattr(a, "reason", "") == "PromoteRefused"]


def test_a_promotion_with_fewer_than_min_samples_says_so_in_a_warning() -> None:
    """Issue 19: a user's promotion set a baseline from one sample without a word, and said "median of 1 samples"."""
    from sglang_operator.api.rollback import RollbackPolicy
    from sglang_operator.decisions.judging import judge

    out = judge(_typed(_verifying_status("9699b6738c", [(50.0, 2.7)])), None, RollbackPolicy(), NOW,
                _observation("9699b6738c"), [], 1, promote_token="9699b6738c")
    [event] = [a for a in out.actions if getattr(a, "reason", "") == "Promoted"]
    assert event.type == "Warning"  # type: ignore[union-attr]
    assert "(median of 1 sample)" in event.message  # type: ignore[union-attr]
    assert "only 1 sample of minSamples 5" in event.message  # type: ignore[union-attr]
    enough = judge(_typed(_verifying_status("9699b6738c", [(50.0, 2.7)] * 5)), None, RollbackPolicy(), NOW,
                   _observation("9699b6738c"), [], 1, promote_token="9699b6738c")
    [event] = [a for a in enough.actions if getattr(a, "reason", "") == "Promoted"]
    assert event.type == "Normal" and "minSamples" not in event.message  # type: ignore[union-attr]
    assert "(median of 5 samples)" in event.message  # type: ignore[union-attr]


def test_a_verdict_records_the_accept_rate_the_release_reported() -> None:
    """The ledger keeps SGLang's sglang:spec_accept_rate of the last sample with the verdict (history's ACCEPT
    RATE), none where the release reports none."""
    from sglang_operator.api.rollback import RollbackPolicy
    from sglang_operator.decisions.judging import judge

    status = _verifying_status("9699b6738c", [(50.0, 2.7)])
    status["analysis"]["lastSample"] = {"at": "2026-12-01T11:59:30Z", "kind": "Measured", "verdict": "Pass",
                                        "tokensPerSecond": 50.0, "acceptLength": 2.7, "acceptRate": 0.5671}
    out = judge(_typed(status), None, RollbackPolicy(), NOW, _observation("9699b6738c"), [], 1,
                promote_token="9699b6738c")
    assert out.status["revisions"][0]["acceptRate"] == 0.567
    del status["analysis"]["lastSample"]["acceptRate"]
    out = judge(_typed(status), None, RollbackPolicy(), NOW, _observation("9699b6738c"), [], 1,
                promote_token="9699b6738c")
    assert "acceptRate" not in out.status["revisions"][0]


def test_the_accept_rate_of_this_intervals_sample_comes_first() -> None:
    from sglang_operator.decisions.judging import accept_rate
    from sglang_operator.decisions.rollback_state import RollbackState
    from sglang_operator.decisions.sampling.model import Figures, Sample, SampleKind

    sample = Sample(SampleKind.MEASURED, "r1", NOW, NOW, Figures(accept_rate=0.42))
    assert accept_rate("r1", sample, RollbackState()) == 0.42
    assert accept_rate("r2", sample, RollbackState()) is None
    assert accept_rate("r1", Sample(SampleKind.MEASURED, "r1", NOW, NOW, Figures(accept_rate=float("nan"))),
                       RollbackState()) is None


def test_a_verdict_records_the_median_accept_rate_of_its_own_samples() -> None:
    """The verdict's accept rate is the median of the samples behind it (those that had one: a sample whose pods had
    not written SGLang's gauges yet has none), like its accept length, not the last sample's alone."""
    from sglang_operator.api.rollback import RollbackPolicy
    from sglang_operator.decisions.judging import judge

    status = _verifying_status("9699b6738c", [(50.0, 2.7)] * 3)
    status["analysis"]["validFigures"] = [
        {"tokensPerSecond": 50.0, "acceptLength": 2.7, "acceptRate": 0.70},
        {"tokensPerSecond": 51.0},
        {"tokensPerSecond": 52.0, "acceptLength": 2.8, "acceptRate": 0.66},
        {"tokensPerSecond": 53.0, "acceptLength": 2.6, "acceptRate": 0.68}]
    status["analysis"]["lastSample"] = {"at": "2026-12-01T11:59:30Z", "kind": "Measured", "verdict": "Pass",
                                        "tokensPerSecond": 53.0, "acceptRate": 0.1}
    out = judge(_typed(status), None, RollbackPolicy(), NOW, _observation("9699b6738c"), [], 1,
                promote_token="9699b6738c")
    record = out.status["revisions"][0]
    assert (record["acceptLength"], record["acceptRate"], record["samples"]) == (2.7, 0.68, 4)
