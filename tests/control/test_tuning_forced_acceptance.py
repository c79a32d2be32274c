"""A tuning of a server that forces SGLang's acceptance (``spec.env`` ``SGLANG_SIMULATE_ACC_*``) is refused at its
first step (control/tuning.py ``TuningRunner.step``, decisions/tuning/lifecycle.py ``forced_refused``): phase
``Failed``, reason ``ForcedAcceptance``, the message naming the variables, no trial and no workload, so its made-up
figures never reach the namespace's known best or measured capacity (issue 41 item 3)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fakekube import FakeKube
from test_tuning_trial_wait import SAMPLE, TUNING, Views

from sglang_operator.control import tuning as ctl


@pytest.mark.parametrize("env", [[{"name": "SGLANG_SIMULATE_ACC_LEN", "value": "3.2"}],
                                 [{"name": "SGLANG_SIMULATE_ACC_METHOD", "value": "multinomial"}], []])
async def test_a_forced_acceptance_server_is_never_tuned(monkeypatch: pytest.MonkeyPatch,
                                                        env: list[dict[str, Any]]) -> None:
    fk = FakeKube().install()
    server = copy.deepcopy(SAMPLE)
    server["metadata"] = {"name": "s", "namespace": "ns"}
    server["spec"]["env"] = env
    fk.put(server)
    tuning = copy.deepcopy(TUNING)
    tuning["status"] = {}
    fk.put(tuning)
    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.01)
    views = Views(fk, [])
    try:
        going_on = await ctl.TuningRunner("ns", "t", views).step()
    finally:
        await views.http.aclose()
    status = (fk.get("SGLangTuning", "ns", "t") or {}).get("status") or {}
    if not env:  # the same server without the variables starts
        assert going_on and status["phase"] == "Running" and status["setup"]["image"] == "lmsysorg/sglang:v0.5.10-cu129"
        return
    assert not going_on and status["phase"] == "Failed"
    complete = next(c for c in status["conditions"] if c["type"] == "Complete")
    assert complete["reason"] == "ForcedAcceptance" and env[0]["name"] in complete["message"]
    assert "made up" in complete["message"] and not status.get("trials")
    assert fk.get("Deployment", "ns", "t-trial-1") is None
