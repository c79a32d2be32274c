"""The known-good sample rendered for each supported SGLang release starts the simulator emulating that
release (its own flag spellings), and the simulator's /server_info reports exactly the sample's settings."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.cluster.procs import free_port
from sglang_operator import builders
from sglang_operator.api.server import parse

ROOT = Path(__file__).resolve().parents[2]
IMAGES = {"0.5.10": "lmsysorg/sglang:v0.5.10-cu129", "0.5.23": "lmsysorg/sglang:v0.5.23-cu130"}
STRATEGY_FLAG = {"0.5.10": "--mamba-scheduler-strategy", "0.5.23": "--mamba-radix-cache-strategy"}



def known_good(version: str) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = "default"
    body["spec"]["sglang"]["image"] = IMAGES[version]
    return body


@pytest.mark.parametrize("version", sorted(IMAGES))
def test_rendered_known_good_starts_the_simulator_of_its_release(version: str) -> None:
    rendered = builders.render(parse(known_good(version)))
    container = rendered.deployment["spec"]["template"]["spec"]["containers"][0]
    args = list(container["args"])
    assert STRATEGY_FLAG[version] in args
    port = free_port()
    args[args.index("--port") + 1] = str(port)
    env = {**os.environ, **{e["name"]: e["value"] for e in container.get("env", []) if "value" in e},
           "SGLANG_SIM_HOST": "127.0.0.1", "SGLANG_SIM_VERSION": version, "SGLANG_SIM_GPU": "NVIDIA RTX A6000",
           "SGLANG_SIM_LOAD_SECONDS": "0.2", "SGLANG_SIM_WARMUP_SECONDS": "0.05"}
    proc = subprocess.Popen([sys.executable, "-m", "sglang_sim", *container["command"], *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = None
        deadline = time.monotonic() + 30
        while info is None and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=1)
                info = r.json() if r.status_code == 200 else None
            except httpx.HTTPError:
                time.sleep(0.1)
        assert info is not None, "simulator did not answer /server_info"
        assert info["version"].startswith(version[:4])
        assert (info["tp_size"], info["speculative_algorithm"]) == (2, "EAGLE")
        assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
                info["speculative_num_draft_tokens"]) == (3, 1, 4)
        assert (info["mem_fraction_static"], info["context_length"], info["max_running_requests"]) \
            == (0.88, 131072, 16)
        assert info["enable_metrics"] is True
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
