"""Hand-ported speculative-decoding resolution, per release (variants: :mod:`.rule_eras`).

Ports ``sglang/srt/server_args.py`` — ``__post_init__``'s "Speculative Decoding" block (0.4.6–0.5.2),
``ServerArgs._handle_speculative_decoding`` (0.5.3–0.5.12), ``auto_choose_speculative_params`` — and
``sglang/srt/arg_groups/speculative_hook.py:handle_speculative_decoding`` → ``_handle_eagle_family`` /
``_handle_ngram`` (0.5.13 on), and adaptive speculative decoding (``speculative/adaptive_spec_params.py``, 0.5.11 on).
DFLASH/DSPARK/UNO/FROZEN_KV_MTP resolution is not ported (noted in ``notes``).
Warning texts are SGLang's, from the release the variant names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_operator.sglang._parser import SGLangArgError
from sglang_operator.sglang._version import SGLangVersion
from sglang_operator.sglang.rule_eras import AdaptiveRule, AutoParams, Overlap

if TYPE_CHECKING:
    from sglang_operator.sglang.rules import Ctx

_NONE_GT_INT = "'>' not supported between instances of 'NoneType' and 'int'"
_DRAFT_IS_TARGET = frozenset({  # the architectures' lists of _handle_speculative_decoding / _handle_eagle_family
    "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration",
})
"""MTP drafts that default to the target path (the union over releases: architectures added later did not load
on older releases at all)."""
_DEEPSEEK_314 = frozenset({"DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV32ForCausalLM",
                           "GptOssForCausalLM", "Glm4MoeForCausalLM", "BailingMoeForCausalLM",
                           "BailingMoeV2ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration"})
_LLAMA_548 = frozenset({"LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"})
BUILTIN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP")
"""``sglang/srt/speculative/spec_info.py:SpeculativeAlgorithm`` (0.5.23), checked when the release's
``--speculative-algorithm`` has no argparse choices."""

W48 = ("Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
       "setting --max-running-requests.")
_V0_5_8 = SGLangVersion(0, 5, 8)  # STANDALONE joins spec v2 (0.5.8 _handle_speculative_decoding)
W_SYNC = "Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding."


def _fail(kind: str, message: str = "") -> SGLangArgError:
    return SGLangArgError(message, kind)


def _max_running_48(c: Ctx) -> None:
    if c.v.get("max_running_requests") is None:
        c.v["max_running_requests"] = 48
        if c.rules.warn_48:
            c.warnings.append(W48)


def _auto_params(c: Ctx) -> tuple[int, int, int]:
    """``auto_choose_speculative_params`` of the release (:class:`AutoParams`)."""
    mode = c.rules.auto_params
    if mode is AutoParams.ALL_548:
        return (5, 4, 8)
    if c.v["speculative_algorithm"] == "STANDALONE":
        return (3, 1, 4)
    if c.arch in _LLAMA_548:
        return (5, 4, 8)
    if mode is AutoParams.DEEPSEEK_314:
        return (3, 1, 4) if c.arch in _DEEPSEEK_314 else (5, 4, 8)
    return (3, 1, 4)


def _overlap(c: Ctx, algo: str) -> None:
    """How the release sets ``disable_overlap_schedule`` for the EAGLE family (:class:`Overlap`); records in
    ``c.spec_v2`` whether the V2 (overlap-capable) worker runs."""
    v, mode = c.v, c.rules.overlap
    env = c.dialect.spec_v2_enabled(c.env.get("SGLANG_ENABLE_SPEC_V2"))
    topk = v.get("speculative_eagle_topk")
    if mode is Overlap.ALWAYS_OFF:
        v["disable_overlap_schedule"] = True
        c.warnings.append("Overlap scheduler is disabled because of using eagle speculative decoding.")
        c.spec_v2 = False
    elif mode is Overlap.BETA:
        c.spec_v2 = algo == "EAGLE" and env
        if c.spec_v2:
            v["disable_overlap_schedule"] = False
            c.warnings.append("Beta spec is enabled for eagle speculative decoding and overlap schedule is turned on.")
        if not env:
            v["disable_overlap_schedule"] = True
            c.warnings.append("Overlap scheduler is disabled because of using eagle3 or standalone speculative "
                              "decoding.")
    elif mode is Overlap.OPT_IN:
        algos = ("EAGLE", "EAGLE3", "STANDALONE") if c.rules.release >= _V0_5_8 else ("EAGLE", "EAGLE3")
        c.spec_v2 = algo in algos and env
        if c.spec_v2:
            v["disable_overlap_schedule"] = False
            c.warnings.append("Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is "
                              "turned on.")
            if topk is not None and topk > 1:
                raise _fail("ValueError", "Spec v2 currently only supports topk = 1 for speculative decoding.")
        else:
            v["disable_overlap_schedule"] = True
            c.warnings.append("Overlap scheduler is disabled when spec v2 is off or using unsupported speculative "
                              "algorithm. You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental "
                              "overlap scheduler. ")
    elif mode is Overlap.V1_FALLBACK:
        reason = None
        if topk is not None and topk > 1 and not v["disable_overlap_schedule"]:
            v["disable_overlap_schedule"], reason = True, "spec v2 currently only supports topk = 1"
        elif not env and not v["disable_overlap_schedule"]:
            v["disable_overlap_schedule"], reason = True, "SGLANG_ENABLE_SPEC_V2=False"
        c.spec_v2 = not v["disable_overlap_schedule"]
        if v["disable_overlap_schedule"]:
            c.warnings.append("Spec v1 is used for eagle/eagle3/standalone speculative decoding because "
                              f"{reason or 'overlap schedule is disabled'}.")
        else:
            c.warnings.append("Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.")
    else:
        c.spec_v2 = True
        if mode is Overlap.SYNC_ENV and not env and not v["disable_overlap_schedule"]:
            v["disable_overlap_schedule"] = True
        if v["disable_overlap_schedule"]:
            c.warnings.append(W_SYNC)
        elif mode is Overlap.SYNC_ENV:
            c.warnings.append("Overlap spec v2 is enabled by default for eagle/eagle3/standalone speculative "
                              "decoding.")


def _draft_path(c: Ctx) -> None:
    v = c.v
    if not c.rules.draft_is_target or c.arch not in _DRAFT_IS_TARGET:
        return
    if v["speculative_draft_model_path"] is None:
        v["speculative_draft_model_path"] = v["model_path"]
        if c.rules.draft_revision_main:
            v["speculative_draft_model_revision"] = v.get("revision")
    elif c.arch not in ("MistralLarge3ForCausalLM", "PixtralForConditionalGeneration"):
        c.warnings.append("DeepSeek MTP does not require setting speculative_draft_model_path.")


def _page_topk(c: Ctx) -> None:
    """topk > 1 with page_size > 1 (see ``RuleSet.page_topk``)."""
    v, ok = c.v, c.rules.page_topk
    topk, page = v["speculative_eagle_topk"], v["page_size"]
    if ok is None:
        if page > 1 and topk > 1:
            v["speculative_eagle_topk"] = 1
            c.warnings.append("speculative_eagle_topk is adjusted to 1 when page_size > 1")
        return
    if not ok or not (topk > 1 and page > 1) or v.get("attention_backend") in ok:
        return
    if len(ok) < 3:
        raise _fail("ValueError", "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect "
                                  "results for paged attention backends. This combination is only supported for "
                                  "the 'flashinfer' backend.")
    raise _fail("ValueError", f"speculative_eagle_topk > 1 with page_size > 1 is only supported on {ok}; got "
                              f"attention_backend={v.get('attention_backend')!r}. Use page_size == 1 or one of "
                              "those backends.")


def _eagle_shape(c: Ctx) -> None:
    """num-steps / eagle-topk / num-draft-tokens: auto choice, the topk == 1 rewrite, backend checks."""
    v = c.v
    _draft_path(c)
    if v["speculative_num_steps"] is None:
        if not (v["speculative_eagle_topk"] is None and v["speculative_num_draft_tokens"] is None):
            raise _fail("AssertionError")  # bare `assert` in SGLang: empty message
        (v["speculative_num_steps"], v["speculative_eagle_topk"], v["speculative_num_draft_tokens"]) = _auto_params(c)
    topk, steps = v["speculative_eagle_topk"], v["speculative_num_steps"]
    if c.rules.page_topk is None:
        if topk is None:
            raise _fail("TypeError", _NONE_GT_INT)
        _page_topk(c)
        topk = v["speculative_eagle_topk"]
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
    if c.rules.page_topk is not None:
        _page_topk(c)


def _ngram(c: Ctx) -> None:
    """NGRAM branch (``_handle_speculative_decoding`` 0.5.3–0.5.12 / ``speculative_hook._handle_ngram``)."""
    v = c.v
    _max_running_48(c)
    v["disable_overlap_schedule"] = True
    v["enable_mixed_chunk"] = False
    v["speculative_eagle_topk"] = v.get("speculative_ngram_max_bfs_breadth")
    if v["speculative_num_draft_tokens"] is None:
        if c.rules.ngram_ndt_12:
            v["speculative_num_draft_tokens"] = 12
            c.warnings.append("speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. "
                              "You can override this by explicitly setting --speculative-num-draft-tokens.")
        else:
            v["speculative_num_draft_tokens"] = v.get("speculative_ngram_max_match_window_size")
    c.warnings.append("The overlap scheduler and mixed chunked prefill are disabled because of using ngram "
                      "speculative decoding.")
    if v.get("enable_dp_attention"):
        raise _fail("ValueError", "Currently ngram speculative decoding does not support dp attention.")


W_ADAPTIVE_OFF = "speculative_adaptive disabled: {}. Falling back to static speculative params."


def _adaptive_unsupported(c: Ctx) -> str | None:
    """``adaptive_spec_params.py:adaptive_unsupported_reason`` of the release (its texts)."""
    v, mode = c.v, c.rules.adaptive
    algo, topk = v.get("speculative_algorithm"), v.get("speculative_eagle_topk")
    worker = "MultiLayerEagleWorker" if mode is not AdaptiveRule.PER_BATCH else "MultiLayerEagleWorkerV2"
    if algo not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algo} (only EAGLE/EAGLE3 are supported)"
    if topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    if v.get("enable_dp_attention"):
        return ("enable_dp_attention=True is not supported (adaptive tier decisions are not synchronized across DP "
                "ranks)")
    if mode is AdaptiveRule.V1_ONLY and not v.get("disable_overlap_schedule"):
        return "the overlap scheduler (spec v2) is enabled (adaptive is only implemented for EAGLEWorker v1)"
    if v.get("enable_multi_layer_eagle"):
        return f"enable_multi_layer_eagle=True is not supported ({worker} does not implement adaptive)"
    if v.get("enable_two_batch_overlap"):
        return ("enable_two_batch_overlap=True is not supported (adaptive state swap would discard the TboAttnBackend "
                "wrapper)")
    if v.get("enable_pdmux"):
        return "enable_pdmux=True is not supported (adaptive state swap does not update decode_attn_backend_group)"
    return None


def _adaptive(c: Ctx) -> None:
    """``--speculative-adaptive`` (0.5.11 on, :class:`AdaptiveRule`): turned off with SGLang's warning where
    unsupported; from 0.5.13 the start-up steps must be a candidate of the default config (a config file is not read
    offline: noted)."""
    v = c.v
    if not v.get("speculative_adaptive") or c.rules.adaptive is AdaptiveRule.NONE:
        return
    reason = _adaptive_unsupported(c)
    if reason is not None:
        c.warnings.append(W_ADAPTIVE_OFF.format(reason))
        v["speculative_adaptive"] = False
        return
    if c.rules.adaptive is not AdaptiveRule.PER_BATCH:
        return
    if v.get("speculative_adaptive_config") is not None:
        c.notes.append("the adaptive config file is read by SGLang at start-up, not here: --speculative-num-steps must "
                       "be one of its candidate_steps")
        return
    steps, candidates = v.get("speculative_num_steps"), list(c.rules.adaptive_default_steps)
    if steps not in candidates:
        raise _fail("ValueError", f"--speculative-num-steps={steps} is not in the adaptive config candidate_steps "
                                  f"{candidates}. Pass one of those values.")


def speculative(c: Ctx) -> None:
    """The release's speculative-decoding resolution (NEXTN → EAGLE, 48 running requests, overlap, shape)."""
    v, rs = c.v, c.rules
    if rs.draft_revision_main and v.get("speculative_draft_model_path") is not None \
            and v.get("speculative_draft_model_revision") is None:
        v["speculative_draft_model_revision"] = "main"
    algo = v.get("speculative_algorithm")
    if algo is None:
        return
    if rs.upper_algorithm:
        algo = algo.upper()
    if algo == "NEXTN":
        algo = "EAGLE"
    v["speculative_algorithm"] = algo
    if c.free_algorithm and algo not in BUILTIN_ALGORITHMS:  # spec_info.py:SpeculativeAlgorithm.from_string
        raise _fail("ValueError", f"Unknown speculative algorithm name: {algo}")
    if algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        if algo == "STANDALONE" and (v.get("enable_dp_attention") or (v.get("attn_dp_size") or 1) > 1):
            raise _fail("ValueError", "Currently standalone speculative decoding does not support dp attention.")
        _max_running_48(c)
        _overlap(c, algo)
        if rs.mixed_chunk_off and v.get("enable_mixed_chunk"):
            v["enable_mixed_chunk"] = False
            c.warnings.append("Mixed chunked prefill is disabled because of using eagle speculative decoding.")
        _eagle_shape(c)
    elif algo == "NGRAM":
        _ngram(c)
    else:
        c.notes.append(f"{algo} resolution is not emulated; values are as given")
    _adaptive(c)
