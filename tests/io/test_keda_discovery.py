"""``io/keda.py``: KEDA's ScaledObject API discovered once, re-checked while absent (KEDA installed later needs no
restart), errors read as absent; ``--prometheus-address`` reaches the process-wide default from ``run``'s command line
(the Kubernetes client replaced by a fake probe)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from apiprobe import Probe
from typer.testing import CliRunner

from sglang_operator.io.keda import RECHECK_SECONDS, SCALED_OBJECTS, ScaledObjects


def test_absent_is_rechecked_after_the_interval_and_present_is_kept() -> None:
    now = [1000.0]
    probe = Probe([False, True, False])
    keda = ScaledObjects(probe=probe, clock=lambda: now[0])
    assert asyncio.run(keda.available()) is False
    now[0] += RECHECK_SECONDS - 1
    assert asyncio.run(keda.available()) is False and probe.calls == 1  # not re-read within the interval
    now[0] += 1
    assert asyncio.run(keda.available()) is True and probe.calls == 2  # KEDA installed meanwhile
    now[0] += 10 * RECHECK_SECONDS
    assert asyncio.run(keda.available()) is True and probe.calls == 2  # present: never re-read
    keda.forget()  # an apply answered 404
    assert asyncio.run(keda.available()) is False and probe.calls == 3


def test_an_error_reads_as_absent() -> None:
    keda = ScaledObjects(probe=Probe([RuntimeError("forbidden")]))
    assert asyncio.run(keda.available()) is False


def test_run_passes_the_prometheus_address(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr("sglang_operator.entry.runner.run", lambda **kw: calls.append(kw))
    from sglang_operator.entry.cli import app

    result = CliRunner().invoke(app, ["run", "--prometheus-address", "http://prom.monitoring.svc:9090"])
    assert result.exit_code == 0, result.output
    assert calls[0]["prometheus_address"] == "http://prom.monitoring.svc:9090"
    SCALED_OBJECTS.configure("")
    assert SCALED_OBJECTS.prometheus_address is None  # the chart's empty default: none
