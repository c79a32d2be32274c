"""A revision whose spec forces SGLang's acceptance (``SGLANG_SIMULATE_ACC_*`` in ``spec.env``) is never judged:
its figures are made up, so the analysis pauses with reason ``SimulatedAcceptance`` and its verdict says why,
instead of promoting it (or rolling it back) on them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from rollback_driver import BAD_LEN, BAD_TPS, SETUP, Run

from sglang_operator.api import parse
from sglang_operator.api.status import Verdict
from sglang_operator.decisions.criteria import setup_differences
from sglang_operator.decisions.rollback import SIMULATED_ACCEPTANCE, RecordVerdict
from sglang_operator.decisions.rollback_state import setup_of

ROOT = Path(__file__).resolve().parents[2]
KNOWN_GOOD: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())


def test_the_setup_of_a_spec_says_whether_it_forces_acceptance() -> None:
    body = copy.deepcopy(KNOWN_GOOD)
    assert setup_of(parse(body).spec).simulated_acceptance is None
    body["spec"]["env"] = [{"name": "SGLANG_SIMULATE_ACC_LEN", "value": "4"}]
    assert setup_of(parse(body).spec).simulated_acceptance is True
    # a baseline stored before the field existed still compares with an ordinary revision
    base = Run()
    base.promote_good()
    assert base.state.baseline is not None
    assert setup_differences(base.state.baseline, SETUP, base.policy.signal.value) == []


def test_a_revision_that_forces_acceptance_is_paused_unjudged_with_its_reason() -> None:
    run = Run(setup=SETUP.model_copy(update={"simulated_acceptance": True}))
    run.warm_up()
    for _ in range(5):  # figures that would fail every criterion, or pass: neither counts
        run.interval(tps=BAD_TPS, accept=BAD_LEN)
    a = run.state.analysis
    assert a is not None and run.phase == "Paused" and a.reason == "SimulatedAcceptance"
    assert SIMULATED_ACCEPTANCE in (a.message or "") and "SGLANG_SIMULATE_ACC_" in SIMULATED_ACCEPTANCE
    assert run.state.stable_revision is None and not run.applies  # neither promoted nor rolled back
    verdicts = [v for v in run.actions if isinstance(v, RecordVerdict)]
    assert [(v.verdict, v.reason) for v in verdicts] == [(Verdict.UNVERIFIED, SIMULATED_ACCEPTANCE)]
    assert [e.reason for e in run.events() if e.type == "Warning"] == ["Paused"]
