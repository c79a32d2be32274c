"""Benchmark (not a test): N concurrent streaming chat requests against one sglang-sim process.

Prints the simulator's CPU use (cores = process CPU seconds / wall seconds, from /proc/<pid>/stat) and the
client-side p50/p99 inter-chunk delay (ms). Goal: < 1 core at 200 streams.

    python bench/sim_stream.py [--concurrency 200] [--max-tokens 256] [--time-scale 1]

The simulator runs Qwen3-8B with EAGLE3 (3/1/4) on one RTX A6000 with ``--max-running-requests`` =
concurrency, so that all streams decode together (the published Qwen3.6-27B case cannot hold 200 running
requests in memory: its mamba draft states would not fit).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time

import httpx
from sglang_sim import perf
from sglang_sim.profiles import load_gpu_profile, load_model_profile

from sglang_operator.io.loadgen import hold_concurrency

ARGV = ["--model-path", "Qwen/Qwen3-8B", "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "Tengyunw/qwen3_8b_eagle3", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--enable-metrics"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (Linux ``/proc/<pid>/stat`` fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--time-scale", type=float, default=1.0)
    a = ap.parse_args()
    port = free_port()
    cmd = [sys.executable, "-m", "sglang_sim", "sglang", "serve", *ARGV, "--port", str(port),
           "--max-running-requests", str(a.concurrency), "--sim-sglang-version", "0.5.23",
           "--sim-gpu", "NVIDIA RTX A6000", "--sim-load-seconds", "0.1", "--sim-warmup-seconds", "0.05",
           "--sim-time-scale", str(a.time_scale)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
        else:
            raise SystemExit(f"simulator did not become healthy (exit status {proc.poll()})")
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        load = await hold_concurrency(base, a.concurrency, requests_per_worker=1, max_tokens=a.max_tokens)
        cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
        metrics = httpx.get(base + "/metrics").text
        gen = [ln for ln in metrics.splitlines() if ln.startswith("sglang:gen_throughput")]
        print(f"streams: {a.concurrency}, max_tokens: {a.max_tokens}, time scale: {a.time_scale}")
        print(f"requests ok: {len(load.ok)}, errors: {load.errors}, wall: {t1 - t0:.1f} s")
        print(f"simulator CPU: {(cpu1 - cpu0) / (t1 - t0):.2f} cores ({cpu1 - cpu0:.1f} CPU s)")
        print(f"inter-chunk delay p50: {load.gap_quantile(0.5) * 1000:.1f} ms, "
              f"p99: {load.gap_quantile(0.99) * 1000:.1f} ms")
        print(f"client tok/s total: {load.total_tok_s:.0f}, per stream median: {load.median_tok_s:.1f}, "
              f"median TTFT: {load.median_ttft_s * 1000:.0f} ms")
        step = perf.step_seconds(load_model_profile("Qwen/Qwen3-8B"), load_gpu_profile("NVIDIA RTX A6000"), 1,
                                 perf.SpecShape(3, 1, 4), a.concurrency) / a.time_scale
        print(f"model decode step at {a.concurrency} running (wall): {step * 1000:.1f} ms "
              "(gaps above it are prefill batches stalling decode, or simulator overhead)")
        print(f"last gen_throughput gauge: {gen[0].rsplit(' ', 1)[1] if gen else 'n/a'} tok/s")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    asyncio.run(main())
