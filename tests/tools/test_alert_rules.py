"""The alert rules: the checked-in copies are what ``sglang_operator.monitoring`` generates, ``promtool check rules``
accepts them, and ``promtool test rules`` fires every alert in one case and not in another (real promtool from
``python -m e2e.tools prometheus``; missing promtool fails the test)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from sglang_operator_tools.monitoring import generate, rules

from e2e.tools import require_promtool

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "deploy" / "prometheus" / "sglang-operator-rules.yaml"
S = {"namespace": "ns", "sglang_server": "qwen"}
POD = {**S, "pod": "qwen-abc", "job": "sglang", "instance": "10.1.0.5:30000"}
OPERATOR = {"job": "sglang-operator", "instance": "10.1.0.9:9808"}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def counters(labels: dict[str, str], tokens_per_min: int, run: str, start: int = 0) -> list[dict[str, str]]:
    """SGLang 0.5.2x counters of one pod: ``tokens_per_min`` generated per 1000 verify calls a minute
    (accept length ``tokens_per_min`` / 1000), from minute ``start`` for ``run`` (``x120``, ``x120 stale``)."""
    gap = f"_x{start} " if start else ""
    return [series("sglang:generation_tokens_total", {**labels, "is_streaming": "true"},
                   f"{gap}0+{tokens_per_min}{run}"),
            series("sglang:spec_verify_calls_total", labels, f"{gap}0+1000{run}")]


def rule(name: str) -> dict[str, Any]:
    doc = yaml.safe_load(RULES_FILE.read_text())
    return next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == name)


def expand(template: str, labels: dict[str, str], value: str) -> str:
    """Prometheus' alert template for the only actions the rules use: ``$labels.x`` and ``$value | humanize``."""
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m[1], ""), template)
    return out.replace("{{ $value | humanize }}", value)


def firing(name: str, labels: dict[str, str], value: str) -> dict[str, Any]:
    r = rule(name)
    return {"exp_labels": {**labels, **r["labels"]},
            "exp_annotations": {k: expand(v, labels, value) for k, v in r["annotations"].items()}}


