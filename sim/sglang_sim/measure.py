"""Measure one speculative point in process: start-up (memory plan, CUDA graphs), then a closed-loop load at a
concurrency, on the simulated scheduler and its virtual clock. Pure: no I/O, no wall clock; the same arguments
give the same figures (``seed`` draws the noise).

What a tuning trial sees through pods, without pods (``bench/tuning.py``, the tests): SGLang's sweep script
(``scripts/playground/bench_speculative.py``) sends fixed prompts at concurrency = batch size; here
``num_requests`` requests of ``prompt_tokens`` / ``max_new_tokens`` tokens, ``concurrency`` in flight (a new one
as soon as one finishes). Figures are client-side, as a streaming client would measure them: per-request decode
tok/s after the first token (median), output tok/s over the run, p50/p95 inter-chunk latency (one chunk per
verify step, as SGLang streams) and time to first token, and the accept length from the requests' counters.

Noise (``noise=True``): the engine's seeded per-step jitter (Gaussian, 3 %, clipped to ±20 %) and one draw per
trial of the server's speed (Gaussian, ``run_jitter`` = 1.5 %, clipped to ±3σ): a fresh server on the same GPU
model varies by about that much run to run. ``noise=False`` gives the noise-free figures of the perf model.

A point fails like SGLang would: out of memory at start-up (:func:`sglang_sim.memory.plan_memory`, the CUDA-graph
capture of :func:`sglang_sim.memory.plan_graphs`) or under load (an eager batch too big,
:class:`sglang_sim.engine.EngineCrash`); ``failure`` then carries SGLang's message.
"""

from __future__ import annotations

import io
import random
import statistics
from dataclasses import dataclass, field
from typing import Any

from sglang_sim import perf
from sglang_sim.engine import Engine, EngineConfig, EngineCrash, SimRequest
from sglang_sim.faults import Faults
from sglang_sim.logfmt import SimLogger
from sglang_sim.memory import StartupError, eager_oom_message, plan_graphs, plan_memory
from sglang_sim.profiles import GPUProfile, ModelProfile

ENGINE_JITTER = 0.03
RUN_JITTER = 0.015
MAX_STEPS = 2_000_000


@dataclass(frozen=True)
class Workload:
    """The load of one concurrency level: ``num_requests`` requests (``None``: max(8, 2 × concurrency)) of
    ``prompt_tokens`` prompt and ``max_new_tokens`` output tokens."""

    prompt_tokens: int = 256
    max_new_tokens: int = 512
    num_requests: int | None = None

    def requests(self, concurrency: int) -> int:
        return self.num_requests if self.num_requests is not None else max(8, 2 * concurrency)


@dataclass(frozen=True)
class PointFigures:
    """One concurrency level of one trial. Speeds in tok/s, latencies and durations in seconds (the GPU's, i.e.
    the simulator's virtual clock); ``failure`` is SGLang's message when the server died (figures then 0)."""

    concurrency: int
    decode_tok_s: float = 0.0
    output_tok_s: float = 0.0
    itl_p50_s: float = 0.0
    itl_p95_s: float = 0.0
    ttft_p50_s: float = 0.0
    ttft_p95_s: float = 0.0
    accept_length: float = 0.0
    startup_seconds: float = 0.0
    measure_seconds: float = 0.0
    max_running_requests: int = 0
    failure: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def server_args(tp: int, shape: perf.SpecShape | None, memory: dict[str, Any] | None = None) -> dict[str, Any]:
    """Resolved server args (``/server_info`` keys) for ``shape`` plus ``memory`` overrides (e.g.
    ``mem_fraction_static``, ``max_running_requests``, ``cuda_graph_max_bs``)."""
    args: dict[str, Any] = {"tp_size": tp}
    if shape is not None:
        args.update(speculative_algorithm="EAGLE", speculative_num_steps=shape.num_steps,
                    speculative_eagle_topk=shape.topk, speculative_num_draft_tokens=shape.num_draft_tokens)
    args.update(memory or {})
    return args


