"""Hand-ported radix-cache resolution of hybrid GDN/Mamba models (Qwen3-Next, Qwen3.5/3.6), per release.

Variants (:class:`.rule_eras.MambaRule`): 0.5.7–0.5.9 and 0.5.10–0.5.13 port
``sglang/srt/server_args.py:_handle_mamba_radix_cache`` (0.5.7–0.5.8: the same logic inline in
``_handle_model_specific_adjustments``), reached before speculative resolution so it sees the raw algorithm and
draft tokens; 0.5.14 on ports ``_handle_mamba_radix_cache`` 0.5.14 / ``arg_groups/overrides.py:
_mamba_radix_cache_resolution`` + ``model_hook.py:handle_mamba_radix_cache`` + ``mamba_hook.py:
validate_mamba_{extra,no}_buffer`` (0.5.23). Before 0.5.7 there is no ``--mamba-scheduler-strategy`` and the
hybrid handling is not emulated (a note says so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_operator.sglang._parser import SGLangArgError
from sglang_operator.sglang.models import HYBRID_MAMBA_ARCHS
from sglang_operator.sglang.rule_eras import MambaRule

if TYPE_CHECKING:
    from sglang_operator.sglang.rules import Ctx

_MAMBA_OLD = HYBRID_MAMBA_ARCHS - {"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"}  # ≤ 0.5.13 architecture list
_FLA_CHUNK_SIZE = 64  # sglang/srt/layers/attention/fla/chunk_delta_h.py:CHUNK_SIZE


def _fail(kind: str, message: str = "") -> SGLangArgError:
    return SGLangArgError(message, kind)


def _extra_buffer_old(c: Ctx) -> None:
    v, rs = c.v, c.rules
    if rs.mamba is MambaRule.REFUSE and v["disable_radix_cache"]:
        sep = ". " if rs.mamba_disable_radix_period else " "
        raise _fail("ValueError", f"mamba extra_buffer is not compatible with --disable-radix-cache{sep}Overlap "
                                  "scheduling is already supported with no_buffer + disable_radix_cache. Please "
                                  "use --mamba-scheduler-strategy no_buffer instead.")
    ndt, interval = v["speculative_num_draft_tokens"], v["mamba_track_interval"]
    if ndt is not None and not interval >= ndt:
        raise _fail("AssertionError", f"mamba_track_interval {interval} must be greater than or equal to "
                                      f"speculative_num_draft_tokens {ndt}")
    page = v["page_size"]
    if interval % page != 0:
        raise _fail("AssertionError", f"mamba_track_interval {interval} must be divisible by page_size {page}")
    if rs.mamba_fla_chunk_check and max(_FLA_CHUNK_SIZE, page) % min(_FLA_CHUNK_SIZE, page) != 0:
        raise _fail("AssertionError",
                    "For SSM models with extra buffer, either FLA_CHUNK_SIZE or page_size must be divisible "
                    f"by the other, got FLA_CHUNK_SIZE={_FLA_CHUNK_SIZE}, self.page_size={page}")


def _old(c: Ctx) -> None:
    """0.5.7–0.5.13 (``--mamba-scheduler-strategy``)."""
    v, rs = c.v, c.rules
    if c.arch not in _MAMBA_OLD:
        return
    strategy = v.get("mamba_scheduler_strategy")
    if rs.mamba_flashinfer_check and v.get("linear_attn_decode_backend") == "flashinfer" and strategy == "no_buffer":
        raise _fail("ValueError",
                    "FlashInfer GDN decode (--linear-attn-decode-backend flashinfer) is not compatible with "
                    "--mamba-scheduler-strategy no_buffer. Please use --mamba-scheduler-strategy extra_buffer "
                    "instead. See https://github.com/sgl-project/sglang/issues/20791")
    if strategy in ("extra_buffer", "extra_buffer_lazy"):
        _extra_buffer_old(c)
        return
    if v["disable_radix_cache"]:
        return
    if rs.mamba_no_buffer_page_1 and v["page_size"] not in (None, 1):
        c.warnings.append(f"{c.arch} with radix cache requires page_size=1 in the current Mamba scheduling mode "
                          f"(no_buffer), but got {v['page_size']}. Automatically setting page_size=1.")
        v["page_size"] = 1
    if v["speculative_algorithm"] is None:
        c.warnings.append("Disabling overlap schedule since mamba no_buffer is not compatible with overlap schedule, "
                          "try to use --disable-radix-cache if overlap schedule is necessary")
        v["disable_overlap_schedule"] = True
    elif rs.mamba is MambaRule.DISABLE_RADIX:
        c.warnings.append(f"Disabling radix cache since speculative decoding for {c.arch} is not supported with "
                          "radix cache yet.")
        v["disable_radix_cache"] = True
    else:
        raise _fail("ValueError",
                    f"Speculative decoding for {c.arch} is not compatible with radix cache when using "
                    "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, "
                    "please use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.")


def _auto(c: Ctx) -> None:
    """0.5.14 on (``--mamba-radix-cache-strategy``): ``auto`` becomes ``extra_buffer`` when overlap is on or page
    size > 1 (triton linear-attention backend), else ``no_buffer`` with overlap off."""
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


def mamba_radix_cache(c: Ctx) -> None:
    """The release's variant; raises :class:`SGLangArgError` with SGLang's message."""
    mode = c.rules.mamba
    if mode is MambaRule.AUTO:
        _auto(c)
    elif mode is MambaRule.NONE:
        if c.arch in HYBRID_MAMBA_ARCHS:
            c.notes.append(f"radix-cache handling of {c.arch} is not emulated for SGLang {c.rules.release}")
    else:
        _old(c)
