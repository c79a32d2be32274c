"""``kubectl sglang tune`` (issue 17 item 5) without a cluster: ``start`` builds an SGLangTuning the API's Python
mirror accepts (and refuses bad options before anything is sent, with the closest choice); ``status`` shows the
trials, the recommendation and its speedup from a status fixture built from the API models (table and ``-o json``);
``plot`` draws a PNG with matplotlib (a clear error without it); ``apply``'s target spec carries the winner and
renders for the server's release, and its snippet is the YAML a Git repository needs. The write itself is undo's
(``tests/plugin/test_undo_plan.py``; on a cluster: ``e2e/tests/test_tune_apply.py``)."""

from __future__ import annotations

import builtins
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from sglang_operator import builders
from sglang_operator.api.server import parse
from sglang_operator.api.tuning import SGLangTuning, parse_tuning
from sglang_operator.api.tuning_status import (
    BestPoint,
    LevelFigures,
    SGLangTuningStatus,
    Trial,
    TrialSettings,
    objective_text,
    speedup_of,
)
from sglang_operator.plugin import tune, tuneplan
from sglang_operator.plugin.commands import app as kubectl_sglang

ROOT = Path(__file__).resolve().parents[2]
BAD: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-regressed.yaml").read_text())
SAMPLE: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-tuning.yaml").read_text())
runner = CliRunner()


def _levels(c1: tuple[float, float, float], c16: tuple[float, float, float]) -> list[LevelFigures]:
    return [LevelFigures(concurrency=c, decode_tokens_per_second=d, output_tokens_per_second=o, accept_length=a,
                         inter_token_latency_p50_seconds=0.02, inter_token_latency_p95_seconds=0.03)
            for c, (d, o, a) in ((1, c1), (16, c16))]


def _ratio(c1: tuple[float, float, float], c16: tuple[float, float, float]) -> float:
    """The sample's objective (decodeTokensPerSecond over levels 1 ×2 and 16): the weighted mean of c1's decode tok/s
    ÷ the control trial's 31 and c16's output tok/s ÷ its 380."""
    return round((2 * c1[0] / 31.0 + c16[1] / 380.0) / 3, 3)


def _trial(n: int, steps: int | None, topk: int | None, ndt: int | None, c1: tuple[float, float, float],
           c16: tuple[float, float, float], **extra: Any) -> Trial:
    settings = TrialSettings(speculative=steps is not None, num_steps=steps, eagle_topk=topk, num_draft_tokens=ndt)
    return Trial(name=f"qwen36-27b-tune-trial-{n}", settings=settings, verdict="Completed", levels=_levels(c1, c16),
                 objective=_ratio(c1, c16), **extra)


