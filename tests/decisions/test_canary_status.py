"""What ``kubectl get sgls`` shows over a canary's steps (issue 40 item 3): the default printer columns REPLICAS,
ANALYSIS and REASON read ``status.summary`` (:func:`sglang_operator.decisions.status.summary`), computed here at every
tick of the step-by-step world of ``test_canary_decision.py`` from the state ``step()`` left and the pods Ready, with
the conditions :func:`~sglang_operator.decisions.derive.derive` gives for that state. No row says ``Stable Promoted``
while a canary is judged, none says ``WarmingUp`` once it is promoted, and a removed canary is never ``RolledBack``."""

from __future__ import annotations

from typing import Any

import pytest

from sglang_operator.api.crd import PRINTER_COLUMNS
from sglang_operator.api.rollback import RollbackAction
from sglang_operator.api.spec import CanaryStep, CanaryStrategy
from sglang_operator.decisions.conditions import condition
from sglang_operator.decisions.derive import derive
from sglang_operator.decisions.status import summary
from tests.decisions.rollback_driver import BAD, GOOD
from tests.decisions.test_canary_decision import STABLE_REV, World


def row(w: World) -> dict[str, Any]:
    """The printer columns' values after the last tick, and the Degraded condition's reason."""
    c = w.state.canary
    stable = sum(v.ready for v in w.views(w.revision))  # the serving revision's pods, as gather counts them
    split = (sum(v.ready for v in w.views(c.stable_revision)), sum(v.ready for v in w.views(c.revision))) \
        if c is not None else None
    patch = w.state.status_patch()
    shown = summary(stable, patch.get("analysis"), patch.get("canary"), split)
    healthy = [condition("Degraded", "False", "AsExpected", "pods fine", 1, w.now)]
    degraded = next(x for x in derive(healthy, w.state, RollbackAction.ROLLBACK, 1, w.now) if x["type"] == "Degraded")
    return {**shown, "degraded": degraded["reason"], "canary": c is not None}


def rows(w: World, done: Any, limit: int = 300) -> list[dict[str, Any]]:
    out = []
    for _ in range(limit):
        w.tick()
        out.append(row(w))
        if done():
            return out
    raise AssertionError(f"not done after {limit} ticks")


def more(w: World, ticks: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(ticks):
        w.tick()
        out.append(row(w))
    return out


def test_the_default_columns_read_the_summary() -> None:
    paths = {c["name"]: c["jsonPath"] for c in PRINTER_COLUMNS if "priority" not in c}
    assert paths["Replicas"] == ".status.summary.ready"
    assert (paths["Analysis"], paths["Reason"]) == (".status.summary.analysis", ".status.summary.reason")


@pytest.mark.parametrize("roundtrip", [False, True])
def test_a_canary_promoted_in_two_steps_shows_both_sides_and_its_step_never_stable_promoted(roundtrip: bool) -> None:
    w = World(strategy=CanaryStrategy(steps=[CanaryStep(replicas="25%"), CanaryStep(replicas="50%")]),
              roundtrip=roundtrip)
    assert row(w)["ready"] == "4" and (row(w)["analysis"], row(w)["reason"]) == ("Stable", "Promoted")
    w.apply_spec(GOOD)
    seen = rows(w, lambda: w.state.stable_revision == GOOD)
    seen += more(w, 3)
    judged = [r for r in seen if r["canary"]]
    assert judged and all(r["analysis"] == "Canary" for r in judged)
    assert not [r for r in judged if (r["analysis"], r["reason"]) == ("Stable", "Promoted")]
    reasons = {r["reason"] for r in judged}
    assert {"Stepping 1/2", "Stepping 2/2", "Promoting"} <= reasons, reasons
    splits = {r["ready"] for r in judged}
    assert {"3+1", "2+2", "0+4"} <= splits, splits  # both sides counted, never the stable alone
    for r in judged:  # at most one pod starting: the two sides add up to 3 or 4 Ready pods
        assert 3 <= sum(int(n) for n in r["ready"].split("+")) <= 4, r
    after = [r for r in seen if not r["canary"]]
    assert after and all((r.get("analysis"), r.get("reason")) == ("Stable", "Promoted") for r in after), after
    assert not [r for r in seen if r["analysis"] == "WarmingUp"]  # no transient row at the end of the promotion
    assert not [e for e in w.events("WarmingUp") if GOOD in e.message]
    assert after[0]["ready"] == "4"


@pytest.mark.parametrize(("how", "reason"), [("abort", "CanaryAborted"), ("regressed", "CanaryRegressed")])
def test_a_removed_canary_is_never_rolled_back(how: str, reason: str) -> None:
    w = World()
    revision = GOOD if how == "abort" else BAD
    w.apply_spec(revision)
    if how == "abort":
        rows(w, lambda: w.state.canary is not None and w.state.canary.canary_replicas == 1)
        w.abort_token = "1"
    seen = rows(w, lambda: w.state.canary is None)
    seen += more(w, 3)
    assert all(r["analysis"] != "RolledBack" and r["degraded"] != "RolledBack" for r in seen), seen
    assert [r for r in seen if r["canary"] and r["reason"].startswith("Removing ")]
    last = seen[-1]
    assert (last["analysis"], last["reason"], last["degraded"], last["ready"]) == ("Stable", reason, reason, "4")
    a = w.state.analysis
    assert a is not None and a.phase == "Stable" and a.reason == reason and a.revision == STABLE_REV
    assert not w.state.rollbacks  # no rollback record either
    healthy = [condition("Degraded", "False", "AsExpected", "pods fine", 1, w.now)]
    [degraded] = [x for x in derive(healthy, w.state, RollbackAction.ROLLBACK, 1, w.now) if x["type"] == "Degraded"]
    assert "removed as a canary" in degraded["message"] and "no rollback" in degraded["message"]
    assert "sglang-operator.io/retry" in degraded["message"]
    # the spec asks for the stable revision again: plain Stable Promoted, Degraded left to pod health
    w.apply_spec(STABLE_REV)
    w.tick()
    assert (row(w)["analysis"], row(w)["reason"], row(w)["degraded"]) == ("Stable", "Promoted", "AsExpected")
