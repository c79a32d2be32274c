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


async def test_a_huge_server_info_string_is_truncated_in_status_and_the_patch_stays_small() -> None:
    """A hostile pod's ``/server_info`` with a 1 MiB ``speculative_algorithm``, read by the real client over
    loopback: ``status.effective.algorithm`` and the SettingsDiffer message carry a marked prefix, and the whole
    status patch stays a few KiB (it was 2 MiB)."""
    import datetime as dt
    import json

    from aiohttp import web

    from e2e.cluster.procs import free_port
    from sglang_operator.api.base import MESSAGE_LIMIT, TRUNCATED, VALUE_LIMIT
    from sglang_operator.api.status import SGLangServerStatus
    from sglang_operator.decisions import status as st
    from sglang_operator.decisions.conditions import find
    from sglang_operator.decisions.pods import PodHealth
    from sglang_operator.io.sglang_http import SGLangHTTP

    huge = "EAGLE" + "x" * (1024 * 1024)

    async def info(_: web.Request) -> web.Response:
        return web.json_response({**INFO_REGRESSED, "speculative_algorithm": huge})

    app = web.Application()
    app.router.add_get("/server_info", info)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    http = SGLangHTTP()
    try:
        body = await http.server_info(f"http://127.0.0.1:{port}")
    finally:
        await http.aclose()
        await runner.cleanup()
    assert len(body["speculative_algorithm"]) == len(huge)  # the read itself is bounded by the body limit only
    eff = effective_settings(body)
    assert len(eff["algorithm"]) == VALUE_LIMIT and eff["algorithm"].endswith(TRUNCATED)
    assert eff["algorithm"].startswith("EAGLEx")
    diffs = differences({"algorithm": "NEXTN", "numSteps": 1}, eff)
    now = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    health = PodHealth(1, 1, 1, "Running")
    new = st.observed(SGLangServerStatus(), health, 1, now, effective=eff, differences=diffs)
    patch = st.merge_patch({}, st.changed({}, new))
    cond = find(patch["conditions"], st.SETTINGS_DIFFER)
    assert cond is not None and cond["status"] == "True" and len(cond["message"]) <= MESSAGE_LIMIT
    assert patch["effective"]["algorithm"] == eff["algorithm"]
    assert len(json.dumps(patch)) < 4096


def test_truncate_keeps_short_text_and_cuts_long_text_to_the_limit_with_the_marker() -> None:
    import pytest

    from sglang_operator.api.base import MESSAGE_LIMIT, TRUNCATED, truncate

    assert truncate("short") == "short"
    assert truncate("x" * MESSAGE_LIMIT) == "x" * MESSAGE_LIMIT
    cut = truncate("y" * (MESSAGE_LIMIT + 1))
    assert len(cut) == MESSAGE_LIMIT and cut == "y" * (MESSAGE_LIMIT - len(TRUNCATED)) + TRUNCATED
    with pytest.raises(ValueError, match="shorter than the marker"):
        truncate("abc", 3)
