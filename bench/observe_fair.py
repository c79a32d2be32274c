"""Benchmark: fair observation: whether healthy SGLangServers keep being sampled every interval while ``--hostile``
servers' pods never answer (they accept the TCP connection and never reply), without a cluster.

The operator's real :class:`~sglang_operator.control.observer.Observer` runs its loop (``--interval`` seconds,
5 s by default, the operator's own default) over ``--healthy`` servers of one pod each and ``--hostile`` servers of
``--hostile-pods`` pods each, against an in-memory API (as ``bench/observe.py``: status patches answered like the
API server's, the pods listed from memory, every other call a no-op). Each server is the known-good sample with
``spec.rollback`` ``signal: traffic`` and ``intervalSeconds`` = ``--interval``; its pods are Ready at their own
loopback address (``127.0.1.x`` healthy, ``127.0.2.x`` hostile) on a port served by a child process: a small
aiohttp app answering ``/metrics`` and ``/server_info`` for the healthy ones, a TCP listener that accepts and
never answers for the hostile ones.

After ``--settle`` seconds it counts, for ``--seconds``, each healthy server's samples (completed calls of the
sampler): the figure is the share of its intervals in which it was sampled (samples ÷ intervals, capped at 1),
the fewest of any healthy server and the longest gap between two samples of one; and how often each hostile
server was sampled (its back-off).

    python bench/observe.py --fairness                      # 32 hostile, 16 healthy, 90 s
    python bench/observe_fair.py --seconds 30               # a quick check
    PYTHONPATH=/tmp/old/operator python bench/observe_fair.py   # the same harness on an older tree

Prints the figures; exit status 0 either way (a benchmark, not a test). Measured on a 2-core machine shared with
other work: at eefd729 (eight shared slots held through 5 s reads) the fewest samples of a healthy server were 2
of 18 intervals (11 %, longest gap 40 s); with the reads' slot given back, 2 s deadlines and the back-off, 18 of 18
(longest gap 5.1 s), each silent server read 3 times in 90 s.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import importlib
import logging
import socket
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import StatusStore, add_numeric_options, parse_args_or_serve, serving_child  # noqa: E402

NS = "bench"
METRICS = (
    "# HELP sglang:num_running_reqs The number of running requests.\n"
    "# TYPE sglang:num_running_reqs gauge\n"
    'sglang:num_running_reqs{model_name="m"} 0.0\n'
    "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
    "# TYPE sglang:generation_tokens_total counter\n"
    'sglang:generation_tokens_total{model_name="m"} 0.0\n'
)


def serve(ok_port: int, bad_port: int) -> None:
    """The child process: the healthy pods' endpoints on ``ok_port`` and a silent listener on ``bad_port`` (every
    loopback address)."""
    from aiohttp import web

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=METRICS, content_type="text/plain")

    async def server_info(_: web.Request) -> web.Response:
        return web.json_response({"version": "0.5.10", "speculative_algorithm": "NEXTN"})

    held: list[asyncio.StreamWriter] = []

    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepted, never answered, never closed

    async def main() -> None:
        app = web.Application()
        app.add_routes([web.get("/metrics", metrics), web.get("/server_info", server_info),
                        web.get("/get_server_info", server_info)])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", ok_port).start()
        await asyncio.start_server(silent, "0.0.0.0", bad_port, backlog=4096)
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pod(server: str, revision: str, index: int, ip: str) -> dict[str, Any]:
    return {"metadata": {"name": f"{server}-{index}", "namespace": NS, "uid": f"{server}-{index}",
                         "resourceVersion": "1",
                         "labels": {"app.kubernetes.io/name": "sglang",
                                    "app.kubernetes.io/managed-by": "sglang-operator",
                                    "app.kubernetes.io/instance": server, "sglang-operator.io/revision": revision}},
            "spec": {"containers": [{"name": "sglang"}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "sglang", "ready": True, "restartCount": 0}]}}


async def run(args: argparse.Namespace, ok_port: int, bad_port: int) -> None:
    logging.disable(logging.WARNING)
    observer_mod = importlib.import_module("sglang_operator.control.observer")
    kube = importlib.import_module("sglang_operator.io.kube")
    revisions = importlib.import_module("sglang_operator.io.revisions")
    writer: Any = importlib.import_module("sglang_operator.io.kube_write")
    from sglang_operator import builders
    from sglang_operator.api.server import parse

    store = StatusStore()
    objects = store.objects
    pods: list[dict[str, Any]] = []

    async def patch_status(ns: str, name: str, resource_version: str | None, patch: Any) -> dict[str, Any] | None:
        fresh = await store.patch_status(ns, name, resource_version, patch)
        if fresh is not None:
            obs.track("MODIFIED", copy.deepcopy(fresh))
        return fresh

    async def nothing(*_: Any, **__: Any) -> Any:
        return None

    async def no_revisions(*_: Any, **__: Any) -> list[Any]:
        return []

    async def list_pods(namespace: str, *_: Any, **__: Any) -> list[dict[str, Any]]:
        return [copy.deepcopy(p) for p in pods if p["metadata"]["namespace"] == namespace]

    async def get_server(ns: str, name: str) -> dict[str, Any] | None:
        obj = objects.get((ns, name))
        return copy.deepcopy(obj) if obj is not None else None

    writer.patch_status, writer.post_event = patch_status, nothing
    kube.list_pods, kube.secret_value, kube.get_sglangserver = list_pods, nothing, get_server
    revisions.list_revisions = no_revisions
    base: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    base["spec"]["rollback"] = {"signal": "traffic", "intervalSeconds": int(args.interval),
                                 "probe": {"timeoutSeconds": max(1, int(args.interval) - 1)}}
    obs = observer_mod.Observer(float(args.interval))
    healthy = [f"healthy-{i:02d}" for i in range(args.healthy)]
    hostile = [f"hostile-{i:02d}" for i in range(args.hostile)]
    for i, name in enumerate(healthy + hostile):
        bad = name.startswith("hostile")
        body = copy.deepcopy(base)
        body["spec"]["replicas"] = args.hostile_pods if bad else 1
        body["spec"]["port"] = bad_port if bad else ok_port
        body["metadata"] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1,
                            "resourceVersion": "1"}
        revision = builders.render(parse(body)).revision
        body["status"] = {"revision": revision, "sglangVersion": "0.5.10", "phase": "Progressing",
                          "revisions": [{"revision": revision, "spec": copy.deepcopy(body["spec"])}]}
        objects[(NS, name)] = body
        for j in range(body["spec"]["replicas"]):
            pods.append(pod(name, revision, j, f"127.0.{2 if bad else 1}.{i * 4 + j + 1}"))
        obs.track("ADDED", copy.deepcopy(body))

    sampled: dict[str, list[float]] = {n: [] for n in healthy + hostile}
    sampler = obs.sampler
    real = sampler.sample

    async def counting(server: Any, *a: Any, **kw: Any) -> Any:
        out = await real(server, *a, **kw)
        if server.name in sampled:
            sampled[server.name].append(time.monotonic())
        return out

    sampler.sample = counting
    lag = [0.0]

    async def lag_timer() -> None:
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(0.05)
            lag[0] = max(lag[0], loop.time() - t - 0.05)

    timer = asyncio.get_running_loop().create_task(lag_timer())
    obs.start()
    await asyncio.sleep(args.settle)
    for times in sampled.values():
        times.clear()
    lag[0] = 0.0
    t0 = time.monotonic()
    await asyncio.sleep(args.seconds)
    t1 = time.monotonic()
    timer.cancel()
    await obs.stop()
    intervals = args.seconds / args.interval
    bad = sum(len([t for t in sampled.pop(n) if t0 <= t <= t1]) for n in hostile)
    shares = {n: min(1.0, len([t for t in ts if t0 <= t <= t1]) / intervals) for n, ts in sampled.items()}
    gaps = {n: max([b - a for a, b in zip([t0, *ts], [*ts, t1], strict=True)]) for n, ts in sampled.items()}
    worst = min(shares, key=lambda n: shares[n])
    print(f"{observer_mod.__file__}: {args.healthy} healthy + {args.hostile} hostile servers "
          f"({args.hostile_pods} silent pods each), interval {args.interval:g} s, {args.seconds:g} s measured: "
          f"healthy sampled in {100 * min(shares.values()):.0f} % of their intervals at least "
          f"({worst}: {len(sampled[worst])} samples of {intervals:.0f} intervals), "
          f"{100 * sum(shares.values()) / len(shares):.0f} % on average; longest gap {max(gaps.values()):.1f} s; "
          f"hostile servers sampled {bad / max(1, len(hostile)):.1f} times each; "
          f"max event-loop lag {1000 * lag[0]:.0f} ms; "
          f"{'PASS' if min(shares.values()) >= 0.9 else 'FAIL'} (goal: every healthy server >= 90 %)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_numeric_options(parser, {"--healthy": 16, "--hostile": 32, "--hostile-pods": 2, "--interval": 5.0,
                                 "--seconds": 90.0, "--settle": 15.0})
    args = parse_args_or_serve(parser, serve, (int, int))
    if args is None:
        return
    ok_port, bad_port = free_port(), free_port()
    with serving_child(__file__, "--serve", str(ok_port), str(bad_port), what="the target process"):
        asyncio.run(run(args, ok_port, bad_port))


if __name__ == "__main__":
    main()
