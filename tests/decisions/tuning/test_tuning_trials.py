"""The tuning controller's pure decisions (decisions/tuning/trials.py) and the Shadow trial's workload
(builders/tuning.py): a trial's spec, the search replayed from ``status.trials`` (a resumed tuning repeats no
finished trial and measures the running one again), the recommendation with its speedups, and a trial Deployment
that the server's Service never selects."""

from __future__ import annotations

from typing import Any

import yaml

from e2e.policies import BAD, LOCAL
from sglang_operator import builders
from sglang_operator.api import tuning as api
from sglang_operator.api.server import parse
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.api.tuning_status import LevelFigures, SGLangTuningStatus, Trial, TrialSettings
from sglang_operator.builders.labels import selector_labels
from sglang_operator.builders.tuning import TUNING_LABEL, trial_workload
from sglang_operator.decisions.tuning import trials as plan
from sglang_operator.decisions.tuning.search import MAX_MEASUREMENTS

SERVER: dict[str, Any] = yaml.safe_load((LOCAL / BAD).read_text())
SERVER["metadata"]["namespace"] = "ns"
TUNING = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": "t", "namespace": "ns", "uid": "u"}}


def spec(**extra: Any) -> SGLangTuningSpec:
    return SGLangTuningSpec.model_validate({"serverRef": {"name": "qwen36-27b"},
                                                "parameters": {"numSteps": {"min": 1, "max": 5}}, **extra})


def completed(name: str, settings: TrialSettings, decode: float, output16: float | None = None) -> Trial:
    levels = [LevelFigures(concurrency=1, decode_tokens_per_second=decode, output_tokens_per_second=decode)]
    if output16 is not None:
        levels.append(LevelFigures(concurrency=16, decode_tokens_per_second=output16 / 16,
                                       output_tokens_per_second=output16))
    return Trial(name=name, settings=settings, verdict="Completed", levels=levels, objective=decode)


def chain(steps: int) -> TrialSettings:
    return TrialSettings(num_steps=steps, eagle_topk=1, num_draft_tokens=steps + 1)


def test_the_control_trial_drops_speculative_decoding_and_a_point_replaces_only_its_settings() -> None:
    off = plan.trial_spec(SERVER["spec"], TrialSettings(speculative=False))
    assert "speculative" not in off and off["replicas"] == 1
    on = plan.trial_spec(SERVER["spec"], chain(3))
    assert on["speculative"] == {**SERVER["spec"]["speculative"], "numSteps": 3, "eagleTopk": 1,
                                 "numDraftTokens": 4}
    assert on["model"] == SERVER["spec"]["model"] and on["nodeSelector"] == SERVER["spec"]["nodeSelector"]
    assert SERVER["spec"]["speculative"]["numSteps"] == 1  # a copy
    command = builders.render(parse({**SERVER, "spec": on})).command.command_line
    assert "--speculative-num-steps 3" in command and "--speculative-num-draft-tokens 4" in command


def test_the_search_starts_with_the_control_trial_and_resumes_from_status_without_repeating() -> None:
    s = spec()
    valid, invalid = plan.points(s.parameters, parse(SERVER).spec)
    assert [p.label for p in valid] == ["1/1/2", "2/1/3", "3/1/4", "4/1/5", "5/1/6"] and not invalid
    status = SGLangTuningStatus(started_at="2026-01-01T00:00:00Z")
    first = plan.next_step(s, status, valid, 0)
    assert first.kind == "start" and first.settings == TrialSettings(speculative=False)
    done = [completed("t-trial-0", TrialSettings(speculative=False), 21.0), completed("t-trial-1", chain(3), 52.0)]
    nxt = plan.next_step(s, status.model_copy(update={"trials": done}), valid, 10)
    assert nxt.kind == "start" and nxt.settings == chain(4)  # the climb goes on; 3/1/4 is not run again
    running = Trial(name="t-trial-2", settings=chain(4), started_at="2026-01-01T00:01:00Z")
    again = plan.next_step(s, status.model_copy(update={"trials": [*done, running]}), valid, 10)
    assert again.kind == "resume" and again.trial == running  # a restart measures the running trial again
    over = plan.next_step(s, status.model_copy(update={"trials": done}), valid, s.budget.max_duration_seconds)
    assert over.kind == "finish" and "maxDurationSeconds" in over.reason
    assert plan.started_count([*done, running]) == 3
    assert plan.trial_name("t", 3) == "t-trial-3"
    # at most: the control trial, the 5 points, 3 finalists measured again as long as the noise rule asks
    assert plan.planned_trials(s, len(valid)) == min(1 + 5 + 3 * (MAX_MEASUREMENTS - 1), 24)
    grid = spec(algorithm={"algorithmName": "Grid"})
    assert plan.planned_trials(grid, len(valid)) == len(valid) + 1


