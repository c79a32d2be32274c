"""Start-up of ``sglang-sim``: the same phases and log lines as SGLang's ``launch_server``.

Order (``python/sglang/srt/entrypoints/http_server.py:launch_server``, ``engine.py``, ``model_runner.py``,
``model_runner_kv_cache_mixin.py``, ``scheduler.py``): ``server_args=ServerArgs(...)``; per TP rank ``Load weight
begin`` (weights larger than the GPU: PyTorch's out-of-memory error at once, exit 1) … (``--sim-load-seconds``) …
``Load weight end. elapsed=… s, type=<Arch>, avail mem=… GB, mem usage=… GB.``
(then the draft model, ``type=<Arch>MTP`` for NEXTN); memory pools (or SGLang's out-of-memory error and exit 1);
``max_total_num_tokens=…`` line; only then does the HTTP port open (so probes get "connection refused" while
weights load, as with SGLang); warm-up (health endpoints 503); ``The server is fired up and ready to roll!``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from sglang_sim import perf
from sglang_sim.adaptive import AdaptiveTiers, adaptive_tiers
from sglang_sim.cli import SimCommand
from sglang_sim.engine import Engine, EngineConfig, EngineCrash, SimRequest
from sglang_sim.facts import Resolved, VersionFacts
from sglang_sim.faults import Faults, faults_from
from sglang_sim.logfmt import SimLogger, rank_prefix
from sglang_sim.memory import (
    GraphPlan,
    MemoryPlan,
    StartupError,
    check_weights,
    eager_oom_message,
    plan_graphs,
    plan_memory,
)
from sglang_sim.metrics import MetricsContext
from sglang_sim.profiles import GPUProfile, ModelProfile, load_gpu_profile, load_model_profile
from sglang_sim.server import build_app, crash_watch
from sglang_sim.state import SimState


def spec_shape(args: Mapping[str, Any]) -> perf.SpecShape | None:
    """The resolved speculative shape, or ``None`` when ``speculative_algorithm`` is unset."""
    if not args.get("speculative_algorithm"):
        return None
    steps = int(args.get("speculative_num_steps") or 3)
    topk = int(args.get("speculative_eagle_topk") or 1)
    ndt = int(args.get("speculative_num_draft_tokens") or steps + 1)
    return perf.SpecShape(steps, topk, ndt)


def _server_args_line(args: Mapping[str, Any]) -> str:
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


def _log_loading(log: SimLogger, model: ModelProfile, gpu: GPUProfile, plan: MemoryPlan, tp: int,
                 arch: str, draft_arch: str, shape: perf.SpecShape | None, load_s: float) -> None:
    target_gib = model.weights_gib / tp
    for rank in range(tp):
        p = rank_prefix(tp, tp_rank=rank)
        log.log(f"Load weight end. elapsed={load_s:.2f} s, type={arch}, avail mem={gpu.avail_gib - target_gib:.2f} GB, "
                f"mem usage={target_gib:.2f} GB.", p)
    if shape is not None:
        draft_gib = model.draft_weights_gib / tp
        for rank in range(tp):
            p = rank_prefix(tp, tp_rank=rank)
            log.log(f"Load weight begin. avail mem={gpu.avail_gib - target_gib:.2f} GB", p)
            log.log(f"Load weight end. elapsed=0.35 s, type={draft_arch}, "
                    f"avail mem={gpu.avail_gib - target_gib - draft_gib:.2f} GB, mem usage={draft_gib:.2f} GB.", p)
    half = plan.kv_cache_gib / 2
    p0 = rank_prefix(tp)
    log.log(f"KV Cache is allocated. #tokens: {plan.max_total_num_tokens}, K size: {half:.2f} GB, "
            f"V size: {half:.2f} GB", p0)
    log.log(f"Memory pool end. avail mem={plan.avail_after_gib:.2f} GB", p0)


@dataclass(frozen=True)
class Built:
    """The pieces :func:`build` makes from a resolved command line."""

    model: ModelProfile
    gpu: GPUProfile
    shape: perf.SpecShape | None
    plan: MemoryPlan
    graphs: GraphPlan
    engine: Engine
    metrics_ctx: MetricsContext


def build(facts: VersionFacts, resolved: Resolved, options: Mapping[str, Any], env: Mapping[str, str],
          log: SimLogger, faults: Faults | None = None) -> Built:
    """Profiles, memory plan, engine and metrics context for a resolved command line (no I/O besides
    reading the profiles). ``options`` are the ``--sim-*`` options (``gpu``, ``seed``, ``time_scale``,
    ``jitter``, ``load_seconds``). Raises :class:`StartupError` when SGLang would die at start-up."""
    args = resolved.server_args
    tp = int(args.get("tp_size") or 1)
    model = load_model_profile(str(args.get("model_path") or ""))
    gpu = load_gpu_profile(options.get("gpu"))
    shape = spec_shape(args)
    plan = plan_memory(model, gpu, args, shape, dict(env))
    graphs = plan_graphs(model, gpu, args, shape, plan)
    chunked = int(args.get("chunked_prefill_size") or 8192)
    engine = Engine(EngineConfig(
        model=model, gpu=gpu, tp_size=tp, shape=shape, max_running_requests=plan.max_running_requests,
        max_total_num_tokens=plan.max_total_num_tokens, decode_log_interval=int(args.get("decode_log_interval") or 40),
        accept_rate_formula=facts.accept_rate_formula, log_prefix=rank_prefix(tp),
        seed=int(options.get("seed", 0)), time_scale=float(options.get("time_scale", 1.0)),
        jitter=float(options.get("jitter", 0.03)), chunked_prefill_size=max(chunked, 1),
        graph_max_bs=graphs.max_bs, eager_token_limit=graphs.eager_token_limit,
        adaptive=_adaptive(args, facts) if shape is not None else None,
        record_step_time=env.get("SGLANG_RECORD_STEP_TIME", "").lower() in ("1", "true")),
        faults or Faults(), log)
    served = str(args.get("served_model_name") or args.get("model_path"))
    load_s = float(options.get("load_seconds", 0.0))
    ctx = MetricsContext(facts.table, served, model.hybrid_mamba, shape.num_steps if shape else 0,
                         shape.num_draft_tokens if shape else 0, plan.max_total_num_tokens, plan.context_len,
                         load_s, load_s + 1.0)
    return Built(model, gpu, shape, plan, graphs, engine, ctx)


def _capture(log: SimLogger, b: Built, tp: int) -> str | None:
    """The CUDA-graph capture log lines (``cuda_graph_runner.py``); SGLang's error when capture fails."""
    g = b.graphs
    if not g.capture_bs:
        return None
    p0 = rank_prefix(tp)
    log.log(f"Capture cuda graph begin. This can take up to several minutes. avail mem={b.plan.avail_after_gib:.2f} GB",
            p0)
    log.log(f"Capture cuda graph bs {list(g.capture_bs)}", p0)
    return g.error