# (alert, input series, eval time, expected alerts): for each alert one case that fires and one that does not
CASES: list[tuple[str, str, list[dict[str, str]], str, list[dict[str, Any]]]] = [
    ("SGLangAcceptLengthCollapsed", "0.5.2x counters: regressed revision after 2 h of the known-good one", [
        *counters({**POD, "revision": "good"}, 2700, "x120 stale"),
        *counters({**POD, "pod": "qwen-def", "revision": "bad"}, 1750, "x60", start=121),
    ], "150m", [firing("SGLangAcceptLengthCollapsed", {**S, "revision": "bad"}, "1.75")]),
    ("SGLangAcceptLengthCollapsed", "0.5.10 gauge: regressed revision after 2 h of the known-good one", [
        series("sglang:spec_accept_length", {**POD, "revision": "good"}, "2.7x120 stale"),
        series("sglang:spec_accept_length", {**POD, "pod": "qwen-def", "revision": "bad"}, "_x121 1.75x60"),
    ], "150m", [firing("SGLangAcceptLengthCollapsed", {**S, "revision": "bad"}, "1.75")]),
    ("SGLangAcceptLengthCollapsed", "known-good only, a mild dip on another server, an idle server", [
        *counters({**POD, "revision": "good"}, 2700, "x180"),
        series("sglang:spec_accept_length", {**POD, "sglang_server": "b", "revision": "r1"}, "2.7x120 stale"),
        series("sglang:spec_accept_length", {**POD, "sglang_server": "b", "pod": "b2", "revision": "r2"},
               "_x121 2.4x60"),
        *counters({**POD, "sglang_server": "idle", "revision": "r"}, 0, "x180"),
        series("sglang:spec_accept_length", {**POD, "sglang_server": "idle", "revision": "r"}, "2.7x180"),
    ], "150m", []),
    ("SGLangDecodeThroughputLow", "15 tok/s for 20 min", [
        series("sglang_operator_server_decode_tokens_per_second", {**S, "revision": "r"}, "15x30"),
    ], "20m", [firing("SGLangDecodeThroughputLow", {**S, "revision": "r"}, "15")]),
    ("SGLangDecodeThroughputLow", "45 tok/s", [
        series("sglang_operator_server_decode_tokens_per_second", {**S, "revision": "r"}, "45x30"),
    ], "20m", []),
    ("SGLangMetricsScrapeFailing", "pod down 30 min", [
        series("up", {**POD, "revision": "r"}, "0x30"),
    ], "20m", [firing("SGLangMetricsScrapeFailing", {**POD, "revision": "r"}, "0")]),
    ("SGLangMetricsScrapeFailing", "pod up; a non-SGLang target down", [
        series("up", {**POD, "revision": "r"}, "1x30"),
        series("up", {"job": "node", "instance": "n1:9100"}, "0x30"),
    ], "20m", []),
    ("SGLangOperatorScrapeErrors", "one timeout per second", [
        series("sglang_operator_scrape_errors_total", {**OPERATOR, "reason": "timeout"}, "0+60x30"),
    ], "20m", [firing("SGLangOperatorScrapeErrors", {"reason": "timeout"}, "1")]),
    ("SGLangOperatorScrapeErrors", "old errors, none since", [
        series("sglang_operator_scrape_errors_total", {**OPERATOR, "reason": "timeout"}, "5x30"),
    ], "20m", []),
    ("SGLangServerNotReady", "two servers Degraded for 50 min", [
        series("sglang_operator_servers", {**OPERATOR, "phase": "Degraded"}, "2x60"),
        series("sglang_operator_servers", {**OPERATOR, "phase": "Ready"}, "3x60"),
    ], "50m", [firing("SGLangServerNotReady", {"phase": "Degraded"}, "2")]),
    ("SGLangServerNotReady", "Progressing for 30 min (within the start-up budget), Stopped", [
        series("sglang_operator_servers", {**OPERATOR, "phase": "Progressing"}, "1x30"),
        series("sglang_operator_servers", {**OPERATOR, "phase": "Stopped"}, "1x30"),
    ], "30m", []),
    ("SGLangSpeculativeDecodingInactive", "generating with accept length 0", [
        series("sglang:spec_accept_length", {**POD, "revision": "r", "model_name": "m"}, "0x30"),
        series("sglang:generation_tokens_total", {**POD, "revision": "r", "is_streaming": "true"}, "0+600x30"),
    ], "20m", [firing("SGLangSpeculativeDecodingInactive", {**S, "revision": "r"}, "0")]),
    ("SGLangSpeculativeDecodingInactive", "generating with accept length 2.7; idle with 0", [
        series("sglang:spec_accept_length", {**POD, "revision": "r", "model_name": "m"}, "2.7x30"),
        series("sglang:generation_tokens_total", {**POD, "revision": "r", "is_streaming": "true"}, "0+600x30"),
        series("sglang:spec_accept_length", {**POD, "sglang_server": "idle", "revision": "r"}, "0x30"),
        series("sglang:generation_tokens_total", {**POD, "sglang_server": "idle", "revision": "r"}, "100x30"),
    ], "20m", []),
    ("SGLangRollbackHappened", "a rollback at 10 min", [
        series("sglang_operator_rollbacks_total", {**OPERATOR, **S}, "0x10 1x20"),
    ], "15m", [firing("SGLangRollbackHappened", {**OPERATOR, **S}, "1")]),
    ("SGLangRollbackHappened", "no rollback", [
        series("sglang_operator_rollbacks_total", {**OPERATOR, **S}, "0x30"),
    ], "15m", []),
    ("SGLangServerRollbackPaused", "Paused since minute 5 (maxRollbacks reached), another server Stable", [
        *(series("sglang_operator_server_analysis_phase", {**OPERATOR, **S, "phase": ph}, v)
          for ph, v in (("Verifying", "1x4 0x20"), ("Paused", "0x4 1x20"), ("Stable", "0x24"))),
        series("sglang_operator_server_analysis_phase", {**OPERATOR, **S, "sglang_server": "b", "phase": "Stable"},
               "1x24"),
    ], "10m", [firing("SGLangServerRollbackPaused", S, "1")]),
    ("SGLangServerRollbackPaused", "Verifying, Stable, RolledBack; Paused for under a minute before a retry", [
        *(series("sglang_operator_server_analysis_phase", {**OPERATOR, **S, "phase": ph}, v)
          for ph, v in (("Paused", "0x8 1 0x15"), ("WarmingUp", "0x9 1x15"), ("RolledBack", "1x4 0x20"))),
        series("sglang_operator_server_analysis_phase", {**OPERATOR, **S, "sglang_server": "b", "phase": "Stable"},
               "1x24"),
    ], "10m", []),
]


