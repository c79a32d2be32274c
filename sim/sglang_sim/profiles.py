"""Model and GPU profiles of the simulator, kept as YAML data in ``sim/profiles/``.

``load_model_profile(model_path)`` picks the first model profile whose ``match`` substring occurs in the
lower-cased ``--model-path`` (else the file's ``default``); ``load_gpu_profile(name)`` picks the GPU by the
node's product name (``nvidia.com/gpu.product``, case-insensitive, aliases allowed; else ``default``).
Both raise ``KeyError`` only if the YAML files are inconsistent.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field


class ModelProfile(BaseModel):
    """One model: sizes (GiB, bytes/token, MiB/request), acceptance α and relative step costs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    match: list[str]
    architecture: str
    draft_architecture: str
    model_type: str
    hybrid_mamba: bool
    context_length: int
    weights_gib: float
    draft_weights_gib: float
    kv_bytes_per_token: int
    mamba_state_mib_per_req: float
    alpha: float = Field(gt=0.0, lt=1.0)
    draft_step_cost: float
    verify_token_cost: float
    tree_candidate_decay: float
    tree_width_cost: float
    batch_slowdown: float
    verify_batch_factor: float
    prefill_speedup: float
    decode_efficiency: float
    active_weights_gib: float | None = None
    base_decode_tok_s: dict[str, dict[int, float]] = Field(default_factory=dict)
    spec_overhead: float = 0.0
    """Fixed cost of a speculative step besides draft forwards and verified tokens (draft-tree building,
    sampling and KV bookkeeping kernels), relative to one target decode forward."""
    activation_mib_per_token: float = 0.5
    """GPU memory one token of a forward batch needs outside the static pools (fp32 logits over the vocabulary
    plus hidden-state buffers), MiB per GPU: CUDA graphs hold it for ``max captured bs × tokens per bs``."""
    graph_capture_seconds: float = 0.25
    """Seconds to capture one CUDA graph (one batch size) of the target model on the real GPU."""


class GPUProfile(BaseModel):
    """One GPU model: memory (GiB) and bandwidth (GB/s)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    aliases: list[str] = Field(default_factory=list)
    memory_gib: float
    avail_gib: float
    mem_bw_gbs: float


def _read(name: str) -> dict[str, Any]:
    text = resources.files("sglang_sim").joinpath("profiles").joinpath(name).read_text("utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise KeyError(f"{name}: not a mapping")
    return data


@cache
def model_profiles() -> tuple[tuple[ModelProfile, ...], str]:
    """All model profiles and the name of the default one."""
    data = _read("models.yaml")
    return tuple(ModelProfile(**m) for m in data["models"]), str(data["default"])


@cache
def gpu_profiles() -> tuple[tuple[GPUProfile, ...], str]:
    """All GPU profiles and the name of the default one."""
    data = _read("gpus.yaml")
    return tuple(GPUProfile(**g) for g in data["gpus"]), str(data["default"])


def load_model_profile(model_path: str) -> ModelProfile:
    """The profile for ``model_path`` (e.g. ``Qwen/Qwen3.6-27B`` or ``/models/qwen3.6-27b-fp8``)."""
    profiles, default = model_profiles()
    lowered = model_path.lower()
    for p in profiles:
        if any(m in lowered for m in p.match):
            return p
    for p in profiles:
        if p.name == default:
            return p
    raise KeyError(f"default model profile {default!r} missing")


def load_gpu_profile(name: str | None) -> GPUProfile:
    """The profile for GPU product ``name`` (e.g. ``NVIDIA RTX A6000``); the default one if unknown."""
    profiles, default = gpu_profiles()
    wanted = (name or default).strip().lower()
    for p in profiles:
        if wanted == p.name.lower() or wanted in (a.lower() for a in p.aliases):
            return p
    for p in profiles:
        if p.name == default:
            return p
    raise KeyError(f"default GPU profile {default!r} missing")
