"""Reading back what SGLang resolved and naming the differences (the check the incident lacked)."""

from sglang_operator.decisions.effective import differences, effective_settings

INFO_REGRESSED = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 1,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 2,
    "max_running_requests": 48,
    "mem_fraction_static": 0.85,
    "context_length": 262144,
    "internal_states": [{"avg_spec_accept_length": 1.75, "effective_max_running_requests_per_dp": 48}],
}


def test_effective_settings_from_server_info():
    eff = effective_settings(INFO_REGRESSED)
    assert eff["algorithm"] == "EAGLE" and eff["numDraftTokens"] == 2
    assert eff["maxRunningRequests"] == 48 and eff["avgSpecAcceptLength"] == 1.75


def test_nextn_reported_as_eagle_is_not_a_difference():
    assert differences({"algorithm": "NEXTN", "numSteps": 1}, effective_settings(INFO_REGRESSED)) == []


def test_rewritten_values_are_named_with_both_values():
    want = {"numSteps": 1, "numDraftTokens": 4, "maxRunningRequests": 16, "memFractionStatic": 0.85}
    diffs = differences(want, effective_settings(INFO_REGRESSED))
    assert diffs == ["numDraftTokens: spec 4, SGLang 2", "maxRunningRequests: spec 16, SGLang 48"]


def test_unreported_keys_are_not_differences():
    assert differences({"contextLength": 131072}, {}) == []


def test_broken_server_info_values_are_dropped_not_raised():
    info = {"speculative_num_steps": "3", "speculative_eagle_topk": True, "context_length": float("nan"),
            "speculative_num_draft_tokens": 4.0, "internal_states": {"not": "a list"}}
    assert effective_settings(info) == {"numDraftTokens": 4}
