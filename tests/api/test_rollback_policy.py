"""``spec.rollback``: the defaults of issue 8 item 1, units in every description (``kubectl explain``), the probe
prompt, and the impossible combinations refused with the values named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator.api.crd import crd
from sglang_operator.api.rollback import PROBE_PROMPT, RollbackAction, RollbackPolicy, Signal, without_default_prompt
from sglang_operator.api.server import SpecError, parse_spec
from sglang_operator.io import loadgen
from sglang_operator.io.sampler import sampling_params

ROOT = Path(__file__).resolve().parents[2]

UNITS = ("seconds", "count", "tok/s", "fraction", "tokens per verify step", "tokens")


def rollback_schema() -> dict[str, Any]:
    spec = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    schema: dict[str, Any] = spec["properties"]["rollback"]
    return schema


def test_defaults_are_the_issues() -> None:
    p = RollbackPolicy()
    assert (p.action, p.signal) == (RollbackAction.ROLLBACK, Signal.PROBE)
    assert (p.warmup_seconds, p.interval_seconds, p.min_samples, p.verify_seconds) == (120, 30, 5, 600)
    assert (p.failure_threshold, p.error_threshold, p.progress_deadline_seconds) == (3, 4, 3600)
    assert (p.min_relative_tokens_per_second, p.min_relative_accept_length) == (0.85, 0.9)
    assert p.min_tokens_per_second is None and p.min_accept_length is None
    assert p.min_traffic.running_requests == 1
    assert (p.max_rollbacks, p.rollback_window_seconds, p.history_limit) == (3, 86400, 10)
    assert p.probe.prompt == "" and p.probe.text == PROBE_PROMPT and p.probe.max_tokens == 256
    assert p.probe.timeout_seconds < p.interval_seconds


def test_every_numeric_field_states_its_unit() -> None:
    def walk(node: dict[str, Any], path: str) -> list[str]:
        out = []
        for name, sub in node.get("properties", {}).items():
            if sub.get("type") in ("integer", "number") and not any(u in sub["description"].lower() for u in UNITS):
                out.append(f"{path}.{name}")
            out += walk(sub, f"{path}.{name}")
        return out

    assert walk(rollback_schema(), "spec.rollback") == []


def test_the_default_probe_prompt_is_about_512_tokens_and_the_load_generators() -> None:
    """≈ 4 characters per token (the simulator's count, and the usual rule for English); ≈ 0.75 words per token."""
    assert 480 <= len(PROBE_PROMPT) / 4 <= 580
    assert 450 <= len(PROBE_PROMPT.split()) / 0.75 <= 580
    assert loadgen.CODING_PROMPT == PROBE_PROMPT


def test_the_built_in_prompt_is_not_copied_into_objects_and_kubectl_explain_names_it() -> None:
    """The CRD default is empty (issue 19: the 2 KB text was written into every object); the description says
    what empty sends."""
    prompt = rollback_schema()["properties"]["probe"]["properties"]["prompt"]
    assert prompt["default"] == ""
    assert "Empty (the default): the operator's built-in prompt" in prompt["description"]
    assert PROBE_PROMPT[:40] not in yaml.safe_dump(crd())


def test_an_older_objects_copy_of_the_built_in_prompt_reads_as_the_default() -> None:
    base = {"sglang": {"image": "lmsysorg/sglang:v0.5.10-cu129"}, "model": {"path": "Qwen/Qwen3.6-27B"}}
    old = parse_spec({**base, "rollback": {"probe": {"prompt": PROBE_PROMPT, "maxTokens": 64}}})
    new = parse_spec({**base, "rollback": {"probe": {"maxTokens": 64}}})
    assert old.rollback == new.rollback and old.rollback.probe.prompt == ""
    assert old.rollback.probe.text == PROBE_PROMPT
    own = parse_spec({**base, "rollback": {"probe": {"prompt": "Write a haiku."}}})
    assert own.rollback.probe.prompt == own.rollback.probe.text == "Write a haiku."
    assert sampling_params(old.rollback).probe_prompt == sampling_params(new.rollback).probe_prompt == PROBE_PROMPT
    assert sampling_params(own.rollback).probe_prompt == "Write a haiku."
    stored = {**base, "rollback": {"probe": {"prompt": PROBE_PROMPT, "maxTokens": 64}}}
    assert without_default_prompt(stored) == {**base, "rollback": {"probe": {"maxTokens": 64}}}
    empty = {**base, "rollback": {"probe": {"prompt": ""}}}
    assert without_default_prompt(empty) == {**base, "rollback": {"probe": {}}}
    own = {**base, "rollback": {"probe": {"prompt": "x"}}}
    assert without_default_prompt(own) == own


@pytest.mark.parametrize("prompt", [None, "", PROBE_PROMPT])
def test_the_revision_hash_of_an_object_is_the_same_whichever_default_prompt_it_holds(prompt: str | None) -> None:
    """The samples' hashes (the prompt is not in the pod template): an object stored with the old default, one with
    the new, and one without any, all run the same revision. Pinned since issue 18's probe periods (before them:
    456b406687 and 12e27607e6; an upgrade restarts no pod for it, tests/control/test_upgrade_defaults.py)."""
    from sglang_operator import builders
    from sglang_operator.api.server import parse

    hashes = {}
    for name, revision in (("qwen3.6-27b-known-good.yaml", "458c0f504c"), ("qwen3.6-27b-regressed.yaml", "318e2d36b6")):
        body = yaml.safe_load((ROOT / "samples" / name).read_text())
        body["metadata"]["namespace"] = "default"
        if prompt is not None:
            body["spec"]["rollback"] = {"probe": {"prompt": prompt}}
        hashes[name] = (builders.render(parse(body)).revision, revision)
    assert all(got == want for got, want in hashes.values()), hashes


@pytest.mark.parametrize(("rollback", "message"), [
    ({"verifySeconds": 60}, "spec.rollback.verifySeconds is 60 but minSamples × intervalSeconds is 5 × 30 = 150"),
    ({"probe": {"timeoutSeconds": 30}}, "spec.rollback.probe.timeoutSeconds is 30 but intervalSeconds is 30"),
    ({"warmupSeconds": 600, "progressDeadlineSeconds": 600},
     "spec.rollback.progressDeadlineSeconds is 600 but warmupSeconds is 600"),
    ({"minTokensPerSecond": 10}, "spec.rollback.minTokensPerSecond is 10: a probe of probe.maxTokens 256 tokens"),
    ({"minRelativeTokensPerSecond": 1.2}, "less than or equal to 1"),
    ({"action": "Rollforward"}, "'Rollback', 'Alert' or 'DryRun'"),
    ({"windowSeconds": 300}, "spec.rollback.windowSeconds: unknown field; did you mean rollbackWindowSeconds?"),
])
def test_impossible_policies_are_refused_with_the_values(rollback: dict[str, Any], message: str) -> None:
    spec = {"sglang": {"image": "lmsysorg/sglang:v0.5.10-cu129"}, "model": {"path": "Qwen/Qwen3.6-27B"},
            "rollback": rollback}
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    assert any(message in m for m in err.value.messages), err.value.messages


def test_a_fast_policy_is_valid() -> None:
    p = RollbackPolicy.model_validate({"warmupSeconds": 10, "intervalSeconds": 5, "minSamples": 3,
                                       "verifySeconds": 15, "probe": {"timeoutSeconds": 4}})
    assert p.verify_seconds == 15
