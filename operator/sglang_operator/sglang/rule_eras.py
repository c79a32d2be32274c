"""Which variant of each hand-ported SGLang rule a release runs (the rules themselves: :mod:`.rules`,
:mod:`.rules_spec`, :mod:`.rules_mamba`).

Only behaviour that changes how the speculative and memory flags the operator validates resolve is tracked.
Each field says the releases it covers and the SGLang file it was read from (in that release's wheel); the
boundaries were found by diffing ``sglang/srt/server_args.py`` (``__post_init__``'s "Speculative Decoding"
block up to 0.5.2, ``_handle_speculative_decoding`` 0.5.3–0.5.12, ``auto_choose_speculative_params``,
``_handle_mamba_radix_cache``, ``check_server_args``) and ``sglang/srt/arg_groups/speculative_hook.py`` /
``mamba_hook.py`` / ``validation_hook.py`` (0.5.13 on) across every release.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import TypeVar

from sglang_operator.sglang._version import SGLangVersion, parse_version

__all__ = ["AdaptiveRule", "AutoParams", "MambaRule", "Overlap", "RuleSet", "rules_for"]

_T = TypeVar("_T")


def _v(text: str) -> SGLangVersion:
    return parse_version(text)


class Overlap(StrEnum):
    """How EAGLE/EAGLE3/STANDALONE speculative decoding sets ``disable_overlap_schedule``."""

    ALWAYS_OFF = "always-off"
    """0.4.6–0.5.4: always disabled, "Overlap scheduler is disabled because of using eagle speculative decoding."
    (``server_args.py``)."""
    BETA = "beta"
    """0.5.4.post1–0.5.6.post2: ``SGLANG_ENABLE_SPEC_V2`` turns it on for EAGLE only ("Beta spec is enabled ...");
    unset, it is disabled ("... because of using eagle3 or standalone speculative decoding.")."""
    OPT_IN = "opt-in"
    """0.5.7–0.5.10: ``SGLANG_ENABLE_SPEC_V2`` turns it on for EAGLE/EAGLE3 (+STANDALONE from 0.5.8) and then
    refuses topk > 1; otherwise disabled ("Overlap scheduler is disabled when spec v2 is off ...")."""
    V1_FALLBACK = "v1-fallback"
    """0.5.11–0.5.12: on by default; topk > 1 or ``SGLANG_ENABLE_SPEC_V2=0`` fall back to spec v1 with overlap
    off ("Spec v1 is used for ... because %s.")."""
    SYNC_ENV = "sync-env"
    """0.5.13: always the V2 worker; ``SGLANG_ENABLE_SPEC_V2=0`` selects its non-overlap path
    (``arg_groups/speculative_hook.py:_handle_eagle_family``)."""
    V2 = "v2"
    """0.5.14 on: always the V2 worker; ``--disable-overlap-schedule`` selects the synchronous path."""


class AutoParams(StrEnum):
    """``auto_choose_speculative_params`` (``server_args.py``): (steps, topk, draft tokens) when none is given."""

    ALL_548 = "all-5-4-8"  # 0.4.6–0.4.6.post5: (5, 4, 8) for every architecture
    DEEPSEEK_314 = "deepseek-3-1-4"  # 0.4.7–0.5.7: DeepSeek-family (3, 1, 4), others (5, 4, 8)
    DEFAULT_314 = "default-3-1-4"  # 0.5.8 on: Llama and Grok (5, 4, 8), everything else (3, 1, 4)


class MambaRule(StrEnum):
    """How hybrid GDN/Mamba models (Qwen3-Next, Qwen3.5/3.6) resolve the radix cache under speculative decoding."""

    NONE = "none"  # ≤ 0.5.6: no --mamba-scheduler-strategy; not emulated
    DISABLE_RADIX = "disable-radix"
    """0.5.7–0.5.9: no_buffer + speculative decoding silently disables the radix cache ("Disabling radix cache
    since speculative decoding for <arch> is not supported with radix cache yet.")."""
    REFUSE = "refuse"
    """0.5.10–0.5.13: the same combination is a ValueError (PR #19391; ``_handle_mamba_radix_cache``)."""
    AUTO = "auto"
    """0.5.14 on: ``--mamba-radix-cache-strategy auto`` picks extra_buffer when overlap or paging is on
    (``_handle_mamba_radix_cache`` 0.5.14, ``arg_groups/overrides.py:_mamba_radix_cache_resolution`` later)."""


class AdaptiveRule(StrEnum):
    """How ``--speculative-adaptive`` resolves (``python/sglang/srt/speculative/adaptive_spec_params.py``; read in the
    0.5.11, 0.5.12, 0.5.13 and 0.5.17 wheels)."""

    NONE = "none"  # ≤ 0.5.10: no such flag
    V1_ONLY = "v1-only"
    """0.5.11: turned off (warning) unless algorithm EAGLE/EAGLE3, topk 1, no DP attention, the overlap scheduler
    off ("adaptive is only implemented for EAGLEWorker v1"), no multi-layer EAGLE, two-batch overlap or PD-mux
    (``server_args.py:_handle_speculative_decoding`` end); the config: one object, candidate steps [1, 3, 7]."""
    ANY_WORKER = "any-worker"
    """0.5.12: the same without the overlap condition (``eagle_worker_v2.py`` gained the controller); the start-up
    steps join the candidates."""
    PER_BATCH = "per-batch"
    """0.5.13 on: per-batch-size candidate steps; ``--speculative-num-steps`` must be one of them, else ValueError
    (``arg_groups/speculative_hook.py``: ``validate_adaptive_initial_steps``, 0.5.17
    ``_init_adaptive_speculative_params``)."""


@dataclass(frozen=True)
class RuleSet:
    """The rule variants of one release (see each field's comment for releases and sources)."""

    release: SGLangVersion
    overlap: Overlap
    auto_params: AutoParams
    mamba: MambaRule
    warn_48: bool  # 0.5.4 on: "Max running requests is reset to 48 for speculative decoding. ..." (before: silent)
    mixed_chunk_off: bool  # 0.4.7 on: speculative decoding turns --enable-mixed-chunk off, with a warning
    draft_is_target: bool  # 0.4.6.post2 on: DeepSeek-family MTP drafts default to the target model path
    draft_revision_main: bool  # 0.5.6 on: a draft model path without revision gets revision "main"
    page_topk: tuple[str, ...] | None
    """topk > 1 with page_size > 1: ``None`` = topk silently set to 1 (0.4.6–0.4.8.post1), ``()`` = not checked
    (0.4.9–0.5.1.post3), else the attention backends allowed: ('flashinfer',) 0.5.2–0.5.5.post3,
    ('flashinfer', 'fa3') 0.5.6–0.5.12, ('flashinfer', 'fa3', 'triton') 0.5.13 on (new message)."""
    ngram_ndt_12: bool  # 0.5.10 on: NGRAM draft tokens default to 12 with a warning (before: the match window)
    upper_algorithm: bool  # 0.5.12 on: --speculative-algorithm is upper-cased (``_handle_speculative_decoding``)
    colon_check: bool  # 0.5.5.post1 on: served_model_name may not contain ':' (``check_server_args``)
    pp_overlap_check: bool  # 0.4.6.post2–0.5.13: pipeline parallelism refuses overlap/spec/mixed chunk
    dp_message_new: bool  # 0.5.22 on: "multi-node data-parallel replicas are not supported; ..."
    chunk_page_message: bool  # 0.4.9.post4 on: "chunked_prefill_size must be divisible by page_size" (before: bare)
    mamba_flashinfer_check: bool  # 0.5.10 only: FlashInfer GDN decode refuses no_buffer
    mamba_no_buffer_page_1: bool  # 0.5.11–0.5.13: no_buffer forces page_size 1 (warning)
    mamba_fla_chunk_check: bool  # 0.5.9–0.5.12: extra_buffer page size must divide / be divided by FLA_CHUNK_SIZE
    mamba_disable_radix_period: bool  # 0.5.13: the extra_buffer/--disable-radix-cache message gained a period
    adaptive: AdaptiveRule = AdaptiveRule.NONE
    adaptive_default_steps: tuple[int, ...] = ()
    """The union of the default config's candidate steps (``DEFAULT_ADAPTIVE_CONFIG``): (1, 3, 7) read in 0.5.13,
    (0, 1, 3, 7) in 0.5.17 (step 0, no speculation, at batch sizes 8 and more); 0.5.14–0.5.16 are taken as 0.5.13
    and 0.5.18 on as 0.5.17 (not read)."""


def _era(v: SGLangVersion, eras: tuple[tuple[str, _T], ...], last: _T, through: bool = False) -> _T:
    """The value of the first era ``v`` falls in: ``eras`` are ``(bound, value)`` in release order, ``v`` before
    ``bound`` (``through``: up to and including it); ``last`` past every bound."""
    for bound, value in eras:
        if (v <= _v(bound)) if through else (v < _v(bound)):
            return value
    return last


def _overlap(v: SGLangVersion) -> Overlap:
    return _era(v, (("0.5.4", Overlap.ALWAYS_OFF), ("0.5.6.post2", Overlap.BETA), ("0.5.10.post1", Overlap.OPT_IN),
                    ("0.5.12.post1", Overlap.V1_FALLBACK), ("0.5.13.post1", Overlap.SYNC_ENV)), Overlap.V2,
                through=True)


def _page_topk(v: SGLangVersion) -> tuple[str, ...] | None:
    eras: tuple[tuple[str, tuple[str, ...] | None], ...] = (
        ("0.4.8.post1", None), ("0.5.1.post3", ()), ("0.5.5.post3", ("flashinfer",)),
        ("0.5.12.post1", ("flashinfer", "fa3")))
    return _era(v, eras, ("flashinfer", "fa3", "triton"), through=True)


@cache
def rules_for(release: SGLangVersion) -> RuleSet:
    """The :class:`RuleSet` of a known release (any version works: boundaries are by release number)."""
    v = release
    mamba = _era(v, (("0.5.7", MambaRule.NONE), ("0.5.10", MambaRule.DISABLE_RADIX), ("0.5.14", MambaRule.REFUSE)),
                 MambaRule.AUTO)
    auto = _era(v, (("0.4.7", AutoParams.ALL_548), ("0.5.8", AutoParams.DEEPSEEK_314)), AutoParams.DEFAULT_314)
    return RuleSet(
        release=v,
        overlap=_overlap(v),
        auto_params=auto,
        mamba=mamba,
        warn_48=v >= _v("0.5.4"),
        mixed_chunk_off=v >= _v("0.4.7"),
        draft_is_target=v >= _v("0.4.6.post2"),
        draft_revision_main=v >= _v("0.5.6"),
        page_topk=_page_topk(v),
        ngram_ndt_12=v >= _v("0.5.10"),
        upper_algorithm=v >= _v("0.5.12"),
        colon_check=v >= _v("0.5.5.post1"),
        pp_overlap_check=_v("0.4.6.post2") <= v < _v("0.5.14"),
        dp_message_new=v >= _v("0.5.22"),
        chunk_page_message=v >= _v("0.4.9.post4"),
        mamba_flashinfer_check=_v("0.5.10") <= v < _v("0.5.11"),
        mamba_no_buffer_page_1=_v("0.5.11") <= v < _v("0.5.14"),
        mamba_fla_chunk_check=_v("0.5.9") <= v < _v("0.5.13"),
        mamba_disable_radix_period=_v("0.5.13") <= v < _v("0.5.14"),
        adaptive=_adaptive(v),
        adaptive_default_steps=(() if v < _v("0.5.13") else (1, 3, 7) if v < _v("0.5.17") else (0, 1, 3, 7)),
    )


def _adaptive(v: SGLangVersion) -> AdaptiveRule:
    return _era(v, (("0.5.11", AdaptiveRule.NONE), ("0.5.12", AdaptiveRule.V1_ONLY),
                    ("0.5.13", AdaptiveRule.ANY_WORKER)), AdaptiveRule.PER_BATCH)
