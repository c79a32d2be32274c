"""Benchmark (offline, no cluster): what parsing hostile ``/metrics`` bodies costs the event loop the operator shares.

Issue 42's ``parse-cost`` mode. One hostile SGLangServer of ``--pods`` pods (default 8) whose ``/metrics`` is within
every default scrape limit of the operator being measured (as many samples the sampler reads as
``--scrape-sample-limit`` allows, at most 256 series of one role, label values of ``--label-chars`` characters, new
ones every scrape so no cache helps, the body under ``--scrape-body-limit``), beside ``--healthy`` healthy servers of
one pod (a real SGLang 0.5.23-sized body, ``bench/scrape.py``), every server sampled every ``--interval`` seconds
(default 1) for ``--seconds`` (default 60) after ``--warmup`` seconds (default 5; the parse workers start then) by
the real :class:`sglang_operator.io.sampler.Sampler` on one asyncio loop,
as the observer does (each server at its own point of the interval, an observation outlasting its tick skips it).
The bodies are served by a child process (its CPU and buffers are not counted). Prints:

- the loop's lag (a 50 ms sleep's overshoot, every 50 ms): p50, p99, max, ms; and the share of the run the loop's
  thread was on the CPU;
- the healthy servers' longest gap between the starts of two samples, in intervals, their fewest samples and their
  slowest sample (seconds);
- the hostile server's samples, by kind and reason, and its CPU back-off when the sampler has one;
- the bench process's RSS and peak (MiB), and its parse workers' RSS when it has any.

    python bench/hostile.py --modes parse-cost --seconds 60
    python bench/hostile_parse.py --seconds 30 --scrape-sample-limit 10000

Exit status 0 either way (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import multiprocessing
import statistics
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HOSTILE_SERIES = 250
"""Series of the hostile body's one histogram role (under the default 256 a role may keep)."""
VARIANTS = 4
"""Hostile bodies built in advance, served in turn (label values differ between them)."""


