"""Node ranks ≥ 1 of a multi-node ``sglang-sim`` (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``).

As SGLang (``python/sglang/srt/entrypoints/engine.py``: ``node_rank >= 1`` runs no tokenizer and no HTTP API):
the node starts its share of the TP/PP ranks (tp × pp ÷ nnodes), loads their weights (weights larger than the GPU:
PyTorch's out-of-memory error, exit 1, :func:`sglang_sim.memory.check_weights`), and once its schedulers
are ready starts the dummy health server (:func:`sglang_sim.server.build_dummy_app`) on
``--host``/``--port``, then runs until SIGTERM. Only rank 0 (:mod:`.launch`) serves the real API.

Joining the group: ``--dist-init-addr`` must parse as ``host:port`` (SGLang's ``NetworkAddress.parse``, else
``ValueError``), and ``--node-rank`` must be below ``--nnodes``. The simulator does **not** resolve or connect to
the host: on the local test cluster the leader's address is the DNS name LeaderWorkerSet gives
(``<lws>-<g>.<subdomain>.<namespace>``) and there is no cluster DNS; a rank only logs where it would connect.
So a worker becomes Ready on its own, and the leader does not wait for its workers (SGLang's rank 0 blocks in
``torch.distributed`` init until every rank joined).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from sglang_sim.cli import SimCommand
from sglang_sim.facts import Resolved
from sglang_sim.logfmt import SimLogger, rank_prefix
from sglang_sim.memory import StartupError, check_weights
from sglang_sim.profiles import load_gpu_profile, load_model_profile
from sglang_sim.server import build_dummy_app


class JoinError(ValueError):
    """The rank cannot join its group (bad ``--dist-init-addr``, rank out of range); SGLang's wording."""


def node_rank(args: Mapping[str, Any]) -> int:
    """``--node-rank`` of resolved server args (0 when unset)."""
    return int(args.get("node_rank") or 0)


def parse_dist_init_addr(addr: str | None) -> tuple[str, int]:
    """``host:port`` (IPv6 bracketed) → (host, port); raises :class:`JoinError` as ``NetworkAddress.parse``
    (``python/sglang/srt/utils/network.py``) does."""
    if not addr:
        raise JoinError("Empty address string")
    host, sep, port = addr.rpartition(":")
    if addr.startswith("["):
        if not host.endswith("]"):
            raise JoinError(f"Missing closing bracket in IPv6 address: {addr!r}")
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise JoinError(f"Cannot parse address {addr!r}: expected host:port")
    return host, int(port)


def node_tp_ranks(args: Mapping[str, Any]) -> range:
    """The TP ranks this node runs: tp × pp ÷ nnodes consecutive ranks (``engine.py:_calculate_rank_ranges``,
    pipeline parallelism 1; with pp > 1 the node's PP stage takes the same share of TP ranks)."""
    tp, pp, nnodes = (int(args.get(k) or 1) for k in ("tp_size", "pp_size", "nnodes"))
    per_node = max(tp * pp // nnodes, 1)
    first = (node_rank(args) * per_node) % tp
    return range(first, first + min(per_node, tp))


async def follow(cmd: SimCommand, resolved: Resolved, env: Mapping[str, str], log: SimLogger) -> int:
    """Run node rank ≥ 1 until SIGTERM/SIGINT (returns 0), or fail to join (returns 1, SGLang's message on
    stderr)."""
    args = resolved.server_args
    rank, nnodes = node_rank(args), int(args.get("nnodes") or 1)
    tp = int(args.get("tp_size") or 1)
    try:
        if rank >= nnodes:
            raise JoinError(f"node_rank {rank} must be smaller than nnodes {nnodes}")
        host, port = parse_dist_init_addr(args.get("dist_init_addr"))
    except JoinError as exc:
        log.log(f"ValueError: {exc}")
        print(f"ValueError: {exc}", file=sys.stderr)
        return 1
    log.log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")")
    ranks = node_tp_ranks(args)
    for r in ranks:
        log.log(f"Init torch distributed begin. (node rank {rank}/{nnodes}, rendezvous tcp://{host}:{port}; "
                "sglang-sim does not resolve or connect to it)", rank_prefix(tp, tp_rank=r))
    model = load_model_profile(str(args.get("model_path") or ""))
    gpu = load_gpu_profile(cmd.options.get("gpu"))
    for r in ranks:
        log.log(f"Load weight begin. avail mem={gpu.avail_gib:.2f} GB", rank_prefix(tp, tp_rank=r))
    try:
        check_weights(model, gpu, tp, bool(args.get("speculative_algorithm")))
    except StartupError as exc:
        log.log(f"Scheduler hit an exception: Traceback (most recent call last):\n{exc}",
                rank_prefix(tp, tp_rank=ranks[0]))
        print(str(exc), file=sys.stderr)
        return 1
    t0 = time.monotonic()
    await asyncio.sleep(float(cmd.options["load_seconds"]))
    share = model.weights_gib / tp
    for r in ranks:
        log.log(f"Load weight end. elapsed={time.monotonic() - t0:.2f} s, type={model.architecture}, "
                f"avail mem={gpu.avail_gib - share:.2f} GB, mem usage={share:.2f} GB.", rank_prefix(tp, tp_rank=r))
    bind = env.get("SGLANG_SIM_HOST") or str(args.get("host") or "127.0.0.1")
    http_port = int(args.get("port") or 30000)
    runner = web.AppRunner(build_dummy_app(bool(args.get("enable_metrics"))), access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, bind, http_port, reuse_address=True).start()
    log.log(f"Dummy health check server started in background thread at {bind}:{http_port}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.log(f"SIGTERM received on node_rank {rank}; shutting down")
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(runner.cleanup(), timeout=2.0)
    return 0
