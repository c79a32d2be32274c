"""Model and GPU profiles of the simulator, kept as YAML data in ``sim/profiles/``.

``load_model_profile(model_path)`` picks the first model profile whose ``match`` substring occurs in the
lower-cased ``--model-path``; a model without one is sized from its config (:func:`profile_from_config`): the
``sized`` entries of ``models.yaml`` (the config of a model known but not calibrated, e.g. DeepSeek-V3), else the
``config.json`` of a ``--model-path`` that is a local directory, as SGLang reads it; any other model raises
:class:`UnknownModel` (the simulator refuses to start). ``load_gpu_profile(name)`` picks the GPU by the node's
product name (``nvidia.com/gpu.product``, case-insensitive, aliases allowed; else ``default``). Both raise
``KeyError`` if the YAML files are inconsistent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
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
    kv_latent: bool = False
    """Multi-head latent attention (DeepSeek): every TP rank caches each token's latent whole (SGLang's MLA cell
    size has no TP divisor), so ``kv_bytes_per_token`` is not divided by the tensor-parallel size."""
    num_layers: int = Field(default=32, gt=0)
    """Decoder layers (``num_hidden_layers``): a weight load that runs out of memory fails on one layer's share."""


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


class UnknownModel(LookupError):
    """No profile and no config for the model: ``str()`` is the simulator's refusal."""


@dataclass(frozen=True)
class SizedModel:
    """A ``sized`` entry of ``models.yaml``: a model known by its config (an excerpt of its ``config.json``)."""

    name: str
    match: tuple[str, ...]
    config: dict[str, Any]
    draft_architecture: str | None = None


@cache
def model_profiles() -> tuple[tuple[ModelProfile, ...], str]:
    """All model profiles and the name of the one whose speed constants a model sized from its config takes."""
    data = _read("models.yaml")
    return tuple(ModelProfile(**m) for m in data["models"]), str(data["sized_from"])


@cache
def sized_models() -> tuple[SizedModel, ...]:
    """The ``sized`` entries of ``models.yaml``."""
    return tuple(SizedModel(str(e["name"]), tuple(e["match"]), dict(e["config"]), e.get("draft_architecture"))
                 for e in _read("models.yaml").get("sized") or [])


@cache
def gpu_profiles() -> tuple[tuple[GPUProfile, ...], str]:
    """All GPU profiles and the name of the default one."""
    data = _read("gpus.yaml")
    return tuple(GPUProfile(**g) for g in data["gpus"]), str(data["default"])


GIB = float(1 << 30)
_QUANT_BYTES = {"fp8": 1.0, "fbgemm_fp8": 1.0, "w8a8_fp8": 1.0, "modelopt": 1.0, "w8a8_int8": 1.0,
                "mxfp4": 0.5, "modelopt_fp4": 0.5}
"""Bytes per quantized weight by ``quantization_config.quant_method`` (AWQ/GPTQ: ``bits`` / 8)."""
_DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}


@dataclass(frozen=True)
class ConfigSize:
    """What a model's config says of its size: parameters (the target's, those one token reads, the MTP/NextN
    draft layers'), bytes per weight, KV-cache bytes per token (all layers, K and V, 16-bit), layers and context."""

    parameters: int
    active_parameters: int
    draft_parameters: int
    bytes_per_parameter: float
    kv_bytes_per_token: int
    kv_latent: bool
    num_layers: int
    context_length: int


def _get(c: dict[str, Any], *keys: str, default: int = 0) -> int:
    return next((int(c[k]) for k in keys if c.get(k) is not None), default)