def hostile_body(variant: int, samples: int, label_chars: int, body_bytes: int) -> bytes:
    """An ``sglang:inter_token_latency_seconds`` histogram of :data:`HOSTILE_SERIES` series whose bucket lines total
    ``samples``, two labels of about ``label_chars`` characters each (``variant`` makes them differ), cut to stay
    under ``body_bytes``."""
    buckets = max(1, samples // HOSTILE_SERIES - 1)
    pad = "x" * max(0, label_chars - 12)
    lines: list[str] = []
    size = 0
    for s in range(HOSTILE_SERIES):
        lab = f'a="{variant:06d}{s:06d}{pad}",b="{s:06d}{variant:06d}{pad}"'
        group = [f'sglang:inter_token_latency_seconds_bucket{{{lab},le="{0.001 * (j + 1):g}"}} {j}\n'
                 for j in range(buckets)]
        group.append(f'sglang:inter_token_latency_seconds_bucket{{{lab},le="+Inf"}} {buckets}\n')
        cost = sum(map(len, group))
        if size + cost > body_bytes - 1024 or len(lines) + len(group) > samples:
            break
        lines += group
        size += cost
    return "".join(lines).encode()


def _serve(out: Connection, samples: int, label_chars: int, body_bytes: int) -> None:
    from aiohttp import web

    from bench.scrape import exposition

    bodies = [hostile_body(v, samples, label_chars, body_bytes) for v in range(VARIANTS)]
    started = time.monotonic()
    turn = 0

    async def hostile(_request: web.Request) -> web.Response:
        nonlocal turn
        turn += 1
        return web.Response(body=bodies[turn % VARIANTS], content_type="text/plain")

    async def healthy(_request: web.Request) -> web.Response:
        return web.Response(body=exposition(time.monotonic() - started), content_type="text/plain")

    async def main() -> None:
        ports = []
        for handler in (hostile, healthy):
            app = web.Application()
            app.router.add_get("/metrics", handler)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            ports.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        out.send((ports, len(bodies[0]), bodies[0].count(b"\n")))
        await asyncio.Event().wait()

    asyncio.run(main())


def _rss(pid: int | str = "self") -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _children_rss() -> float:
    """RSS of this process's child processes but the body server (the parse workers), MiB."""
    total = 0.0
    for child in multiprocessing.active_children():
        if child.name != "bodies" and child.pid is not None:
            total += _rss(child.pid)[0]
    return total


def _limits(args: argparse.Namespace) -> Any:
    """The sampler's limits from the options (those of them this version of the sampler has)."""
    from sglang_operator.decisions.sampling.limits import ScrapeLimits

    wanted = {"samples": args.scrape_sample_limit, "body_bytes": args.scrape_body_limit,
              "parse_workers": args.parse_workers, "cpu_budget_seconds": args.cpu_budget}
    known = {f.name for f in dataclasses.fields(ScrapeLimits)}
    return ScrapeLimits(**{k: v for k, v in wanted.items() if k in known and v is not None})


async def _run(args: argparse.Namespace, ports: list[int]) -> dict[str, Any]:
    from sglang_operator.decisions.sampling.model import Signal
    from sglang_operator.decisions.sampling.roles import roles_for
    from sglang_operator.io.pods import Target
    from sglang_operator.io.sampler import Sampler, SamplingParams, ServerRef
    from sglang_operator.io.sglang_http import SGLangHTTP
    from sglang_operator.sglang.versions import parse_version

    limits = _limits(args)
    http = SGLangHTTP(max_body_bytes=limits.body_bytes)
    sampler = Sampler(http, limits=limits)
    roles = roles_for(parse_version("0.5.23"))
    servers = [(ServerRef("bench", "hostile", roles, ports[0], "m"),
                [Target(f"hostile-{i}", "r1", "127.0.0.1", True, 0) for i in range(args.pods)])]
    servers += [(ServerRef("bench", f"healthy-{i}", roles, ports[1], "m"), [Target(f"healthy-{i}", "r1", "127.0.0.1",
                                                                                  True, 0)])
                for i in range(args.healthy)]
    params = SamplingParams(interval_seconds=args.interval, signal=Signal.TRAFFIC)
    loop = asyncio.get_running_loop()
    measured = loop.time() + args.warmup  # the parse workers start meanwhile: not measured
    stop = measured + args.seconds
    starts: dict[str, list[float]] = {ref.name: [] for ref, _ in servers}
    kinds: dict[str, list[str]] = {ref.name: [] for ref, _ in servers}
    lags: list[float] = []

    durations: list[float] = []

    async def observe(ref: ServerRef, pods: list[Target]) -> None:
        began = loop.time()
        for s in await sampler.sample(ref, lambda: pods, params):
            kinds[ref.name].append(f"{s.kind.value}: {s.reason[:90]}")
        if began >= measured:
            starts[ref.name].append(began)
            if ref.name != "hostile":
                durations.append(loop.time() - began)

    async def ticks(index: int, ref: ServerRef, pods: list[Target]) -> None:
        offset = args.interval * index / len(servers)
        start = loop.time()
        running: asyncio.Task[None] | None = None
        k = 0
        while loop.time() < stop:
            k += 1
            await asyncio.sleep(max(0.0, start + offset + k * args.interval - loop.time()))
            if (running is None or running.done()) and sampler.due(ref.state, params.interval_seconds):
                running = loop.create_task(observe(ref, pods))
        if running is not None:
            await running

    async def lag() -> None:
        while loop.time() < stop:
            t0 = loop.time()
            await asyncio.sleep(0.05)
            if t0 >= measured:
                lags.append(loop.time() - t0 - 0.05)

    async def cpu_share() -> tuple[float, float]:
        await asyncio.sleep(args.warmup)
        cpu0, wall0 = time.thread_time(), time.monotonic()
        await asyncio.sleep(args.seconds)
        return time.thread_time() - cpu0, time.monotonic() - wall0

    try:
        (cpu, wall), *_ = await asyncio.gather(cpu_share(), lag(),
                                               *(ticks(i, ref, pods) for i, (ref, pods) in enumerate(servers)))
        workers = _children_rss()
    finally:
        await sampler.aclose()
        await http.aclose()
    healthy = [ref.name for ref, _ in servers[1:]]
    gaps = [max((b - a for a, b in zip(starts[n], starts[n][1:], strict=False)), default=float("inf"))
            for n in healthy]
    hostile_state = servers[0][0].state
    return {"lags": sorted(lags), "loop_share": cpu / wall, "gap": max(gaps, default=0.0) / args.interval,
            "fewest": min((len(starts[n]) for n in healthy), default=0), "slowest": max(durations, default=0.0),
            "expected": int(args.seconds / args.interval),
            "hostile": kinds["hostile"], "healthy_kinds": sorted({k for n in healthy for k in kinds[n]}),
            "backoff": getattr(hostile_state, "cost", None), "workers_rss": workers, "limits": limits}


def parse_cost(args: argparse.Namespace) -> None:
    """Run the measurement of the module docstring with ``args`` (:func:`add_options`) and print it."""
    from sglang_operator.decisions.sampling import limits as defaults

    args.scrape_sample_limit = args.scrape_sample_limit or defaults.SAMPLES
    args.scrape_body_limit = args.scrape_body_limit or defaults.BODY_BYTES
    if args.parse_workers is None:
        args.parse_workers = getattr(defaults, "PARSE_WORKERS", None)
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    child = ctx.Process(target=_serve, args=(there, args.scrape_sample_limit, args.label_chars,
                                             args.scrape_body_limit), daemon=True, name="bodies")
    child.start()
    try:
        ports, size, lines = here.recv()
        import sglang_operator.io.sampler  # noqa: F401  (imported before the first reading)

        out = asyncio.run(_run(args, ports))
        rss, peak = _rss()
    finally:
        child.kill()
    lags = out["lags"]
    q = statistics.quantiles(lags, n=100) if len(lags) > 1 else [0.0] * 99
    print(f"parse-cost: {args.pods} hostile pods (/metrics {size / 1e6:.1f} MB, {lines} samples read, labels of "
          f"{args.label_chars} characters, new each scrape) and {args.healthy} healthy servers, every "
          f"{args.interval:g} s for {args.seconds:g} s; limits {out['limits']}", flush=True)
    print(f"  loop lag p50 {q[49] * 1e3:.1f} ms, p99 {q[98] * 1e3:.1f} ms, max {lags[-1] * 1e3:.1f} ms; loop thread "
          f"on CPU {out['loop_share'] * 100:.0f} % of the run", flush=True)
    print(f"  healthy servers: longest gap between two samples' starts {out['gap']:.2f} intervals, fewest samples "
          f"{out['fewest']} of ~{out['expected']}, slowest sample {out['slowest']:.2f} s; kinds "
          f"{[k for k in out['healthy_kinds'] if not k.startswith('Inconclusive: first scrape')]}", flush=True)
    hostile = out["hostile"]
    print(f"  hostile server: {len(hostile)} samples; back-off {out['backoff']}", flush=True)
    for kind in sorted(set(hostile)):
        print(f"    {hostile.count(kind)} x {kind}", flush=True)
    print(f"  RSS {rss:.0f} MiB (peak {peak:.0f}); parse workers {out['workers_rss']:.0f} MiB", flush=True)


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of :func:`parse_cost` (``bench/hostile.py`` adds them too)."""
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds sampled before the measurement")
    parser.add_argument("--pods", type=int, default=8, help="pods of the hostile server")
    parser.add_argument("--healthy", type=int, default=4, help="healthy servers of one pod")
    parser.add_argument("--interval", type=float, default=1.0, help="every server's sampling interval, seconds")
    parser.add_argument("--label-chars", type=int, default=300, help="characters of each of the hostile labels")
    parser.add_argument("--scrape-sample-limit", type=int, default=None,
                        help="the sampler's sample limit (default: the operator's)")
    parser.add_argument("--scrape-body-limit", type=int, default=None,
                        help="the sampler's body limit, bytes (default: the operator's)")
    parser.add_argument("--parse-workers", type=int, default=None,
                        help="the sampler's parse workers (default: the operator's flag's; 0: parse on the loop)")
    parser.add_argument("--cpu-budget", type=float, default=None,
                        help="the sampler's parse CPU budget per server and interval, seconds (default: the "
                             "operator's)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_options(parser)
    parse_cost(parser.parse_args())


if __name__ == "__main__":
    main()
