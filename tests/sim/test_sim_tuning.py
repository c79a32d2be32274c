"""The simulator answers a tuner like SGLang would: trees win where EAGLE3 published them winning, chains where
NEXTN/MTP did, the optimum moves with concurrency, memory limits bite, start-up pays load and CUDA-graph capture,
and ``measure_point`` is seeded and noise-free on request."""

from __future__ import annotations

import pytest
from sglang_sim import perf
from sglang_sim.measure import Workload, measure_point
from sglang_sim.memory import capture_batch_sizes, plan_graphs, plan_memory
from sglang_sim.profiles import load_gpu_profile, load_model_profile
from simproc import GPU, KNOWN_GOOD_TOK_S, MODEL

H100 = "NVIDIA H100 80GB HBM3"
LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA70 = "meta-llama/Llama-3.3-70B-Instruct"
PUBLISHED_MEMORY = {"mem_fraction_static": 0.88, "context_length": 131072, "max_running_requests": 16,
                    "mamba_full_memory_ratio": 0.5, "mamba_scheduler_strategy": "extra_buffer"}


def _grid() -> list[perf.SpecShape]:
    out = []
    for s in range(1, 9):
        out.append(perf.SpecShape(s, 1, s + 1))
        out += [perf.SpecShape(s, k, n) for k in (2, 4, 8) for n in (2, 4, 8, 16, 32, 64) if n <= s * k + 1]
    return out


def _best(model_path: str, gpu: str, tp: int, bs: int) -> perf.SpecShape:
    m, g = load_model_profile(model_path), load_gpu_profile(gpu)
    return max(_grid(), key=lambda s: perf.per_request_tok_s(m, g, tp, s, bs))


@pytest.mark.parametrize(("model_path", "tp", "base", "accept", "tok_s"), [
    (LLAMA8, 1, 158.0, 5.39, 373.0),  # sgl-project/sglang#4247: EAGLE3 8 steps on 1 x H100, MT-bench
    (LLAMA70, 8, 88.6, 5.88, 234.5),  # sgl-project/sglang#4716: EAGLE3 8/8/64 on 8 x H100, MT-bench
])
def test_eagle3_profiles_reproduce_published_trees(model_path: str, tp: int, base: float, accept: float,
                                                   tok_s: float) -> None:
    m, g = load_model_profile(model_path), load_gpu_profile(H100)
    shape = perf.SpecShape(8, 8, 64)
    assert perf.per_request_tok_s(m, g, tp, None) == pytest.approx(base, rel=0.01)
    assert perf.expected_accept_length(m.alpha, shape, m.tree_candidate_decay) == pytest.approx(accept, abs=0.05)
    assert perf.per_request_tok_s(m, g, tp, shape) == pytest.approx(tok_s, rel=0.03)
    best = _best(model_path, H100, tp, 1)
    assert best.topk > 1  # a tree wins at one stream ...
    assert perf.per_request_tok_s(m, g, tp, shape) >= 0.98 * perf.per_request_tok_s(m, g, tp, best)
    chain = max((s for s in _grid() if s.topk == 1), key=lambda s: perf.per_request_tok_s(m, g, tp, s))
    assert perf.per_request_tok_s(m, g, tp, chain) < 0.75 * perf.per_request_tok_s(m, g, tp, best)


@pytest.mark.parametrize("model_path", [MODEL, "Qwen/Qwen3.6-35B-A3B"])
def test_mtp_profiles_keep_chains_winning(model_path: str) -> None:
    assert _best(model_path, GPU, 2, 1).topk == 1


@pytest.mark.parametrize(("model_path", "gpu", "tp"), [(MODEL, GPU, 2), (LLAMA8, H100, 1), (LLAMA70, H100, 8)])
def test_the_optimum_moves_with_concurrency(model_path: str, gpu: str, tp: int) -> None:
    one, sixteen = _best(model_path, gpu, tp, 1), _best(model_path, gpu, tp, 16)
    assert one != sixteen
    assert sixteen.num_steps < one.num_steps  # fewer draft steps pay off when the batch fills the GPU