def size_from_config(config: dict[str, Any]) -> ConfigSize:
    """Count the parameters of a decoder from its ``config.json`` (``text_config`` of a multimodal one): the
    embeddings and LM head (one matrix when ``tie_word_embeddings``), per layer the attention (grouped-query heads,
    or DeepSeek's multi-head latent attention when ``kv_lora_rank`` is set) and a gated MLP (3 matrices) or, from
    layer ``first_k_dense_replace`` on, ``n_routed_experts`` / ``num_experts`` / ``num_local_experts`` experts of
    ``moe_intermediate_size`` with their router and shared experts. For DeepSeek-V3's config this gives 671B, 37B
    active, as its model card says. Raises ``KeyError`` when a dimension is missing."""
    c = {**config, **(config.get("text_config") or {})}
    h, layers, vocab = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c["vocab_size"])
    heads = int(c["num_attention_heads"])
    kv_heads = _get(c, "num_key_value_heads", default=heads)
    head_dim = _get(c, "head_dim", default=h // heads)
    if c.get("kv_lora_rank"):  # MLA (deepseek_v2 / deepseek_v3 modeling): latent KV, one cache entry per layer
        lora, rope, nope = int(c["kv_lora_rank"]), int(c["qk_rope_head_dim"]), int(c["qk_nope_head_dim"])
        v_dim, q_lora = int(c["v_head_dim"]), _get(c, "q_lora_rank")
        q = h * q_lora + q_lora * heads * (nope + rope) if q_lora else h * heads * (nope + rope)
        attention = q + h * (lora + rope) + lora * heads * (nope + v_dim) + heads * v_dim * h
        kv_bytes = layers * (lora + rope) * 2
    else:
        attention = h * head_dim * (heads + 2 * kv_heads) + heads * head_dim * h
        kv_bytes = 2 * layers * kv_heads * head_dim * 2
    dense = 3 * h * _get(c, "intermediate_size")
    experts = _get(c, "n_routed_experts", "num_experts", "num_local_experts")
    moe_inter = _get(c, "moe_intermediate_size", default=_get(c, "intermediate_size"))
    shared = 3 * h * _get(c, "shared_expert_intermediate_size", default=moe_inter * _get(c, "n_shared_experts"))
    moe = 3 * h * moe_inter * experts + shared + h * experts
    moe_active = 3 * h * moe_inter * _get(c, "num_experts_per_tok") + shared + h * experts
    dense_layers = min(_get(c, "first_k_dense_replace"), layers) if experts else layers
    embeddings = vocab * h * (1 if c.get("tie_word_embeddings") else 2)
    total = embeddings + layers * attention + dense_layers * dense + (layers - dense_layers) * moe
    active = vocab * h + layers * attention + dense_layers * dense + (layers - dense_layers) * moe_active
    layer = attention + (moe if experts else dense)
    draft = _get(c, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=1) * layer + 2 * h * h
    quant = c.get("quantization_config") or {}
    method = str(quant.get("quant_method") or "")
    if method in ("awq", "gptq"):
        per = _get(quant, "bits", default=4) / 8
    else:
        per = _QUANT_BYTES.get(method) or _DTYPE_BYTES.get(str(c.get("torch_dtype") or c.get("dtype")), 2.0)
    return ConfigSize(total, active if experts else total, draft, per, kv_bytes, bool(c.get("kv_lora_rank")), layers,
                      _get(c, "max_position_embeddings", default=4096))


def profile_from_config(name: str, match: tuple[str, ...], config: dict[str, Any],
                        draft_architecture: str | None = None) -> ModelProfile:
    """A profile for a model known only by its config (:func:`size_from_config`): weights, KV cache, layers and
    context from the config, the speed constants (acceptance, step costs, bandwidth efficiency) of the profile
    ``sized_from`` of ``models.yaml``; a plain attention model (no mamba state), its decode speed the bandwidth
    roofline. Raises ``KeyError`` when the config lacks a dimension."""
    profiles, sized_from = model_profiles()
    base = next((p for p in profiles if p.name == sized_from), None)
    if base is None:
        raise KeyError(f"sized_from profile {sized_from!r} missing")
    size = size_from_config(config)
    per = size.bytes_per_parameter
    return ModelProfile(**{
        **base.model_dump(), "name": name, "match": list(match),
        "architecture": str((config.get("architectures") or [base.architecture])[0]),
        "draft_architecture": draft_architecture or base.draft_architecture,
        "model_type": str(config.get("model_type") or base.model_type), "hybrid_mamba": False,
        "context_length": size.context_length, "num_layers": size.num_layers,
        "weights_gib": round(size.parameters * per / GIB, 2),
        "draft_weights_gib": round(size.draft_parameters * per / GIB, 2),
        "active_weights_gib": (round(size.active_parameters * per / GIB, 2)
                               if size.active_parameters < size.parameters else None),
        "kv_bytes_per_token": size.kv_bytes_per_token, "kv_latent": size.kv_latent, "mamba_state_mib_per_req": 0.0,
        "base_decode_tok_s": {},
    })


def _local_config(model_path: str) -> dict[str, Any] | None:
    path = Path(model_path) / "config.json"
    if not model_path or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_model_profile(model_path: str) -> ModelProfile:
    """The profile for ``model_path`` (e.g. ``Qwen/Qwen3.6-27B`` or ``/models/qwen3.6-27b-fp8``): a profile whose
    ``match`` occurs in the lower-cased path, a ``sized`` entry's, or one sized from ``model_path/config.json``.
    Raises :class:`UnknownModel` for any other model."""
    profiles, _ = model_profiles()
    lowered = model_path.lower()
    for p in profiles:
        if any(m in lowered for m in p.match):
            return p
    for s in sized_models():
        if any(m in lowered for m in s.match):
            return profile_from_config(s.name, s.match, s.config, s.draft_architecture)
    config = _local_config(model_path)
    if config is not None:
        try:
            return profile_from_config(model_path, (lowered,), config)
        except KeyError as exc:
            raise UnknownModel(f"sglang-sim: cannot size model {model_path!r}: its config.json has no {exc}") from None
        except (TypeError, ValueError) as exc:
            raise UnknownModel(f"sglang-sim: cannot size model {model_path!r} from its config.json: {exc}") from None
    known = sorted({m for p in profiles for m in p.match} | {m for s in sized_models() for m in s.match})
    raise UnknownModel(
        f"sglang-sim: no profile for model {model_path!r} and no config.json to size it from: the simulator "
        f"knows {', '.join(known)} (sim/sglang_sim/profiles/models.yaml) and local directories holding a "
        "config.json; add a profile or a `sized` entry with the model's config")


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
