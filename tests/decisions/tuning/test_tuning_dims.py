"""The search's further dimensions (issue 17 item 1): ``parameters.maxRunningRequests`` and ``cudaGraphMaxBs`` are
dimensions of the space (rendered into the trial's spec under the release's flag name), and ``parameters.adaptive``
runs one adaptive-mode trial of the best static point, where the release's rules accept it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from e2e.policies import BAD, LOCAL
from sglang_operator import builders
from sglang_operator.api.server import parse
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.api.tuning_status import LevelFigures as ApiLevelFigures
from sglang_operator.api.tuning_status import SGLangTuningStatus, Trial, TrialSettings
from sglang_operator.decisions.tuning import (
    Algorithm,
    Point,
    SearchSettings,
    SearchSpace,
    TrialLevelFigures,
    TrialResult,
    decide,
    enumerate_space,
    suggest,
)
from sglang_operator.decisions.tuning import trials as plan

SERVER: dict[str, Any] = yaml.safe_load((LOCAL / BAD).read_text())  # SGLang 0.5.10: no adaptive mode
SERVER["metadata"]["namespace"] = "ns"


def server(version: str) -> dict[str, Any]:
    """The published server on another release (spec v1: SGLang 0.5.11 runs adaptive mode there only)."""
    body = copy.deepcopy(SERVER)
    body["spec"]["sglang"] = {"image": f"lmsysorg/sglang:v{version}-cu129"}
    body["spec"]["speculative"]["specV2"] = False
    return body


def tuning(budget: int | None = None, algorithm: str | None = None, seed: int = 0,
           **parameters: Any) -> SGLangTuningSpec:
    """A tuning of ``parameters`` (numSteps 1–6 unless given), ``budget`` maxTrialCount, ``algorithm``."""
    body: dict[str, Any] = {"serverRef": {"name": "qwen36-27b"},
                            "parameters": {"numSteps": {"min": 1, "max": 6}, **parameters}}
    if budget is not None:
        body["budget"] = {"maxTrialCount": budget}
    if algorithm is not None:
        body["algorithm"] = {"algorithmName": algorithm, "seed": seed}
    return SGLangTuningSpec.model_validate(body)


def speed(p: Point | None, adaptive_gain: float = 1.0) -> float:
    """A stand-in for decode tok/s: a hump over numSteps at 4, more running requests and a larger CUDA-graph batch
    slightly faster (so the climbs over them have a direction), adaptive mode ``adaptive_gain`` × its static
    point."""
    if p is None:
        return 100.0
    v = 200.0 - 6.0 * (p.num_steps - 4) ** 2 + 0.2 * (p.max_running_requests or 0) + 0.1 * (p.cuda_graph_max_bs or 0)
    return v * (adaptive_gain if p.adaptive else 1.0)


def run(spec: SGLangTuningSpec, body: dict[str, Any], f: Callable[[Point | None], float]) -> list[Trial]:
    """The tuning to its end through :func:`plan.next_step` alone (what the controller does), each trial measured
    as ``f`` says; checks on the way that a resumed tuning (the trials so far replayed from status) proposes the
    same next step."""
    valid, _ = plan.points(spec.parameters, parse(body).spec)
    trials: list[Trial] = []
    for n in range(200):
        status = SGLangTuningStatus(started_at="2026-01-01T00:00:00Z", trials=list(trials))
        step = plan.next_step(spec, status, valid, 0)
        resumed = plan.next_step(spec, SGLangTuningStatus.model_validate(status.dump()), valid, 0)
        assert resumed == step
        if step.kind == "finish":
            return trials
        assert step.kind == "start" and step.settings is not None
        value = f(plan.point_of(step.settings))
        trials.append(Trial(name=plan.trial_name("t", n), settings=step.settings, verdict="Completed",
                                levels=[ApiLevelFigures(concurrency=1, decode_tokens_per_second=value,
                                                         output_tokens_per_second=value)], objective=value))
    raise AssertionError("the tuning did not end")


def test_unset_dimensions_leave_the_space_as_it_was() -> None:
    valid, invalid = enumerate_space(SearchSpace(num_steps=(1, 2, 3), eagle_topk=(1, 2), num_draft_tokens=(2, 4)))
    assert [p.label for p in valid] == ["1/1/2", "1/2/2", "2/2/2", "3/2/2", "2/1/3", "2/2/4", "3/1/4", "3/2/4"]
    assert all(p.max_running_requests is None and p.cuda_graph_max_bs is None and not p.adaptive
               for p in [*valid, *(i.point for i in invalid)])
    assert plan.settings_of(valid[0]) == TrialSettings(num_steps=1, eagle_topk=1, num_draft_tokens=2)


def test_max_running_requests_and_cuda_graph_max_bs_multiply_the_space() -> None:
    space = SearchSpace(num_steps=(1, 2, 3, 4), eagle_topk=(1,), num_draft_tokens=(),
                        max_running_requests=(32, 8, 16), cuda_graph_max_bs=(16, 8))
    valid, invalid = enumerate_space(space)
    assert len(valid) == 4 * 3 * 2 and invalid == []
    assert [p.label for p in valid[:7]] == ["1/1/2 mrr 8 bs 8", "1/1/2 mrr 8 bs 16", "1/1/2 mrr 16 bs 8",
                                            "1/1/2 mrr 16 bs 16", "1/1/2 mrr 32 bs 8", "1/1/2 mrr 32 bs 16",
                                            "2/1/3 mrr 8 bs 8"]  # the smaller values are the cheaper ones
    # through the API and the server's release (SGLang 0.5.10 accepts every one of them)
    spec = tuning(numSteps={"min": 1, "max": 4}, maxRunningRequests={"list": [8, 16, 32]},
                  cudaGraphMaxBs={"min": 8, "max": 16, "step": 8})
    api_valid, api_invalid = plan.points(spec.parameters, parse(SERVER).spec)
    assert api_valid == valid and api_invalid == []
    settings = plan.settings_of(valid[3])
    assert settings.summary() == valid[3].label == "1/1/2 mrr 16 bs 16"
    assert plan.point_of(settings) == valid[3]
    assert plan.planned_trials(spec, api_valid) == spec.budget.max_trial_count  # 24 points, the control, repeats


@pytest.mark.parametrize(("version", "flag"), [("0.5.10", "--cuda-graph-max-bs"),
                                               ("0.5.19", "--cuda-graph-max-bs-decode"),
                                               ("0.5.20", "--cuda-graph-max-bs-decode"),
                                               ("0.5.23", "--cuda-graph-max-bs-decode")])
def test_a_trial_renders_its_dimensions_under_the_releases_flag_names(version: str, flag: str) -> None:
    body = SERVER if version == "0.5.10" else server(version)
    settings = plan.settings_of(Point(num_steps=3, eagle_topk=1, num_draft_tokens=4, max_running_requests=12,
                                      cuda_graph_max_bs=24))
    spec = plan.trial_spec(body["spec"], settings)
    assert spec["memory"] == {**body["spec"]["memory"], "maxRunningRequests": 12, "cudaGraphMaxBs": 24}
    args = builders.render(parse({**body, "spec": spec})).command.args
    assert args[args.index(flag) + 1] == "24" and args[args.index("--max-running-requests") + 1] == "12"
    assert [a for a in args if a.startswith("--cuda-graph")] == [flag]
    assert "--cuda-graph-max-bs" not in body["spec"].get("extraArgs", [])  # a copy: the server's spec is kept
    assert "cudaGraphMaxBs" not in body["spec"]["memory"]


def test_the_climbs_over_running_requests_and_graph_batch_size_find_the_best_values() -> None:
    spec = tuning(maxRunningRequests={"list": [4, 8, 16, 32, 64]}, cudaGraphMaxBs={"list": [8, 16, 32, 64]},
                  budget=20)
    trials = run(spec, SERVER, speed)
    assert len(trials) <= 20  # every trial counts, the control trial included
    best, _ = plan.recommendation(spec, trials)
    assert best is not None and best.summary == "4/1/5 mrr 64 bs 64"  # the optimum of 120 valid points
    started = [t.settings.summary() for t in trials]
    assert started[1] == "3/1/4 mrr 16 bs 16"  # SGLang's 3 steps, at the middle values of both dimensions


@pytest.mark.parametrize("algorithm", ["Default", "Grid", "Random"])
@pytest.mark.parametrize(("gain", "winner"), [(1.3, "adaptive 4/1/5"), (0.9, "4/1/5")])
def test_the_adaptive_trial_runs_once_after_the_search_and_competes(algorithm: str, gain: float,
                                                                    winner: str) -> None:
    spec = tuning(adaptive=True, algorithm=algorithm, seed=1, budget=12)
    body = server("0.5.12")  # from 0.5.13 SGLang takes numSteps in its candidate steps only (1, 3, 7 by default)
    valid, _ = plan.points(spec.parameters, parse(body).spec)
    assert sorted(p.label for p in valid if p.adaptive) == [f"adaptive {s}/1/{s + 1}" for s in range(1, 7)]
    trials = run(spec, body, lambda p: speed(p, gain))
    labels = [t.settings.summary() for t in trials]
    adaptive = [i for i, label in enumerate(labels) if label.startswith("adaptive")]
    assert adaptive and labels[adaptive[0]] == "adaptive 4/1/5"  # the best static point, in adaptive mode
    assert {labels[i] for i in adaptive} == {"adaptive 4/1/5"}  # the one adaptive trial (the repeats may measure
    # it again, as a finalist)
    new_after = [label for label in labels[adaptive[0] + 1:] if labels.index(label) > adaptive[0]]
    assert new_after == []  # after the search converged: no new static point follows it
    # Grid and Random: 6 chains + the control trial + the adaptive trial; the default search converges and
    # repeats its finalists within maxTrialCount, the adaptive trial counted
    assert len(trials) <= plan.planned_trials(spec, valid) == (12 if algorithm == "Default" else 6 + 2)
    assert algorithm == "Default" or len(trials) == 6 + 2
    assert trials[adaptive[0]].settings.adaptive is True
    run_spec = plan.trial_spec(body["spec"], trials[adaptive[0]].settings)
    assert run_spec["speculative"]["adaptive"] == {"enabled": True}
    assert "--speculative-adaptive" in builders.render(parse({**body, "spec": run_spec})).command.args
    best, _ = plan.recommendation(spec, trials)
    assert best is not None and best.summary == winner


def test_never_on_a_release_without_adaptive_mode() -> None:
    spec = tuning(adaptive=True, budget=12)
    valid, invalid = plan.points(spec.parameters, parse(SERVER).spec)  # SGLang 0.5.10
    assert not any(p.adaptive for p in valid)
    refused = [i for i in invalid if i.point.adaptive]
    assert len(refused) == 6 and all("SGLang 0.5.10 has no --speculative-adaptive" in i.reason
                                     and "0.5.11" in i.reason for i in refused)
    records = plan.invalid_records("t", refused, 16)
    assert all(r.verdict == "Invalid" and r.settings.adaptive for r in records)
    trials = run(spec, SERVER, lambda p: speed(p, 2.0))
    assert not any(t.settings.adaptive for t in trials)
    assert [t.settings for t in trials] == [t.settings for t in run(tuning(budget=12), SERVER,
                                                                     speed)]
    assert plan.planned_trials(spec, valid) == 12


def test_no_adaptive_trial_when_the_release_refuses_the_best_point_in_adaptive_mode() -> None:
    """From 0.5.13 SGLang refuses a numSteps outside the adaptive config's candidate steps (1, 3, 7 by default):
    the best static point 4/1/5 has no adaptive trial then, and its refusal is SGLang's message."""
    spec = tuning(adaptive=True, budget=12)
    body = server("0.5.23")
    valid, invalid = plan.points(spec.parameters, parse(body).spec)
    assert sorted(p.label for p in valid if p.adaptive) == ["adaptive 1/1/2", "adaptive 3/1/4"]
    reasons = {i.point.label: i.reason for i in invalid}
    assert "--speculative-num-steps=4 is not in the adaptive config candidate_steps" in reasons["adaptive 4/1/5"]
    trials = run(spec, body, lambda p: speed(p, 1.5))
    assert not any(t.settings.adaptive for t in trials) and len(trials) <= 12


