"""The tuning's search space: SGLang's shape rules, the release's rules through the spec, objectives and speedups."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sglang_operator.api.server import parse
from sglang_operator.decisions.tuning import (
    Objective,
    ObjectiveKind,
    Point,
    SearchSpace,
    TrialLevelFigures,
    TrialResult,
    TrialVerdict,
    enumerate_space,
    objective_value,
    spec_validator,
    speedups,
)

SAMPLES = Path(__file__).resolve().parents[3] / "samples"


def P(s: int, k: int, n: int) -> Point:
    return Point(num_steps=s, eagle_topk=k, num_draft_tokens=n)


def test_derived_draft_tokens_refuse_nothing_and_keep_every_valid_point() -> None:
    """A tuning without numDraftTokens (``derived_draft_tokens``): chains get numSteps + 1 only and each tree the
    values up to its numSteps × eagleTopk + 1, so none is refused for a count nobody listed; the valid points are
    those of the same values listed."""
    values = dict(num_steps=range(1, 9), eagle_topk=(1, 2, 4), num_draft_tokens=range(2, 34))
    derived_valid, derived_invalid = enumerate_space(SearchSpace(**values, derived_draft_tokens=True))
    listed_valid, listed_invalid = enumerate_space(SearchSpace(**values))
    assert derived_invalid == [] and len(listed_invalid) > 400
    assert derived_valid == listed_valid and len(derived_valid) == 8 + sum(s * k for s in range(1, 9) for k in (2, 4))


def test_default_space_counts_invalid_points_and_keeps_sglang_rules() -> None:
    valid, invalid = enumerate_space(SearchSpace())
    # chains: one per numSteps; trees: numDraftTokens <= steps * topk + 1 (the sweep script's filter)
    assert len(valid) == 95 and len({p.label for p in valid}) == 95
    assert all(p.num_draft_tokens == p.num_steps + 1 for p in valid if p.eagle_topk == 1)
    assert all(2 <= p.num_draft_tokens <= p.num_steps * p.eagle_topk + 1 for p in valid)
    assert P(8, 8, 64) in valid and P(3, 1, 4) in valid and P(7, 4, 32) not in valid
    reasons = {i.point.label: i.reason for i in invalid}
    assert "adjusted to speculative_num_steps + 1" in reasons["3/1/8"]
    assert "numDraftTokens 32 > numSteps × eagleTopk + 1 = 29" in reasons["7/4/32"]
    assert valid == sorted(valid, key=Point.cost_key)  # cheapest first: fewer draft tokens, then fewer steps


def test_space_is_normalised_and_camel_case() -> None:
    space = SearchSpace.model_validate({"numSteps": [3, 1, 3], "eagleTopk": [1], "numDraftTokens": []})
    assert space.num_steps == (1, 3)
    valid, invalid = enumerate_space(space)
    assert [p.label for p in valid] == ["1/1/2", "3/1/4"] and invalid == []
    assert P(3, 1, 4).model_dump(by_alias=True) == {"numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4}
    with pytest.raises(ValueError, match="numDraftTokens needs at least one value"):
        SearchSpace(eagle_topk=(1, 2), num_draft_tokens=())


def test_release_rules_refuse_trees_under_spec_v2() -> None:
    """The published known-good sample runs spec v2 (SGLANG_ENABLE_SPEC_V2=1), which needs eagleTopk 1."""
    spec = parse(yaml.safe_load((SAMPLES / "qwen3.6-27b-known-good.yaml").read_text())).spec
    valid, invalid = enumerate_space(SearchSpace(num_steps=(1, 2, 3), eagle_topk=(1, 2), num_draft_tokens=(4,)),
                                     spec_validator(spec))
    assert [p.label for p in valid] == ["1/1/2", "2/1/3", "3/1/4"]
    tree = {i.point.label: i.reason for i in invalid}
    assert "specV2 needs eagleTopk 1" in tree["2/2/4"] and "specV2 needs eagleTopk 1" in tree["3/2/4"]


def _trial(point: Point | None, **levels: tuple[float, float, float, float]) -> TrialResult:
    figs = tuple(TrialLevelFigures(concurrency=int(c[1:]), decode_tokens_per_second=d, output_tokens_per_second=o,
                              itl_p95_seconds=itl, ttft_p95_seconds=ttft)
                 for c, (d, o, itl, ttft) in levels.items())
    return TrialResult(point=point, figures=figs)


def test_objectives_are_functions_of_the_figures() -> None:
    t = _trial(P(3, 1, 4), c1=(52.0, 51.0, 0.03, 0.2), c16=(30.0, 480.0, 0.06, 1.5), c32=(20.0, 600.0, 0.09, 4.0))
    assert objective_value(Objective(), t) == 52.0
    assert objective_value(Objective(kind=ObjectiveKind.OUTPUT_TOKENS_PER_SECOND, concurrency=16), t) == 480.0
    assert objective_value(Objective(kind=ObjectiveKind.OUTPUT_TOKENS_PER_SECOND, concurrency=8), t) is None
    goodput = Objective(kind=ObjectiveKind.GOODPUT, itl_p95_limit_seconds=0.07, ttft_p95_limit_seconds=2.0)
    assert objective_value(goodput, t) == 480.0  # c32 breaks both limits
    strict = goodput.model_copy(update={"itl_p95_limit_seconds": 0.01})
    assert objective_value(strict, t) == 0.0
    failed = TrialResult(point=P(8, 1, 9), verdict=TrialVerdict.FAILED, reason="RuntimeError: Not enough memory.")
    assert objective_value(Objective(), failed) is None
    with pytest.raises(ValueError, match="goodput needs"):
        Objective(kind=ObjectiveKind.GOODPUT)
    with pytest.raises(ValueError, match="concurrency 1"):
        Objective(concurrency=4)


def test_speedup_per_level_against_the_control_trial() -> None:
    trials = [_trial(None, c1=(21.0, 20.0, 0, 0), c16=(17.0, 260.0, 0, 0)),
              _trial(P(3, 1, 4), c1=(52.0, 50.0, 0, 0), c16=(30.0, 520.0, 0, 0)),
              _trial(P(3, 1, 4), c1=(52.0, 54.0, 0, 0), c16=(30.0, 520.0, 0, 0))]
    assert speedups(trials, P(3, 1, 4)) == {1: pytest.approx(2.6), 16: pytest.approx(2.0)}
