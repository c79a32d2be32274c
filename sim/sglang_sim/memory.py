"""Start-up memory model: does the KV cache (and the mamba state of hybrid models) fit?

Ported in simplified form from SGLang 0.5.10 ``python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py``
(``profile_max_num_token``, ``handle_max_mamba_cache``, ``_resolve_max_num_reqs``, ``MemoryPoolConfig``) and the
automatic ``mem_fraction_static`` of ``python/sglang/srt/server_args.py`` (``_handle_gpu_memory_settings``).
Per GPU: static budget = avail × mem_fraction_static; minus weights / tp (target and draft); minus the
spec-decoding mamba intermediate states (per request × max_running_requests × num_draft_tokens); the rest is
split between mamba state and KV cache by ``mamba_full_memory_ratio`` (default 0.9); the request-to-token
table costs (max_running_requests + 1) × (context_len + 4 + num_draft_tokens) × 4 bytes.

Weights that do not fit the GPU at all (:func:`check_weights`, before any pool) end the start-up as PyTorch does
while SGLang allocates the model's parameters.

CUDA graphs (:func:`plan_graphs`, after the pools, as ``model_runner.init_device_graphs`` runs): the batch sizes
of ``cuda_graph_runner.py:get_batch_sizes_to_capture``, each graph holding ``bs × tokens per bs`` tokens
(``num_draft_tokens`` for the target's verify graphs) of activations (:attr:`ModelProfile.activation_mib_per_token`)
in one shared pool; what is left of the memory outside the static pools bounds the batches that run without a
graph (more running requests than ``--cuda-graph-max-bs``): beyond it SGLang dies with PyTorch's out-of-memory
error under load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang_sim.perf import SpecShape
from sglang_sim.profiles import GPUProfile, ModelProfile

GIB = float(1 << 30)
MIB = float(1 << 20)
# python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py
MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3
MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP = 2
MAMBA_CACHE_V2_ADDITIONAL_RATIO_NO_OVERLAP = 1
KV_DTYPE_BYTES = {"fp8_e5m2": 1.0, "fp8_e4m3": 1.0, "mxfp8": 1.0, "nvfp4": 0.5, "fp4_mx_block16": 0.5}


GRAPH_RESERVE_GIB = 0.5
"""Memory outside the static pools that neither graphs nor eager batches may use (cuBLAS/NCCL workspaces,
allocator fragmentation), GiB per GPU."""
CAPTURE_SOLUTIONS = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n")
"""The advice ``cuda_graph_runner.py`` appends to a failed capture (``Capture CUDA graph failed: ...``)."""


class StartupError(Exception):
    """SGLang would die at start-up; ``str()`` is the exception line SGLang prints (``Type: message``)."""


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory layout after start-up (GiB) and the resulting pool sizes (tokens, requests)."""

    mem_fraction_static: float
    avail_before_gib: float
    weight_gib: float
    kv_cache_gib: float
    mamba_gib: float
    avail_after_gib: float
    max_total_num_tokens: int
    max_running_requests: int
    max_mamba_cache_size: int | None
    context_len: int


def format_size(gib: float) -> str:
    """A size as PyTorch's allocator prints it (``c10/cuda/CUDACachingAllocator.cpp``: ``format_size``)."""
    size = gib * GIB
    if size <= 1024:
        return f"{int(size)} bytes"
    if size <= 1024 * 1024:
        return f"{size / 1024:.2f} KiB"
    if size <= GIB:
        return f"{size / MIB:.2f} MiB"
    return f"{gib:.2f} GiB"


