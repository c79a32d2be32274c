"""Start-up of sglang-sim: entry-point forms, rejection of bad argv with SGLang's message and exit status,
the memory model's out-of-memory failure, and the start-up log lines."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest
from sglang_sim.cli import SimUsageError, parse_command
from sglang_sim.launch import spec_shape
from sglang_sim.memory import StartupError, plan_memory
from sglang_sim.profiles import load_gpu_profile, load_model_profile
from simproc import GPU, KNOWN_GOOD, MODEL, REGRESSED, SPEC_V2_ENV, free_port, start_sim, to_0523


@pytest.mark.parametrize("entry", [
    ["python", "-m", "sglang.launch_server"], ["/usr/bin/python3", "-m", "sglang.launch_server"],
    ["sglang", "serve"], [],
])
def test_entry_points_and_sim_options_are_split_off(entry: list[str]) -> None:
    cmd = parse_command([*entry, "--model-path", MODEL, "--sim-gpu", GPU, "--tp-size", "2",
                         "--sim-time-scale=4", "--sim-fault-http-500-rate", "0.5"],
                        {"SGLANG_SIM_VERSION": "0.5.10", "SGLANG_SIM_LOAD_SECONDS": "3"})
    assert cmd.entry == tuple(entry)
    assert cmd.argv == ["--model-path", MODEL, "--tp-size", "2"]
    assert cmd.options["gpu"] == GPU and cmd.options["time_scale"] == 4.0
    assert cmd.options["sglang_version"] == "0.5.10" and cmd.options["load_seconds"] == 3.0
    assert cmd.faults == {"http_500_rate": 0.5}
    assert cmd.legacy_entry == (len(entry) == 3)


def test_bad_sim_option_is_rejected() -> None:
    with pytest.raises(SimUsageError, match="--sim-time-scale"):
        parse_command(["--sim-time-scale", "fast"], {})


def _run(argv: list[str], version: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "sglang_sim", "python3", "-m", "sglang.launch_server", *argv,
           "--port", str(free_port()), "--sim-sglang-version", version, "--sim-gpu", GPU,
           "--sim-load-seconds", "0.05"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize(("version", "argv", "env", "code", "message"), [
    ("0.5.23", KNOWN_GOOD, SPEC_V2_ENV, 2, "unrecognized arguments: --mamba-scheduler-strategy extra_buffer"),
    ("0.5.23", ["--model-path", MODEL, "--cuda-graph-max-bs", "64"], {}, 2, "ambiguous option: --cuda-graph-max-bs"),
    ("0.5.10", ["--model-path", MODEL, "--speculative-algorithm", "nextn"], {}, 2, "invalid choice: 'nextn'"),
    # hybrid model + MTP + radix cache on 0.5.10 without extra_buffer / spec v2
    ("0.5.10", ["--model-path", MODEL, "--tp-size", "2", "--speculative-algorithm", "NEXTN",
                "--speculative-num-steps", "1", "--speculative-eagle-topk", "1"], SPEC_V2_ENV, 1,
     "ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache"),
    # out of memory at start-up: too little static memory for weights + mamba state
    ("0.5.10", [*KNOWN_GOOD[:-8], "--mem-fraction-static", "0.55", "--mamba-scheduler-strategy", "extra_buffer"],
     SPEC_V2_ENV, 1, "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    ("0.5.10", [*REGRESSED, "--context-length", "1000000"], SPEC_V2_ENV, 1,
     "is greater than the derived context_length (262144)"),
])
def test_rejected_at_startup(version: str, argv: list[str], env: dict[str, str], code: int, message: str) -> None:
    proc = _run(argv, version, env)
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr


def test_memory_model_decides_fit() -> None:
    model, gpu = load_model_profile(MODEL), load_gpu_profile(GPU)
    base = {"tp_size": 2, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "mamba_scheduler_strategy": "extra_buffer"}
    shape = spec_shape(base)
    good = plan_memory(model, gpu, {**base, "mem_fraction_static": 0.88, "context_length": 131072,
                                    "max_running_requests": 16, "mamba_full_memory_ratio": 0.5}, shape, {})
    assert good.max_running_requests == 16 and good.max_total_num_tokens > 131072
    with pytest.raises(StartupError, match="Not enough memory"):
        plan_memory(model, gpu, {**base, "mem_fraction_static": 0.6, "max_running_requests": 16}, shape, {})
    with pytest.raises(StartupError, match="Not enough memory"):  # many requests' mamba draft states
        plan_memory(model, gpu, {**base, "mem_fraction_static": 0.88, "max_running_requests": 256}, shape, {})
    small = plan_memory(model, gpu, {**base, "mem_fraction_static": 0.88, "max_running_requests": 64}, shape, {})
    assert small.max_total_num_tokens < good.max_total_num_tokens


def test_startup_logs_and_port_opens_only_after_load() -> None:
    sim = start_sim(to_0523(REGRESSED), extra=["--sim-load-seconds", "4"], wait_ready=False)
    lines: list[str] = []
    assert sim.proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(sim.proc.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        # the interpreter's start-up takes its time on a loaded machine: wait for the loading to begin (it then
        # takes 4 s), not a fixed while
        deadline = time.monotonic() + 30
        while not any(" TP1] Load weight begin." in line for line in list(lines)):
            assert sim.proc.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, f"no 'Load weight begin' in 30 s: {''.join(lines)}"
            time.sleep(0.05)
        with pytest.raises(httpx.ConnectError):  # SGLang opens its port only after loading weights
            httpx.get(sim.base_url + "/health", timeout=1)
    finally:
        if sim.proc.poll() is None:
            sim.proc.terminate()
        sim.proc.wait(timeout=10)
        reader.join(10)
    err = "".join(lines)
    assert "Max running requests is reset to 48 for speculative decoding" in err
    assert " TP0] Load weight begin. avail mem=" in err and " TP1] Load weight begin. avail mem=" in err
    assert "Load weight end." not in err


def test_started_server_logs() -> None:
    sim = start_sim(to_0523(REGRESSED))
    err = sim.stop()
    assert " TP1] Load weight end. elapsed=" in err and "type=Qwen3_5ForCausalLMMTP, avail mem=" in err
    assert "max_running_requests=" in err and "The server is fired up and ready to roll!" in err
    # CUDA graphs up to the request pool (11 requests: what the mamba slots leave of the automatic 48)
    assert "max_running_requests=11," in err and "Capture cuda graph bs [1, 2, 3, 4, 5, 6, 7, 8, 10, 11]" in err
    assert err.index("Capture cuda graph begin.") < err.index("Capture cuda graph end. Time elapsed:") \
        < err.index("The server is fired up")
