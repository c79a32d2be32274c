"""Scrape benchmark: N targets (default 1 000) served by ONE lightweight process, each with ``/metrics`` as large as
a real SGLang 0.5.23 server's (every family of the release's metric table, histograms included, plausible label
sets, increasing counters), scraped every 15 s by the operator's sampler (this process) and, in the same run, by a
real Prometheus 3 (``python -m e2e.tools prometheus``).

Prints, for the sampler: cycle wall time p50/p99 (one cycle samples every target), CPU seconds per cycle per
1 000 targets, peak RSS; for Prometheus: CPU seconds per 15 s per 1 000 targets and its scrape durations; and the
CPU ratio sampler ÷ Prometheus. Goals (issue 7): cycle < 3 s, RSS < 300 MiB.

    python bench/scrape.py                      # 1 000 targets, 5 minutes
    python bench/scrape.py --duration 60        # a quick check
    python bench/scrape.py --no-prometheus      # the sampler alone

Both scrapers share this machine's cores with the target server; the figures are for that setting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "operator"))

from sglang_sim.stats import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS  # noqa: E402

from bench.common import add_numeric_options  # noqa: E402
from sglang_operator.sglang.metrics import MetricFamily, load_metrics  # noqa: E402
from sglang_operator.sglang.versions import parse_version  # noqa: E402

VERSION = "0.5.23"
MODEL = "Qwen/Qwen3.6-27B"
SCHEDULER = {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
TOKENIZER = {"model_name": MODEL, "engine_type": "unified"}
LABEL_VALUES = {
    "is_streaming": ("true", "false"), "cache_source": ("device", "host", "storage", "total"),
    "mode": ("decode", "prefill_compute", "extend"), "phase": ("load_weight", "kv_cache_allocation", "scheduler_e2e"),
    "stage": ("prefill_waiting", "prefill_forward", "decode_forward", "request_process"),
    "category": ("forward", "sample", "idle"), "modality": ("image", "video", "audio"), "source": ("disk",),
    "pool": ("device", "host"), "reason": ("evicted", "timeout"), "kind": ("real", "padding"),
    "forward_mode": ("decode", "extend"), "layer": ("0", "1", "2", "3"), "outcome": ("released", "timeout"),
    "status": ("ok", "error"), "backend": ("mooncake",), "rank_state": ("busy", "idle"),
}
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
SIZE_BUCKETS = tuple(float(2**i) for i in range(16))
MS_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)


def _buckets(m: MetricFamily) -> tuple[float, ...]:
    known = {"sglang:time_to_first_token_seconds": TTFT_BUCKETS, "sglang:inter_token_latency_seconds": ITL_BUCKETS,
             "sglang:e2e_request_latency_seconds": E2E_BUCKETS}
    if m.name in known:
        return known[m.name]
    if m.name.endswith("_ms"):
        return MS_BUCKETS
    return SECONDS_BUCKETS if m.name.endswith("_seconds") else SIZE_BUCKETS


def _label_sets(m: MetricFamily) -> list[dict[str, str]]:
    base = dict(SCHEDULER if m.collector == "SchedulerMetricsCollector" else TOKENIZER) if m.collector_labels else {}
    if m.multiprocess_mode == "all":
        base["pid"] = "4242"
    sets = [base]
    for key in m.labels:
        values = LABEL_VALUES.get(key, ("0", "1"))
        sets = [{**s, key: v} for s in sets for v in values]
    return sets


def _fmt(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""


def exposition(elapsed: float) -> bytes:
    """The body of every target ``elapsed`` seconds into the run: counters and histograms grow with it (400 tok/s,
    accept length 2.72, 52 tok/s per request, ~1 request/s)."""
    out: list[str] = []
    requests = 1.0 + elapsed
    gen = 400.0 * (1.0 + elapsed)
    for m in load_metrics(parse_version(VERSION)).values():
        name = m.name
        out.append(f"# HELP {name} {m.help}")
        out.append(f"# TYPE {name} {m.type}")
        for i, labels in enumerate(_label_sets(m)):
            lab = _fmt(labels)
            if m.type == "counter":
                value = {"sglang:generation_tokens_total": gen, "sglang:spec_verify_calls_total": gen / 2.72,
                         "sglang:num_requests_total": requests}.get(name, (i + 1) * 3.0 * (1.0 + elapsed))
                if labels.get("is_streaming") == "false" or labels.get("cache_source") not in (None, "total"):
                    value = 0.0
                out.append(f"{name}{lab} {value}")
            elif m.type in ("gauge", "info"):
                out.append(f"{name}{lab} {1.0 + (i % 7) * 0.5}")
            elif m.type == "summary":
                for q in ("0.5", "0.9", "0.99"):
                    out.append(f"{name}{_fmt({**labels, 'quantile': q})} 0.9")
                out += [f"{name}_sum{lab} {elapsed}", f"{name}_count{lab} {requests}"]
            else:
                count = gen if name == "sglang:inter_token_latency_seconds" else requests
                total = count / 52.0 if name == "sglang:inter_token_latency_seconds" else 0.2 * count
                bounds = _buckets(m)
                base = {k: v for k, v in labels.items()}
                for j, le in enumerate(bounds):
                    share = min(1.0, (j + 1) / (len(bounds) * 0.6))
                    out.append(f"{name}_bucket{_fmt({**base, 'le': repr(le)})} {math.floor(count * share)}.0")
                out.append(f"{name}_bucket{_fmt({**base, 'le': '+Inf'})} {math.floor(count)}.0")
                out += [f"{name}_count{lab} {math.floor(count)}.0", f"{name}_sum{lab} {total}"]
    return ("\n".join(out) + "\n").encode()


def addresses(n: int) -> list[str]:
    return [f"127.88.{i // 250}.{i % 250 + 1}" for i in range(n)]


class _Targets:
    """The response every target gives, rebuilt once a second (the counters move on)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.second = -1
        self.response = b""

    def current(self) -> bytes:
        second = int(time.monotonic() - self.t0)
        if second != self.second:
            body = exposition(float(second))
            head = (f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode()
            self.second, self.response = second, head + body
        return self.response


class _Metrics(asyncio.Protocol):
    """HTTP/1.1 with keep-alive, just enough for ``GET /metrics`` (anything else: 404)."""

    NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"

    def __init__(self, targets: _Targets) -> None:
        self.targets = targets
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            ok = head.startswith(b"GET /metrics ")
            self.transport.write(self.targets.current() if ok else self.NOT_FOUND)
            if b"connection: close" in head.lower():
                self.transport.close()
                return


def serve(n: int, port: int) -> None:
    """The target server: one asyncio process listening on ``n`` loopback addresses, answering ``/metrics`` from a
    response rebuilt once a second (C-level socket writes; ~0.1 ms of CPU per scrape)."""
    targets = _Targets()

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def protocol() -> _Metrics:
            return _Metrics(targets)
        for ip in addresses(n):
            await loop.create_server(protocol, ip, port, backlog=512)
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mib(pid: int) -> float:
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def sample_cycles(n: int, port: int, pods_per_server: int, interval: float, duration: float) -> dict[str, object]:
    """Run the operator's sampler over every target every ``interval`` s for ``duration`` s."""
    from sglang_operator.decisions.sampling.model import SampleKind, Signal
    from sglang_operator.decisions.sampling.roles import roles_for
    from sglang_operator.io.pods import Target
    from sglang_operator.io.sampler import Sampler, SamplingParams, ServerRef
    from sglang_operator.io.sglang_http import SGLangHTTP

    roles = roles_for(parse_version(VERSION))
    http = SGLangHTTP()
    sampler = Sampler(http)
    ips = addresses(n)
    servers = []
    for s in range(0, n, pods_per_server):
        pods = [Target(f"s{s}-p{k}", "r1", ip, True, 0) for k, ip in enumerate(ips[s:s + pods_per_server])]
        servers.append((ServerRef("bench", f"s{s}", roles, port, MODEL), pods))
    params = SamplingParams(interval_seconds=interval, signal=Signal.TRAFFIC,
                            scrape_timeout_seconds=min(10.0, interval))
    walls, cpus, kinds = [], [], {k: 0 for k in SampleKind}
    start = time.monotonic()
    cycle = 0
    while time.monotonic() - start < duration:
        t0, c0 = time.perf_counter(), time.process_time()
        results = await asyncio.gather(*(sampler.sample(ref, pods.copy, params) for ref, pods in servers))
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        for samples in results:
            for smp in samples:
                kinds[smp.kind] += 1
        cycle += 1
        print(f"  cycle {cycle}: {walls[-1]:.2f} s wall, {cpus[-1]:.2f} s CPU, "
              f"{sum(len(r) for r in results)} samples", flush=True)
        await asyncio.sleep(max(0.0, start + cycle * interval - time.monotonic()))
    await http.aclose()
    return {"walls": walls, "cpus": cpus, "kinds": {k.value: v for k, v in kinds.items()},
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def start_prometheus(n: int, port: int, interval: float, workdir: Path) -> tuple[Any, str]:
    """(a started ``e2e.prometheus.PrometheusProcess`` scraping every target, "") or (None, why not)."""
    from e2e.prometheus import PrometheusProcess
    from e2e.tools import find_prometheus

    found = find_prometheus()
    if found is None:
        return None, "Prometheus 3 is not built: run `python -m e2e.tools prometheus`; its half is skipped"
    config = {"global": {"scrape_interval": f"{interval:g}s", "scrape_timeout": f"{min(10.0, interval):g}s"},
              "scrape_configs": [{"job_name": "bench", "static_configs": [
                  {"targets": [f"{ip}:{port}" for ip in addresses(n)]}]}]}
    prom = PrometheusProcess(found / "prometheus", workdir / "prometheus", config)
    prom.start()
    return prom, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_numeric_options(parser, {"--targets": 1000, "--pods-per-server": 4, "--interval": 15.0, "--duration": 300.0})
    parser.add_argument("--no-prometheus", action="store_true")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # internal: run the target server on a port
    args = parser.parse_args()
    if args.serve:
        serve(args.targets, args.serve)
        return
    body = exposition(0.0)
    lines = body.count(b"\n")
    print(f"-- {args.targets} targets, /metrics of SGLang {VERSION}: {len(load_metrics(parse_version(VERSION)))} "
          f"families, {lines} lines, {len(body) / 1024:.0f} KiB each; every {args.interval:g} s for "
          f"{args.duration:g} s")
    from e2e.cluster.procs import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--targets", str(args.targets)],
                              stdout=subprocess.PIPE, text=True)
    prom: Any = None
    note = ""
    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as tmp:
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            if not args.no_prometheus:
                prom, note = start_prometheus(args.targets, port, args.interval, Path(tmp))
            prom_cpu0 = _cpu_seconds(prom.proc.pid) if prom else 0.0
            server_cpu0 = _cpu_seconds(server.pid)
            t0 = time.monotonic()
            res = asyncio.run(sample_cycles(args.targets, port, args.pods_per_server, args.interval, args.duration))
            elapsed = time.monotonic() - t0
            prom_cpu = _cpu_seconds(prom.proc.pid) - prom_cpu0 if prom else None
            server_cpu = _cpu_seconds(server.pid) - server_cpu0
            prom_stats = _prometheus_stats(prom, elapsed) if prom else None
        finally:
            if prom is not None:
                prom.stop()
            server.terminate()
            server.wait(10)
    walls, cpus = res["walls"], res["cpus"]
    assert isinstance(walls, list) and isinstance(cpus, list)
    per_k = 1000 / args.targets
    cycles = len(walls)
    steady = cpus[1:] or cpus  # the first cycle only makes connections and first scrapes
    op_cpu = statistics.mean(steady) * per_k
    print(f"\n-- operator sampler ({cycles} cycles, samples by kind {json.dumps(res['kinds'])})")
    print(f"   cycle wall p50 {_quantile(walls, 0.5):.2f} s, p99 {_quantile(walls, 0.99):.2f} s (goal < 3 s)")
    print(f"   CPU {op_cpu:.2f} s per cycle per 1000 targets; peak RSS {res['rss_mib']:.0f} MiB (goal < 300 MiB)")
    print(f"-- target server: {server_cpu / max(cycles, 1) * per_k:.2f} CPU s per cycle per 1000 targets "
          f"(serving both scrapers)")
    if prom_cpu is None:
        print(f"-- Prometheus: not run. {note}".rstrip())
        return
    rounds = elapsed / args.interval
    prom_per = prom_cpu / rounds * per_k
    print(f"-- Prometheus 3: CPU {prom_per:.2f} s per {args.interval:g} s per 1000 targets; {prom_stats}")
    print(f"-- ratio operator ÷ Prometheus (CPU per scrape of 1000 targets): {op_cpu / prom_per:.2f}")


def _prometheus_stats(prom: Any, elapsed: float) -> str:
    try:
        window = f"{max(int(elapsed), 30)}s"
        duration = f'scrape_duration_seconds{{job="bench"}}[{window}]'
        exprs = {"p50": f"quantile(0.5, avg_over_time({duration}))",
                 "p99": f"quantile(0.99, avg_over_time({duration}))", "up": 'sum(up{job="bench"})',
                 "series": 'sum(scrape_samples_scraped{job="bench"})'}
        q = {name: prom.query(expr) for name, expr in exprs.items()}
        val = {k: float(v[0]["value"][1]) if v else math.nan for k, v in q.items()}
        return (f"mean scrape duration per target p50 {val['p50']:.3f} s, p99 {val['p99']:.3f} s; "
                f"{val['up']:.0f} targets up; {val['series']:.0f} samples per round; "
                f"peak RSS {_peak_rss_mib(prom.proc.pid):.0f} MiB")
    except Exception as err:  # the CPU figure stands without these
        return f"(scrape statistics unavailable: {err})"


if __name__ == "__main__":
    main()
