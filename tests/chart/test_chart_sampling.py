"""Issue 42: the chart's ``sampling`` values reach the operator's scrape flags (``--scrape-parse-workers``,
``--scrape-cpu-budget-seconds``, ``--min-sample-interval``), which the real CLI turns into the sampler's
:class:`~sglang_operator.decisions.sampling.limits.ScrapeLimits`; a release without the values (``--reuse-values``
from an older chart) passes none, so the flags' defaults hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from e2e.tools import helm_template, require_helm
from sglang_operator.decisions.sampling.limits import PARSE_WORKERS, ScrapeLimits

CHART = Path(__file__).resolve().parents[2] / "charts" / "sglang-operator"


def _limits(monkeypatch: pytest.MonkeyPatch, **values: Any) -> tuple[list[str], ScrapeLimits]:
    from sglang_operator.entry.cli import app

    objs = helm_template(require_helm(), CHART, "rel", "ops", values)
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr("sglang_operator.entry.runner.run", lambda **kw: calls.append(kw))
    result = CliRunner().invoke(app, [*container["command"][1:], *container["args"]])
    assert result.exit_code == 0, result.output
    flags = [a for a in container["args"] if a.startswith(("--scrape-parse", "--scrape-cpu", "--min-sample"))]
    return flags, calls[-1]["scrape_limits"]


def test_the_sampling_values_reach_the_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    flags, limits = _limits(monkeypatch)
    assert flags == ["--scrape-parse-workers=1", "--scrape-cpu-budget-seconds=0.25", "--min-sample-interval=1"]
    assert limits == ScrapeLimits(parse_workers=PARSE_WORKERS)
    _, limits = _limits(monkeypatch, sampling={"parseWorkers": 3, "cpuBudgetSeconds": 0.5, "minIntervalSeconds": 5})
    assert limits == ScrapeLimits(parse_workers=3, cpu_budget_seconds=0.5, min_interval_seconds=5)
    flags, limits = _limits(monkeypatch, sampling=None)  # an older release's values
    assert flags == [] and limits == ScrapeLimits(parse_workers=PARSE_WORKERS)
