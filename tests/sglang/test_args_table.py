"""Table test: SGLang argv combinations per emulated release → accepted (with resolved values and warnings)
or rejected (with SGLang's own message). Expected messages are SGLang's texts from the cited files (0.5.10 and
0.5.23 in full; one case per rule variant of the other releases at the end)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from sglang_operator.sglang.args import SGLangArgError, resolve_server_args

# The two configurations of the published incident (copied from shared/published-case.yaml).
QWEN = "Qwen/Qwen3.6-27B"
SPEC_V2 = {"SGLANG_ENABLE_SPEC_V2": "1"}
KNOWN_GOOD = [
    "--model-path", QWEN, "--tp-size", "2", "--speculative-algorithm", "NEXTN",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    "--mem-fraction-static", "0.88", "--context-length", "131072", "--max-running-requests", "16",
    "--mamba-full-memory-ratio", "0.5", "--mamba-scheduler-strategy", "extra_buffer",
]
REGRESSED = [
    "--model-path", QWEN, "--tp-size", "2", "--speculative-algorithm", "NEXTN",
    "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
    "--mamba-scheduler-strategy", "extra_buffer",
]


def _to_0523(argv: list[str]) -> list[str]:
    return ["--mamba-radix-cache-strategy" if a == "--mamba-scheduler-strategy" else a for a in argv]


LLAMA = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct"]
EAGLE = [*LLAMA, "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "yuhuili/EAGLE-LLaMA3.1-8B"]
QNEXTN = ["--model-path", QWEN, "--speculative-algorithm", "NEXTN"]
SHAPE_314 = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]

W48 = ("Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
       "setting --max-running-requests.")
WADJ = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
W_OVERLAP_OFF = ("Overlap scheduler is disabled when spec v2 is off or using unsupported speculative algorithm. "
                 "You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental overlap scheduler. ")
W_V2_ON = "Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on."
HYBRID_ERR = ("Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache when "
              "using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please "
              "use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.")
COLON_ERR = ("served_model_name cannot contain a colon (':') character. The colon is reserved for the "
             "'model:adapter' syntax used in LoRA adapter specification. Invalid value: 'qwen:27b'")
NONE_GT = "'>' not supported between instances of 'NoneType' and 'int'"


@dataclass
class Case:
    id: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)  # expected resolved values (subset)
    warnings: list[str] = field(default_factory=list)  # expected warnings (in order, subsequence)
    no_warning: str | None = None
    error: tuple[str, str] | None = None  # (kind, message)
    draft_arch: str | None = None


CASES_0510 = [
    Case("known-good", KNOWN_GOOD, SPEC_V2,
         {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
          "speculative_num_draft_tokens": 4, "max_running_requests": 16, "tp_size": 2,
          "mamba_scheduler_strategy": "extra_buffer", "disable_overlap_schedule": False,
          "mem_fraction_static": 0.88, "context_length": 131072, "served_model_name": QWEN},
         [W_V2_ON], no_warning=WADJ, draft_arch="Qwen3_5ForCausalLMMTP"),
    Case("regressed", REGRESSED, SPEC_V2,
         {"speculative_num_draft_tokens": 2, "max_running_requests": 48, "speculative_num_steps": 1},
         [W48, W_V2_ON, WADJ], draft_arch="Qwen3_5ForCausalLMMTP"),
    Case("known-good-without-spec-v2", KNOWN_GOOD, {},
         {"disable_overlap_schedule": True, "speculative_num_draft_tokens": 4}, [W_OVERLAP_OFF]),
    Case("spec-v2-false-string", KNOWN_GOOD, {"SGLANG_ENABLE_SPEC_V2": "false"}, {"disable_overlap_schedule": True}),
    Case("hybrid-auto-no-buffer", [*QNEXTN, *SHAPE_314], SPEC_V2, error=("ValueError", HYBRID_ERR)),
    Case("hybrid-explicit-no-buffer", [*QNEXTN, "--mamba-scheduler-strategy", "no_buffer"], SPEC_V2,
         error=("ValueError", HYBRID_ERR)),
    Case("hybrid-no-radix-cache", [*QNEXTN, "--disable-radix-cache"], SPEC_V2,
         {"speculative_num_draft_tokens": 4, "mamba_scheduler_strategy": "no_buffer"}),
    Case("hybrid-extra-buffer-no-radix", [*QNEXTN, "--mamba-scheduler-strategy", "extra_buffer",
                                          "--disable-radix-cache"],
         error=("ValueError", "mamba extra_buffer is not compatible with --disable-radix-cache Overlap scheduling "
                "is already supported with no_buffer + disable_radix_cache. Please use "
                "--mamba-scheduler-strategy no_buffer instead.")),
    Case("hybrid-no-spec", ["--model-path", QWEN], {}, {"disable_overlap_schedule": True,
                                                        "mamba_scheduler_strategy": "no_buffer"},
         ["Disabling overlap schedule since mamba no_buffer is not compatible with overlap schedule, try to use "
          "--disable-radix-cache if overlap schedule is necessary"]),
    Case("eagle-auto-llama", EAGLE, {}, {"speculative_num_steps": 5, "speculative_eagle_topk": 4,
                                         "speculative_num_draft_tokens": 8, "max_running_requests": 48,
                                         "speculative_draft_model_revision": "main"}, [W48]),
    Case("topk1-forces-ndt", [*EAGLE, "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
                              "--speculative-num-draft-tokens", "4"], {}, {"speculative_num_draft_tokens": 2},
         [WADJ]),
    Case("topk-without-steps", [*EAGLE, "--speculative-eagle-topk", "2"], error=("AssertionError", "")),
    Case("steps-without-topk", [*EAGLE, "--speculative-num-steps", "2"], error=("TypeError", NONE_GT)),
    Case("spec-v2-topk4", [*EAGLE, "--speculative-num-steps", "2", "--speculative-eagle-topk", "4",
                           "--speculative-num-draft-tokens", "8"], SPEC_V2,
         error=("ValueError", "Spec v2 currently only supports topk = 1 for speculative decoding.")),
    Case("algo-lowercase", [*LLAMA, "--speculative-algorithm", "nextn"],
         error=("argparse", "argument --speculative-algorithm: invalid choice: 'nextn' (choose from 'EAGLE', "
                "'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM')")),
    Case("colon-name", [*LLAMA, "--served-model-name", "qwen:27b"], error=("AssertionError", COLON_ERR)),
    Case("tp-abbrev", [*LLAMA, "--tp", "4"], {}, {"tp_size": 4}),
    Case("tp-nnodes", [*LLAMA, "--tp-size", "3", "--nnodes", "2"],
         error=("AssertionError", "tp_size must be divisible by number of nodes")),
    Case("bad-int", [*LLAMA, "--port", "abc"], error=("argparse", "argument --port: invalid int value: 'abc'")),
    Case("human-int", [*LLAMA, "--context-length", "128k"], {}, {"context_length": 128000}),
    Case("new-flag-unknown", [*LLAMA, "--mamba-radix-cache-strategy", "extra_buffer"],
         error=("argparse", "unrecognized arguments: --mamba-radix-cache-strategy extra_buffer")),
    Case("explicit-mrr", [*EAGLE, "--max-running-requests", "64"], {}, {"max_running_requests": 64},
         no_warning=W48),
    Case("cuda-graph-max-bs", [*LLAMA, "--cuda-graph-max-bs", "64"], {}, {"cuda_graph_max_bs": 64}),
    Case("missing-model", ["--tp-size", "2"],
         error=("argparse", "the following arguments are required: --model-path/--model")),
    Case("deepseek-nextn", ["--model-path", "deepseek-ai/DeepSeek-V3", "--speculative-algorithm", "NEXTN"], {},
         {"speculative_draft_model_path": "deepseek-ai/DeepSeek-V3", "speculative_num_draft_tokens": 4},
         draft_arch="DeepseekV3ForCausalLMNextN"),
    Case("ngram", [*LLAMA, "--speculative-algorithm", "NGRAM"], {},
         {"speculative_num_draft_tokens": 12, "max_running_requests": 48, "disable_overlap_schedule": True}),
]

W_SYNC = "Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding."
CASES_0523 = [
    Case("known-good-old-flag", KNOWN_GOOD, SPEC_V2,
         error=("argparse", "unrecognized arguments: --mamba-scheduler-strategy extra_buffer")),
    Case("regressed-old-flag", REGRESSED, SPEC_V2,
         error=("argparse", "unrecognized arguments: --mamba-scheduler-strategy extra_buffer")),
    Case("known-good-renamed", _to_0523(KNOWN_GOOD), SPEC_V2,
         {"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 4, "max_running_requests": 16,
          "mamba_radix_cache_strategy": "extra_buffer", "tp_size": 2}, draft_arch="Qwen3_5ForCausalLMMTP"),
    Case("regressed-renamed", _to_0523(REGRESSED), {}, {"speculative_num_draft_tokens": 2,
                                                        "max_running_requests": 48}, [W48, WADJ]),
    Case("cuda-graph-max-bs-ambiguous", [*LLAMA, "--cuda-graph-max-bs", "64"],
         error=("argparse", "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
                "--cuda-graph-max-bs-prefill")),
    Case("cuda-graph-max-bs-decode", [*LLAMA, "--cuda-graph-max-bs-decode", "64"], {},
         {"cuda_graph_max_bs_decode": 64}),
    Case("algo-lowercase", [*LLAMA, "--speculative-algorithm", "nextn"], {}, {"speculative_algorithm": "EAGLE"}),
    Case("algo-unknown", [*LLAMA, "--speculative-algorithm", "foo"],
         error=("ValueError", "Unknown speculative algorithm name: FOO")),
    Case("hybrid-auto-extra-buffer", [*QNEXTN, *SHAPE_314], {}, {"mamba_radix_cache_strategy": "extra_buffer"}),
    Case("hybrid-no-buffer-overlap", [*QNEXTN, "--mamba-radix-cache-strategy", "no_buffer"],
         error=("AssertionError", "no_buffer do not support overlap schedule. Try to set "
                "disable_overlap_schedule=True.")),
    Case("hybrid-no-buffer-sync", [*QNEXTN, "--mamba-radix-cache-strategy", "no_buffer",
                                   "--disable-overlap-schedule"], {}, {"speculative_num_draft_tokens": 4},
         [W48, W_SYNC]),
    Case("hybrid-auto-sync", ["--model-path", QWEN, "--disable-overlap-schedule"], {},
         {"mamba_radix_cache_strategy": "no_buffer"}),
    Case("steps-without-topk", [*EAGLE, "--speculative-num-steps", "2"], error=("TypeError", NONE_GT)),
    Case("topk-without-steps", [*EAGLE, "--speculative-num-draft-tokens", "4"], error=("AssertionError", "")),
    Case("topk1-forces-ndt", [*EAGLE, "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
                              "--speculative-num-draft-tokens", "4"], {}, {"speculative_num_draft_tokens": 2},
         [WADJ]),
    Case("eagle-auto-llama", EAGLE, {}, {"speculative_num_steps": 5, "speculative_eagle_topk": 4,
                                         "speculative_num_draft_tokens": 8}),
    Case("colon-name", [*LLAMA, "--served-model-name", "qwen:27b"], error=("AssertionError", COLON_ERR)),
    Case("multi-node-dp", [*LLAMA, "--tp-size", "2", "--dp-size", "2", "--nnodes", "2"],
         error=("AssertionError", "multi-node data-parallel replicas are not supported; use attention DP "
                "(--attn-dp-size) across nodes")),
    Case("tp-abbrev", [*LLAMA, "--tp", "2"], {}, {"tp_size": 2}),
    Case("deprecated-dp-attention", [*LLAMA, "--enable-dp-attention"], {}, {"enable_dp_attention": True},
         ["'--enable-dp-attention' is deprecated and will be removed in a future release. "
          "Use '--attn-dp-size <dp-size>' instead."]),
    Case("spec-v2-env-ignored", _to_0523(KNOWN_GOOD), {"SGLANG_ENABLE_SPEC_V2": "0"},
         {"speculative_num_draft_tokens": 4}),
    Case("explicit-mrr", [*EAGLE, "--max-running-requests", "8"], {}, {"max_running_requests": 8}, no_warning=W48),
    Case("iec-int", [*LLAMA, "--context-length", "1Mi"], {}, {"context_length": 1048576}),
    Case("bad-float", [*LLAMA, "--mem-fraction-static", "lots"],
         error=("argparse", "argument --mem-fraction-static: invalid float value: 'lots'")),
    Case("ngram", [*LLAMA, "--speculative-algorithm", "NGRAM"], {}, {"speculative_num_draft_tokens": 12}),
]


def _check(version: str, case: Case) -> None:
    if case.error is not None:
        with pytest.raises(SGLangArgError) as exc:
            resolve_server_args(case.argv, version, case.env)
        assert (exc.value.kind, exc.value.message) == case.error
        assert exc.value.exit_code == (2 if case.error[0] == "argparse" else 1)
        return
    res = resolve_server_args(case.argv, version, case.env)
    assert {k: res[k] for k in case.values} == case.values
    it = iter(res.warnings)
    assert all(any(w == got for got in it) for w in case.warnings), res.warnings
    if case.no_warning:
        assert case.no_warning not in res.warnings
    if case.draft_arch:
        assert res.draft_architecture == case.draft_arch


@pytest.mark.parametrize("case", CASES_0510, ids=lambda c: c.id)
def test_0_5_10(case: Case) -> None:
    _check("0.5.10", case)


@pytest.mark.parametrize("case", CASES_0523, ids=lambda c: c.id)
def test_0_5_23(case: Case) -> None:
    _check("0.5.23", case)


def test_0_5_11_has_spec_v2_on_by_default() -> None:
    res = resolve_server_args(KNOWN_GOOD, "0.5.11", {})
    assert res.spec_v2 is True
    assert res["disable_overlap_schedule"] is False


# Rule variants of other releases (sglang/rule_eras.py): each case is the behaviour the cited release's
# server_args.py / arg_groups hooks show for that argv.
W_OFF_OLD = "Overlap scheduler is disabled because of using eagle speculative decoding."
SHAPE_348 = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]
SHAPE_314_EAGLE = [*EAGLE, *SHAPE_314]
PAGED_TOPK4 = [*EAGLE, "--page-size", "16", *SHAPE_348]
DEEPSEEK = ["--model-path", "deepseek-ai/DeepSeek-V3", "--speculative-algorithm", "NEXTN"]
CASES_BY_RELEASE = [
    ("0.4.6", Case("auto-548-silent-48", EAGLE, {}, {"speculative_num_steps": 5, "speculative_eagle_topk": 4,
                                                     "speculative_num_draft_tokens": 8, "max_running_requests": 48,
                                                     "disable_overlap_schedule": True}, [W_OFF_OLD], no_warning=W48)),
    ("0.4.6", Case("paged-topk-adjusted", PAGED_TOPK4, {}, {"speculative_eagle_topk": 1,
                                                            "speculative_num_draft_tokens": 4},
                   [W_OFF_OLD, "speculative_eagle_topk is adjusted to 1 when page_size > 1", WADJ])),
    ("0.4.6", Case("deepseek-draft-not-defaulted", DEEPSEEK, {}, {"speculative_draft_model_path": None})),
    ("0.4.9.post6", Case("deepseek-314-draft-is-target", DEEPSEEK, {},
                         {"speculative_num_steps": 3, "speculative_num_draft_tokens": 4,
                          "speculative_draft_model_path": "deepseek-ai/DeepSeek-V3"})),
    ("0.4.9.post6", Case("paged-topk-unchecked", PAGED_TOPK4, {}, {"speculative_eagle_topk": 4,
                                                                   "speculative_num_draft_tokens": 8})),
    ("0.5.3", Case("paged-topk-flashinfer-only", PAGED_TOPK4,
                   error=("ValueError", "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces "
                          "incorrect results for paged attention backends. This combination is only supported "
                          "for the 'flashinfer' backend."))),
    ("0.5.3", Case("algo-lowercase", [*LLAMA, "--speculative-algorithm", "nextn"],
                   error=("argparse", "argument --speculative-algorithm: invalid choice: 'nextn' (choose from "
                          "'EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM')"))),
    ("0.5.6", Case("beta-spec-eagle", SHAPE_314_EAGLE, SPEC_V2, {"disable_overlap_schedule": False},
                   [W48, "Beta spec is enabled for eagle speculative decoding and overlap schedule is turned on."])),
    ("0.5.6", Case("beta-spec-off", SHAPE_314_EAGLE, {}, {"disable_overlap_schedule": True},
                   [W48, "Overlap scheduler is disabled because of using eagle3 or standalone speculative "
                         "decoding."])),
    ("0.5.9", Case("hybrid-no-buffer-disables-radix", [*QNEXTN, *SHAPE_314], SPEC_V2,
                   {"disable_radix_cache": True},
                   ["Disabling radix cache since speculative decoding for Qwen3_5ForConditionalGeneration is not "
                    "supported with radix cache yet."])),
    ("0.5.11", Case("topk4-falls-back-to-v1", [*EAGLE, *SHAPE_348], {}, {"disable_overlap_schedule": True},
                    ["Spec v1 is used for eagle/eagle3/standalone speculative decoding because spec v2 currently "
                     "only supports topk = 1."])),
    ("0.5.12", Case("spec-v2-default", SHAPE_314_EAGLE, {}, {"disable_overlap_schedule": False},
                    ["Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding."])),
    ("0.5.13", Case("spec-v2-env-0-sync", SHAPE_314_EAGLE, {"SGLANG_ENABLE_SPEC_V2": "0"},
                    {"disable_overlap_schedule": True}, [W_SYNC])),
    ("0.5.17", Case("alias-era-old-flag", [*QNEXTN, *SHAPE_314, "--mamba-scheduler-strategy", "extra_buffer"], {},
                    {"mamba_radix_cache_strategy": "extra_buffer"},
                    ["'--mamba-scheduler-strategy' is deprecated and will be removed in a future release. Use "
                     "'--mamba-radix-cache-strategy' instead."])),
    ("0.5.17", Case("alias-era-auto", [*QNEXTN, *SHAPE_314], {}, {"mamba_radix_cache_strategy": "extra_buffer"})),
    ("0.5.21", Case("multi-node-dp-old-message", [*LLAMA, "--tp-size", "2", "--dp-size", "2", "--nnodes", "2"],
                    error=("AssertionError", "multi-node data parallel is not supported unless dp attention!"))),
]


@pytest.mark.parametrize(("version", "case"), CASES_BY_RELEASE, ids=lambda x: x if isinstance(x, str) else x.id)
def test_rule_variants_of_other_releases(version: str, case: Case) -> None:
    _check(version, case)
