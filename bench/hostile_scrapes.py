"""Benchmark (offline, no cluster): what retained ``/metrics`` scrapes cost the operator's sampler.

``--pods`` pods (default 32) answer an 8 MB ``/metrics`` within every default scrape limit: ``--series`` series
(default 2 000) of ``sglang:generation_tokens_total`` with two labels of ``--label-chars`` characters (default 2 000),
new each scrape. The real :class:`sglang_operator.io.sampler.Sampler` scrapes them every interval, as one server's
pods, for ``--intervals`` intervals; the body is served by a child process (so its buffers are not counted). Prints
the sampler process's RSS before the first scrape and after the last (MiB, after a garbage collection), its peak
(VmHWM), and the samples' kinds and reasons.

    python bench/hostile.py --retained-scrapes          # the same, from the hostile bench
    python bench/hostile_scrapes.py --intervals 5

Exit status 0 either way (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import add_numeric_options  # noqa: E402


def _serve(port_out: multiprocessing.connection.Connection, series: int, label_chars: int) -> None:
    from aiohttp import web

    count = 0

    async def metrics(_request: web.Request) -> web.Response:
        nonlocal count
        count += 1
        pad = "x" * (label_chars - 12)
        lines = [f'sglang:generation_tokens_total{{a="{count:06d}{i:06d}{pad}",b="{i:06d}{count:06d}{pad}"}} '
                 f"{count * 100 + i}\n" for i in range(series)]
        return web.Response(body="".join(lines).encode(), content_type="text/plain")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_out.send(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


def _rss() -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def _run(port: int, pods: int, intervals: int) -> tuple[list[str], float, float]:
    from sglang_operator.decisions.sampling.model import Signal
    from sglang_operator.decisions.sampling.roles import roles_for
    from sglang_operator.io.pods import Target
    from sglang_operator.io.sampler import Sampler, SamplingParams, ServerRef
    from sglang_operator.io.sglang_http import SGLangHTTP
    from sglang_operator.sglang.versions import parse_version

    http = SGLangHTTP()
    sampler = Sampler(http)
    server = ServerRef("bench", "fat", roles_for(parse_version("0.5.23")), port, "m")
    targets = [Target(f"fat-{i:02d}", "r1", "127.0.0.1", True, 0) for i in range(pods)]
    params = SamplingParams(signal=Signal.TRAFFIC, scrape_timeout_seconds=60)
    kinds: list[str] = []
    started = time.monotonic()
    try:
        for _ in range(intervals):
            for s in await sampler.sample(server, lambda: targets, params):
                kinds.append(f"{s.kind.value}: {s.reason[:100]}")
        gc.collect()
        held, _ = _rss()  # the server's sampler state still held, as in the operator between intervals
    finally:
        await http.aclose()
    return kinds, time.monotonic() - started, held


def retained_scrapes(pods: int = 32, series: int = 2000, label_chars: int = 2000, intervals: int = 4) -> None:
    """Run the measurement of the module docstring and print it."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    child = ctx.Process(target=_serve, args=(there, series, label_chars), daemon=True)
    child.start()
    try:
        port = here.recv()
        import sglang_operator.io.sampler  # noqa: F401  (imports before the first reading)

        gc.collect()
        before, _ = _rss()
        kinds, seconds, after = asyncio.run(_run(port, pods, intervals))
        _, peak = _rss()
    finally:
        child.kill()
    body = series * (2 * label_chars + 60)
    print(f"retained scrapes: {pods} pods x {series} series with {label_chars}-character labels (~{body / 1e6:.1f} MB "
          f"/metrics, new each scrape), {intervals} intervals in {seconds:.0f} s: RSS before {before:.0f} MiB, after "
          f"{after:.0f} MiB (+{after - before:.0f}), peak {peak:.0f} MiB", flush=True)
    for kind in sorted(set(kinds)):
        print(f"  {kinds.count(kind)} x {kind}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_numeric_options(parser, {"--pods": 32, "--series": 2000, "--label-chars": 2000, "--intervals": 4})
    args = parser.parse_args()
    retained_scrapes(args.pods, args.series, args.label_chars, args.intervals)


if __name__ == "__main__":
    main()
