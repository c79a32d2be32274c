"""The simulator's HTTP surface (aiohttp), per ``python/sglang/srt/entrypoints/http_server.py``.

Routes: ``/health``, ``/health_generate``, ``/ready`` (0.5.20+ only), ``/ping``, ``/server_info`` and the
deprecated ``/get_server_info`` (logs SGLang's deprecation warning), ``/model_info`` / ``/get_model_info``,
``/v1/models``, ``/generate``, ``/v1/completions``, ``/v1/chat/completions``, ``/metrics`` (only with
``--enable-metrics``), ``/flush_cache``, and the simulator's ``/sim/admin/faults`` (GET/POST).
Node ranks ≥ 1 of a multi-node server serve :func:`build_dummy_app` instead, as SGLang does.
While ``Starting`` (warm-up) the health endpoints answer 503. ``--api-key`` is enforced on everything but
``/health*``, ``/metrics*`` and (0.5.20+) ``/ready*`` (``python/sglang/srt/utils/auth.py``: 401
``{"error": "Unauthorized"}``).
"""

from __future__ import annotations

import asyncio
import hmac
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from sglang_sim import hostile, metrics, openai_api
from sglang_sim.state import SIM_KEY, SimState

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
UNAUTHENTICATED_PREFIXES = ("/health", "/metrics")


@web.middleware
async def faults_and_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Injected HTTP 500s (not on ``/sim/admin``), then SGLang's API-key check."""
    sim = request.app[SIM_KEY]
    path = request.path
    if path.startswith("/sim/admin"):
        return await handler(request)
    rate = sim.faults.http_500_rate
    if rate > 0 and sim.engine.rng.random() < rate:
        return openai_api.openai_error("Internal server error (injected by sglang-sim)", 500, "InternalServerError")
    key = sim.api_key
    open_prefixes = UNAUTHENTICATED_PREFIXES + (("/ready",) if sim.facts.has_ready else ())
    if key and request.method != "OPTIONS" and not path.startswith(open_prefixes):
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), key.encode()):
            return web.json_response({"error": "Unauthorized"}, status=401)
    return await handler(request)


def _healthy(sim: SimState) -> bool:
    return sim.status == "Up" and sim.faults.ready_now()


async def health(request: web.Request) -> web.Response:
    """``/health``, ``/health_generate``, ``/ready``, ``/ping``: 200 when up (and not flapping), else 503."""
    return web.Response(status=200 if _healthy(request.app[SIM_KEY]) else 503)


def _internal_state(sim: SimState) -> dict[str, Any]:
    st: dict[str, Any] = dict(sim.args)
    st.update(world_size=int(sim.args.get("tp_size") or 1),
              effective_max_running_requests_per_dp=sim.plan.max_running_requests,
              last_gen_throughput=sim.engine.stats.last_gen_throughput,
              memory_usage={"weight": round(sim.plan.weight_gib, 2), "kv_cache": round(sim.plan.kv_cache_gib, 2),
                            "graph": 0.5, "token_capacity": sim.plan.max_total_num_tokens})
    avg = sim.engine.stats.avg_spec_accept_length()
    if avg is not None:
        st["avg_spec_accept_length"] = avg
    if sim.engine.cfg.record_step_time:  # get_internal_state: only with SGLANG_RECORD_STEP_TIME
        st["step_time_dict"] = {str(bs): list(times) for bs, times in sim.engine.stats.step_time_dict.items()}
    return st


def server_info_body(sim: SimState) -> dict[str, Any]:
    """``/server_info``: resolved args + scheduler info + ``internal_states`` + ``version``."""
    body: dict[str, Any] = dict(sim.args)
    body.update(status="ready" if sim.status == "Up" else "starting",
                max_total_num_tokens=sim.plan.max_total_num_tokens,
                max_req_input_len=min(sim.plan.context_len, sim.plan.max_total_num_tokens) - 6,
                internal_states=[_internal_state(sim)], version=str(sim.facts.version))
    if sim.facts.server_info_extras:
        body.update(launch_command=sim.launch_command, startup_time=sim.startup_seconds, frontend="python",
                    kv_events=None)
    if sim.faults.server_info_string_mb is not None:  # hostile: a string the operator must cut before status
        body["speculative_algorithm"] = "NEXTN" + "x" * max(int(sim.faults.server_info_string_mb * hostile.MIB) - 5, 0)
    return body