def fixture() -> SGLangTuning:
    """The published case, tuned: 3/1/4 wins at concurrency 1 (52 tok/s vs 36 without speculation ... 1/1/2 is the
    regressed default), 2/1/3 at 16; one trial ran out of memory. The sample weighs levels 1 and 16: a trial's
    objective is its weighted ratio to the control trial; each level's best is in tok/s."""
    trials = [
        _trial(0, None, None, None, (31.0, 29.0, 1.0), (25.0, 380.0, 1.0)),  # control: no speculation
        _trial(1, 1, 1, 2, (36.0, 34.0, 1.75), (28.0, 420.0, 1.75)),
        _trial(2, 3, 1, 4, (52.0, 49.0, 2.72), (30.0, 450.0, 2.72)),
        _trial(3, 2, 1, 3, (45.0, 42.0, 2.3), (31.0, 470.0, 2.3)),
        _trial(4, 4, 2, 6, (50.0, 47.0, 2.9), (27.0, 400.0, 2.9)),
        Trial(name="qwen36-27b-tune-trial-5", settings=TrialSettings(num_steps=6, eagle_topk=4, num_draft_tokens=16),
              verdict="Failed", reason="RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    ]
    best = BestPoint(trial=trials[2].name, settings=trials[2].settings, summary="3/1/4", objective=trials[2].objective,
                     objective_summary=objective_text(trials[2].objective, True), speedup=speedup_of(49.0, 29.0))
    per_level = [best.model_copy(update={"concurrency": 1, "objective": 52.0,
                                         "objective_summary": objective_text(52.0, False)}),
                 BestPoint(concurrency=16, trial=trials[3].name, settings=trials[3].settings, summary="2/1/3",
                           objective=470.0, objective_summary=objective_text(470.0, False),
                           speedup=speedup_of(470.0, 380.0))]
    status = SGLangTuningStatus(phase="Succeeded", progress="5/5", trials_total=5, trials_completed=4,
                                trials_failed=1, trials=trials, control_trial=trials[0].name, best=best,
                                best_per_level=per_level)
    return SGLangTuning.model_validate({**SAMPLE, "metadata": {**SAMPLE["metadata"], "namespace": "ns"},
                                        "status": status.dump()})


# --- start ---------------------------------------------------------------------------------------------------


def test_start_builds_a_tuning_the_api_accepts() -> None:
    body = tuneplan.tuning_body(tuneplan.StartOptions(
        server="qwen36-27b", namespace="ns", steps="1-8", topk="1,2,4", draft_tokens="2-16/2", concurrency="1:2,16",
        objective="OutputTokensPerSecond", max_trials=12, mode="shadow", adaptive=True, seed=7))
    tuning = parse_tuning({**body, "metadata": {**body["metadata"], "name": "x"}})
    spec = tuning.spec
    assert body["metadata"] == {"namespace": "ns", "generateName": "qwen36-27b-tune-"}
    assert spec.parameters.num_steps.values() == tuple(range(1, 9))
    assert spec.parameters.eagle_topk.values() == (1, 2, 4)
    assert spec.parameters.num_draft_tokens is not None and spec.parameters.num_draft_tokens.values() == (
        2, 4, 6, 8, 10, 12, 14, 16)
    assert spec.parameters.adaptive and spec.budget.max_trial_count == 12 and spec.algorithm.seed == 7
    assert spec.workload.levels() == (1, 16) and spec.workload.concurrency[0].weight == 2.0
    assert spec.objective.objective_metric_name.value == "outputTokensPerSecond"
    assert spec.objective.concurrency == 16  # the highest level when not given
    long = tuneplan.tuning_body(tuneplan.StartOptions(server="s" * 63))
    assert len(long["metadata"]["generateName"]) + 5 <= 52  # the API server adds five characters


@pytest.mark.parametrize(("opts", "said"), [
    ({"steps": "1..8"}, "--steps '1..8': write a range (1-8, 1-8/2) or a list (1,2,4)"),
    ({"objective": "goodputt"}, "did you mean goodput?"),
    ({"mode": "Inplace"}, "--mode InPlace needs --allow-disruption"),
    ({"mode": "shadw"}, "did you mean Shadow?"),
    ({"objective": "goodput"}, "goodput needs a limit"),  # the CRD's rule, from its Python mirror
    ({"steps": "8-1"}, "spec.parameters.numSteps.min is 8 but max is 1"),
    ({"concurrency": "1,x"}, "LEVEL:WEIGHT"),
    ({"concurrency": "4", "objective": "decodeTokensPerSecond"}, "add level 1 to spec.workload.concurrency"),
])
def test_start_refuses_bad_options_before_sending(opts: dict[str, Any], said: str) -> None:
    with pytest.raises(tuneplan.UsageError) as err:
        tuneplan.tuning_body(tuneplan.StartOptions(server="qwen36-27b", **opts))
    assert said in str(err.value)


def test_start_dry_run_prints_the_object_and_a_refusal_exits_2() -> None:
    out = runner.invoke(kubectl_sglang, ["tune", "start", "qwen36-27b", "-n", "ns", "--name", "t1", "--steps", "2-5",
                                         "--concurrency", "1,16", "--dry-run"])
    assert out.exit_code == 0, out.output
    doc = yaml.safe_load(out.output)
    assert doc["metadata"] == {"namespace": "ns", "name": "t1"}
    assert doc["spec"]["parameters"]["numSteps"] == {"min": 2, "max": 5}
    bad = runner.invoke(kubectl_sglang, ["tune", "start", "qwen36-27b", "--algorithm", "grd", "--dry-run"])
    assert bad.exit_code == 2 and "did you mean Grid?" in bad.output


# --- status --------------------------------------------------------------------------------------------------


def test_status_table_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tune, "_client", lambda: None)
    monkeypatch.setattr(tune, "_tuning", lambda _c, _ns, _n: fixture())
    out = runner.invoke(kubectl_sglang, ["tune", "status", "qwen36-27b-tune", "-n", "ns"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    row = next(line for line in lines if "trial-2" in line)
    assert "★" in row and "3/1/4" in row and "1.51" in row and "52.0" in row and "2.72" in row
    assert "◇" in next(line for line in lines if "trial-0" in line) and "no speculation" in out.output
    assert "qwen36-27b-tune-trial-5: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" in lines
    assert "c16 OUT TOK/S" in out.output and "OBJECTIVE (× CONTROL)" in out.output
    # the title says what the objective is: a weighted ratio, not decode tok/s
    assert "(decodeTokensPerSecond, weighted ratio to the control trial over c1 ×2, c16)" in out.output
    # the speedup as stored (two decimals), the same figure kubectl get's SPEEDUP column and the plot show
    assert ("best: 3/1/4 (qwen36-27b-tune-trial-2), objective 1.51× control, 1.69× no speculation (output tok/s at "
            "c1)") in out.output
    assert ("at concurrency 16: 2/1/3 (qwen36-27b-tune-trial-3), 470.0 tok/s, 1.24× no speculation (output tok/s at "
            "c16)") in out.output
    js = runner.invoke(kubectl_sglang, ["tune", "status", "qwen36-27b-tune", "-n", "ns", "-o", "json"])
    doc = json.loads(js.output)
    assert doc["server"] == "qwen36-27b" and doc["status"]["best"]["summary"] == "3/1/4"
    assert len(doc["status"]["trials"]) == 6 and doc["status"]["bestPerLevel"][1]["concurrency"] == 16


def test_status_of_a_new_tuning() -> None:
    fresh = SGLangTuning.model_validate({**SAMPLE, "status": None})
    header, rows = tuneplan.status_rows(fresh)
    assert rows == [] and header[-1] == "OBJECTIVE (× CONTROL)" and tuneplan.reason_lines(fresh) == []
    one_level = SGLangTuning.model_validate({**SAMPLE, "spec": {**SAMPLE["spec"], "workload": {"concurrency": [
        {"level": 1}]}}, "status": None})
    assert tuneplan.status_rows(one_level)[0][-1] == "OBJECTIVE (TOK/S)"
    assert tuneplan.objective_title(one_level) == "decodeTokensPerSecond"
    assert tuneplan.summary_lines(fresh) == ["phase: Pending, trials 0/? (completed 0, failed 0, pruned 0, invalid 0)",
                                             "no recommendation yet"]


# --- plot ----------------------------------------------------------------------------------------------------


def test_plot_writes_a_png(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    from sglang_operator.plugin import tuneplot
    from sglang_operator.plugin.tuneplot import plot_tuning

    out = plot_tuning(fixture(), tmp_path / "plots" / "tune.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    titles: list[str] = []
    real = tuneplot.panel_title

    def recorded(*a: Any) -> str:
        titles.append(real(*a))
        return titles[-1]

    monkeypatch.setattr(tuneplot, "panel_title", recorded)
    plot_tuning(fixture(), tmp_path / "again.png")
    # the speedup of each level's best as stored (bestPerLevel[].speedup), in the panel holding it, no other
    starred = [t for t in titles if "★" in t]
    assert starred == ["concurrency 1, topk 1\nno speculation: 31 tok/s\n★ 1.69× no speculation (output tok/s)",
                       "concurrency 16, topk 1\nno speculation: 380 tok/s\n★ 1.24× no speculation (output tok/s)"]
    with pytest.raises(ValueError, match="no measured trial"):
        plot_tuning(SGLangTuning.model_validate({**SAMPLE, "status": None}), tmp_path / "none.png")


def test_plot_without_matplotlib_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sglang_operator.plugin import tuneplot

    real = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    monkeypatch.setattr(tune, "_client", lambda: None)
    monkeypatch.setattr(tune, "_tuning", lambda _c, _ns, _n: fixture())
    with pytest.raises(tuneplot.PlotUnavailable, match=r"pip install 'sglang-operator\[plot\]'"):
        tuneplot.plot_tuning(fixture(), tmp_path / "x.png")
    out = runner.invoke(kubectl_sglang, ["tune", "plot", "qwen36-27b-tune", "-o", str(tmp_path / "x.png")])
    assert out.exit_code == 1 and "optional extra" in out.output and not (tmp_path / "x.png").exists()


# --- apply ---------------------------------------------------------------------------------------------------


def _renders(spec: dict[str, Any]) -> str:
    return " ".join(builders.render(parse({**BAD, "spec": spec})).command.args)


def test_the_winner_goes_into_the_spec_and_renders() -> None:
    best = fixture().status.best  # type: ignore[union-attr]
    assert best is not None
    target = tuneplan.winner_spec(BAD["spec"], best.settings)
    assert target["speculative"] == {**BAD["spec"]["speculative"], "numSteps": 3, "eagleTopk": 1,
                                     "numDraftTokens": 4}
    assert {k: v for k, v in target.items() if k != "speculative"} == {
        k: v for k, v in BAD["spec"].items() if k != "speculative"}
    assert "--speculative-num-steps 3" in _renders(target) and "--speculative-num-draft-tokens 4" in _renders(target)
    assert tuneplan.changed_keys(BAD["spec"], target) == ["speculative"]
    assert BAD["spec"]["speculative"]["numSteps"] == 1  # the input is not modified


def test_memory_graph_batch_adaptive_and_no_speculation() -> None:
    # an older spec with the CUDA-graph batch size in extraArgs (before spec.memory.cudaGraphMaxBs owned it)
    spec = {**copy.deepcopy(BAD["spec"]), "sglang": {"image": "lmsysorg/sglang:v0.5.23-cu129"},
            "memory": {"mambaSchedulerStrategy": "extra_buffer"}, "extraArgs": ["--cuda-graph-max-bs=8", "--page-size",
                                                                               "1"]}
    spec["speculative"]["specV2"] = False
    settings = TrialSettings(num_steps=3, eagle_topk=1, num_draft_tokens=4, adaptive=True, max_running_requests=16,
                             cuda_graph_max_bs=32)
    target = tuneplan.winner_spec(spec, settings)
    assert target["memory"] == {"mambaSchedulerStrategy": "extra_buffer", "maxRunningRequests": 16,
                                "cudaGraphMaxBs": 32}
    assert target["extraArgs"] == ["--page-size", "1"]
    assert "--cuda-graph-max-bs-decode 32" in _renders(target)  # 0.5.23's name, from the typed field
    assert target["speculative"]["adaptive"] == {"enabled": True}
    assert tuneplan.winner_keys(settings) == ["speculative", "memory"]
    static = tuneplan.winner_spec(target, TrialSettings(num_steps=2, eagle_topk=1, num_draft_tokens=3, adaptive=False))
    assert "adaptive" not in static["speculative"]
    off = tuneplan.winner_spec(BAD["spec"], TrialSettings(speculative=False))
    assert "speculative" not in off and "--speculative" not in _renders(off)
    with pytest.raises(tuneplan.UsageError, match=r"no spec\.speculative"):
        tuneplan.winner_spec(off, TrialSettings(num_steps=3, eagle_topk=1))


def test_the_snippet_is_the_yaml_for_git() -> None:
    target = tuneplan.winner_spec(BAD["spec"], TrialSettings(num_steps=3, eagle_topk=1, num_draft_tokens=4))
    text = tuneplan.snippet("qwen36-27b", "ns", target, ["speculative"])
    doc = yaml.safe_load(text)
    assert doc == {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
                   "metadata": {"name": "qwen36-27b", "namespace": "ns"},
                   "spec": {"speculative": {"algorithm": "NEXTN", "numSteps": 3, "eagleTopk": 1, "specV2": True,
                                            "numDraftTokens": 4}}}
    off = tuneplan.snippet("qwen36-27b", "ns", tuneplan.winner_spec(BAD["spec"], TrialSettings(speculative=False)),
                           ["speculative"])
    assert "# remove spec.speculative from the file" in off
