"""Hand-ported SGLang resolution and validation rules (GPU-independent subset), per release.

Rules run in SGLang's order: missing defaults, model-specific (mamba radix cache, :mod:`.rules_mamba`),
speculative decoding (:mod:`.rules_spec`), then ``check_server_args``. Which variant of each rule a release runs
is data (:func:`.rule_eras.rules_for`, every boundary with its release and SGLang file). The device is taken to
be CUDA (the operator targets NVIDIA GPUs); GPU-dependent choices (attention backend, memory fraction, chunked
prefill size, cuda-graph sizes) are left unresolved (``None``), as SGLang decides them from the GPU.
Not emulated: 0.4.6–0.4.6.post1's requirement that ``--model-path`` be a local directory with ``config.json``
when the speculative shape is left to ``auto_choose_speculative_params``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.sglang._parser import SGLangArgError
from sglang_operator.sglang.rule_eras import RuleSet, rules_for
from sglang_operator.sglang.rules_mamba import mamba_radix_cache
from sglang_operator.sglang.rules_spec import speculative
from sglang_operator.sglang.versions import Dialect, SpecV2

__all__ = ["Ctx", "apply"]


@dataclass
class Ctx:
    """Mutable resolution state: ``v`` are the server-args fields being resolved.

    ``free_algorithm``: the release's ``--speculative-algorithm`` has no argparse choices (names are checked at
    resolution, ``spec_info.py``). ``spec_v2``: set by the speculative rules — whether the V2 worker runs.
    """

    v: dict[str, Any]
    dialect: Dialect
    env: Mapping[str, str]
    arch: str | None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    free_algorithm: bool = False
    spec_v2: bool = False

    @property
    def rules(self) -> RuleSet:
        return rules_for(self.dialect.release)


def _fail(kind: str, message: str = "") -> SGLangArgError:
    return SGLangArgError(message, kind)


def missing_defaults(c: Ctx) -> None:
    """``server_args.py:_handle_missing_default_values`` (``__post_init__`` before 0.5.3; ``serving_hook.py``
    from 0.5.19): tokenizer path and served model name default to the model path; mamba strategy ``auto``
    becomes ``no_buffer`` (0.5.7–0.5.13); page size defaults to 1 (``_handle_page_size``). 0.5.14–0.5.20 warn
    that ``SGLANG_ENABLE_SPEC_V2`` was removed (``environ.py``)."""
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


def check_server_args(c: Ctx) -> None:
    """``server_args.py:ServerArgs.check_server_args`` (≤ 0.5.18) / ``arg_groups/validation_hook.py:
    check_server_args`` (0.5.19 on): nodes divide tp*pp, no multi-node DP replicas, no ':' in served-model-name
    (0.5.5.post1 on), chunked prefill size a multiple of page size; pipeline parallelism refuses overlap,
    speculative decoding and mixed chunking (0.4.6.post2–0.5.13)."""
    v, rs = c.v, c.rules
    pp = v.get("pp_size") or 1
    if (v["tp_size"] * pp) % v["nnodes"] != 0:
        raise _fail("AssertionError", "tp_size must be divisible by number of nodes")
    if rs.pp_overlap_check and pp > 1 and not (
        v["disable_overlap_schedule"] and v["speculative_algorithm"] is None and not v.get("enable_mixed_chunk")
    ):
        raise _fail("AssertionError", "Pipeline parallelism is not compatible with overlap schedule, speculative "
                                      "decoding, mixed chunked prefill.")
    if v["dp_size"] > 1 and v["nnodes"] != 1:
        if rs.dp_message_new:
            raise _fail("AssertionError", "multi-node data-parallel replicas are not supported; use attention DP "
                                          "(--attn-dp-size) across nodes")
        if not v.get("enable_dp_attention"):
            raise _fail("AssertionError", "multi-node data parallel is not supported unless dp attention!")
    name = v["served_model_name"]
    if rs.colon_check and name is not None and ":" in name:
        raise _fail("AssertionError",
                    "served_model_name cannot contain a colon (':') character. The colon is reserved for the "
                    "'model:adapter' syntax used in LoRA adapter specification. "
                    f"Invalid value: '{name}'")
    chunk = v.get("chunked_prefill_size")
    if chunk is not None and chunk > 0 and v.get("disaggregation_mode") != "decode" and chunk % v["page_size"]:
        raise _fail("AssertionError",
                    "chunked_prefill_size must be divisible by page_size" if rs.chunk_page_message else "")


def apply(c: Ctx) -> None:
    """Run the release's rules in SGLang's order. Raises :class:`SGLangArgError` with SGLang's message."""
    missing_defaults(c)
    mamba_radix_cache(c)
    speculative(c)
    check_server_args(c)
