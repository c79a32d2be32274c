"""Pure status decisions: after an apply, after a refused spec, after observing pods and SGLang."""

import datetime as dt

from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions.conditions import find
from sglang_operator.decisions.pods import pod_health
from sglang_operator.decisions.status import applied, changed, invalid, ledger_entry, observed

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
LATER = NOW + dt.timedelta(minutes=1)


def render_status(rev: str) -> dict:
    return {"revision": rev, "selector": "a=b", "sglangVersion": "0.5.10", "command": f"sglang serve # {rev}",
            "numDraftTokens": 4}


def typed(status: dict) -> SGLangServerStatus:
    """A status as stored, parsed as the observer reads it (once per view)."""
    return SGLangServerStatus.model_validate(status)


def entry(rev: str, gen: int) -> dict:
    return ledger_entry(rev, gen, f"cmd {rev}", {"numSteps": "3"}, {"replicas": 1}, NOW)


def test_first_apply_records_the_revision_and_is_progressing():
    st = applied(typed({}), render_status("r1"), [], entry("r1", 1), 1, 10, NOW)
    assert st["phase"] == "Progressing" and st["observedGeneration"] == 1
    assert [r["revision"] for r in st["revisions"]] == ["r1"] and st["revisions"][0]["verdict"] == "Verifying"
    assert find(st["conditions"], "SpecValid")["reason"] == "Valid"


def test_reapplying_the_same_revision_changes_nothing():
    first = applied(typed({}), render_status("r1"), [], entry("r1", 1), 1, 10, NOW)
    again = applied(typed(first), render_status("r1"), [], entry("r1", 1), 1, 10, LATER)
    assert changed(first, again) == {}


def test_new_revision_supersedes_and_resets_readings_and_history_is_bounded():
    st: dict = {}
    for i in range(1, 5):
        st = {**st, **applied(typed(st), render_status(f"r{i}"), [], entry(f"r{i}", i), i, 3, NOW)}
    assert [r["revision"] for r in st["revisions"]] == ["r2", "r3", "r4"]
    assert [r["verdict"] for r in st["revisions"]] == ["Superseded", "Superseded", "Verifying"]
    assert st["effective"] is None and st["tokensPerSecond"] is None


def test_warnings_go_to_spec_valid_message():
    st = applied(typed({}), render_status("r1"), ["maxRunningRequests unset"], entry("r1", 1), 1, 10, NOW)
    cond = find(st["conditions"], "SpecValid")
    assert (cond["status"], cond["reason"]) == ("True", "ValidWithWarnings")
    assert "maxRunningRequests unset" in cond["message"]


def test_invalid_spec_keeps_the_running_revision_and_only_says_why():
    running = applied(typed({}), render_status("r1"), [], entry("r1", 1), 1, 10, NOW)
    bad = invalid(typed(running), ["spec.extraArgs: --nope is not a flag of SGLang 0.5.10"], 2, LATER)
    assert set(bad) == {"conditions", "observedGeneration"}  # revision, command, ledger untouched
    assert find(bad["conditions"], "SpecValid")["status"] == "False"
    assert invalid(typed({}), ["x"], 1, NOW)["phase"] == "Invalid"  # nothing was ever applied


