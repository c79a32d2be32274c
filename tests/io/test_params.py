"""How a server is sampled comes from its spec.rollback (or defaults); --sample-interval overrides the interval."""

from __future__ import annotations

from types import SimpleNamespace

from sglang_operator.api.rollback import RollbackPolicy
from sglang_operator.decisions.sampling.model import Signal
from sglang_operator.io.sampler import SamplingParams, sampling_params


def test_params_follow_the_policy_and_the_override() -> None:
    policy = RollbackPolicy.model_validate({"signal": "traffic", "intervalSeconds": 45, "minTraffic":
                                            {"runningRequests": 3}, "probe": {"maxTokens": 64, "timeoutSeconds": 9,
                                                                              "prompt": "hi"}})
    p = sampling_params(policy)
    assert (p.interval_seconds, p.signal, p.min_running_requests) == (45, Signal.TRAFFIC, 3)
    assert (p.probe_prompt, p.probe_max_tokens, p.probe_timeout_seconds) == ("hi", 64, 9)
    assert sampling_params(policy, 2.0).interval_seconds == 2.0
    defaults = sampling_params(RollbackPolicy())
    assert (defaults.interval_seconds, defaults.signal) == (30, Signal.PROBE)


def test_an_old_policy_object_without_the_fields_gets_the_defaults() -> None:
    assert sampling_params(SimpleNamespace()) == SamplingParams()
