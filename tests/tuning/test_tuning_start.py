"""The default search's climb over numSteps starts at the tuned server's own numSteps (``status.setup.numSteps``,
recorded when the tuning began), so the demo's regressed 1/1/2 climbs 1 → 2 → 3 …; without a recorded setup it starts
at SGLang's default 3, as before."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from e2e.policies import BAD, LOCAL
from sglang_operator.api import tuning as api
from sglang_operator.api.server import parse
from sglang_operator.decisions.tuning import known_best
from sglang_operator.decisions.tuning import trials as plan

SERVER: dict[str, Any] = yaml.safe_load((LOCAL / BAD).read_text())


def run(setup_steps: int | None) -> list[str]:
    """The settings the search starts, in order, each chain measured at 50 − 5 × |steps − 3| tok/s."""
    body = copy.deepcopy(SERVER)
    if setup_steps is not None:
        body["spec"]["speculative"]["numSteps"] = setup_steps
    server = parse({**body, "metadata": {"name": "s", "namespace": "ns"}}).spec
    spec = api.SGLangTuningSpec.model_validate({"serverRef": {"name": "s"}, "parameters": {"numSteps": {
        "min": 1, "max": 5}}, "budget": {"maxTrialCount": 9}})
    valid, _ = plan.points(spec.parameters, server)
    setup = known_best.tuning_setup(server, spec.workload) if setup_steps is not None else None
    status = api.SGLangTuningStatus(setup=setup)
    out = []
    for i in range(20):
        step = plan.next_step(spec, status, valid, 0)
        if step.kind != "start":
            break
        assert step.settings is not None
        decode = 20.0 if not step.settings.speculative else 50.0 - 5 * abs((step.settings.num_steps or 0) - 3)
        trial = api.Trial(name=f"t-{i}", settings=step.settings, verdict="Completed", levels=[api.LevelFigures(
            concurrency=1, decode_tokens_per_second=decode, output_tokens_per_second=decode, requests=4)])
        status = status.model_copy(update={"trials": [*status.trials, trial]})
        out.append(step.settings.summary())
    return out


def test_the_climb_starts_at_the_servers_own_steps() -> None:
    from_one = run(1)
    assert from_one[:5] == ["no speculation", "1/1/2", "2/1/3", "3/1/4", "4/1/5"], from_one
    assert run(None)[:3] == ["no speculation", "3/1/4", "4/1/5"]
    assert run(5)[:4] == ["no speculation", "5/1/6", "4/1/5", "3/1/4"]
