"""Issue 42 item 2: the chart's ``trialRequestRate`` reaches the operator's ``--trial-request-rate``, which the real
CLI hands to the runner (each trial's requests per second at most); a release without the value
(``--reuse-values`` from an older chart) passes none, so the flag's default holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from e2e.tools import helm_template, require_helm
from sglang_operator.decisions.tuning.trialload import TRIAL_REQUEST_RATE

CHART = Path(__file__).resolve().parents[2] / "charts" / "sglang-operator"


def _rate(monkeypatch: pytest.MonkeyPatch, **values: Any) -> tuple[list[str], float]:
    from sglang_operator.entry.cli import app

    objs = helm_template(require_helm(), CHART, "rel", "ops", values)
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr("sglang_operator.entry.runner.run", lambda **kw: calls.append(kw))
    result = CliRunner().invoke(app, [*container["command"][1:], *container["args"]])
    assert result.exit_code == 0, result.output
    return [a for a in container["args"] if a.startswith("--trial-request-rate")], calls[-1]["trial_request_rate"]


def test_the_trial_request_rate_reaches_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _rate(monkeypatch) == (["--trial-request-rate=200"], TRIAL_REQUEST_RATE)
    assert _rate(monkeypatch, trialRequestRate=12.5) == (["--trial-request-rate=12.5"], 12.5)
    assert _rate(monkeypatch, trialRequestRate=None) == ([], TRIAL_REQUEST_RATE)  # an older release's values
