"""``spec.speculative.adaptive`` (issue 17 item 7): rendered as ``--speculative-adaptive`` and, with a ConfigMap, a
``--speculative-adaptive-config`` path where the key is mounted read-only (SGLang opens a JSON file there:
``adaptive_spec_params.py``); refused before 0.5.11 naming the first release with it, and wherever SGLang would
quietly run static settings; ``status.effective`` gets ``adaptive`` from ``/server_info`` and the active tier from the
``sglang:spec_num_steps`` gauge, rewritten when SGLang switches tiers."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from e2e.tests.test_invalid_specs import valid_server
from sglang_operator import builders
from sglang_operator.api import parse
from sglang_operator.api.status import EffectiveSettings, SGLangServerStatus
from sglang_operator.builders.command import ADAPTIVE_CONFIG_DIR
from sglang_operator.decisions import effective as eff
from sglang_operator.decisions.sampling.model import Figures
from sglang_operator.decisions.status import figures_patch

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _server(image: str = "lmsysorg/sglang:v0.5.23-cu130", **adaptive: Any) -> dict[str, Any]:
    body = valid_server()
    body["spec"]["sglang"]["image"] = image
    body["spec"]["speculative"]["specV2"] = False
    body["spec"]["speculative"]["adaptive"] = adaptive
    return body


def test_adaptive_renders_the_flag_and_the_release_keeps_it() -> None:
    r = builders.render(parse(_server()))
    args = r.command.args
    assert "--speculative-adaptive" in args and "--speculative-adaptive-config" not in args
    assert args.index("--speculative-adaptive") > args.index("--speculative-num-draft-tokens")
    assert not [v for v in r.workload["spec"]["template"]["spec"]["volumes"] if "configMap" in v]


def test_a_config_map_is_mounted_and_named_by_path() -> None:
    r = builders.render(parse(_server(configMapRef={"name": "tiers", "key": "tiers.json"})))
    args = r.command.args
    assert args[args.index("--speculative-adaptive-config") + 1] == f"{ADAPTIVE_CONFIG_DIR}/tiers.json"
    pod = r.workload["spec"]["template"]["spec"]
    vol = next(v for v in pod["volumes"] if "configMap" in v)
    assert vol["configMap"] == {"name": "tiers", "items": [{"key": "tiers.json", "path": "tiers.json"}]}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == vol["name"])
    assert mount == {"name": vol["name"], "mountPath": ADAPTIVE_CONFIG_DIR, "readOnly": True}


def test_disabled_renders_nothing() -> None:
    r = builders.render(parse(_server(enabled=False, configMapRef={"name": "tiers"})))
    assert not [a for a in r.command.args if a.startswith("--speculative-adaptive")]
    assert not [v for v in r.workload["spec"]["template"]["spec"]["volumes"] if "configMap" in v]


@pytest.mark.parametrize(("image", "message"), [
    ("lmsysorg/sglang:v0.5.10", "SGLang 0.5.10 has no --speculative-adaptive (not supported by that release; SGLang "
                                "has it in 0.5.11 on)"),
    ("lmsysorg/sglang:v0.5.4", "SGLang 0.5.4 has no --speculative-adaptive"),
])
def test_older_releases_refuse_it_naming_the_first_release(image: str, message: str) -> None:
    body = _server(image)
    body["spec"]["memory"].pop("mambaSchedulerStrategy")
    body["spec"]["memory"].pop("mambaFullMemoryRatio")
    with pytest.raises(builders.InvalidSpec) as err:
        builders.render(parse(body))
    assert any(message in e for e in err.value.errors), err.value.errors


def test_every_release_from_0_5_11_renders_it() -> None:
    for image in ("v0.5.11", "v0.5.12", "v0.5.13", "v0.5.17", "v0.5.20", "v0.5.23"):
        assert "--speculative-adaptive" in builders.render(parse(_server(f"lmsysorg/sglang:{image}"))).command.args


def test_server_info_gives_adaptive_and_differences_name_a_silent_fallback() -> None:
    got = eff.effective_settings({"speculative_adaptive": False, "speculative_num_steps": 3})
    assert got == {"adaptive": False, "numSteps": 3}
    assert eff.effective_settings({"speculative_adaptive": "yes"}) == {}
    assert eff.differences({"adaptive": True}, got) == ["adaptive: spec True, SGLang False"]


def test_the_active_tier_comes_from_the_gauge_when_adaptive() -> None:
    stored = {"adaptive": True, "numSteps": 3, "numDraftTokens": 4}

    def tier(effective: dict[str, Any], steps: float | None, drafts: float | None) -> dict[str, int]:
        return eff.active_tier(EffectiveSettings.model_validate(effective), steps, drafts)

    assert tier(stored, 7.0, 8.0) == {"activeNumSteps": 7, "activeNumDraftTokens": 8}
    assert tier({**stored, "activeNumSteps": 7, "activeNumDraftTokens": 8}, 7.0, 8.0) == {}  # unchanged
    assert tier({**stored, "adaptive": False}, 7.0, 8.0) == {}
    assert tier(stored, None, None) == {}  # 0.5.11-0.5.12: no such gauge
    assert eff.active_tier(None, 7.0, 8.0) == {}  # never read back
    status = SGLangServerStatus.model_validate({"effective": stored, "acceptLength": 2.7, "tokensPerSecond": 55.0,
                                                "metricsUpdatedAt": NOW.isoformat()})
    patch = figures_patch(status, Figures(accept_length=2.7, decode_tokens_per_second=55.0, num_steps=7,
                                          num_draft_tokens=8), NOW, NOW)
    assert patch == {"effective": {**stored, "activeNumSteps": 7, "activeNumDraftTokens": 8}}
    assert figures_patch(status, Figures(accept_length=2.7, decode_tokens_per_second=55.0, num_steps=3,
                                         num_draft_tokens=4), NOW, NOW)["effective"]["activeNumSteps"] == 3