async def server_info(request: web.Request) -> web.Response:
    sim = request.app[SIM_KEY]
    if request.path == "/get_server_info" and "/server_info" in sim.facts.routes:
        sim.logger.log("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                       "Please use '/server_info' instead.")
    return web.json_response(server_info_body(sim))


async def model_info(request: web.Request) -> web.Response:
    sim = request.app[SIM_KEY]
    if request.path == "/get_model_info" and "/model_info" in sim.facts.routes:
        sim.logger.log("Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                       "Please use '/model_info' instead.")
    arch = sim.resolved.architecture or sim.model.architecture
    return web.json_response({
        "model_path": sim.args.get("model_path"), "tokenizer_path": sim.args.get("tokenizer_path")
        or sim.args.get("model_path"), "served_model_name": sim.served_model_name, "is_generation": True,
        "preferred_sampling_params": None, "weight_version": "default", "has_image_understanding": False,
        "has_audio_understanding": False, "model_type": sim.model.model_type, "architectures": [arch]})


async def metrics_endpoint(request: web.Request) -> web.StreamResponse:
    """``/metrics`` with the fault modes of :class:`~sglang_sim.faults.Faults`."""
    sim = request.app[SIM_KEY]
    mode = sim.faults.metrics_mode
    if mode == "hang":
        await asyncio.sleep(3600)
    if mode == "slow":
        await asyncio.sleep(sim.faults.metrics_delay_s)
    ctype = "text/plain; version=0.0.4; charset=utf-8"
    if mode == "garbage":
        return web.Response(body=b"<html>\x00\xff garbage {{{ not prometheus\nsglang:oops{= 1 2 3\n",
                            headers={"Content-Type": ctype})
    text = metrics.render(sim.engine.stats, sim.metrics_ctx)
    if mode == "long_label":
        return await hostile.write_blocks(request, hostile.long_label(text, sim.faults.metrics_label_mb), ctype)
    if mode == "many_series":
        return await hostile.write_blocks(request, hostile.many_series(text, sim.faults.metrics_series), ctype)
    if mode == "huge":
        target = int(sim.faults.metrics_huge_mb * 1024 * 1024)
        filler = []
        size, i = 0, 0
        filler.append("# TYPE sglang_sim_filler gauge\n")
        while size < target:
            line = f'sglang_sim_filler{{series="{i:09d}"}} {i}.0\n'
            filler.append(line)
            size += len(line)
            i += 1
        text += "".join(filler)
    return web.Response(text=text, headers={"Content-Type": ctype})


async def flush_cache(request: web.Request) -> web.Response:
    """``/flush_cache``: 400 while requests run or wait (``tokenizer_manager.flush_cache``)."""
    eng = request.app[SIM_KEY].engine
    if eng.running or eng.waiting:
        return web.Response(status=400, text="Flush cache failed.\n")
    return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there are running "
                             "or waiting requests, the operation will not be performed.)\n")


async def admin_faults(request: web.Request) -> web.Response:
    """``GET``/``POST /sim/admin/faults``: read or partially update the active faults (JSON)."""
    sim = request.app[SIM_KEY]
    if request.method == "POST":
        try:
            changes = await request.json()
            if not isinstance(changes, dict):
                raise ValueError("body must be a JSON object")
            sim.faults.update(changes)
        except (ValueError, KeyError, ValidationError) as exc:
            return web.json_response({"error": f"{type(exc).__name__}: {exc}"}, status=400)
        sim.logger.log(f"sglang-sim: faults set: {changes}")
    return web.json_response(sim.faults.public())


def build_app(sim: SimState) -> web.Application:
    """The aiohttp application for ``sim`` with the routes of the emulated version."""
    app = web.Application(middlewares=[faults_and_auth], client_max_size=64 * 1024 * 1024)
    app[SIM_KEY] = sim
    r = app.router
    for path in ("/health", "/health_generate", "/ping") + (("/ready",) if sim.facts.has_ready else ()):
        r.add_get(path, health)
    for path in ("/server_info", "/get_server_info", "/model_info", "/get_model_info"):
        if path in sim.facts.routes:  # /server_info and /model_info from 0.5.6; the get_ forms deprecated then
            r.add_get(path, server_info if "server" in path else model_info)
    r.add_get("/v1/models", openai_api.models)
    for method in ("POST", "PUT"):
        r.add_route(method, "/generate", openai_api.generate)
    r.add_post("/v1/completions", openai_api.completions)
    r.add_post("/v1/chat/completions", openai_api.chat_completions)
    r.add_route("GET", "/flush_cache", flush_cache)
    r.add_route("POST", "/flush_cache", flush_cache)
    if sim.args.get("enable_metrics"):
        r.add_get("/metrics", metrics_endpoint)
    r.add_get("/sim/admin/faults", admin_faults)
    r.add_post("/sim/admin/faults", admin_faults)
    return app


def crash_watch(sim: SimState) -> Callable[[], Coroutine[Any, Any, None]]:
    """A coroutine factory that exits the process (code 1) once ``faults.crash_at_wall`` has passed."""

    async def watch() -> None:
        while True:
            at = sim.faults.crash_at_wall
            if at is not None and time.monotonic() >= at:
                sim.logger.log("Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was "
                               "encountered (injected by sglang-sim)", sim.engine.cfg.log_prefix)
                os._exit(1)
            await asyncio.sleep(0.05)
    return watch



# --- node ranks >= 1 --------------------------------------------------------------------------------------


async def dummy_ok(request: web.Request) -> web.Response:
    """``/health``, ``/health_generate``, ``/ping`` of a non-zero node rank: always 200."""
    return web.Response(status=200)


async def dummy_metrics(request: web.Request) -> web.Response:
    """``/metrics`` of a non-zero node rank: no SGLang series (its schedulers' collectors run on the leader's
    TP rank 0; what is left is process-level, which the simulator does not emulate)."""
    return web.Response(text="", headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def build_dummy_app(enable_metrics: bool) -> web.Application:
    """The health server of node ranks >= 1 (``python/sglang/srt/utils/common.py:launch_dummy_health_check_server``,
    started by ``entrypoints/engine.py`` once the node's schedulers are ready): 200 on ``/ping``, ``/health`` and
    ``/health_generate`` whatever the leader does, ``/metrics`` when enabled; nothing else (404), no ``/ready``."""
    app = web.Application()
    for path in ("/ping", "/health", "/health_generate"):
        app.router.add_get(path, dummy_ok)
    if enable_metrics:
        app.router.add_get("/metrics", dummy_metrics)
    return app