def torch_oom(gpu: GPUProfile, tried_gib: float, free_gib: float, allocated_gib: float) -> str:
    """PyTorch's ``torch.OutOfMemoryError`` for an allocation of ``tried_gib`` with ``free_gib`` left on the GPU and
    ``allocated_gib`` held by this process's tensors (the rest of what it uses is its CUDA context:
    ``memory_gib - avail_gib`` of the GPU profile)."""
    in_use = gpu.memory_gib - gpu.avail_gib + allocated_gib
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {format_size(tried_gib)}. GPU 0 has a "
            f"total capacity of {format_size(gpu.memory_gib)} of which {format_size(free_gib)} is free. Including "
            f"non-PyTorch memory, this process has {format_size(in_use)} memory in use. Of the allocated memory "
            f"{format_size(allocated_gib)} is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
            "unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
            "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def check_weights(model: ModelProfile, gpu: GPUProfile, tp: int, spec: bool) -> None:
    """Raise :class:`StartupError` with PyTorch's out-of-memory error when one GPU's share of the weights (the
    target's, plus the draft's under speculative decoding) exceeds what the GPU has free before loading.

    SGLang has no check of its own there: ``DefaultModelLoader.load_model`` (``python/sglang/srt/model_loader/
    loader.py``) builds the model under ``with target_device:``, so every parameter is allocated on the GPU as its
    layer is created, and the first layer that does not fit raises ``torch.OutOfMemoryError`` (PyTorch's
    ``CUDACachingAllocator``), which the scheduler process logs as ``Scheduler hit an exception`` before the server
    exits (``python/sglang/srt/managers/scheduler.py:run_scheduler_process``). The allocation that fails here is one
    layer's share; the layers before it are allocated."""
    share = (model.weights_gib + (model.draft_weights_gib if spec else 0.0)) / tp
    if share <= gpu.avail_gib:
        return
    layer = model.weights_gib / tp / model.num_layers
    allocated = min(int(gpu.avail_gib / layer) * layer, model.weights_gib / tp) if layer > 0 else 0.0
    tried = layer if allocated < model.weights_gib / tp else share - allocated
    raise StartupError(torch_oom(gpu, tried, gpu.avail_gib - allocated, allocated))


def default_mem_fraction_static(gpu: GPUProfile, tp: int, spec_on: bool, chunked_prefill_size: int | None,
                                cuda_graph_max_bs: int | None) -> float:
    """SGLang's automatic ``mem_fraction_static`` (0.5.10 ``server_args.py``), gpu memory in MiB."""
    gpu_mem = gpu.memory_gib * 1024
    if chunked_prefill_size is None:
        chunked_prefill_size = 2048 if gpu_mem < 35 * 1024 else 4096 if gpu_mem < 60 * 1024 else 8192
    if cuda_graph_max_bs is None:
        cuda_graph_max_bs = 24 if gpu_mem < 35 * 1024 else 32 if gpu_mem < 60 * 1024 else 256
    reserved = 512 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2 + tp / 8 * 1024
    reserved += 60 * 8  # piecewise cuda graph token sizes
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if spec_on:
        reserved += 4 * 1024
    return round((gpu_mem - reserved) / gpu_mem, 3)


def _int(args: dict[str, Any], key: str) -> int | None:
    v = args.get(key)
    return None if v is None else int(v)


def check_context_length(model: ModelProfile, args: dict[str, Any], env: dict[str, str]) -> int:
    """Effective context length; raises :class:`StartupError` like ``python/sglang/srt/configs/model_config.py``
    (``_derive_context_length``) when ``--context-length`` exceeds the model's."""
    wanted = _int(args, "context_length")
    if wanted is None:
        return model.context_length
    if wanted > model.context_length and env.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN") not in ("1", "true"):
        raise StartupError(
            f"ValueError: Warning: User-specified context_length ({wanted}) is greater than the derived "
            f"context_length ({model.context_length}). This may lead to incorrect model outputs or CUDA errors. "
            "Note that the derived context_length may differ from max_position_embeddings in the model's config. "
            "To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
        )
    return wanted


