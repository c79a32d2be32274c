"""The PodMonitor the operator renders and the chart's ServiceMonitor and PrometheusRule validate against the real
Prometheus Operator v0.85.0 CRD schemas (``python -m e2e.tools prometheus-operator-crds``), offline with
jsonschema; ``e2e/tests/test_prometheus.py`` has the API server itself check them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from e2e.tools import helm_template, require_helm, require_prometheus_operator_crds
from sglang_operator.builders.monitoring import pod_monitor

ROOT = Path(__file__).resolve().parents[2]


def schema(kind: str) -> dict[str, Any]:
    """The ``v1`` openAPIV3Schema of the Prometheus Operator CRD for ``kind``."""
    for path in require_prometheus_operator_crds():
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
            out: dict[str, Any] = version["schema"]["openAPIV3Schema"]
            return out
    raise AssertionError(f"no CRD for {kind}")


def validate(obj: dict[str, Any]) -> None:
    """Raises ``jsonschema.ValidationError``. The schema itself is not checked against the metaschema: its Go
    regexes (``(?i)`` flags) are not ECMA ones, and the fields using them are not set here."""
    jsonschema.Draft202012Validator(schema(obj["kind"])).validate(obj)


def chart_objects() -> list[dict[str, Any]]:
    objs = helm_template(require_helm(), ROOT / "charts" / "sglang-operator", "rel", "ops",
                         {"serviceMonitor": {"enabled": True, "interval": "30s"}, "prometheusRule": {"enabled": True}})
    return [o for o in objs if o["kind"] in ("ServiceMonitor", "PrometheusRule")]


def test_pod_monitor_matches_the_crd() -> None:
    validate(pod_monitor("qwen36-27b", "team-a", "0.5.10", {"release": "kps"}, "15s"))


def test_chart_objects_match_the_crds() -> None:
    objs = chart_objects()
    assert sorted(o["kind"] for o in objs) == ["PrometheusRule", "ServiceMonitor"]
    for obj in objs:
        validate(obj)


@pytest.mark.parametrize("breakage", ["relabel action", "duration"])
def test_the_schemas_refuse_broken_objects(breakage: str) -> None:
    if breakage == "relabel action":
        bad = copy.deepcopy(pod_monitor("s", "ns", "0.5.10"))
        bad["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["action"] = "keeep"
    else:
        bad = copy.deepcopy(next(o for o in chart_objects() if o["kind"] == "PrometheusRule"))
        bad["spec"]["groups"][0]["rules"][1]["for"] = "ten minutes"
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)