def ready_pod(rev: str) -> dict:
    return {"metadata": {"labels": {"sglang-operator.io/revision": rev}},
            "status": {"podIP": "127.1.0.9", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_observed_writes_effective_settings_differences_and_metrics_once():
    base = applied(typed({}), render_status("r1"), [], entry("r1", 1), 1, 10, NOW)
    health = pod_health([ready_pod("r1")], 1, "r1", 1, NOW)
    new = observed(typed(base), health, 1, NOW, {"numDraftTokens": 2}, ["numDraftTokens: spec 4, SGLang 2"],
                   {"acceptLength": 1.75, "acceptRate": 0.75, "tokensPerSecond": 35.8})
    assert new["phase"] == "Ready" and new["readyReplicas"] == 1
    differ = find(new["conditions"], "SettingsDiffer")
    assert differ["status"] == "True" and "spec 4, SGLang 2" in differ["message"]
    assert new["tokensPerSecond"] == 35.8 and new["metricsUpdatedAt"] == "2026-11-30T12:00:00Z"
    merged = {**base, **new}
    same_again = observed(typed(merged), pod_health([ready_pod("r1")], 1, "r1", 1, LATER), 1, LATER, None, None,
                          {"acceptLength": 1.75, "acceptRate": 0.75, "tokensPerSecond": 35.8})
    assert changed(merged, same_again) == {}  # same readings: no write at all


def test_returning_to_an_earlier_revision_makes_it_the_newest_record():
    st: dict = {}
    for rev in ("A", "B", "A"):
        st = {**st, **applied(typed(st), render_status(rev), [], entry(rev, 1), 1, 10, NOW)}
    assert [(r["revision"], r["verdict"]) for r in st["revisions"]] == [("B", "Superseded"), ("A", "Verifying")]


def test_a_replicas_only_change_updates_the_applied_spec_of_the_same_revision():
    first = applied(typed({}), render_status("A"), [], entry("A", 1), 1, 10, NOW)
    scaled = ledger_entry("A", 2, "cmd A", {}, {"replicas": 3}, NOW)
    st = applied(typed(first), render_status("A"), [], scaled, 2, 10, NOW)
    assert [r["spec"]["replicas"] for r in st["revisions"]] == [3]


def test_settings_differ_is_rewritten_from_differences_alone():
    health = pod_health([ready_pod("r1")], 1, "r1", 1, NOW)
    base = applied(typed({}), render_status("r1"), [], entry("r1", 1), 1, 10, NOW)
    base = {**base, "effective": {"numDraftTokens": 2}}  # read earlier; a kopf patch then dropped the condition
    new = observed(typed(base), health, 1, NOW, None, ["numDraftTokens: spec 4, SGLang 2"], {})
    assert find(new["conditions"], "SettingsDiffer")["status"] == "True"
    assert "effective" not in new  # not re-read


def test_merge_patch_nulls_nested_keys_that_are_gone() -> None:
    from sglang_operator.decisions.status import merge_patch

    old = {"analysis": {"revision": "a", "warmedUpAt": "t1", "readySince": "t0", "phase": "Stable"}, "phase": "Ready",
           "rollbacks": [{"from": "b"}]}
    delta = {"analysis": {"revision": "c", "phase": "WarmingUp"}, "rollbacks": []}
    patch = merge_patch(old, delta)
    assert patch == {"analysis": {"revision": "c", "phase": "WarmingUp", "warmedUpAt": None, "readySince": None},
                     "rollbacks": []}
    assert merge_patch(old, {"phase": "Degraded", "analysis": None}) == {"phase": "Degraded", "analysis": None}


def test_no_settings_differ_claims_sglang_runs_as_asked_unless_read_back():
    health = pod_health([ready_pod("r1")], 1, "r1", 1, NOW)
    base = applied(typed({}), render_status("r1"), [], entry("r1", 1), 1, 10, NOW)
    asked = observed(typed(base), health, 1, NOW, {"numDraftTokens": 4}, [], {})
    assert find(asked["conditions"], "SettingsDiffer")["reason"] == "AsRequested"  # read back and equal
    # a new revision: the last one's "as requested" no longer holds until the new one is read back
    merged = {**base, **asked}
    second = applied(typed(merged), render_status("r2"), [], entry("r2", 2), 2, 10, NOW)
    differ = find(second["conditions"], "SettingsDiffer")
    assert (differ["status"], differ["reason"]) == ("Unknown", "NotReadBack") and "r2" in differ["message"]
    # its pod answers, but not as SGLang: Unknown with the one sentence, never False
    sentence = ("pod a-0 answers /server_info with a JSON object without SGLang's server arguments: the image "
                "nginx:1.27 does not serve SGLang; set spec.sglang.image to an SGLang image")
    foreign = observed(typed({**merged, **second}), pod_health([ready_pod("r2")], 1, "r2", 2, NOW), 2, NOW, None,
                       None, {}, not_sglang=sentence)
    differ = find(foreign["conditions"], "SettingsDiffer")
    assert (differ["status"], differ["reason"], differ["message"]) == ("Unknown", "NotSGLang", sentence)
    assert "effective" not in foreign