def measure_point(model: ModelProfile, gpu: GPUProfile, tp: int, shape: perf.SpecShape | None, concurrency: int,
                  *, seed: int = 0, noise: bool = True, workload: Workload | None = None,
                  memory: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> PointFigures:
    """Start a server for ``shape`` (``None``: no speculative decoding) and drive ``concurrency`` streams."""
    work = workload or Workload()
    args = server_args(tp, shape, memory)
    spec_on = shape is not None
    try:
        plan = plan_memory(model, gpu, args, shape, env or {})
    except StartupError as exc:
        return PointFigures(concurrency, startup_seconds=perf.load_seconds(model, tp, spec_on), failure=str(exc))
    graphs = plan_graphs(model, gpu, args, shape, plan)
    startup = perf.load_seconds(model, tp, spec_on) + perf.capture_seconds(model, len(graphs.capture_bs), spec_on)
    if graphs.error is not None:
        return PointFigures(concurrency, startup_seconds=startup, max_running_requests=plan.max_running_requests,
                            failure=graphs.error)
    rng = random.Random(seed)
    speed = min(max(rng.gauss(1.0, RUN_JITTER), 1 - 3 * RUN_JITTER), 1 + 3 * RUN_JITTER) if noise else 1.0
    engine = Engine(EngineConfig(
        model=model, gpu=gpu, tp_size=tp, shape=shape, max_running_requests=plan.max_running_requests,
        max_total_num_tokens=plan.max_total_num_tokens, decode_log_interval=1 << 30, seed=rng.randrange(1 << 31),
        jitter=ENGINE_JITTER if noise else 0.0, speed_factor=speed, graph_max_bs=graphs.max_bs,
        eager_token_limit=graphs.eager_token_limit), Faults(), SimLogger(io.StringIO()))
    total = work.requests(concurrency)
    sent: list[SimRequest] = []
    gaps: list[float] = []
    last_chunk: dict[str, tuple[float, int]] = {}

    def send() -> None:
        req = SimRequest(f"r{len(sent)}", work.prompt_tokens, work.max_new_tokens, True)
        req.arrival = engine.vnow
        sent.append(req)
        engine.submit(req)

    for _ in range(min(concurrency, total)):
        send()
    active = list(sent)
    steps = 0
    try:
        while active:
            engine.step()
            engine.publish()
            steps += 1
            if steps > MAX_STEPS:
                raise RuntimeError("measure_point: the engine made no progress")
            for r in active:
                seen = last_chunk.get(r.rid)
                if r.first_token_at is not None and (seen is None or seen[1] != r.generated):
                    if seen is not None:
                        gaps.append(engine.vnow - seen[0])
                    last_chunk[r.rid] = (engine.vnow, r.generated)
            if any(r.finished for r in active):
                active = [r for r in active if not r.finished]
                while len(sent) < total and len(active) < concurrency:
                    send()
                    active.append(sent[-1])
    except EngineCrash as exc:
        return PointFigures(concurrency, startup_seconds=startup, max_running_requests=plan.max_running_requests,
                            failure=eager_oom_message(gpu, model, exc.tokens, graphs))
    decode = [(r.generated - 1) / (r.finished_at - r.first_token_at) for r in sent
              if r.finished_at is not None and r.first_token_at is not None and r.finished_at > r.first_token_at]
    ttft = [r.first_token_at - r.arrival for r in sent if r.first_token_at is not None]
    start = min(r.arrival for r in sent)
    end = max(r.finished_at or 0.0 for r in sent)
    verify = sum(r.verify_ct for r in sent)
    accepted = sum(r.accepted_drafts for r in sent)
    return PointFigures(
        concurrency=concurrency, decode_tok_s=statistics.median(decode) if decode else 0.0,
        output_tok_s=sum(r.generated for r in sent) / (end - start) if end > start else 0.0,
        itl_p50_s=_quantile(gaps, 0.5), itl_p95_s=_quantile(gaps, 0.95), ttft_p50_s=_quantile(ttft, 0.5),
        ttft_p95_s=_quantile(ttft, 0.95), accept_length=(accepted + verify) / verify if verify else 1.0,
        startup_seconds=startup, measure_seconds=end - start, max_running_requests=plan.max_running_requests)
