"""The Grafana dashboard: the checked-in JSON is what the generator (grafana-foundation-sdk) produces, it has the
variables and panels the issue asks for, every SGLang family it queries exists in a supported release's metric
table, and every query (variables filled in) is valid PromQL for the real promtool."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml
from sglang_operator_tools.monitoring import dashboard, series

from e2e.tools import require_promtool

ROOT = Path(__file__).resolve().parents[2]
JSON_FILE = ROOT / "deploy" / "grafana" / "sglang-operator.json"
VARIABLES = {"$namespace": "ns", "$server": "qwen", "$__rate_interval": "1m", "$__range": "1h",
             "${datasource}": "prom"}


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
    assert set(variables) == {"datasource", "namespace", "server"}
    assert "namespace)" in variables["namespace"]["query"]
    assert '{namespace="$namespace"}, sglang_server)' in variables["server"]["query"]
    titles = {p["title"] for p in dashboard.panels(d)}
    wanted = {"Generation throughput", "Accept length", "Accept rate", "Speculative steps and draft tokens",
              "Running and queued requests", "Time to first token", "Inter-token latency", "KV-cache usage",
              "Prefix cache hit rate", "Retractions", "Analysis phase", "Stable revision", "Rollbacks"}
    assert wanted <= titles, wanted - titles
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]  # type: ignore[attr-defined]
    assert "Rollback" in rows
    assert {a["name"] for a in d["annotations"]["list"]} >= {"Rollbacks"}  # type: ignore[index]
    assert len({p["id"] for p in d["panels"]}) == len(d["panels"])  # type: ignore[arg-type]


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
    rules = tmp_path / "none.yaml"
    rules.write_text("groups: []\n")
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": inputs, "promql_expr_test": tests}]}))
    proc = subprocess.run([str(promtool), "test", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
