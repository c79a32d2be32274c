"""``tune start --dry-run`` prints the plan (valid and refused points, trials at most, wall time, GPU-hours;
plugin/tunecost.py), and ``tune status`` says in one line which points the release refused and why a trial or the
tuning waits (plugin/tuneplan.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from e2e.policies import BAD, LOCAL
from sglang_operator.api import tuning as api
from sglang_operator.api.server import parse
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.plugin import tune, tunecost, tuneplan
from sglang_operator.plugin.commands import app as kubectl_sglang

SERVER: dict[str, Any] = {**yaml.safe_load((LOCAL / BAD).read_text()), "metadata": {"name": "qwen36-27b",
                                                                                      "namespace": "ns"}}
runner = CliRunner()


def pod(start: str, ready: str | None) -> dict[str, Any]:
    conds = [{"type": "Ready", "status": "True", "lastTransitionTime": ready}] if ready else []
    return {"status": {"startTime": start, "conditions": conds}}


def test_the_cost_of_a_tuning() -> None:
    spec = SGLangTuningSpec.model_validate({
        "serverRef": {"name": "qwen36-27b"}, "parameters": {"numSteps": {"min": 1, "max": 5}, "eagleTopk": {
            "list": [1, 2]}, "numDraftTokens": {"list": [3, 4]}}, "budget": {"maxTrialCount": 9},
        "algorithm": {"algorithmName": "Grid"},
        "workload": {"concurrency": [{"level": 1}, {"level": 16}], "secondsPerLevel": 30, "warmupSeconds": 10,
                     "repetitions": 2}})
    pods = [pod("2026-12-04T00:00:00Z", "2026-12-04T00:01:40Z"), pod("2026-12-04T00:00:00Z", "2026-12-04T00:02:00Z"),
            pod("2026-12-04T00:00:00Z", None)]
    c = tunecost.cost(spec, parse(SERVER).spec, pods)
    # specV2 refuses the trees: 5 chains valid; Grid runs the control trial and each once: 6 ≤ maxTrialCount 9
    assert (c.valid, c.trials, c.gpus) == (5, 6, 2) and c.invalid > 0
    assert c.load_seconds == 110.0  # the median of 100 s and 120 s; the pod not Ready is left out
    assert c.measured_seconds == 2 * 10 + 2 * 2 * 30  # warm-up per level, 2 levels × 2 repetitions × 30 s
    assert c.wall_seconds == 6 * (110 + 140) and abs(c.gpu_hours - 1500 * 2 / 3600) < 1e-9
    text = "\n".join(tunecost.lines(c))
    assert "5 valid points" in text and "at most 6 trials" in text and "110 s model load" in text
    assert "at most 25 min wall time, 0.83 GPU-hours" in text
    unknown = tunecost.cost(spec, parse(SERVER).spec, [])
    assert unknown.load_seconds is None and "plus the model loads" in tunecost.lines(unknown)[-1]


class FakeClient:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    def get(self, _resource: Any, name: str, **_: Any) -> Any:
        assert name == "qwen36-27b"
        return type("S", (), {"to_dict": lambda self: copy.deepcopy(SERVER)})()

    def list(self, _resource: Any, **_: Any) -> list[Any]:
        return [type("P", (), {"to_dict": lambda self, p=p: p})() for p in self.pods]


def test_start_dry_run_prints_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tune, "_make_client", lambda: FakeClient([pod("2026-12-04T00:00:00Z",
                                                                       "2026-12-04T00:00:30Z")]))
    out = runner.invoke(kubectl_sglang, ["tune", "start", "qwen36-27b", "-n", "ns", "--name", "t1", "--steps", "1-5",
                                         "--max-trials", "9", "--dry-run"])
    assert out.exit_code == 0, out.output
    doc = yaml.safe_load(out.output)  # the plan is comments: the output is still the object
    assert doc["metadata"]["name"] == "t1"
    assert "# plan: 5 valid points, 0 refused" in out.output and "# at most 9 trials" in out.output
    assert "30 s model load" in out.output and "GPU-hours" in out.output

    def unreachable() -> Any:
        raise RuntimeError("Configuration file ~/.kube/config not found")

    monkeypatch.setattr(tune, "_make_client", unreachable)
    out = runner.invoke(kubectl_sglang, ["tune", "start", "qwen36-27b", "-n", "ns", "--name", "t1", "--dry-run"])
    assert out.exit_code == 0 and "# no plan: SGLangServer ns/qwen36-27b could not be read" in out.output
    assert yaml.safe_load(out.output)["metadata"]["name"] == "t1"


def test_the_plan_counts_refused_points_per_rule_with_an_example() -> None:
    """Unset numDraftTokens is derived per shape (no chain refused for a draft-token count nobody listed); what the
    rules refuse is counted per rule, with one point and its message."""
    server = parse(SERVER).spec  # specV2: chains only
    chains = SGLangTuningSpec.model_validate({"serverRef": {"name": "qwen36-27b"}, "parameters": {
        "numSteps": {"min": 1, "max": 8}}, "workload": {"concurrency": [{"level": 1}, {"level": 16}]}})
    c = tunecost.cost(chains, server)
    assert (c.valid, c.invalid, c.refused, c.unused) == (8, 0, (), ())
    assert tunecost.lines(c)[0] == "# plan: 8 valid points, 0 refused by the API's or the release's rules (never run)"
    trees = SGLangTuningSpec.model_validate({"serverRef": {"name": "qwen36-27b"}, "parameters": {
        "numSteps": {"min": 1, "max": 8}, "eagleTopk": {"list": [1, 2, 4]}}})
    c = tunecost.cost(trees, server)
    # every tree of steps s and topk k: draft tokens 2 .. s × k + 1 (none above), all refused by the one rule
    assert c.valid == 8 and c.invalid == sum(s * k for s in range(1, 9) for k in (2, 4)) == 216
    assert len(c.refused) == 1 and c.refused[0].count == 216 and c.refused[0].example == "1/2/2"
    lines = tunecost.lines(c)
    assert lines[0].endswith("refused by the API's or the release's rules (never run), per rule:")
    assert lines[1].startswith("#   216 refused, e.g. 1/2/2: spec.speculative.specV2 needs eagleTopk 1")
    assert c.unused == (c.unused[0],) and c.unused[0].startswith("--topk 2,4: every point with these values is "
                                                                 "refused") and "specV2" in c.unused[0]
    listed = SGLangTuningSpec.model_validate({"serverRef": {"name": "qwen36-27b"}, "parameters": {
        "numSteps": {"min": 1, "max": 3}, "numDraftTokens": {"list": [2, 3, 9]}}})
    c = tunecost.cost(listed, server)
    # listed draft tokens apply to chains too (each one point, steps + 1): the others are counted, one rule
    assert c.valid == 3 and [(r.count, r.example) for r in c.refused] == [(2 + 2 + 3, "1/1/3")]
    assert c.unused == ("--draft-tokens 9: every point with this value is refused by the API's or the release's "
                        "rules, so it would search nothing (e.g. 1/1/9: eagleTopk 1 is a chain (SGLang: "
                        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                        "speculative_eagle_topk == 1): numDraftTokens 9 would run 1/1/2 again); drop it or change the "
                        "server",)


def test_start_refuses_an_option_value_no_point_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--topk 1,2,4`` on a specV2 server: topk 2 and 4 would search nothing. The dry run prints the plan and the
    refusal (exit 2); without --dry-run nothing is created."""
    monkeypatch.setattr(tune, "_make_client", lambda: FakeClient([]))
    args = ["tune", "start", "qwen36-27b", "-n", "ns", "--name", "t1", "--steps", "1-8", "--topk", "1,2,4"]
    out = runner.invoke(kubectl_sglang, [*args, "--dry-run"])
    assert out.exit_code == 2, out.output
    assert "#   216 refused, e.g. 1/2/2: spec.speculative.specV2 needs eagleTopk 1" in out.output
    assert "error: --topk 2,4: every point with these values is refused" in out.output
    created: list[Any] = []

    def create(obj: Any, **_: Any) -> Any:
        created.append(obj)
        return obj

    client = FakeClient([])
    client.create = create  # type: ignore[attr-defined]
    monkeypatch.setattr(tune, "_make_client", lambda: client)
    out = runner.invoke(kubectl_sglang, args)
    assert out.exit_code == 2 and "--topk 2,4" in out.output and created == []
    out = runner.invoke(kubectl_sglang, [*args[:-2], "--topk", "1"])
    assert out.exit_code == 0 and "/t1 created" in out.output and len(created) == 1, out.output