def test_checked_in_files_are_fresh() -> None:
    assert generate.stale(ROOT) == [], "run `python -m sglang_operator_tools.monitoring.generate`"


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    names = [r["alert"] for g in yaml.safe_load(RULES_FILE.read_text())["groups"] for r in g["rules"]
             if "alert" in r]
    assert sorted(names) == sorted({c[0] for c in CASES})
    for name in names:
        outcomes = {bool(c[4]) for c in CASES if c[0] == name}
        assert outcomes == {True, False}, name


def test_promtool_check_rules() -> None:
    promtool = require_promtool()
    proc = subprocess.run([str(promtool), "check", "rules", str(RULES_FILE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 9 rules found" in proc.stdout, proc.stdout  # 1 recording rule, 8 alerts


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_promtool_test_rules(case: tuple[str, str, list[dict[str, str]], str, list[dict[str, Any]]],
                             tmp_path: Path) -> None:
    promtool = require_promtool()
    name, _, input_series, eval_time, expected = case
    doc = {"rule_files": [str(RULES_FILE)], "evaluation_interval": "1m",
           "tests": [{"interval": "1m", "input_series": input_series,
                      "alert_rule_test": [{"eval_time": eval_time, "alertname": name, "exp_alerts": expected}]}]}
    test_file = tmp_path / "test.yaml"
    test_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = subprocess.run([str(promtool), "test", "rules", str(test_file)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_test_that_expects_the_wrong_outcome_fails(tmp_path: Path) -> None:
    """The harness can fail: the firing collapse case with no alert expected is refused by promtool."""
    promtool = require_promtool()
    name, _, input_series, eval_time, _ = CASES[0]
    doc = {"rule_files": [str(RULES_FILE)], "evaluation_interval": "1m",
           "tests": [{"interval": "1m", "input_series": input_series,
                      "alert_rule_test": [{"eval_time": eval_time, "alertname": name, "exp_alerts": []}]}]}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(doc))
    proc = subprocess.run([str(promtool), "test", "rules", str(tmp_path / "t.yaml")], capture_output=True,
                          text=True)
    assert proc.returncode != 0 and name in proc.stdout + proc.stderr


def test_parameters_reach_the_expressions() -> None:
    fast = rules.fast(accept_length_fraction=0.5, accept_length_window="2m", for_duration="4s",
                      min_decode_tokens_per_second=33)
    got = {r.get("alert") or r["record"]: r for g in rules.rule_groups(fast)["groups"] for r in g["rules"]}
    assert "0.5 * quantile_over_time(0.5," in got["SGLangAcceptLengthCollapsed"]["expr"]
    assert "[5m]" in got[rules.ACCEPT_LENGTH_RECORD]["expr"]  # rate_window unchanged
    assert "[2m:]" in got["SGLangAcceptLengthCollapsed"]["expr"]
    assert got["SGLangDecodeThroughputLow"]["expr"].endswith("< 33")
    assert got["SGLangDecodeThroughputLow"]["for"] == "4s"


def test_chart_values_hold_the_defaults() -> None:
    values = yaml.safe_load((ROOT / "charts" / "sglang-operator" / "values.yaml").read_text())
    assert values["prometheusRule"]["thresholds"] == rules.RuleParams().values()
