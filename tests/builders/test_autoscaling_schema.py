"""The rendered ScaledObject validates with kubeconform ``-strict`` against KEDA v2.21.0's own CRD schema (local
schemas only: ``keda.sh_scaledobjects.yaml`` from the module zip, ``python -m e2e.build_keda crds``, converted by
``scripts/crd_to_jsonschema.py``), in every shape the builder makes; a misspelt field or a wrong enum is refused, so
the check has teeth."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import build_keda
from e2e.tools import kubeconform_path
from sglang_operator.builders import autoscaling as so
from tests.builders.test_autoscaling import BASIC, PROM, server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("keda-schemas")
    crd = build_keda.require_crds() / build_keda.SCALED_OBJECT_CRD
    subprocess.run([sys.executable, str(ROOT / "scripts" / "crd_to_jsonschema.py"), str(out), str(crd)],
                   check=True, capture_output=True, text=True)
    assert (out / "keda.sh" / "scaledobject_v1alpha1.json").is_file()
    return out


def kubeconform(schemas: Path, objs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    binary = kubeconform_path()
    if not binary.is_file():
        pytest.fail(f"kubeconform not found at {binary}: run `python -m e2e.tools kubeconform` first", pytrace=False)
    return subprocess.run([str(binary), "-strict", "-summary", "-schema-location",
                           str(schemas / "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"), "-"],
                          input=yaml.safe_dump_all(objs), capture_output=True, text=True)


def shapes() -> list[dict[str, Any]]:
    user = 'sum(rate(sglang:generation_tokens_total{namespace="$namespace", sglang_server="$server"}[1m]))'
    servers = [
        (server(BASIC), {}),
        (server({**BASIC, "metric": "kvCacheUsage", "target": 0.75, "minReplicas": 2,
                 "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0, "replicas": 3, "periodSeconds": 15},
                              "scaleDown": {"stabilizationWindowSeconds": 30}},
                 "fallback": {"failureThreshold": 1, "replicas": 3}}), {"verifying": True}),
        (server({**BASIC, "metric": "query", "query": user, "target": 500,
                 "prometheus": {"address": "https://prom.example:9091"}}), {"trial_replicas": 2}),
        (server(BASIC, parallelism={"tensor": 16, "nodes": 2}, resources={"gpu": 8}), {}),
    ]
    out = [so.scaled_object(s, PROM, **kw) for s, kw in servers]
    assert all(o is not None for o in out)
    return [o for o in out if o is not None]


def test_every_shape_validates_against_kedas_crd(schemas: Path) -> None:
    objs = shapes()
    proc = kubeconform(schemas, objs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Valid: {len(objs)}" in proc.stdout, proc.stdout


@pytest.mark.parametrize("breakage", ["fallback behavior", "unknown field", "no trigger"])
def test_the_schema_refuses_a_broken_scaled_object(schemas: Path, breakage: str) -> None:
    bad = copy.deepcopy(shapes()[0])
    if breakage == "fallback behavior":
        bad["spec"]["fallback"]["behavior"] = "currentReplicasIfHigherr"
    elif breakage == "unknown field":
        bad["spec"]["scaleTargetRef"]["namespace"] = "team-a"
    else:
        bad["spec"]["triggers"] = []
    proc = kubeconform(schemas, [bad])
    assert proc.returncode != 0 and "Invalid: 1" in proc.stdout, proc.stdout + proc.stderr