def tuning(status: dict[str, Any]) -> api.SGLangTuning:
    return api.SGLangTuning.model_validate({"metadata": {"name": "t", "namespace": "ns"},
                                            "spec": {"serverRef": {"name": "qwen36-27b"}}, "status": status})


def test_status_summarises_invalid_points_in_one_line_and_says_why_a_trial_is_pending() -> None:
    why = "Spec v2 currently only supports topk = 1; set eagleTopk 1 or specV2 false"
    invalid = [{"name": f"t-invalid-{i}", "settings": {"numSteps": i, "eagleTopk": 2, "numDraftTokens": 3},
                "verdict": "Invalid", "reason": why} for i in range(1, 7)]
    t = tuning({"phase": "Running", "trialsInvalid": 9, "trials": [
        *invalid, {"name": "t-trial-0", "settings": {"speculative": False}, "startedAt": "2026-12-04T00:00:00Z"}],
        "conditions": [{"type": "TrialPending", "status": "True", "reason": "PodNotReady",
                        "message": "trial t-trial-0: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]})
    _, rows = tuneplan.status_rows(t)
    assert [r[1] for r in rows] == ["t-trial-0"]  # the Invalid points are not rows
    lines = tuneplan.reason_lines(t)
    assert lines[0] == ("invalid: 9 points refused by the release's rules, never run (3 more not recorded) — "
                        "1/2/3, 2/2/3, 3/2/3, 4/2/3 …: Spec v2 currently only supports topk = 1")
    assert lines[1] == "pending: trial t-trial-0: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    waiting = tuning({"phase": "Pending", "conditions": [
        {"type": "Running", "status": "False", "reason": "ServerNotFound", "message": "SGLangServer ns/x does not "
         "exist (spec.serverRef.name)"}]})
    assert tuneplan.reason_lines(waiting) == [
        "waiting: ServerNotFound: SGLangServer ns/x does not exist (spec.serverRef.name)"]
    done = tuning({"phase": "Succeeded", "trials": invalid[:1]})
    assert tuneplan.reason_lines(done) == [
        "invalid: 1 points refused by the release's rules, never run — 1/2/3: Spec v2 currently only supports topk = 1"]


def test_apply_into_another_server_of_the_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tune apply NAME --server OTHER`` (what a ``BelowKnownBest`` condition suggests) writes the winner into
    OTHER's spec, through the same writer; without ``--server`` into the tuned server."""
    import types

    from sglang_operator.plugin import specwrite

    best = {"trial": "t-trial-2", "settings": {"numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4}, "summary": "3/1/4"}
    t = tuning({"phase": "Succeeded", "best": best})
    written: list[str] = []

    def write_spec(_client: Any, _ns: str, server: str, read: Any, target_of: Any, *_: Any, **__: Any) -> Any:
        written.append(server)
        target = target_of({**copy.deepcopy(SERVER), "metadata": {"name": server, "namespace": "ns"}})
        assert target["speculative"]["numSteps"] == 3
        return types.SimpleNamespace(plan=types.SimpleNamespace(patch=None), body={}, target=target)

    monkeypatch.setattr(tune, "_client", lambda: None)
    monkeypatch.setattr(tune, "_tuning", lambda _c, _ns, _n: t)
    monkeypatch.setattr(specwrite, "write_spec", write_spec)
    out = runner.invoke(kubectl_sglang, ["tune", "apply", "t", "-n", "ns", "--server", "qwen36-second"])
    assert out.exit_code == 0, out.output
    assert "sglangserver/qwen36-second spec has 3/1/4 already" in out.output
    assert runner.invoke(kubectl_sglang, ["tune", "apply", "t", "-n", "ns"]).exit_code == 0
    assert written == ["qwen36-second", "qwen36-27b"]