def test_invalid_points_are_recorded_with_the_releases_reason_and_never_proposed() -> None:
    s = spec(parameters={"numSteps": {"list": [2, 3]}, "eagleTopk": {"list": [1, 2]}})
    valid, invalid = plan.points(s.parameters, parse(SERVER).spec)
    assert all(p.eagle_topk == 1 for p in valid)
    assert any("specV2" in p.reason for p in invalid)  # spec v2 takes chains only (SGLang's rule)
    records = plan.invalid_records("t", invalid, 2)
    assert len(records) == 2 and all(r.verdict == "Invalid" and r.reason for r in records)
    assert plan.started_count(records) == 0 and plan.results(records) == []


def test_the_recommendation_per_level_with_speedups_and_a_failed_point_never_wins() -> None:
    trials = [
        completed("t-trial-0", TrialSettings(speculative=False), 21.0, 150.0),
        completed("t-trial-1", chain(3), 52.0, 90.0),
        Trial(name="t-trial-2", settings=chain(4), verdict="Failed", reason="RuntimeError: Not enough memory."),
        completed("t-trial-3", chain(1), 36.0, 210.0),
        completed("t-trial-4", chain(3), 52.5, 91.0),
        completed("t-trial-5", chain(1), 35.5, 209.0),
    ]
    s = spec(workload={"concurrency": [{"level": 1, "weight": 3}, {"level": 16}]})
    best, per_level = plan.recommendation(s, trials)
    assert best is not None and best.summary == "3/1/4" and best.trial == "t-trial-1"
    by_level = {b.concurrency: b for b in per_level}
    assert by_level[1].summary == "3/1/4" and by_level[16].summary == "1/1/2"
    assert by_level[16].speedup == round(209.5 / 150.0, 2) == 1.40  # one computation, two decimals, stored so
    assert by_level[1].objective == 52.25 and by_level[16].objective == 209.5  # per level: tok/s
    assert (by_level[1].objective_summary, by_level[16].objective_summary) == ("52.2 tok/s", "209.5 tok/s")
    # overall, over two weighted levels: the weighted ratio to the control trial, named so for kubectl get
    assert best.objective is not None and best.objective_summary == f"{best.objective:.2f}× control"
    assert best.speedup == by_level[1].speedup  # output tok/s at the objective's level (1), the same figure
    assert plan.counts(trials) == {"trials_completed": 5, "trials_failed": 1, "trials_pruned": 0}


def test_the_weights_of_the_levels_decide_the_winner() -> None:
    """The overall objective is Σ weight × (level objective ÷ the control trial's) ÷ Σ weight: 3/1/4 is 2.48× the
    control trial's decode tok/s at level 1 and 0.60× its output tok/s at 16, 1/1/2 is 1.70× and 1.40×. Weighted
    towards level 1, 3/1/4 wins; towards level 16, 1/1/2; the trial's objective says the same."""
    trials = [
        completed("t-trial-0", TrialSettings(speculative=False), 21.0, 150.0),
        completed("t-trial-1", chain(3), 52.0, 90.0),
        completed("t-trial-2", chain(1), 36.0, 210.0),
        completed("t-trial-3", chain(3), 52.5, 91.0),
        completed("t-trial-4", chain(1), 35.5, 209.0),
    ]
    towards_1 = spec(workload={"concurrency": [{"level": 1, "weight": 3}, {"level": 16, "weight": 1}]})
    towards_16 = spec(workload={"concurrency": [{"level": 1, "weight": 1}, {"level": 16, "weight": 3}]})
    best_1, _ = plan.recommendation(towards_1, trials)
    best_16, _ = plan.recommendation(towards_16, trials)
    assert best_1 is not None and best_1.summary == "3/1/4"
    assert best_1.objective == round(((3 * 52.25 / 21 + 90.5 / 150) / 4), 3)
    assert best_16 is not None and best_16.summary == "1/1/2"
    assert best_16.objective == round((35.75 / 21 + 3 * 209.5 / 150) / 4, 3)
    score, levels = plan.trial_objective(towards_16, trials[1].levels, trials[:1])
    assert score is not None and abs(score - (52.0 / 21 + 3 * 90.0 / 150) / 4) < 1e-9
    assert [f.objective for f in levels] == [52.0, 90.0]  # each level's own objective, tok/s
    control, _ = plan.trial_objective(towards_16, trials[0].levels, [])
    assert control == 1.0  # the control trial is the reference
    single, _ = plan.trial_objective(spec(), trials[1].levels[:1], trials[:1])
    assert single == 52.0  # one level: the objective itself, tok/s
    # without a completed control trial the first completed trial (3/1/4: 52 and 90 tok/s) is the reference
    no_control = [Trial(name="t-trial-0", settings=TrialSettings(speculative=False), verdict="Failed",
                            reason="x"), *trials[1:]]
    best, _ = plan.recommendation(towards_1, no_control)
    assert best is not None and best.summary == "1/1/2"
    assert best.objective == round((3 * 35.75 / 52 + 209.5 / 90) / 4, 3)
    score, _ = plan.trial_objective(towards_1, trials[1].levels, no_control[:1])
    assert score == 1.0


