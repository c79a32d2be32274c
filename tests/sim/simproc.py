"""The simulator tests' helpers, importable from every test folder (``tests/conftest.py``): the published case's
two command lines (copied from the published incident write-up, so tests do not read ../shared) and
:func:`start_sim`, a running ``sglang-sim`` subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

import httpx

from e2e.cluster.procs import free_port

MODEL = "Qwen/Qwen3.6-27B"
GPU = "NVIDIA RTX A6000"
# Published case: Qwen3.6-27B on 2 x RTX A6000, TP 2, SGLang of the 0.5.10-0.5.13 era, SGLANG_ENABLE_SPEC_V2=1.
KNOWN_GOOD = ["--model-path", MODEL, "--tp-size", "2", "--speculative-algorithm", "NEXTN",
              "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
              "--mem-fraction-static", "0.88", "--context-length", "131072", "--max-running-requests", "16",
              "--mamba-full-memory-ratio", "0.5", "--mamba-scheduler-strategy", "extra_buffer"]
REGRESSED = ["--model-path", MODEL, "--tp-size", "2", "--speculative-algorithm", "NEXTN",
             "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
             "--mamba-scheduler-strategy", "extra_buffer"]
SPEC_V2_ENV = {"SGLANG_ENABLE_SPEC_V2": "1"}
KNOWN_GOOD_TOK_S = 52.0  # measured 47-57 tok/s
REGRESSED_TOK_S = 36.0  # measured 35.81 tok/s
REGRESSED_ACCEPT_LEN = 1.75  # decode log: accept len 1.75, accept rate 0.75
TIME_SCALE = 20
"""``--sim-time-scale`` of :func:`start_sim`: the simulated GPU runs 20 × faster than the wall clock."""


def to_0523(argv: list[str]) -> list[str]:
    """The same command line in 0.5.23's spelling (``--mamba-radix-cache-strategy``)."""
    return [("--mamba-radix-cache-strategy" if a == "--mamba-scheduler-strategy" else a) for a in argv]


@dataclass
class RunningSim:
    proc: subprocess.Popen[str]
    base_url: str

    def stop(self) -> str:
        """Terminate (SIGTERM) and return everything the process wrote to stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


def start_sim(argv: list[str], *, version: str = "0.5.23", env: dict[str, str] | None = None,
              extra: list[str] | None = None, wait_ready: bool = True) -> RunningSim:
    """Start ``python -m sglang_sim`` on 127.0.0.1 and a free port, fast clock and short load."""
    port = free_port()
    cmd = [sys.executable, "-m", "sglang_sim", "sglang", "serve", *argv, "--host", "127.0.0.1",
           "--port", str(port), "--sim-sglang-version", version, "--sim-gpu", GPU, "--sim-load-seconds", "0.2",
           "--sim-warmup-seconds", "0.05", "--sim-time-scale", str(TIME_SCALE), *(extra or [])]
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
    sim = RunningSim(proc, f"http://127.0.0.1:{port}")
    if wait_ready:
        wait_healthy(sim)
    return sim


def wait_healthy(sim: RunningSim, seconds: float = 30) -> None:
    """Wait until ``sim`` answers ``/health`` with 200; AssertionError (with its stderr) when it exits or does not
    within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if sim.proc.poll() is not None:
            raise AssertionError(f"sglang-sim exited {sim.proc.returncode}: {sim.stop()}")
        try:
            if httpx.get(sim.base_url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"sglang-sim not healthy in {seconds:g} s: {sim.stop()}")
