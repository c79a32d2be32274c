"""A misspelt field gets the field meant (issue 19 item 7): ``render`` and the CLI say ``unknown field; did you
mean numSteps?`` where pydantic said "Extra inputs are not permitted", at every depth, in the pass-through
Kubernetes types too; no suggestion when nothing is close."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator.api.names import did_you_mean, fields_at
from sglang_operator.api.server import SGLangServer, SpecError, parse
from sglang_operator.api.spec import SGLangServerSpec

ROOT = Path(__file__).resolve().parents[2]
GOOD: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())


def messages(update: dict[str, Any], where: tuple[str, ...] = ("spec",)) -> list[str]:
    body = copy.deepcopy(GOOD)
    node = body
    for key in where:
        node = node.setdefault(key, {})
    node.update(update)
    with pytest.raises(SpecError) as err:
        parse(body)
    return err.value.messages


@pytest.mark.parametrize(("where", "typo", "message"), [
    (("spec", "speculative"), "numStep", "spec.speculative.numStep: unknown field; did you mean numSteps?"),
    (("spec", "speculative"), "numdrafttokens", "spec.speculative.numdrafttokens: unknown field; did you mean "
                                                "numDraftTokens?"),
    (("spec",), "nodeSelektor", "spec.nodeSelektor: unknown field; did you mean nodeSelector?"),
    (("spec", "rollback"), "windowSeconds", "spec.rollback.windowSeconds: unknown field; did you mean "
                                            "rollbackWindowSeconds?"),
    (("spec", "rollback", "probe"), "promt", "spec.rollback.probe.promt: unknown field; did you mean prompt?"),
    (("spec", "memory"), "memFraction", "spec.memory.memFraction: unknown field; did you mean memFractionStatic?"),
    (("spec",), "banana", "spec.banana: unknown field"),
])
def test_an_unknown_field_names_the_closest_known_one(where: tuple[str, ...], typo: str, message: str) -> None:
    assert messages({typo: 1}, where) == [message]


def test_the_kubernetes_pass_through_types_suggest_too() -> None:
    got = messages({"env": [{"name": "A", "vaule": "1"}], "volumes": [{"name": "v", "hostPth": {"path": "/x"}}]})
    assert "spec.env.0: vaule: unknown field (Kubernetes v1.36.0 EnvVar schema); did you mean value?" in got
    assert "spec.volumes.0: hostPth: unknown field (Kubernetes v1.36.0 Volume schema); did you mean hostPath?" in got


def test_fields_at_follows_the_models_aliases_lists_and_optionals() -> None:
    assert "numSteps" in fields_at(SGLangServerSpec, ("speculative",))  # Speculative | None
    assert "prompt" in fields_at(SGLangServer, ("spec", "rollback", "probe"))
    assert fields_at(SGLangServerSpec, ("nodeSelector",)) == []  # a free-form map: anything goes
    assert fields_at(SGLangServerSpec, ("imagePullSecrets", 0)) == ["name"]
    assert did_you_mean("foo", ["port", "replicas"]) == ""


def test_render_prints_the_suggestion(tmp_path: Path) -> None:
    body = copy.deepcopy(GOOD)
    body["spec"]["speculative"]["numStep"] = 3
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(body))
    proc = subprocess.run([sys.executable, "-m", "sglang_operator.entry.cli", "render", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "qwen36-27b: invalid: spec.speculative.numStep: unknown field; did you mean numSteps?" in proc.stderr