def plan_memory(model: ModelProfile, gpu: GPUProfile, args: dict[str, Any], shape: SpecShape | None,
                env: dict[str, str]) -> MemoryPlan:
    """Lay out memory for resolved server ``args``; raises :class:`StartupError` with PyTorch's out-of-memory
    error when the weights do not fit the GPU at all (:func:`check_weights`), with SGLang's ``RuntimeError: Not
    enough memory. Please try to increase --mem-fraction-static. ...`` (``model_runner_kv_cache_mixin.py``) when
    they fit but nothing is left of the static budget for the KV cache or for one request's mamba state."""
    tp = _int(args, "tp_size") or 1
    check_weights(model, gpu, tp, shape is not None)
    ctx = check_context_length(model, args, env)
    frac = args.get("mem_fraction_static")
    if frac is None:
        frac = default_mem_fraction_static(gpu, tp, shape is not None, _int(args, "chunked_prefill_size"),
                                           _int(args, "cuda_graph_max_bs")
                                           or _int(args, "cuda_graph_max_bs_decode"))
    frac = float(frac)
    oom = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
           f"Current value: mem_fraction_static={frac}")
    ndt = shape.num_draft_tokens if shape else 0
    weights = (model.weights_gib + (model.draft_weights_gib if shape else 0.0)) / tp
    rest = gpu.avail_gib * frac - weights
    mrr_arg = _int(args, "max_running_requests")
    req_table = ((mrr_arg or 2048) + 1) * (ctx + 4 + ndt) * 4 / GIB
    rest -= req_table
    mamba_gib = 0.0
    mamba_size: int | None = None
    per_req = model.mamba_state_mib_per_req * MIB / tp / GIB
    if model.hybrid_mamba and per_req > 0:
        if shape is not None:
            rest -= per_req * (mrr_arg or 48) * ndt
        if _int(args, "max_mamba_cache_size") is not None:
            mamba_size = int(args["max_mamba_cache_size"])
        elif args.get("disable_radix_cache") and mrr_arg is not None:
            mamba_size = mrr_arg
        else:
            ratio = float(args.get("mamba_full_memory_ratio") or 0.9)
            mamba_size = max(int(rest * ratio / (1 + ratio) / per_req), 0)
        mamba_gib = mamba_size * per_req
        rest -= mamba_gib
    kv_shards = 1 if model.kv_latent else tp
    kv_dtype = KV_DTYPE_BYTES.get(str(args.get("kv_cache_dtype") or "auto"), 2.0)
    kv_bytes = model.kv_bytes_per_token / kv_shards * kv_dtype / 2
    tokens = int(rest * GIB // kv_bytes) if rest > 0 else 0
    if args.get("max_total_tokens") is not None:
        tokens = min(tokens, int(args["max_total_tokens"]))
    page = _int(args, "page_size") or 1
    tokens = tokens // page * page
    if tokens <= 0:
        raise StartupError(oom)
    estimated = max(min(int(tokens / ctx * 512), 4096), 2048)
    mrr = min(mrr_arg, estimated) if mrr_arg is not None else min(estimated, tokens // 2)
    if mamba_size is not None:
        ratio_slots = MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
        strategy = args.get("mamba_scheduler_strategy") or args.get("mamba_radix_cache_strategy")
        if not args.get("disable_radix_cache"):
            if strategy in ("extra_buffer", "extra_buffer_lazy"):
                ratio_slots += (MAMBA_CACHE_V2_ADDITIONAL_RATIO_NO_OVERLAP if args.get("disable_overlap_schedule")
                                else MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP)
        else:
            ratio_slots = 1
        mrr = min(mrr, mamba_size // ratio_slots)
        if mrr <= 0:
            raise StartupError(oom)
    kv_gib = tokens * kv_bytes / GIB
    return MemoryPlan(
        mem_fraction_static=frac, avail_before_gib=gpu.avail_gib, weight_gib=weights, kv_cache_gib=kv_gib,
        mamba_gib=mamba_gib, avail_after_gib=max(gpu.avail_gib - weights - kv_gib - mamba_gib, 0.0),
        max_total_num_tokens=tokens, max_running_requests=mrr, max_mamba_cache_size=mamba_size,
        context_len=ctx,
    )


@dataclass(frozen=True)
class GraphPlan:
    """CUDA graphs of one GPU: captured batch sizes, tokens per batch entry, their pool (GiB), the most tokens an
    eager (uncaptured) batch may hold before PyTorch runs out of memory, and SGLang's error when capture fails."""

    capture_bs: tuple[int, ...]
    tokens_per_bs: int
    graph_gib: float
    eager_token_limit: int
    free_gib: float
    error: str | None = None

    @property
    def max_bs(self) -> int:
        """The largest captured batch size (0 without CUDA graphs)."""
        return max(self.capture_bs, default=0)


def _default_cuda_graph_max_bs(gpu: GPUProfile) -> int:
    gpu_mem = gpu.memory_gib * 1024
    return 24 if gpu_mem < 35 * 1024 else 32 if gpu_mem < 60 * 1024 else 256


def capture_batch_sizes(gpu: GPUProfile, args: dict[str, Any], shape: SpecShape | None,
                        max_running_requests: int) -> tuple[int, ...]:
    """``get_batch_sizes_to_capture`` (``cuda_graph_runner.py``): SGLang's list (fewer sizes under speculative
    decoding, more on GPUs over 96 GiB), cut to ``--cuda-graph-max-bs`` (``--cuda-graph-max-bs-decode`` from
    0.5.20) and to the request pool; ``()`` with ``--disable-cuda-graph`` (``--disable-decode-cuda-graph``)."""
    if args.get("disable_cuda_graph") or args.get("disable_decode_cuda_graph"):
        return ()
    explicit = args.get("cuda_graph_bs") or args.get("cuda_graph_bs_decode")
    if explicit:
        sizes = [int(b) for b in explicit]
    elif shape is None:
        sizes = [1, 2, 4, 8, *range(16, 161, 8)]
    else:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 161, 16)]
    if not explicit and gpu.memory_gib > 96:
        sizes += list(range(160, 257, 8))
    pool = max_running_requests
    if max(sizes) > pool:
        sizes += [pool - 1, pool]
    max_bs = _int(args, "cuda_graph_max_bs") or _int(args, "cuda_graph_max_bs_decode") \
        or _default_cuda_graph_max_bs(gpu)
    sizes = [b for b in sizes if b <= max_bs]
    if sizes and max(sizes) < max_bs:
        sizes += list(range(max(sizes), max_bs + 1, 16))
    return tuple(sorted({b for b in sizes if 0 < b <= pool}))


def plan_graphs(model: ModelProfile, gpu: GPUProfile, args: dict[str, Any], shape: SpecShape | None,
                plan: MemoryPlan) -> GraphPlan:
    """The CUDA graphs SGLang captures after the pools (``error`` set, with SGLang's message, when they do not
    fit in the memory left outside the static pools)."""
    sizes = capture_batch_sizes(gpu, args, shape, plan.max_running_requests)
    per_bs = shape.num_draft_tokens if shape else 1
    mib = model.activation_mib_per_token
    free = max(plan.avail_after_gib - GRAPH_RESERVE_GIB, 0.0)
    graph = max(sizes, default=0) * per_bs * mib / 1024
    error = None
    if graph > free:
        error = (f"Exception: Capture CUDA graph failed: CUDA out of memory. Tried to allocate {graph:.2f} GiB. "
                 f"GPU 0 has a total capacity of {gpu.memory_gib:.2f} GiB of which {free:.2f} GiB is free.\n"
                 + CAPTURE_SOLUTIONS)
    eager = int(max(free - graph, 0.0) * 1024 / mib) if mib > 0 else 1 << 30
    return GraphPlan(sizes, per_bs, graph, eager, free, error)


def eager_oom_message(gpu: GPUProfile, model: ModelProfile, tokens: int, graphs: GraphPlan) -> str:
    """PyTorch's out-of-memory error for an uncaptured forward batch of ``tokens`` tokens."""
    need = tokens * model.activation_mib_per_token / 1024
    left = max(graphs.free_gib - graphs.graph_gib, 0.0)
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {need:.2f} GiB. GPU 0 has a total "
            f"capacity of {gpu.memory_gib:.2f} GiB of which {left:.2f} GiB is free. Of the allocated memory "
            f"{gpu.memory_gib - left:.2f} GiB is allocated by PyTorch. If reserved but unallocated memory is large "
            "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
