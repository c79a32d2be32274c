"""Known model architectures, chosen by model path (no config.json is available to the operator or CI).

SGLang reads ``architectures[0]`` from the model's ``config.json``; this small table maps well-known
Hugging Face ids to that value so the hand-ported rules can decide per architecture. Facts from
``sglang/srt/server_args.py`` (0.5.10: ``_handle_model_specific_adjustments``) and
``sglang/srt/arg_groups/overrides.py`` (0.5.23: ``_MAMBA_RADIX_CACHE_ARCHS``), and the MTP draft class
names from ``sglang/srt/configs/model_config.py`` (``is_draft_model`` renames).
"""

from __future__ import annotations

import re

__all__ = ["HYBRID_MAMBA_ARCHS", "architecture_for", "draft_architecture_for"]

# (regex on the model path's last component, case-insensitive) → architectures[0]; first match wins.
_BY_PATH: tuple[tuple[str, str], ...] = (
    (r"qwen3\.[56]-.*-a\d+b", "Qwen3_5MoeForConditionalGeneration"),
    (r"qwen3\.[56]-", "Qwen3_5ForConditionalGeneration"),
    (r"qwen3-next-", "Qwen3NextForCausalLM"),
    (r"qwen3-.*-a\d+b", "Qwen3MoeForCausalLM"),
    (r"qwen3-", "Qwen3ForCausalLM"),
    (r"qwen2\.5-|qwen2-", "Qwen2ForCausalLM"),
    (r"deepseek-v3\.2", "DeepseekV32ForCausalLM"),
    (r"deepseek-(v3|r1)", "DeepseekV3ForCausalLM"),
    (r"deepseek-v2", "DeepseekV2ForCausalLM"),
    (r"glm-4\.[5-7]", "Glm4MoeForCausalLM"),
    (r"mimo-7b", "MiMoForCausalLM"),
    (r"gpt-oss", "GptOssForCausalLM"),
    (r"llama", "LlamaForCausalLM"),
)

HYBRID_MAMBA_ARCHS: frozenset[str] = frozenset(
    {
        # 0.5.10 server_args.py:_handle_model_specific_adjustments → _handle_mamba_radix_cache
        "Qwen3NextForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "KimiLinearForCausalLM",
        "NemotronHForCausalLM",
        "FalconH1ForCausalLM",
        "Lfm2ForCausalLM",
        # 0.5.23 overrides.py:_MAMBA_RADIX_CACHE_ARCHS adds the text-only Qwen3.5 classes
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
    }
)
"""Hybrid attention + linear-attention (GDN / Mamba) architectures that use the mamba radix cache."""

_DRAFT: dict[str, str] = {
    "Qwen3_5ForConditionalGeneration": "Qwen3_5ForCausalLMMTP",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3_5ForCausalLMMTP",
    "Qwen3NextForCausalLM": "Qwen3NextForCausalLMMTP",
    "DeepseekV3ForCausalLM": "DeepseekV3ForCausalLMNextN",
    "DeepseekV32ForCausalLM": "DeepseekV3ForCausalLMNextN",
    "Glm4MoeForCausalLM": "Glm4MoeForCausalLMNextN",
    "MiMoForCausalLM": "MiMoMTP",
    "NemotronHForCausalLM": "NemotronHForCausalLMMTP",
}


def architecture_for(model_path: str | None) -> str | None:
    """``architectures[0]`` for a known model path (``Qwen/Qwen3.6-27B`` → ``Qwen3_5ForConditionalGeneration``).

    Returns ``None`` for unknown models (rules that depend on the architecture then do not fire).
    """
    if not model_path:
        return None
    name = model_path.rstrip("/").rsplit("/", 1)[-1].lower()
    for pattern, arch in _BY_PATH:
        if re.search(pattern, name):
            return arch
    return None


def draft_architecture_for(architecture: str | None) -> str | None:
    """The class SGLang loads for the built-in MTP/NextN draft of ``architecture``
    (``model_config.py``: ``Qwen3_5ForConditionalGeneration`` → ``Qwen3_5ForCausalLMMTP``), or ``None``."""
    return _DRAFT.get(architecture or "")
