"""An invalid measurement's wiring, on the fake API: a level whose load was no measurement (io/trialbench.py raises
``InvalidMeasurement``: answers far shorter than ``maxOutputTokens``, or streams the rate cap kept idle) ends the
trial there, ``Failed`` with the rule's reason and no figures, its Shadow workload deleted. Only the HTTP load is
faked (``measure_trial``); the rest is the operator's (the harness of ``test_tuning_prune_wiring``)."""

from __future__ import annotations

from typing import Any

import pytest
from fakekube import FakeKube
from test_tuning_prune_wiring import RUNNING, fk, resume

from sglang_operator.api.tuning_status import LevelFigures
from sglang_operator.decisions.tuning.trialload import short_answers
from sglang_operator.io import trialbench

__all__ = ["fk"]  # the harness's fixture, used here


async def test_short_answers_fail_the_trial_with_the_reason(fk: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    reason = short_answers(1, 1.0, 512)
    assert reason is not None
    levels: list[tuple[int, ...]] = []

    async def load(http: Any, pods: Any, model: str, roles: Any, bench: Any, **_: Any) -> list[LevelFigures]:
        levels.append(bench.levels)
        raise trialbench.InvalidMeasurement(reason)

    monkeypatch.setattr(trialbench, "measure_trial", load)
    record = await resume(fk)
    assert record["verdict"] == "Failed", record
    assert record["reason"].startswith("answers of 1 tokens median at concurrency 1, maxOutputTokens 512: not a "
                                       "measurement of decoding"), record
    assert not record.get("levels")
    assert levels == [(1,)]  # stopped at the first level
    assert fk.get("Deployment", "ns", RUNNING.name) is None  # the Shadow workload deleted
