"""The simulator's performance model: pure functions of a model profile, a GPU profile and the resolved
speculative settings. No I/O, no clock, no randomness (the engine adds seeded jitter). Calibration and sources:
``docs/simulator.md``.

Speculative decoding follows SGLang's EAGLE/NEXTN worker (``python/sglang/srt/speculative/eagle_worker.py``,
``eagle_worker_v2.py``): per verify step the target model checks ``speculative_num_draft_tokens`` tokens
drafted in ``speculative_num_steps`` draft forwards of width ``speculative_eagle_topk``; it keeps the accepted
prefix plus one bonus token. With a per-position acceptance probability α:

- chain (topk 1, num_draft_tokens = num_steps + 1): expected tokens per verify step
  E = Σ_{i=0..k} α^i with k = num_steps (``accept len`` in SGLang's decode log);
- tree (topk > 1): of the steps × topk drafted nodes the ``num_draft_tokens - 1`` best-scored are verified
  (:func:`tree_widths`: w_d nodes at depth d, the c-th candidate right with α·decay^(c-1)); every kept beam is
  expanded further, so E = 1 + Σ_d Π_{j≤d} a(w_j), a(w) = 1 − Π_{c<w} (1 − α·decay^c).

Speed: tok/s per request = E / (step seconds), step seconds = (1 / base decode tok/s) × cost(shape) ×
batch factor(bs), cost = 1 + spec_overhead + verify_token_cost·(ndt-1) +
draft_step_cost·steps·(1 + tree_width_cost·(topk-1)), batch factor = 1 + batch_slowdown·(bs-1)·(1 +
verify_batch_factor·(ndt-1)) (verifying many tokens for many requests makes the step compute bound).
Start-up: :func:`load_seconds` (weights at :data:`LOAD_GIB_PER_S`) + :func:`capture_seconds` (per captured
CUDA-graph batch size and graph runner).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from sglang_sim.profiles import GPUProfile, ModelProfile

GIB_TO_GB = 1.073741824
LOAD_GIB_PER_S = 1.5
"""Weight loading speed per GPU (safetensors from a local NVMe disk through the page cache), GiB/s."""
LOAD_FIXED_SECONDS = 8.0
"""Start-up besides loading weights and capturing graphs: process start, NCCL init, tokenizer, warm-up, s."""
GRAPH_RUNNERS_SPEC = 3
"""CUDA-graph runners an EAGLE-family server captures per batch size: target verify, draft decode and draft
extend (``eagle_worker.py:init_cuda_graphs``); one without speculative decoding."""


@dataclass(frozen=True)
class SpecShape:
    """Resolved speculative settings (as ``/server_info`` reports them after SGLang's rewrites)."""

    num_steps: int
    topk: int
    num_draft_tokens: int


def chain_accept_length(alpha: float, num_steps: int) -> float:
    """E = Σ_{i=0..k} α^i tokens per verify step for a draft chain of k = ``num_steps`` positions."""
    return sum(alpha**i for i in range(num_steps + 1))


def tree_widths(alpha: float, shape: SpecShape, decay: float) -> list[int]:
    """Verified nodes per depth (index 0 = depth 1) of the draft tree SGLang builds.

    ``speculative_num_steps`` draft forwards each keep ``speculative_eagle_topk`` beams; the
    ``num_draft_tokens - 1`` highest-scoring of those ``steps × topk`` nodes are verified
    (``eagle_utils.py:organize_draft_results``: top-k over the cumulative draft scores). The score of the
    c-th candidate at depth d is modelled as ``α^(d-1) · P(candidate c is the target's token)`` with
    P = α·decay^(c-1) after c-1 misses, so shallow and first candidates go first.
    """
    nodes: list[tuple[float, int, int]] = []
    for depth in range(1, shape.num_steps + 1):
        reach = alpha ** (depth - 1)
        miss = 1.0
        for cand in range(1, shape.topk + 1):
            p = alpha * decay ** (cand - 1)
            nodes.append((reach * miss * p, depth, cand))
            miss *= 1.0 - p
    nodes.sort(key=lambda n: (-n[0], n[1], n[2]))
    width: dict[int, int] = {}
    for _, depth, _cand in nodes[: max(0, shape.num_draft_tokens - 1)]:
        width[depth] = width.get(depth, 0) + 1
    out: list[int] = []
    for depth in range(1, shape.num_steps + 1):
        if not width.get(depth):
            break
        out.append(width[depth])
    return out


def depth_accept_probability(alpha: float, width: int, decay: float) -> float:
    """P(one of ``width`` sibling candidates is the target's token) = 1 − Π_c (1 − α·decay^c), c < width."""
    return 1.0 - math.prod(1.0 - alpha * decay**c for c in range(width))


def tree_accept_length(alpha: float, shape: SpecShape, decay: float) -> float:
    """Expected tokens per verify step (accepted drafts + 1 bonus) for a draft tree: E = 1 + Σ_d Π_{j≤d} a(w_j)
    with w_j the verified width at depth j (:func:`tree_widths`) and a(w) :func:`depth_accept_probability` (every
    kept beam is expanded further, so an accepted sibling continues the path like the first candidate does).
    Equals :func:`chain_accept_length` when ``topk`` is 1 and ``num_draft_tokens`` is ``num_steps + 1``."""
    total, reach = 1.0, 1.0
    for w in tree_widths(alpha, shape, decay):
        reach *= depth_accept_probability(alpha, w, decay)
        total += reach
    return total


@functools.lru_cache(maxsize=4096)
def expected_accept_length(alpha: float, shape: SpecShape | None, decay: float = 0.5) -> float:
    """Tokens per verify step; 1.0 without speculative decoding (cached: the engine asks every step)."""
    if shape is None:
        return 1.0
    if shape.topk == 1:
        return chain_accept_length(alpha, min(shape.num_steps, shape.num_draft_tokens - 1))
    return tree_accept_length(alpha, shape, decay)


def step_cost(model: ModelProfile, shape: SpecShape | None) -> float:
    """Cost of one decode/verify step relative to one plain target decode forward (dimensionless)."""
    if shape is None:
        return 1.0
    draft = model.draft_step_cost * shape.num_steps * (1.0 + model.tree_width_cost * (shape.topk - 1))
    return 1.0 + model.spec_overhead + model.verify_token_cost * (shape.num_draft_tokens - 1) + draft


def base_decode_tok_s(model: ModelProfile, gpu: GPUProfile, tp: int) -> float:
    """Plain (no speculation) single-stream decode speed in tok/s for ``tp`` GPUs of this kind: the
    calibrated figure from the profile if present, else efficiency × bandwidth roofline with a
    tensor-parallel loss of 8 % per doubling."""
    table = model.base_decode_tok_s.get(gpu.name, {})
    if tp in table:
        return float(table[tp])
    bytes_gb = (model.active_weights_gib or model.weights_gib) * GIB_TO_GB
    tp_eff: float = 0.92 ** math.log2(max(tp, 1))
    return model.decode_efficiency * gpu.mem_bw_gbs * tp * tp_eff / bytes_gb


def batch_factor(model: ModelProfile, shape: SpecShape | None, batch_size: int) -> float:
    """Growth of the step time with ``batch_size`` running requests (1.0 at one request)."""
    ndt = shape.num_draft_tokens if shape else 1
    extra = model.batch_slowdown * max(batch_size - 1, 0)
    return 1.0 + extra * (1.0 + model.verify_batch_factor * (ndt - 1))


def step_seconds(
    model: ModelProfile, gpu: GPUProfile, tp: int, shape: SpecShape | None, batch_size: int,
    slowdown: float = 1.0,
) -> float:
    """Seconds (simulated) for one decode/verify step of the whole batch; ``slowdown`` ≥ 1 from faults."""
    base = 1.0 / base_decode_tok_s(model, gpu, tp)
    return base * step_cost(model, shape) * batch_factor(model, shape, batch_size) * slowdown


def per_request_tok_s(
    model: ModelProfile, gpu: GPUProfile, tp: int, shape: SpecShape | None, batch_size: int = 1,
    alpha: float | None = None,
) -> float:
    """Expected decode speed of one request in tok/s with ``batch_size`` requests running."""
    e = expected_accept_length(model.alpha if alpha is None else alpha, shape, model.tree_candidate_decay)
    return e / step_seconds(model, gpu, tp, shape, batch_size)


def prefill_seconds(model: ModelProfile, gpu: GPUProfile, tp: int, num_tokens: int) -> float:
    """Seconds to prefill ``num_tokens`` prompt tokens (plus a 5 ms fixed overhead)."""
    return 0.005 + num_tokens / (model.prefill_speedup * base_decode_tok_s(model, gpu, tp))


def accept_rate(accept_length: float, shape: SpecShape | None, formula: str) -> float:
    """SGLang's ``accept rate`` for a window with mean ``accept_length``.

    ``formula`` ``"len_over_ndt"``: accepted tokens (incl. bonus) / (verify steps × num_draft_tokens)
    (0.5.10, ``python/sglang/srt/observability/scheduler_metrics_mixin.py``);
    ``"drafts_over_ndt_minus_1"``: accepted drafts / (verify steps × (num_draft_tokens − 1)) (0.5.23,
    ``python/sglang/srt/managers/scheduler_components/metrics_reporter.py``, PR #13212).
    """
    if shape is None or accept_length <= 0:
        return 0.0
    if formula == "len_over_ndt":
        return accept_length / shape.num_draft_tokens
    per_round = shape.num_draft_tokens - 1 or shape.num_steps
    return (accept_length - 1.0) / per_round if per_round > 0 else 0.0


def load_seconds(model: ModelProfile, tp: int, spec_on: bool) -> float:
    """Seconds a fresh server spends before its pools exist: fixed start-up plus the weights of one GPU (the
    target's and, with speculative decoding, the draft's, divided by ``tp``) at :data:`LOAD_GIB_PER_S`."""
    gib = (model.weights_gib + (model.draft_weights_gib if spec_on else 0.0)) / max(tp, 1)
    return LOAD_FIXED_SECONDS + gib / LOAD_GIB_PER_S


def capture_seconds(model: ModelProfile, num_graphs: int, spec_on: bool) -> float:
    """Seconds to capture ``num_graphs`` batch sizes (:func:`sglang_sim.memory.capture_batch_sizes`) with every
    graph runner of the server (:data:`GRAPH_RUNNERS_SPEC` under speculative decoding)."""
    return num_graphs * model.graph_capture_seconds * (GRAPH_RUNNERS_SPEC if spec_on else 1)
