"""The server's one patch carries ``SpeculativeSettings`` (decisions/tuning/known_best.py, gathered as
``Observed.settings``), except while an InPlace tuning holds the server (its pods then run a trial, not the spec)."""

from __future__ import annotations

from rollback_driver import FAST, GOOD, T0
from test_observation import observed, tick, view

from sglang_operator.decisions.conditions import condition
from sglang_operator.decisions.tuning.inplace import TuningRequest

BELOW = condition("SpeculativeSettings", "False", "BelowKnownBest", "the spec runs 1/1/2: 37.1 decode tok/s …", 1, T0)


def test_the_condition_is_written_by_the_one_patch() -> None:
    d = tick(view({"revision": GOOD}), observed(settings=BELOW), FAST)
    got = d.status.condition("SpeculativeSettings")
    assert got is not None and (got.status, got.reason) == ("False", "BelowKnownBest")
    assert tick(view({"revision": GOOD}), observed(), FAST).status.condition("SpeculativeSettings") is None


def test_not_while_an_in_place_tuning_holds_the_server() -> None:
    hold = {"name": "t", "stableRevision": GOOD, "generation": 1}
    asks = (TuningRequest(name="t", in_place=True, active=True, started=True),)
    d = tick(view({"revision": GOOD, "tuningHold": hold}), observed(settings=BELOW, tunings=asks), FAST)
    assert d.status.tuning_hold is not None and d.status.condition("SpeculativeSettings") is None
