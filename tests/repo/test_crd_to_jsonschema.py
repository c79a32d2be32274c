"""scripts/crd_to_jsonschema.py: the strict JSON schema kubeconform gets from a CRD accepts what the API server's
structural schema accepts and refuses unknown fields (the samples pass, a misspelt field or a wrong type fails)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "crd_to_jsonschema.py"
_spec = importlib.util.spec_from_file_location("crd_to_jsonschema", SCRIPT)
assert _spec is not None and _spec.loader is not None
conv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conv)


def validator(schema: dict[str, Any]) -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(schema)  # kubeconform's default draft, OpenAPI v3.0's keyword meanings


def test_kubernetes_keywords_become_json_schema() -> None:
    node = {"type": "object", "properties": {
        "port": {"x-kubernetes-int-or-string": True},
        "note": {"type": "string", "nullable": True},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                 "properties": {"a": {"type": "string"}}},
        "rules": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}}},
                  "x-kubernetes-validations": [{"rule": "self.size() < 3"}]},
        "properties": {"type": "object", "properties": {"x-kubernetes-named": {"type": "string"}}},
    }, "default": {"properties": 1}}
    v = validator(conv.convert(node))
    assert v.is_valid({"port": 8080, "note": None, "free": {"a": "x", "b": 1}, "rules": [{"x": 1}],
                       "properties": {"x-kubernetes-named": "kept: a name, not a keyword"}})
    assert v.is_valid({"port": "http"})
    assert not v.is_valid({"port": 1.5})
    assert not v.is_valid({"rules": [{"x": 1, "y": 2}]})  # strict: unknown fields refused
    assert not v.is_valid({"other": 1})
    assert conv.convert(node)["default"] == {"properties": 1}  # values are copied, not converted


def converted(tmp_path: Path, crd_file: str, schema_file: str) -> jsonschema.Draft4Validator:
    """The script run on ``crds/<crd_file>`` into ``tmp_path``: it writes (and prints) one schema, named
    ``sglang-operator.io/<schema_file>``; its validator."""
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), str(ROOT / "crds" / crd_file)],
                          capture_output=True, text=True, check=True)
    (path,) = map(Path, proc.stdout.split())
    assert path == tmp_path / "sglang-operator.io" / schema_file
    return validator(json.loads(path.read_text()))


def test_our_crd_accepts_the_samples_and_refuses_mistakes(tmp_path: Path) -> None:
    v = converted(tmp_path, "sglangservers.yaml", "sglangserver_v1alpha1.json")
    samples = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "samples").rglob("*.yaml"))]
    for obj in samples:
        if obj["kind"] == "SGLangServer":
            assert v.is_valid(obj), [e.message for e in v.iter_errors(obj)]
    bad = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    bad["spec"]["speculative"]["numStep"] = 3
    bad["spec"]["parallelism"]["tensor"] = "two"
    messages = sorted(e.message for e in v.iter_errors(bad))
    assert any("numStep" in m for m in messages) and any("'two' is not of type 'integer'" in m for m in messages), \
        messages


def test_the_tuning_crd_accepts_the_tuning_sample_and_refuses_mistakes(tmp_path: Path) -> None:
    v = converted(tmp_path, "sglangtunings.yaml", "sglangtuning_v1alpha1.json")
    sample = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-tuning.yaml").read_text())
    assert v.is_valid(sample), [e.message for e in v.iter_errors(sample)]
    sample["spec"]["budget"]["maxTrials"] = 3
    sample["spec"]["parameters"]["numSteps"]["min"] = "one"
    messages = sorted(e.message for e in v.iter_errors(sample))
    assert any("maxTrials" in m for m in messages) and any("'one' is not of type 'integer'" in m for m in messages), \
        messages


def test_a_file_without_a_crd_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "out"), str(tmp_path / "x.yaml")],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "no CustomResourceDefinition" in proc.stderr
