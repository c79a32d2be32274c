"""Hand-ported SGLang resolution and validation rules (GPU-independent subset), per flag-table era.

Each rule names the SGLang function it ports. Rules run in SGLang's order: missing defaults, model-specific
(mamba radix cache), speculative decoding, then ``check_server_args``. The device is taken to be CUDA
(the operator targets NVIDIA GPUs); GPU-dependent choices (attention backend, memory fraction, chunked
prefill size, cuda-graph sizes) are left unresolved (``None``), as SGLang decides them from the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.sglang._parser import SGLangArgError
from sglang_operator.sglang.models import HYBRID_MAMBA_ARCHS
from sglang_operator.sglang.versions import V0_5_10, Dialect, SpecV2

_NONE_GT_INT = "'>' not supported between instances of 'NoneType' and 'int'"
_DRAFT_IS_TARGET = frozenset({  # server_args.py:_handle_speculative_decoding (0.5.10) / _handle_eagle_family
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration",
})
_MAMBA_0510 = HYBRID_MAMBA_ARCHS - {"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"}
_FLA_CHUNK_SIZE = 64  # sglang/srt/layers/attention/fla/chunk_delta_h.py:CHUNK_SIZE


@dataclass
class Ctx:
    """Mutable resolution state: ``v`` are the server-args fields being resolved."""

    v: dict[str, Any]
    dialect: Dialect
    env: Mapping[str, str]
    arch: str | None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def spec_v2(self) -> bool:
        return self.dialect.spec_v2_enabled(self.env.get("SGLANG_ENABLE_SPEC_V2"))


def _fail(kind: str, message: str = "") -> SGLangArgError:
    return SGLangArgError(message, kind)


def missing_defaults(c: Ctx) -> None:
    """``server_args.py:_handle_missing_default_values`` (0.5.10) / ``serving_hook.py`` (0.5.23):
    tokenizer path and served model name default to the model path; 0.5.10 turns mamba strategy
    ``auto`` into ``no_buffer``; page size defaults to 1 (``_handle_page_size``)."""
    v = c.v
    if v.get("tokenizer_path") is None:
        v["tokenizer_path"] = v.get("model_path")
    if v.get("served_model_name") is None:
        v["served_model_name"] = v.get("model_path")
    if v.get("page_size") is None:
        v["page_size"] = 1
    if v.get("mamba_scheduler_strategy") == "auto":
        v["mamba_scheduler_strategy"] = "no_buffer"
    if c.dialect.spec_v2 is SpecV2.REMOVED_WARNS and "SGLANG_ENABLE_SPEC_V2" in c.env:
        c.warnings.append(
            "SGLANG_ENABLE_SPEC_V2 has been removed: speculative decoding always runs the V2 worker. "
            "Use --disable-overlap-schedule to select the non-overlap (synchronous) path."
        )


def mamba_radix_cache_0510(c: Ctx) -> None:
    """``server_args.py:_handle_mamba_radix_cache`` (0.5.10), reached for hybrid GDN/Mamba models from
    ``_handle_model_specific_adjustments`` — before speculative resolution, so it sees the raw
    algorithm and num-draft-tokens."""
    v = c.v
    if c.arch not in _MAMBA_0510:
        return
    if v.get("linear_attn_decode_backend") == "flashinfer" and v["mamba_scheduler_strategy"] == "no_buffer":
        raise _fail("ValueError",
                    "FlashInfer GDN decode (--linear-attn-decode-backend flashinfer) is not compatible with "
                    "--mamba-scheduler-strategy no_buffer. Please use --mamba-scheduler-strategy extra_buffer "
                    "instead. See https://github.com/sgl-project/sglang/issues/20791")
    if v["mamba_scheduler_strategy"] == "extra_buffer":
        if v["disable_radix_cache"]:
            raise _fail("ValueError",
                        "mamba extra_buffer is not compatible with --disable-radix-cache Overlap scheduling is "
                        "already supported with no_buffer + disable_radix_cache. Please use "
                        "--mamba-scheduler-strategy no_buffer instead.")
        ndt, interval = v["speculative_num_draft_tokens"], v["mamba_track_interval"]
        if ndt is not None and not interval >= ndt:
            raise _fail("AssertionError", f"mamba_track_interval {interval} must be greater than or equal to "
                                          f"speculative_num_draft_tokens {ndt}")
        page = v["page_size"]
        if interval % page != 0:
            raise _fail("AssertionError", f"mamba_track_interval {interval} must be divisible by page_size {page}")
        if max(_FLA_CHUNK_SIZE, page) % min(_FLA_CHUNK_SIZE, page) != 0:
            raise _fail("AssertionError",
                        "For SSM models with extra buffer, either FLA_CHUNK_SIZE or page_size must be divisible "
                        f"by the other, got FLA_CHUNK_SIZE={_FLA_CHUNK_SIZE}, self.page_size={page}")
    elif not v["disable_radix_cache"]:
        if v["speculative_algorithm"] is None:
            c.warnings.append(
                "Disabling overlap schedule since mamba no_buffer is not compatible with overlap schedule, "
                "try to use --disable-radix-cache if overlap schedule is necessary")
            v["disable_overlap_schedule"] = True
        else:
            raise _fail("ValueError",
                        f"Speculative decoding for {c.arch} is not compatible with radix cache when using "
                        "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, "
                        "please use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.")


def mamba_radix_cache_0523(c: Ctx) -> None:
    """``arg_groups/overrides.py:_mamba_radix_cache_resolution`` + ``model_hook.py:handle_mamba_radix_cache``
    + ``mamba_hook.py:validate_mamba_{extra,no}_buffer`` (0.5.23): ``auto`` becomes ``extra_buffer`` when
    overlap is on or page size > 1 (triton linear-attention backend), else ``no_buffer`` with overlap off."""
    v = c.v
    strategy = v["mamba_radix_cache_strategy"]
    extra = ("extra_buffer", "extra_buffer_lazy")
    if c.arch not in HYBRID_MAMBA_ARCHS or v["disable_radix_cache"]:
        if c.arch is not None and not v["disable_radix_cache"] and strategy in extra:
            raise _fail("ValueError", f"--mamba-radix-cache-strategy {strategy} needs mamba state, got {c.arch}.")
        return
    if strategy == "auto":
        supports = v.get("linear_attn_backend", "triton") == "triton"
        if (not v["disable_overlap_schedule"] or v["page_size"] > 1) and supports:
            strategy = "extra_buffer"
        else:
            strategy = "no_buffer"
            v["disable_overlap_schedule"] = True
        v["mamba_radix_cache_strategy"] = strategy
    if strategy in extra:
        ndt, interval, page = v["speculative_num_draft_tokens"], v["mamba_track_interval"], v["page_size"]
        if ndt is not None and not interval >= ndt:
            raise _fail("AssertionError")
        if interval % page != 0:
            raise _fail("AssertionError")
    else:
        if v["page_size"] not in (1, None):
            raise _fail("AssertionError", "no_buffer only supports page_size=1.")
        if not v["disable_overlap_schedule"]:
            raise _fail("AssertionError",
                        "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.")
        if v.get("attention_backend") == "trtllm_mha":
            raise _fail("AssertionError", "no_buffer do not support trtllm_mha attention backend.")


def _auto_params(c: Ctx) -> tuple[int, int, int]:
    """``auto_choose_speculative_params`` (0.5.10) / ``speculative_hook._auto_choose_speculative_params``."""
    if c.v["speculative_algorithm"] == "STANDALONE":
        return (3, 1, 4)
    if c.arch in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"):
        return (5, 4, 8)
    return (3, 1, 4)


def _max_running_48(c: Ctx) -> None:
    if c.v["max_running_requests"] is None:
        c.v["max_running_requests"] = 48
        c.warnings.append("Max running requests is reset to 48 for speculative decoding. You can override this "
                          "by explicitly setting --max-running-requests.")


def _eagle_shape(c: Ctx) -> None:
    """The num-steps / eagle-topk / num-draft-tokens part, identical in 0.5.10
    (``server_args.py:_handle_speculative_decoding``) and 0.5.23 (``speculative_hook._handle_eagle_family``)."""
    v = c.v
    if c.arch in _DRAFT_IS_TARGET:
        if v["speculative_draft_model_path"] is None:
            v["speculative_draft_model_path"] = v["model_path"]
            v["speculative_draft_model_revision"] = v.get("revision")
        elif c.arch not in ("MistralLarge3ForCausalLM", "PixtralForConditionalGeneration"):
            c.warnings.append("DeepSeek MTP does not require setting speculative_draft_model_path.")
    if v["speculative_num_steps"] is None:
        if not (v["speculative_eagle_topk"] is None and v["speculative_num_draft_tokens"] is None):
            raise _fail("AssertionError")  # bare `assert` in SGLang: empty message
        (v["speculative_num_steps"], v["speculative_eagle_topk"], v["speculative_num_draft_tokens"]) = _auto_params(c)
    topk, steps = v["speculative_eagle_topk"], v["speculative_num_steps"]
    backends = {v.get("attention_backend"), v.get("decode_attention_backend"), v.get("prefill_attention_backend")}
    if "trtllm_mha" in backends:
        if topk is None:
            raise _fail("TypeError", _NONE_GT_INT)
        if topk > 1:
            raise _fail("ValueError", "trtllm_mha backend only supports topk = 1 for speculative decoding.")
    if topk == 1 and v["speculative_num_draft_tokens"] != steps + 1:
        c.warnings.append("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                          "speculative_eagle_topk == 1")
        v["speculative_num_draft_tokens"] = steps + 1
    if topk is None:
        raise _fail("TypeError", _NONE_GT_INT)
    old = c.dialect.table == V0_5_10
    ok_backends = ("flashinfer", "fa3") if old else ("flashinfer", "fa3", "triton")
    if topk > 1 and v["page_size"] > 1 and v.get("attention_backend") not in ok_backends:
        if old:
            raise _fail("ValueError",
                        "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results "
                        "for paged attention backends. This combination is only supported for the 'flashinfer' "
                        "backend.")
        raise _fail("ValueError",
                    f"speculative_eagle_topk > 1 with page_size > 1 is only supported on {ok_backends}; got "
                    f"attention_backend={v.get('attention_backend')!r}. Use page_size == 1 or one of those backends.")


def _ngram(c: Ctx) -> None:
    """NGRAM branch of ``_handle_speculative_decoding`` (0.5.10) / ``speculative_hook._handle_ngram``."""
    v = c.v
    _max_running_48(c)
    v["disable_overlap_schedule"] = True
    v["enable_mixed_chunk"] = False
    v["speculative_eagle_topk"] = v["speculative_ngram_max_bfs_breadth"]
    if v["speculative_num_draft_tokens"] is None:
        v["speculative_num_draft_tokens"] = 12
        c.warnings.append("speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. "
                          "You can override this by explicitly setting --speculative-num-draft-tokens.")
    c.warnings.append("The overlap scheduler and mixed chunked prefill are disabled because of using ngram "
                      "speculative decoding.")


def speculative_0510(c: Ctx) -> None:
    """``server_args.py:ServerArgs._handle_speculative_decoding`` (0.5.10)."""
    v = c.v
    if v["speculative_draft_model_path"] is not None and v["speculative_draft_model_revision"] is None:
        v["speculative_draft_model_revision"] = "main"
    if v["speculative_algorithm"] == "NEXTN":
        v["speculative_algorithm"] = "EAGLE"
    algo = v["speculative_algorithm"]
    if algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        if algo == "STANDALONE" and v["enable_dp_attention"]:
            raise _fail("ValueError", "Currently standalone speculative decoding does not support dp attention.")
        _max_running_48(c)
        if c.spec_v2:
            v["disable_overlap_schedule"] = False
            c.warnings.append("Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is "
                              "turned on.")
            if v["speculative_eagle_topk"] is not None and v["speculative_eagle_topk"] > 1:
                raise _fail("ValueError", "Spec v2 currently only supports topk = 1 for speculative decoding.")
        else:
            v["disable_overlap_schedule"] = True
            c.warnings.append("Overlap scheduler is disabled when spec v2 is off or using unsupported speculative "
                              "algorithm. You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental "
                              "overlap scheduler. ")
        if v["enable_mixed_chunk"]:
            v["enable_mixed_chunk"] = False
            c.warnings.append("Mixed chunked prefill is disabled because of using eagle speculative decoding.")
        _eagle_shape(c)
    elif algo == "NGRAM":
        _ngram(c)
        if v["enable_dp_attention"]:
            raise _fail("ValueError", "Currently ngram speculative decoding does not support dp attention.")


_BUILTIN_0523 = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP")


def speculative_0523(c: Ctx) -> None:
    """``arg_groups/speculative_hook.py:handle_speculative_decoding`` → ``_handle_eagle_family`` /
    ``_handle_ngram`` (0.5.23). DFLASH/DSPARK/UNO resolution is not ported (noted in ``notes``)."""
    v = c.v
    if v["speculative_draft_model_path"] is not None and v["speculative_draft_model_revision"] is None:
        v["speculative_draft_model_revision"] = "main"
    if v["speculative_algorithm"] is None:
        return
    algo = v["speculative_algorithm"].upper()
    if algo in ("NEXTN", "EAGLE"):
        algo = "EAGLE"
    v["speculative_algorithm"] = algo
    if algo not in _BUILTIN_0523:  # speculative/spec_info.py:SpeculativeAlgorithm.from_string
        raise _fail("ValueError", f"Unknown speculative algorithm name: {algo}")
    if algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        if algo == "STANDALONE" and v.get("attn_dp_size", 1) > 1:
            raise _fail("ValueError", "Currently standalone speculative decoding does not support dp attention.")
        _max_running_48(c)
        if v["disable_overlap_schedule"]:
            c.warnings.append("Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative "
                              "decoding.")
        _eagle_shape(c)
    elif algo == "NGRAM":
        _ngram(c)
    else:
        c.notes.append(f"{algo} resolution is not emulated; values are as given")


def check_server_args(c: Ctx) -> None:
    """``server_args.py:ServerArgs.check_server_args`` (0.5.10) / ``arg_groups/validation_hook.py:check_server_args``
    (0.5.23): nodes divide tp*pp, no multi-node DP replicas, no ':' in served-model-name, chunked prefill
    size a multiple of page size."""
    v = c.v
    old = c.dialect.table == V0_5_10
    if (v["tp_size"] * v["pp_size"]) % v["nnodes"] != 0:
        raise _fail("AssertionError", "tp_size must be divisible by number of nodes")
    if old and v["pp_size"] > 1 and not (
        v["disable_overlap_schedule"] and v["speculative_algorithm"] is None and not v["enable_mixed_chunk"]
    ):
        raise _fail("AssertionError", "Pipeline parallelism is not compatible with overlap schedule, speculative "
                                      "decoding, mixed chunked prefill.")
    if old and v["dp_size"] > 1 and v["nnodes"] != 1 and not v["enable_dp_attention"]:
        raise _fail("AssertionError", "multi-node data parallel is not supported unless dp attention!")
    if not old and v["dp_size"] > 1 and v["nnodes"] != 1:
        raise _fail("AssertionError", "multi-node data-parallel replicas are not supported; use attention DP "
                                      "(--attn-dp-size) across nodes")
    name = v["served_model_name"]
    if name is not None and ":" in name:
        raise _fail("AssertionError",
                    "served_model_name cannot contain a colon (':') character. The colon is reserved for the "
                    "'model:adapter' syntax used in LoRA adapter specification. "
                    f"Invalid value: '{name}'")
    chunk = v["chunked_prefill_size"]
    if chunk is not None and chunk > 0 and v.get("disaggregation_mode") != "decode" and chunk % v["page_size"]:
        raise _fail("AssertionError", "chunked_prefill_size must be divisible by page_size")


def apply(c: Ctx) -> None:
    """Run the era's rules in SGLang's order. Raises :class:`SGLangArgError` with SGLang's message."""
    missing_defaults(c)
    if c.dialect.table == V0_5_10:
        mamba_radix_cache_0510(c)
        speculative_0510(c)
    else:
        mamba_radix_cache_0523(c)
        speculative_0523(c)
    check_server_args(c)
