"""``spec.algorithm.startNumSteps``: the default search's climb over numSteps starts there (the demo's regressed
1/1/2 then climbs 1 → 2 → 3 …); unset it starts at SGLang's default 3, as before. ``tune start --start-steps``
writes it."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from e2e.policies import BAD, LOCAL
from sglang_operator.api.server import parse
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.api.tuning_status import LevelFigures, SGLangTuningStatus, Trial
from sglang_operator.decisions.tuning import trials as plan
from sglang_operator.plugin import tuneplan

SERVER: dict[str, Any] = yaml.safe_load((LOCAL / BAD).read_text())


def run(start: int | None) -> list[str]:
    """The settings the search starts, in order, each chain measured at 50 − 5 × |steps − 3| tok/s."""
    body = copy.deepcopy(SERVER)
    server = parse({**body, "metadata": {"name": "s", "namespace": "ns"}}).spec
    algorithm = {"startNumSteps": start} if start is not None else {}
    spec = SGLangTuningSpec.model_validate({"serverRef": {"name": "s"}, "parameters": {"numSteps": {
        "min": 1, "max": 5}}, "budget": {"maxTrialCount": 9}, "algorithm": algorithm})
    valid, _ = plan.points(spec.parameters, server)
    status = SGLangTuningStatus()
    out = []
    for i in range(20):
        step = plan.next_step(spec, status, valid, 0)
        if step.kind != "start":
            break
        assert step.settings is not None
        decode = 20.0 if not step.settings.speculative else 50.0 - 5 * abs((step.settings.num_steps or 0) - 3)
        trial = Trial(name=f"t-{i}", settings=step.settings, verdict="Completed", levels=[LevelFigures(
            concurrency=1, decode_tokens_per_second=decode, output_tokens_per_second=decode, requests=4)])
        status = status.model_copy(update={"trials": [*status.trials, trial]})
        out.append(step.settings.summary())
    return out


def test_the_climb_starts_where_the_spec_says() -> None:
    from_one = run(1)
    assert from_one[:5] == ["no speculation", "1/1/2", "2/1/3", "3/1/4", "4/1/5"], from_one
    assert run(None)[:3] == ["no speculation", "3/1/4", "4/1/5"]
    assert run(5)[:4] == ["no speculation", "5/1/6", "4/1/5", "3/1/4"]
    assert run(9)[:2] == ["no speculation", "5/1/6"]  # the nearest value of parameters.numSteps


def test_tune_start_writes_the_start() -> None:
    body = tuneplan.tuning_body(tuneplan.StartOptions(server="s", steps="1-5", start_steps=1))
    assert body["spec"]["algorithm"] == {"startNumSteps": 1}
