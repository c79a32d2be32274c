"""The Grafana dashboard: the checked-in JSON is what the generator (grafana-foundation-sdk) produces, it has the
variables and panels the issue asks for, every SGLang family it queries exists in a supported release's metric
table, and every query (variables filled in) is valid PromQL for the real promtool."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from sglang_operator_tools.monitoring import dashboard, series

from e2e.tools import require_promtool

ROOT = Path(__file__).resolve().parents[2]
JSON_FILE = ROOT / "deploy" / "grafana" / "sglang-operator.json"
VARIABLES = {"$namespace": "ns", "$server": "qwen", "$sglang_tuning": "tune", "$__rate_interval": "1m",
             "$__range": "1h", "${datasource}": "prom"}


def doc() -> dict[str, object]:
    out: dict[str, object] = json.loads(JSON_FILE.read_text())
    return out


def exprs() -> list[tuple[str, str]]:
    """(panel title, expr) of every panel target and annotation."""
    d = doc()
    out = [(str(p["title"]), str(t["expr"])) for p in dashboard.panels(d) for t in p.get("targets", [])]
    out += [(f"annotation {a['name']}", str(a["expr"])) for a in d["annotations"]["list"]]  # type: ignore[index]
    return out


def fill(expr: str) -> str:
    for k, v in VARIABLES.items():
        expr = expr.replace(k, v)
    return expr


def test_checked_in_json_is_fresh() -> None:
    assert JSON_FILE.read_text() == dashboard.dashboard_json()
    assert (ROOT / "charts" / "sglang-operator" / "files" / "grafana-dashboard.json").read_text() == \
        dashboard.dashboard_json()


def test_variables_and_panels() -> None:
    d = doc()
    variables = {v["name"]: v for v in d["templating"]["list"]}  # type: ignore[index]
    assert set(variables) == {"datasource", "namespace", "server", "sglang_tuning"}
    assert "namespace)" in variables["namespace"]["query"]
    assert '{namespace="$namespace"}, sglang_server)' in variables["server"]["query"]
    assert variables["sglang_tuning"]["query"] == \
        f'label_values({series.OP_TUNING_TRIALS}{{namespace="$namespace"}}, sglang_tuning)'
    assert variables["sglang_tuning"]["refresh"] == variables["server"]["refresh"]
    titles = {p["title"] for p in dashboard.panels(d)}
    wanted = {"Generation throughput", "Accept length", "Accept rate", "Speculative steps and draft tokens",
              "Running and queued requests", "Time to first token", "Inter-token latency", "KV-cache usage",
              "Prefix cache hit rate", "Retractions", "Analysis phase", "Stable revision", "Rollbacks",
              "Trials by verdict", "Trial objective", "Speedup over no speculation", "Tunings ended by phase"}
    assert wanted <= titles, wanted - titles
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]  # type: ignore[attr-defined]
    assert "Rollback" in rows and rows[-1] == dashboard.TUNING_ROW
    assert {a["name"] for a in d["annotations"]["list"]} >= {"Rollbacks"}  # type: ignore[index]
    every = [*d["panels"], *(q for p in d["panels"] for q in p.get("panels", []))]  # type: ignore[attr-defined]
    assert len({p["id"] for p in every}) == len(every)


def test_per_server_panels_split_by_revision() -> None:
    for title, expr in exprs():
        if "sglang:" in expr:
            assert 'namespace="$namespace"' in expr and 'sglang_server="$server"' in expr, title
            assert "by (revision" in expr or "annotation" in title, title


def test_sglang_families_exist_in_the_tables() -> None:
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for _, e in exprs() for m in re.findall(r"sglang:[a-z_]+", e)}
    assert used, "the dashboard queries no SGLang series"
    for name in used:
        assert series.releases_with(name), f"{name}: no supported SGLang release declares it"
    # the counter-based accept length needs 0.5.2x; the gauge fallback exists in every table
    assert "0.5.23" in series.releases_with(series.SPEC_VERIFY_CALLS)
    assert "0.5.10" not in series.releases_with(series.SPEC_VERIFY_CALLS)
    assert {"0.5.10", "0.5.23"} <= set(series.releases_with(series.SPEC_ACCEPT_LENGTH))


def test_the_simulator_emits_every_sglang_family_the_dashboard_queries() -> None:
    from sglang_sim.metrics import EMITTED

    used = {re.sub(r"_(bucket|sum|count)$", "", m) for _, e in exprs() for m in re.findall(r"sglang:[a-z_]+", e)}
    assert {u for u in used if u.removesuffix("_total") not in EMITTED} == set()


def test_operator_series_are_named_in_one_place() -> None:
    known = {v for k, v in vars(series).items() if k.startswith("OP_")}
    used = {m for _, e in exprs() for m in re.findall(r"sglang_operator_[a-z_]+", e)}
    assert {re.sub(r"_bucket$", "", u) for u in used} <= known


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    promtool = require_promtool()
    rules = [{"record": f"dashboard:q{i}", "expr": fill(e)} for i, (_, e) in enumerate(exprs())]
    rules += [{"record": f"dashboard:v{i}", "expr": fill(v["query"]).split("label_values(", 1)[1].rsplit(",", 1)[0]}
              for i, v in enumerate(doc()["templating"]["list"]) if v["type"] == "query"]  # type: ignore[index]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "$" not in path.read_text()


def _promql_expr_test(promtool: Path, tmp_path: Path, inputs: list[dict[str, str]],
                      tests: list[dict[str, Any]]) -> None:
    """``promtool test rules`` of ``promql_expr_test`` cases over ``inputs`` (1 m apart) passes (no rule file)."""
    rules = tmp_path / "none.yaml"
    rules.write_text("groups: []\n")
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": inputs, "promql_expr_test": tests}]}))
    proc = subprocess.run([str(promtool), "test", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def panel(title: str) -> dict[str, Any]:
    return next(p for p in dashboard.panels(doc()) if p["title"] == title)


def test_speculative_row_leads_with_accept_length_and_its_baseline() -> None:
    row = next(p for p in doc()["panels"] if p.get("title") == "Speculative decoding, per revision")  # type: ignore[union-attr]
    first = min((p for p in dashboard.panels(doc()) if p["gridPos"]["y"] > row["gridPos"]["y"]),
                key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    assert first["title"] == "Accept length"
    exprs_ = [t["expr"] for t in first["targets"]]
    assert any(series.OP_BASELINE_ACCEPT_LENGTH in e for e in exprs_)
    rate = panel("Accept rate")["description"]
    assert "0.5.10" in rate and "draft tokens − 1" in rate and "0.875" in rate and "accept length" in rate


def test_the_note_says_the_operator_series_need_the_service_monitor() -> None:
    note = next(p for p in doc()["panels"] if p["type"] == "text")  # type: ignore[index]
    assert "serviceMonitor.enabled=true" in note["options"]["content"]
    assert "prometheus-config" in note["options"]["content"]


def test_steps_and_draft_tokens_fall_back_to_the_operators_effective_settings(tmp_path: Path) -> None:
    """promtool: a 0.5.23 revision shows SGLang's gauges; a 0.5.10 revision (no gauge) the operator's."""
    promtool = require_promtool()
    targets = panel("Speculative steps and draft tokens")["targets"]
    sel = {"namespace": "ns", "sglang_server": "qwen"}

    def s(name: str, revision: str, value: int, **extra: str) -> dict[str, str]:
        labels = ", ".join(f'{k}="{v}"' for k, v in {**sel, "revision": revision, **extra}.items())
        return {"series": f"{name}{{{labels}}}", "values": f"{value}x5"}
    inputs = [s(series.SPEC_NUM_STEPS, "new", 3, pod="p1"), s(series.SPEC_NUM_DRAFT_TOKENS, "new", 4, pod="p1"),
              s(series.OP_SPEC_NUM_STEPS, "new", 3), s(series.OP_SPEC_NUM_DRAFT_TOKENS, "new", 4),
              s(series.OP_SPEC_NUM_STEPS, "old", 1), s(series.OP_SPEC_NUM_DRAFT_TOKENS, "old", 2)]
    tests = [{"expr": fill(t["expr"]), "eval_time": "2m",
              "exp_samples": [{"labels": '{revision="new"}', "value": want_new},
                              {"labels": '{revision="old"}', "value": want_old}]}
             for t, (want_new, want_old) in zip(targets, ((3, 1), (4, 2)), strict=True)]
    _promql_expr_test(promtool, tmp_path, inputs, tests)


def test_the_tuning_row_is_collapsed_and_holds_one_tunings_panels() -> None:
    d = doc()
    row = next(p for p in d["panels"] if p.get("title") == dashboard.TUNING_ROW)  # type: ignore[union-attr]
    assert row["collapsed"] is True
    inside = dashboard.row_panels(d, dashboard.TUNING_ROW)  # type: ignore[arg-type]
    assert [p["title"] for p in inside] == ["Speedup over no speculation", "Trial objective", "Trials by verdict",
                                           "Tunings ended by phase"]
    assert all(p["gridPos"]["y"] > row["gridPos"]["y"] for p in inside)
    for p in inside:  # what each figure is, and its unit
        assert any(u in p["description"] for u in ("tok/s", "ratio", "a count of")), p["title"]
        for target in p["targets"]:
            if series.OP_TUNINGS in target["expr"]:  # no namespace label of its own: the operator's, when scraped
                assert "$namespace" not in target["expr"]
            else:
                assert 'namespace="$namespace", sglang_tuning="$sglang_tuning"' in target["expr"], p["title"]
    assert panel("Trial objective")["targets"][0]["legendFormat"] == "{{trial}} {{settings}}"
    speedup = panel("Speedup over no speculation")
    assert speedup["type"] == "stat" and speedup["fieldConfig"]["defaults"]["unit"] == "suffix:×"
    assert [s["value"] for s in speedup["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, 1.0]
    # the other rows hold none of the tuning series (the e2e dashboard tests exclude this row by its title)
    outside = [e for title, e in exprs() if title not in {p["title"] for p in inside}]
    assert not any(n in e for n in series.TUNING_SERIES for e in outside)
    with pytest.raises(KeyError):
        dashboard.row_panels(d, "no such row")  # type: ignore[arg-type]


def test_the_tuning_panels_read_the_series_the_operator_exports(tmp_path: Path) -> None:
    """promtool over what ``process.telemetry`` exposes for two tunings (in ``ns`` and in ``other``), scraped
    as the ServiceMonitor would (``job``; the operator's ``namespace`` on the series without one): each tuning
    panel shows the selected tuning's figures only."""
    from prometheus_client import REGISTRY, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from sglang_operator.process import telemetry

    promtool = require_promtool()
    telemetry.count_tuning_trial("ns", "tune", "Completed", "tune-0", "no speculation", 40.0)
    telemetry.count_tuning_trial("ns", "tune", "Completed", "tune-1", "3/1/4", 61.5)
    telemetry.count_tuning_trial("ns", "tune", "Failed", "tune-2", "5/1/6", None)
    telemetry.set_tuning_speedups("ns", "tune", {"1": 1.5375, "4": 1.25, "all": 1.5375})
    telemetry.count_tuning_trial("other", "tune", "Completed", "tune-0", "no speculation", 10.0)
    telemetry.set_tuning_speedups("other", "tune", {"all": 0.9})
    telemetry.count_tuning("Succeeded")
    try:
        inputs, ended = [], {}
        for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
            for sample in family.samples:
                if sample.name in series.TUNING_SERIES:
                    labels = {"namespace": "sglang-operator-system", **sample.labels, "job": "op"}
                    text = ", ".join(f'{k}="{v}"' for k, v in labels.items())
                    inputs.append({"series": f"{sample.name}{{{text}}}", "values": f"{sample.value}x5"})
                    if sample.name == series.OP_TUNINGS:
                        ended[sample.labels["phase"]] = sample.value
    finally:
        telemetry.forget_tuning("ns", "tune")
        telemetry.forget_tuning("other", "tune")
    assert ended["Succeeded"] >= 1

    def raw(name: str, **labels: str) -> str:
        text = ", ".join(f'{k}="{v}"' for k, v in {"namespace": "ns", "sglang_tuning": "tune", **labels,
                                                     "job": "op"}.items())
        return f"{name}{{{text}}}"
    want = {
        "Speedup over no speculation": [
            [(raw(series.OP_TUNING_BEST_SPEEDUP, concurrency="all"), 1.5375)],
            [(raw(series.OP_TUNING_BEST_SPEEDUP, concurrency="1"), 1.5375),
             (raw(series.OP_TUNING_BEST_SPEEDUP, concurrency="4"), 1.25)]],
        "Trial objective": [
            [(raw(series.OP_TUNING_TRIAL_OBJECTIVE, trial="tune-0", settings="no speculation"), 40.0),
             (raw(series.OP_TUNING_TRIAL_OBJECTIVE, trial="tune-1", settings="3/1/4"), 61.5)]],
        "Trials by verdict": [[('{verdict="Completed"}', 2), ('{verdict="Failed"}', 1)]],
        "Tunings ended by phase": [[(f'{{phase="{k}"}}', v) for k, v in ended.items()]],
    }
    tests = [{"expr": fill(target["expr"]), "eval_time": "2m",
              "exp_samples": [{"labels": labels, "value": value} for labels, value in samples]}
             for title, per_target in want.items()
             for target, samples in zip(panel(title)["targets"], per_target, strict=True)]
    _promql_expr_test(promtool, tmp_path, inputs, tests)