def test_measure_point_is_seeded_and_noise_free_on_request() -> None:
    m, g = load_model_profile(MODEL), load_gpu_profile(GPU)
    shape = perf.SpecShape(3, 1, 4)
    clean = measure_point(m, g, 2, shape, 1, noise=False, memory=PUBLISHED_MEMORY)
    assert clean.failure is None and clean.decode_tok_s == pytest.approx(KNOWN_GOOD_TOK_S, rel=0.02)
    assert clean.accept_length == pytest.approx(2.725, abs=0.02)
    runs = [measure_point(m, g, 2, shape, 1, seed=s, memory=PUBLISHED_MEMORY).decode_tok_s for s in (1, 1, 2, 3)]
    assert runs[0] == runs[1] and len(set(runs)) == 3
    assert all(abs(r / clean.decode_tok_s - 1) < 0.06 for r in runs)
    busy = measure_point(m, g, 2, shape, 16, noise=False, memory=PUBLISHED_MEMORY, workload=Workload(num_requests=32))
    assert busy.output_tok_s > 8 * clean.output_tok_s and busy.ttft_p95_s > clean.ttft_p95_s
    assert busy.itl_p95_s >= busy.itl_p50_s > clean.itl_p50_s


def test_every_trial_pays_load_and_capture_which_grows_with_cuda_graph_max_bs() -> None:
    m, g = load_model_profile(LLAMA8), load_gpu_profile(H100)
    shape = perf.SpecShape(3, 1, 4)
    small = capture_batch_sizes(g, {"cuda_graph_max_bs": 8}, shape, 48)
    large = capture_batch_sizes(g, {"cuda_graph_max_bs": 160}, shape, 256)
    assert small == (1, 2, 3, 4, 5, 6, 7, 8) and len(large) > 3 * len(small)
    assert max(large) == 152  # SGLang's list steps 40, 56, ..., 152 and extends by 16s from there: not to 160
    assert capture_batch_sizes(g, {"disable_cuda_graph": True}, shape, 48) == ()
    assert capture_batch_sizes(g, {}, None, 48)[-2:] == (47, 48)  # the request pool caps what is captured
    times = [measure_point(m, g, 1, shape, 1, noise=False, memory={"cuda_graph_max_bs": bs,
                                                                   "max_running_requests": 256}).startup_seconds
             for bs in (8, 64, 160)]
    assert times == sorted(times) and times[0] > perf.load_seconds(m, 1, True) > perf.LOAD_FIXED_SECONDS


def test_memory_limits_bite_at_start_up_and_under_load() -> None:
    m, g = load_model_profile(LLAMA8), load_gpu_profile(H100)
    tree = perf.SpecShape(8, 8, 64)
    # many draft tokens x many captured batch sizes: the CUDA-graph capture runs out of memory at start-up
    many = measure_point(m, g, 1, tree, 1, memory={"mem_fraction_static": 0.9, "cuda_graph_max_bs": 256,
                                                   "max_running_requests": 256})
    assert many.failure is not None and many.failure.startswith("Exception: Capture CUDA graph failed: CUDA out of "
                                                                "memory.")
    assert "2. set --cuda-graph-max-bs to a smaller value" in many.failure
    fewer = measure_point(m, g, 1, perf.SpecShape(3, 1, 4), 1, memory={"mem_fraction_static": 0.9,
                                                                       "cuda_graph_max_bs": 256,
                                                                       "max_running_requests": 256})
    assert fewer.failure is None
    # uncaptured batches (more running requests than --cuda-graph-max-bs) of many draft tokens: OOM under load
    memory = {"mem_fraction_static": 0.9, "cuda_graph_max_bs": 16, "max_running_requests": 256}
    args = {"tp_size": 1, **memory}
    plan = plan_memory(m, g, args, tree, {})
    graphs = plan_graphs(m, g, args, tree, plan)
    assert graphs.error is None and graphs.max_bs == 16
    assert graphs.eager_token_limit < 256 * 64
    crash = measure_point(m, g, 1, tree, 256, memory=memory, workload=Workload(num_requests=256))
    assert crash.failure is not None and crash.failure.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    light = measure_point(m, g, 1, tree, 8, memory=memory)
    assert light.failure is None and light.decode_tok_s > 0