def test_a_shadow_trial_is_owned_by_the_tuning_and_not_selected_by_the_servers_service() -> None:
    trial_spec = parse({**SERVER, "spec": plan.trial_spec(SERVER["spec"], chain(3))}).spec
    work = trial_workload(trial_spec, "qwen36-27b", "ns", "t-trial-1", TUNING)
    dep = work.manifest
    service_selector = builders.render(parse(SERVER)).service["spec"]["selector"]
    assert service_selector == selector_labels("qwen36-27b")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert not all(pod_labels.get(k) == v for k, v in service_selector.items())
    assert dep["metadata"]["name"] == "t-trial-1" and dep["spec"]["replicas"] == 1
    assert pod_labels[TUNING_LABEL] == "t" and pod_labels["app.kubernetes.io/component"] == "tuning-trial"
    assert dep["metadata"]["ownerReferences"][0] | {} == {"apiVersion": api.API_VERSION, "kind": api.KIND,
                                                          "name": "t", "uid": "u", "controller": True,
                                                          "blockOwnerDeletion": True}
    # the revision is the hash the server itself would run for these settings (what `tune apply` leads to)
    assert work.revision == builders.render(parse({**SERVER, "spec": {**trial_spec.model_dump(
        by_alias=True, exclude_none=True, mode="json")}})).revision


def test_the_tunings_series_are_exported_and_removed_with_it() -> None:
    from prometheus_client import REGISTRY

    from sglang_operator.process import telemetry

    telemetry.count_tuning_trial("ns", "tt", "Completed", "tt-trial-1", "3/1/4", 54.6)
    telemetry.count_tuning_trial("ns", "tt", "Failed", "tt-trial-2", "4/1/5", None)
    telemetry.set_tuning_speedups("ns", "tt", {"1": 2.41, "all": 2.41})
    labels = {"namespace": "ns", "sglang_tuning": "tt"}
    assert REGISTRY.get_sample_value("sglang_operator_tuning_trial_objective",
                                     {**labels, "trial": "tt-trial-1", "settings": "3/1/4"}) == 54.6
    assert REGISTRY.get_sample_value("sglang_operator_tuning_trials_total", {**labels, "verdict": "Failed"}) == 1
    assert REGISTRY.get_sample_value("sglang_operator_tuning_best_speedup", {**labels, "concurrency": "all"}) == 2.41
    telemetry.forget_tuning("ns", "tt")
    assert REGISTRY.get_sample_value("sglang_operator_tuning_trial_objective",
                                     {**labels, "trial": "tt-trial-1", "settings": "3/1/4"}) is None
    assert REGISTRY.get_sample_value("sglang_operator_tuning_trials_total", {**labels, "verdict": "Failed"}) is None
    assert REGISTRY.get_sample_value("sglang_operator_tuning_best_speedup", {**labels, "concurrency": "1"}) is None


def test_the_tuning_stops_once_a_trial_reaches_the_objectives_goal() -> None:
    """``objective.goal`` (Katib's): no further trial once a completed one reached it; below it the search goes on."""
    s = spec(objective={"objectiveMetricName": "decodeTokensPerSecond", "goal": 50})
    valid, _ = plan.points(s.parameters, parse(SERVER).spec)
    status = SGLangTuningStatus(started_at="2026-01-01T00:00:00Z")
    below = [completed("t-trial-0", TrialSettings(speculative=False), 21.0),
             completed("t-trial-1", chain(3), 49.9)]
    assert plan.next_step(s, status.model_copy(update={"trials": below}), valid, 10).kind == "start"
    reached = [*below, completed("t-trial-2", chain(4), 52.0)]
    step = plan.next_step(s, status.model_copy(update={"trials": reached}), valid, 10)
    assert step.kind == "finish" and "objective.goal 50 reached by t-trial-2 (4/1/5: 52)" in step.reason, step
    no_goal = spec()
    assert plan.next_step(no_goal, status.model_copy(update={"trials": reached}), valid, 10).kind == "start"
