"""The known best across servers (decisions/tuning/known_best.py): the table built from finished tunings' statuses,
the SpeculativeSettings condition of a server against it (match, no match, unknown GPU, the noise rule), and the
watched index that keeps it (control/memory.py TuningRequests)."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import yaml

from e2e.policies import BAD, LOCAL
from sglang_operator.api.server import parse
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.status import Condition
from sglang_operator.api.tuning_spec import SGLangTuningSpec, Workload
from sglang_operator.api.tuning_status import SGLangTuningStatus
from sglang_operator.api.view import ServerView
from sglang_operator.control.memory import TuningRequests
from sglang_operator.decisions.tuning import known_best as kb
from sglang_operator.decisions.tuning import lifecycle

SERVER: dict[str, Any] = yaml.safe_load((LOCAL / BAD).read_text())
NOW = dt.datetime(2026, 12, 4, tzinfo=dt.UTC)
GPU = "NVIDIA-RTX-A6000"


def server(steps: int = 1, *, gpu: str | None = GPU, image: str | None = None, speculative: bool = True,
           **memory: Any) -> SGLangServerSpec:
    body = copy.deepcopy(SERVER)
    spec = body["spec"]
    spec["speculative"]["numSteps"] = steps
    if not speculative:
        spec.pop("speculative")
    if gpu is None:
        spec.pop("nodeSelector", None)
    else:
        spec["nodeSelector"] = {kb.GPU_PRODUCT_LABEL: gpu}
    if image is not None:
        spec["sglang"]["image"] = image
    spec["memory"] = {**spec.get("memory", {}), **memory}
    return parse({**body, "metadata": {"name": "s", "namespace": "ns"}}).spec


def chain(steps: int) -> dict[str, Any]:
    return {"numSteps": steps, "eagleTopk": 1, "numDraftTokens": steps + 1}


def trial(n: int, settings: dict[str, Any], decode: float, output16: float | None = None,
          verdict: str = "Completed") -> dict[str, Any]:
    levels = [{"concurrency": 1, "decodeTokensPerSecond": decode, "outputTokensPerSecond": decode * 0.6}]
    if output16 is not None:
        levels.append({"concurrency": 16, "decodeTokensPerSecond": output16 / 20, "outputTokensPerSecond": output16})
    return {"name": f"t-trial-{n}", "settings": settings, "verdict": verdict, "levels": levels}


def tuning(name: str, trials: list[dict[str, Any]], *, tuned: SGLangServerSpec | None = None,
           phase: str = "Succeeded", prompts: list[str] | None = None) -> dict[str, Any]:
    workload = Workload.model_validate({"prompts": prompts or [], "maxOutputTokens": 64})
    setup = kb.tuning_setup(tuned or server(), workload)
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"serverRef": {"name": "first"}},
            "status": {"phase": phase, "setup": setup.model_dump(by_alias=True, exclude_none=True, mode="json"),
                       "trials": trials}}


def known(*tunings: dict[str, Any]) -> kb.KnownBest:
    return kb.build(r for t in tunings if (r := kb.record_of(t)) is not None)


REGRESSED = tuning("first-tune", [trial(0, {"speculative": False}, 21.8), trial(1, chain(3), 54.8),
                                  trial(2, chain(1), 34.1), trial(3, chain(2), 47.0), trial(4, chain(4), 50.2)])


def test_a_server_running_settings_a_tuning_measured_clearly_worse_is_below_the_known_best() -> None:
    cond = kb.condition(known(REGRESSED), server(1), 3, NOW)
    assert cond is not None
    assert (cond["type"], cond["status"], cond["reason"]) == ("SpeculativeSettings", "False", "BelowKnownBest")
    message = cond["message"]
    assert "the spec runs 1/1/2: 34.1 decode tok/s at concurrency 1" in message
    assert "3/1/4 measured 54.8 decode tok/s" in message and "1.61×" in message
    assert "SGLangTuning first-tune" in message and "kubectl sglang tune apply first-tune" in message
    assert cond["observedGeneration"] == 3


def test_the_best_settings_are_at_the_known_best_and_unmeasured_settings_say_nothing() -> None:
    cond = kb.condition(known(REGRESSED), server(3), 1, NOW)
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "AtKnownBest")
    assert kb.condition(known(REGRESSED), server(6), 1, NOW) is None  # 6/1/7 never measured
    assert kb.condition(known(), server(1), 1, NOW) is None  # no tuning
    # a server without speculative decoding is the control trial's point: far below 3/1/4
    plain = kb.condition(known(REGRESSED), server(speculative=False), 1, NOW)
    assert plain is not None and plain["reason"] == "BelowKnownBest"
    assert plain["message"].startswith("the spec runs no speculation: 21.8 decode tok/s")


def test_only_the_same_setup_matches_and_an_unknown_gpu_matches_only_an_unknown_gpu() -> None:
    unknown = tuning("blind-tune", REGRESSED["status"]["trials"], tuned=server(gpu=None))
    assert kb.condition(known(unknown), server(1), 1, NOW) is None  # A6000 server, unknown-GPU tuning
    assert kb.condition(known(REGRESSED), server(1, gpu=None), 1, NOW) is None  # unknown server, A6000 tuning
    got = kb.condition(known(unknown), server(1, gpu=None), 1, NOW)
    assert got is not None and got["reason"] == "BelowKnownBest" and "unknown GPU" in got["message"]
    assert kb.condition(known(REGRESSED), server(1, gpu="NVIDIA-H100-80GB-HBM3"), 1, NOW) is None
    assert kb.condition(known(REGRESSED), server(1, image="lmsysorg/sglang:v0.5.13-cu129"), 1, NOW) is None
    # the server's own maxRunningRequests is part of its settings: another value was not measured
    assert kb.condition(known(REGRESSED), server(1, maxRunningRequests=8), 1, NOW) is None
    running = tuning("running-tune", REGRESSED["status"]["trials"], phase="Running")
    assert kb.record_of(running) is None and kb.condition(known(running), server(1), 1, NOW) is None


def forced(steps: int = 1, **env: str) -> SGLangServerSpec:
    """``server(steps)`` with ``env`` in its ``spec.env``."""
    spec = server(steps)
    return spec.model_copy(update={"env": [{"name": k, "value": v} for k, v in env.items()]})


def test_another_images_or_a_forced_acceptance_benchmarks_records_are_never_used() -> None:
    """Issue 41: the setup key holds the image (its digest when the reference names one) and the forced-acceptance
    variables with their values, so a benchmark with forced acceptance, or another build of the same release, never
    steers a production server of the namespace (known best and measured capacity alike)."""
    other = "lmsysorg/sglang:v0.5.10-cu129-custom"  # the same release, another image
    assert kb.condition(known(REGRESSED), server(1, image=other), 1, NOW) is None
    assert kb.capacity(known(REGRESSED), server(1, image=other)) == ()
    assert kb.capacity(known(REGRESSED), server(1)) != ()  # the same image: used
    pinned = "lmsysorg/sglang:v0.5.10-cu129@sha256:" + "ab" * 32
    by_digest = tuning("digest-tune", REGRESSED["status"]["trials"], tuned=server(image=pinned))
    assert by_digest["status"]["setup"]["image"] == "sha256:" + "ab" * 32
    same = kb.condition(known(by_digest), server(1, image="mirror.local/sglang:v0.5.10@sha256:" + "ab" * 32), 1, NOW)
    assert same is not None and same["reason"] == "BelowKnownBest"  # one digest, whatever the tag
    assert kb.condition(known(by_digest), server(1), 1, NOW) is None  # the tag alone: another key
    bench = tuning("bench-tune", REGRESSED["status"]["trials"],
                   tuned=forced(SGLANG_SIMULATE_ACC_LEN="3.2", SGLANG_SIMULATE_ACC_METHOD="multinomial"))
    assert bench["status"]["setup"]["forcedAcceptance"] == (
        "SGLANG_SIMULATE_ACC_LEN=3.2,SGLANG_SIMULATE_ACC_METHOD=multinomial")
    assert kb.condition(known(bench), server(1), 1, NOW) is None  # never steers the production server
    assert kb.capacity(known(bench), server(1)) == ()
    assert kb.condition(known(REGRESSED), forced(SGLANG_SIMULATE_ACC_LEN="3.2"), 1, NOW) is None
    assert kb.condition(known(bench), forced(SGLANG_SIMULATE_ACC_LEN="2.0", SGLANG_SIMULATE_ACC_METHOD="multinomial"),
                        1, NOW) is None  # another forced length: another key


def test_a_tuning_recorded_before_the_image_was_in_the_key_is_read_but_never_matches() -> None:
    """Decided: a setup stored without ``image`` (before issue 41) still parses and lists in the table, but matches
    no server (every server's image is known from its spec): it might have measured another image or forced
    acceptance, which nothing recorded then tells."""
    old = copy.deepcopy(REGRESSED)
    del old["status"]["setup"]["image"]
    record = kb.record_of(old)
    assert record is not None and record.setup.image is None
    assert kb.condition(known(old), server(1), 1, NOW) is None and kb.capacity(known(old), server(1)) == ()


def test_the_noise_rule_two_standard_deviations_at_least_the_floor() -> None:
    # one measurement each, noise floor 2 %: the margin is 2 × 2 % × sqrt(2) = 5.7 %
    close = tuning("close", [trial(1, chain(3), 54.8), trial(2, chain(2), 52.0)])
    assert kb.condition(known(close), server(2), 1, NOW)["reason"] == "AtKnownBest"  # type: ignore[index]
    apart = tuning("apart", [trial(1, chain(3), 54.8), trial(2, chain(2), 51.0)])
    assert kb.condition(known(apart), server(2), 1, NOW)["reason"] == "BelowKnownBest"  # type: ignore[index]
    # repeats that measured 10 % apart make the noise larger: 6.9 % below is then within it
    noisy = tuning("noisy", [trial(1, chain(3), 54.8), trial(2, chain(2), 51.0), trial(3, chain(3), 60.0),
                             trial(4, chain(3), 49.6)])
    table = known(noisy).tables[0]
    assert table.sigma(1) > 0.08
    assert kb.condition(known(noisy), server(2), 1, NOW)["reason"] == "AtKnownBest"  # type: ignore[index]


def test_levels_and_workloads_are_compared_apart_and_a_stale_false_condition_is_cleared() -> None:
    # at 16, 1/1/2 is the best; at 1 it is far below: the condition names concurrency 1
    both = tuning("both", [trial(1, chain(3), 54.8, 400.0), trial(2, chain(1), 34.1, 420.0)])
    cond = kb.condition(known(both), server(1), 1, NOW)
    assert cond is not None and "at concurrency 1" in cond["message"]
    other = tuning("other-prompts", [trial(1, chain(3), 54.8), trial(2, chain(1), 34.1)], prompts=["Hi."])
    table = known(REGRESSED, other)
    assert len(table.tables) == 2 and {t.workload.prompts_hash for t in table.tables} == {
        kb.prompts_hash([]), kb.prompts_hash(["Hi."])}
    stored = [Condition(type="SpeculativeSettings", status="False", reason="BelowKnownBest")]
    cleared = kb.condition(known(), server(1), 2, NOW, stored)
    assert cleared is not None and (cleared["status"], cleared["reason"]) == ("True", "NoKnownBest")
    assert kb.condition(known(), server(1), 2, NOW, [Condition.model_validate(cleared)]) is None


def test_the_typed_figures_per_settings_pool_every_tuning_of_the_setup() -> None:
    again = tuning("second-tune", [trial(1, chain(3), 53.2), trial(2, chain(1), 35.0)])
    got = known(REGRESSED, again)
    setup = kb.server_setup(server(3))
    mine = kb.server_settings(server(3))
    assert setup is not None and mine is not None
    (workload, levels), = got.figures(setup, mine)
    assert workload.max_output_tokens == 64 and workload.replicas == 1
    (level,) = levels
    assert level.concurrency == 1 and level.measurements == 2 and level.tunings == ("first-tune", "second-tune")
    assert abs(level.decode_tokens_per_second - 54.0) < 1e-9 and level.value == level.decode_tokens_per_second
    assert got.tables[0].best(1).settings == mine  # type: ignore[union-attr]


def test_the_index_keeps_finished_tunings_per_namespace_and_forgets_deleted_ones() -> None:
    index = TuningRequests()
    index.apply("ADDED", REGRESSED)
    assert len(index.known_best("ns").tables) == 1 and index.known_best("other").tables == ()
    cond = index.settings_condition("ns", server(1), 1, NOW, ServerView.of({"metadata": {"name": "s"}}))
    assert cond is not None and cond["reason"] == "BelowKnownBest"
    index.apply("DELETED", REGRESSED)
    assert index.known_best("ns").tables == ()


def test_a_tuning_records_its_setup_when_it_begins() -> None:
    spec = SGLangTuningSpec.model_validate({"serverRef": {"name": "first"}, "workload": {"maxOutputTokens": 64}})
    setup = kb.tuning_setup(server(1), spec.workload)
    new, _ = lifecycle.begin(SGLangTuningStatus(), spec, "t", [], [], NOW, None, setup)
    assert new.setup == setup
    assert (setup.model_path, setup.gpu_product, setup.tensor, setup.sglang_version, setup.algorithm,
            setup.spec_v2) == ("Qwen/Qwen3.6-27B", GPU, 2, "0.5.10", "NEXTN", True)


def test_tune_best_lists_one_row_per_setup_workload_and_level() -> None:
    from sglang_operator.plugin import tunebest

    both = tuning("both", [trial(0, {"speculative": False}, 21.8, 240.0), trial(1, chain(3), 54.8, 400.0),
                           trial(2, chain(1), 34.1, 420.0)])
    got = tunebest.known_best([both, {"metadata": {"name": "x"}, "status": {"phase": "Running"}}], "qwen3.6")
    rows = tunebest.rows(got)
    assert [r[5:9] for r in rows] == [["1", "3/1/4", "54.8 decode tok/s", "2.51x"],
                                     ["16", "1/1/2", "420.0 output tok/s", "1.75x"]]
    assert rows[0][:4] == ["Qwen/Qwen3.6-27B", GPU, "TP2", "0.5.10"] and rows[0][-1] == "both"
    assert rows[0][10] == "1/1/2 34.1" and len(rows[0]) == len(tunebest.HEADER)
    assert tunebest.known_best([both], "llama").tables == ()


def test_capacity_of_a_revisions_spec() -> None:
    got = kb.capacity(known(REGRESSED), server(3))
    ((workload, (level,)),) = got
    assert workload.max_output_tokens == 64 and (level.concurrency, level.decode_tokens_per_second) == (1, 54.8)
    assert kb.capacity(known(REGRESSED), server(6)) == ()
