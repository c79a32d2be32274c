"""The SGLangTuning API (issue 17 item 1): the generated CRD is committed fresh (``crds/`` and the chart), structural,
described and bounded everywhere; names, short name and printer columns; defaults; the status the operator will
write survives the API server's pruning; ``sglang-operator crd`` prints both CRDs. The CEL rules against the real
API server, with their Python twins: ``e2e/tests/test_invalid_specs.py`` (``TUNING_CASES``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from schema_walk import schema_nodes
from test_status_schema import undeclared
from typer.testing import CliRunner

from sglang_operator.api import crd as crds
from sglang_operator.api import tuning, tuning_spec, tuning_status
from sglang_operator.api.base import ApiModel
from sglang_operator.api.server import SpecError
from sglang_operator.api.tuning import parse_tuning, parse_tuning_status
from sglang_operator.api.tuning_spec import MAX_LEVELS, AlgorithmName, TuningMode
from sglang_operator.api.tuning_status import MAX_TRIAL_RECORDS, SGLangTuningStatus, TrialSettings
from sglang_operator.entry.cli import app

ROOT = Path(__file__).resolve().parents[2]


def _root() -> dict[str, Any]:
    schema: dict[str, Any] = crds.tuning_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("name", list(crds.CRD_FILES))
def test_committed_crds_are_fresh(name: str) -> None:
    text = crds.CRD_FILES[name]()
    assert (ROOT / "crds" / name).read_text() == text, "crds/ is stale: run `sglang-operator crd --write crds/`"
    assert (ROOT / "charts" / "sglang-operator" / "files" / "crds" / name).read_text() == text, \
        "chart CRD is stale: run `sglang-operator crd --write charts/sglang-operator/files/crds/`"


def test_schema_is_structural_described_and_bounded() -> None:
    for path, node in schema_nodes(_root()):
        assert "$ref" not in node and "title" not in node and "anyOf" not in node, path
        assert "type" in node, f"{path} has no type"
        if path.startswith((".spec", ".status")) and not path.endswith("[]"):
            assert node.get("description"), f"{path} has no description (kubectl explain shows it)"
        if node["type"] == "array":
            assert "maxItems" in node, f"{path}: a list without maxItems"
        if node["type"] == "string" and path not in (".apiVersion", ".kind"):
            assert "maxLength" in node or "enum" in node, f"{path}: a string without maxLength"
    trials = _root()["properties"]["status"]["properties"]["trials"]
    assert trials["maxItems"] == MAX_TRIAL_RECORDS
    assert trials["items"]["properties"]["levels"]["maxItems"] == MAX_LEVELS
    assert len(crds.tuning_crd_yaml().encode()) < 128 * 1024


def test_names_columns_and_subresources() -> None:
    c = crds.tuning_crd()
    assert c["metadata"]["name"] == "sglangtunings.sglang-operator.io"
    assert c["spec"]["scope"] == "Namespaced" and c["spec"]["group"] == crds.crd()["spec"]["group"]
    names = c["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == ("SGLangTuning", "sglangtunings", ["sgtune"])
    v = c["spec"]["versions"][0]
    assert v["name"] == crds.crd()["spec"]["versions"][0]["name"] and v["subresources"] == {"status": {}}
    assert [col["name"] for col in v["additionalPrinterColumns"]] == [
        "Server", "Mode", "Phase", "Trials", "Best", "Objective", "Speedup", "Age"]
    root = v["schema"]["openAPIV3Schema"]
    for col in v["additionalPrinterColumns"]:  # every path a column shows is declared, to its leaf
        node = root
        for part in col["jsonPath"].split(".")[1:]:
            if part == "metadata":
                break
            node = node["properties"][part]
    found = {r["rule"] for _, n in schema_nodes(root) for r in n.get("x-kubernetes-validations", [])}
    rules = {r.rule for module in (tuning, tuning_spec, tuning_status) for cls in vars(module).values()
             if isinstance(cls, type) and issubclass(cls, ApiModel) and cls.__module__ == module.__name__
             for r in cls.cel_rules}
    assert len(rules) >= 20 and rules <= found


def test_a_minimal_tuning_gets_the_documented_defaults() -> None:
    t = parse_tuning({"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning",
                      "metadata": {"name": "qwen36-27b-tune"}, "spec": {"serverRef": {"name": "qwen36-27b"}}})
    p, s = t.spec.parameters, t.spec
    assert p.num_steps.values() == (1, 2, 3, 4, 5, 6, 7, 8) and p.eagle_topk.values() == (1,)
    assert p.num_draft_tokens is None and p.adaptive is False
    assert s.objective.objective_metric_name.value == "decodeTokensPerSecond"
    assert s.workload.levels() == (1,) and s.workload.max_output_tokens == 512
    assert (s.budget.max_trial_count, s.budget.max_failed_trial_count) == (24, 3)
    assert s.algorithm.algorithm_name is AlgorithmName.DEFAULT and s.mode is TuningMode.SHADOW
    # the CRD's defaults are the models' (what the API server fills in equals what the operator assumes)
    spec = _root()["properties"]["spec"]["properties"]
    blocks = {k: spec[k]["default"] for k in ("parameters", "objective", "workload", "budget", "algorithm")}
    filled = parse_tuning({"metadata": {"name": "a"}, "spec": {"serverRef": {"name": "qwen36-27b"}, **blocks}})
    assert filled.spec.dump() == s.dump()


def test_the_sample_parses() -> None:
    t = parse_tuning(yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-tuning.yaml").read_text()))
    assert t.spec.server_ref.name == yaml.safe_load(
        (ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())["metadata"]["name"]
    assert t.spec.workload.levels() == (1, 16) and t.spec.parameters.adaptive


def test_ranges_and_lists() -> None:
    t = parse_tuning({"metadata": {"name": "a"}, "spec": {"serverRef": {"name": "s"}, "parameters": {
        "numSteps": {"min": 2, "max": 8, "step": 3}, "eagleTopk": {"list": [4, 1, 2]}}}})
    assert t.spec.parameters.num_steps.values() == (2, 5, 8)
    assert t.spec.parameters.eagle_topk.values() == (1, 2, 4)
    assert t.spec.parameters.dump()["eagleTopk"] == {"step": 1, "list": [4, 1, 2]}


def test_a_misspelt_field_names_the_one_meant() -> None:
    with pytest.raises(SpecError) as err:
        parse_tuning({"metadata": {"name": "a"}, "spec": {"serverRef": {"name": "s"}, "budget": {"maxTrials": 3}}})
    assert err.value.messages == ["spec.budget.maxTrials: unknown field; did you mean maxTrialCount?"]


def _full_status() -> dict[str, Any]:
    settings = TrialSettings(num_steps=3, eagle_topk=1, num_draft_tokens=4)
    level = {"concurrency": 1, "outputTokensPerSecond": 55.1, "decodeTokensPerSecond": 55.4,
             "interTokenLatencyP50Seconds": 0.018, "interTokenLatencyP95Seconds": 0.02,
             "timeToFirstTokenP50Seconds": 0.1, "timeToFirstTokenP95Seconds": 0.12, "acceptLength": 2.73,
             "stepTimeP20Seconds": 0.049, "spread": 0.01, "objective": 55.4, "requests": 12, "failedRequests": 0}
    return SGLangTuningStatus.model_validate({
        "observedGeneration": 1, "phase": "Succeeded",
        "conditions": [{"type": "Complete", "status": "True", "reason": "BudgetUsed", "message": "24 trials",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
        "startedAt": "2026-01-01T00:00:00Z", "completedAt": "2026-01-01T01:00:00Z", "progress": "2/24",
        "trialsTotal": 24, "trialsCompleted": 2, "trialsFailed": 0, "trialsPruned": 0, "trialsInvalid": 1,
        "trials": [
            {"name": "t-trial-0", "settings": {"speculative": False}, "revision": "abc", "verdict": "Completed",
             "startedAt": "x", "finishedAt": "y", "objective": 31.0, "levels": [level]},
            {"name": "t-trial-1", "settings": settings.model_dump(by_alias=True, exclude_none=True),
             "revision": "def", "verdict": "Completed", "objective": 55.4, "levels": [level]},
            {"name": "t-trial-2", "settings": {"numSteps": 1, "eagleTopk": 1, "numDraftTokens": 4},
             "verdict": "Invalid", "reason": "spec.speculative.numDraftTokens is 4 but must equal numSteps + 1"},
        ],
        "controlTrial": "t-trial-0",
        "best": {"trial": "t-trial-1", "settings": {"numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4},
                 "summary": "3/1/4", "objective": 55.4, "speedup": 1.79},
        "bestPerLevel": [{"concurrency": 1, "trial": "t-trial-1", "settings": {"numSteps": 3}, "summary": "3/1/4",
                          "objective": 55.4, "speedup": 1.79}],
        "stableRevision": "abc",
    }).dump()


def test_every_status_key_is_declared_in_the_crd() -> None:
    status = _full_status()
    assert undeclared(status, _root()["properties"]["status"]) == []
    assert parse_tuning_status({"status": status}).dump() == status  # what the operator reads back, unchanged


def test_a_hand_edited_status_reads_as_empty() -> None:
    assert parse_tuning_status({"metadata": {"name": "a"}, "status": {"trials": "lots"}}) == SGLangTuningStatus()


@pytest.mark.parametrize(("settings", "summary"), [
    (TrialSettings(num_steps=3, eagle_topk=1, num_draft_tokens=4), "3/1/4"),
    (TrialSettings(speculative=False), "no speculation"),
    (TrialSettings(num_steps=3, eagle_topk=1, num_draft_tokens=4, adaptive=True), "adaptive 3/1/4"),
    (TrialSettings(num_steps=8, eagle_topk=8, num_draft_tokens=64, max_running_requests=16, cuda_graph_max_bs=32),
     "8/8/64 mrr 16 bs 32"),
])
def test_trial_summaries(settings: TrialSettings, summary: str) -> None:
    assert settings.summary() == summary


def test_the_cli_prints_both_crds_and_writes_the_committed_copies(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["crd"])
    assert out.exit_code == 0, out.output
    docs = list(yaml.safe_load_all(out.output))
    assert [d["spec"]["names"]["kind"] for d in docs] == ["SGLangServer", "SGLangTuning"]
    one = runner.invoke(app, ["crd", "SGLangTuning"])
    assert one.exit_code == 0 and one.output == crds.tuning_crd_yaml()
    assert runner.invoke(app, ["crd", "SGLangTunings"]).exit_code == 2
    wrote = runner.invoke(app, ["crd", "--write", str(tmp_path)])
    assert wrote.exit_code == 0, wrote.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(crds.CRD_FILES)
    for name, text in crds.CRD_FILES.items():
        assert (tmp_path / name).read_text() == text()