def test_no_adaptive_trial_when_the_best_static_point_is_a_tree() -> None:
    """SGLang's adaptive mode needs a chain (the CRD's adaptive-chain rule): the tree's adaptive variant is counted
    Invalid and never run; the adaptive chains are valid, but none of them is the best static point."""
    def tree_wins(p: Point | None) -> float:
        return 100.0 if p is None else speed(p) + (50.0 if p.eagle_topk > 1 else 0.0)

    spec = tuning(adaptive=True, numSteps={"list": [2, 3, 4]}, eagleTopk={"list": [1, 2]},
                  numDraftTokens={"list": [4, 6]}, algorithm="Grid")
    body = server("0.5.12")
    _, invalid = plan.points(spec.parameters, parse(body).spec)
    assert any("adaptive needs eagleTopk 1" in i.reason for i in invalid if i.point.adaptive)
    trials = run(spec, body, tree_wins)
    assert not any(t.settings.adaptive for t in trials)
    best, _ = plan.recommendation(spec, trials)
    assert best is not None and best.settings.eagle_topk == 2


def test_a_search_replayed_from_any_prefix_proposes_the_same_next_point() -> None:
    valid, _ = enumerate_space(SearchSpace(num_steps=(1, 2, 3, 4, 5), eagle_topk=(1,), num_draft_tokens=(),
                                           max_running_requests=(8, 16, 32), adaptive=True))
    settings = SearchSettings(max_trial_count=10)
    done: list[TrialResult] = []
    while not (s := suggest(settings, valid, done)).done:
        done.append(TrialResult(point=s.point, figures=(TrialLevelFigures(
            concurrency=1, decode_tokens_per_second=speed(s.point, 1.2),
            output_tokens_per_second=speed(s.point, 1.2)),)))
    assert len(done) <= 10 and sum(t.point is not None and t.point.adaptive for t in done) >= 1
    for k in range(len(done)):
        assert suggest(settings, valid, done[:k]).point == done[k].point
    d = decide(done, settings.objective)
    assert d is not None and d.best is not None and d.best.adaptive and d.best.max_running_requests == 32
    for algorithm in (Algorithm.GRID, Algorithm.RANDOM):
        assert suggest(SearchSettings(algorithm=algorithm, max_trial_count=3), valid, []).control