def _scheduler_died(log: SimLogger, tp: int, message: str) -> None:
    log.log(f"Scheduler hit an exception: Traceback (most recent call last):\n{message}", rank_prefix(tp))
    print(message, file=sys.stderr)


async def _run_engine(sim: SimState, tp: int, graphs: GraphPlan) -> None:
    """Step the engine; an out-of-memory batch kills the process like SGLang's scheduler does (exit 1)."""
    try:
        await sim.engine.run()
    except EngineCrash as exc:
        _scheduler_died(sim.logger, tp, eager_oom_message(sim.engine.cfg.gpu, sim.model, exc.tokens, graphs))
        os._exit(1)


def _adaptive(args: Mapping[str, Any], facts: VersionFacts) -> AdaptiveTiers | None:
    """SGLang's adaptive controller for ``args`` (None when off); an unreadable ``--speculative-adaptive-config``
    ends the start-up as SGLang's would (``open()`` / ``json.load`` in ``adaptive_spec_params.py``)."""
    try:
        return adaptive_tiers(args, str(facts.version))
    except (OSError, ValueError) as err:
        raise StartupError(f"{type(err).__name__}: {err}") from None


async def launch(cmd: SimCommand, facts: VersionFacts, resolved: Resolved, env: Mapping[str, str],
                 log: SimLogger) -> int:
    """Run the simulated server until SIGTERM/SIGINT (returns 0) or a start-up failure (returns 1)."""
    args = resolved.server_args
    opts = cmd.options
    tp = int(args.get("tp_size") or 1)
    gpu = load_gpu_profile(opts.get("gpu"))
    for w in resolved.warnings:
        log.log(w)
    log.log(_server_args_line(args))
    for rank in range(tp):
        log.log(f"Load weight begin. avail mem={gpu.avail_gib:.2f} GB", rank_prefix(tp, tp_rank=rank))
    try:  # the parameters are allocated as the model is built, before any weight is read
        check_weights(load_model_profile(str(args.get("model_path") or "")), gpu, tp, spec_shape(args) is not None)
    except StartupError as exc:
        _scheduler_died(log, tp, str(exc))
        return 1
    t0 = time.monotonic()
    await asyncio.sleep(float(opts["load_seconds"]))
    faults = faults_from(cmd.faults, dict(env))
    try:
        b = build(facts, resolved, opts, env, log, faults)
    except StartupError as exc:
        _scheduler_died(log, tp, str(exc))
        return 1
    plan, engine = b.plan, b.engine
    arch = resolved.architecture or b.model.architecture
    _log_loading(log, b.model, gpu, plan, tp, arch, resolved.draft_architecture or b.model.draft_architecture,
                 b.shape, float(opts["load_seconds"]))
    failed = _capture(log, b, tp)
    if failed is not None:
        _scheduler_died(log, tp, failed)
        return 1
    if b.graphs.capture_bs:
        runners = perf.GRAPH_RUNNERS_SPEC if b.shape else 1
        took = len(b.graphs.capture_bs) * runners * float(opts.get("graph_seconds", 0.0))
        await asyncio.sleep(took)
        log.log(f"Capture cuda graph end. Time elapsed: {took:.2f} s. mem usage={b.graphs.graph_gib:.2f} GB. "
                f"avail mem={max(plan.avail_after_gib - b.graphs.graph_gib, 0.0):.2f} GB.", rank_prefix(tp))
    log.log(f"max_total_num_tokens={plan.max_total_num_tokens}, "
            f"chunked_prefill_size={engine.cfg.chunked_prefill_size}, "
            f"max_prefill_tokens={int(args.get('max_prefill_tokens') or 16384)}, "
            f"max_running_requests={plan.max_running_requests}, context_len={plan.context_len}, "
            f"available_gpu_mem={plan.avail_after_gib:.2f} GB", rank_prefix(tp))
    startup = time.monotonic() - t0
    ctx = dataclasses.replace(b.metrics_ctx, startup_seconds=startup)
    sim = SimState(facts, resolved, b.model, plan, engine, faults, log, ctx,
                   " ".join((*cmd.entry, *cmd.argv)), startup_seconds=startup)
    tasks = [asyncio.create_task(_run_engine(sim, tp, b.graphs)), asyncio.create_task(crash_watch(sim)())]
    runner = web.AppRunner(build_app(sim), access_log=None, handle_signals=False)
    await runner.setup()
    host = env.get("SGLANG_SIM_HOST") or str(args.get("host") or "127.0.0.1")
    port = int(args.get("port") or 30000)
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    log.log(f"Started server process [{os.getpid()}]")
    log.log("Waiting for application startup.")
    log.log("Application startup complete.")
    log.log(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    warm = SimRequest("warmup", 4, 8, False)
    engine.submit(warm)
    await asyncio.sleep(float(opts["warmup_seconds"]))
    while not warm.finished:
        await asyncio.sleep(0.01)
    sim.status = "Up"
    log.log("The server is fired up and ready to roll!")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.log("sglang-sim: shutting down")
    for t in tasks:
        t.cancel()
    with contextlib.suppress(TimeoutError):  # a hanging /metrics handler (fault) must not delay exit
        await asyncio.wait_for(runner.cleanup(), timeout=2.0)
    return 0
