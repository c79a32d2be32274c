"""Multi-node ranks of the simulator (issue 9 item 5): rank 0 serves the API; ranks ≥ 1 answer only SGLang's dummy
health server (``launch_dummy_health_check_server``); a bad ``--dist-init-addr`` or rank is refused."""

from __future__ import annotations

import httpx
import pytest
from sglang_sim.follower import JoinError, node_tp_ranks, parse_dist_init_addr
from simproc import start_sim

GROUP = ["--model-path", "deepseek-ai/DeepSeek-V3", "--trust-remote-code", "--tp-size", "16", "--nnodes", "2",
         "--dist-init-addr", "dsv3-0.dsv3-0.ml:20000", "--enable-metrics",
         "--mem-fraction-static", "0.9"]  # 39 GiB of weights per RTX A6000 leave nothing at the automatic 0.81


def test_rank_1_answers_health_with_a_dummy_and_serves_no_api() -> None:
    sim = start_sim([*GROUP, "--node-rank", "1"])
    try:
        for path in ("/health", "/health_generate", "/ping"):
            assert httpx.get(sim.base_url + path, timeout=5).status_code == 200, path
        metrics = httpx.get(sim.base_url + "/metrics", timeout=5)
        assert metrics.status_code == 200 and "sglang:" not in metrics.text  # no SGLang series on rank >= 1
        for path in ("/ready", "/server_info", "/v1/models"):
            assert httpx.get(sim.base_url + path, timeout=5).status_code == 404, path
        r = httpx.post(sim.base_url + "/generate", json={"text": "hi"}, timeout=5)
        assert r.status_code in (404, 405)
    finally:
        err = sim.stop()
    assert sim.proc.returncode == 0
    assert "Dummy health check server started" in err
    assert "rendezvous tcp://dsv3-0.dsv3-0.ml:20000" in err
    assert " TP8] Init torch distributed begin" in err and " TP15] Load weight end" in err
    assert " TP7]" not in err  # node rank 1 of 2 runs TP ranks 8..15 only


def test_rank_0_of_a_group_serves_the_api_with_the_group_settings() -> None:
    sim = start_sim([*GROUP, "--node-rank", "0"])
    try:
        info = httpx.get(sim.base_url + "/server_info", timeout=5).json()
        assert (info["nnodes"], info["node_rank"], info["tp_size"]) == (2, 0, 16)
        assert info["dist_init_addr"] == "dsv3-0.dsv3-0.ml:20000"
        assert httpx.get(sim.base_url + "/ready", timeout=5).status_code == 200
    finally:
        sim.stop()


@pytest.mark.parametrize(("argv", "message"), [
    (["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "h:1"], "node_rank 2 must be smaller than nnodes 2"),
    (["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "nohostport"], "Cannot parse address"),
    (["--nnodes", "2", "--node-rank", "1"], "Empty address string"),
])
def test_a_rank_that_cannot_join_exits_1(argv: list[str], message: str) -> None:
    sim = start_sim(["--model-path", "Qwen/Qwen3-8B", "--tp-size", "2", *argv], wait_ready=False)
    sim.proc.wait(30)
    err = sim.stop()
    assert sim.proc.returncode == 1 and message in err


def test_address_and_rank_arithmetic() -> None:
    assert parse_dist_init_addr("a.b.c:20000") == ("a.b.c", 20000)
    assert parse_dist_init_addr("[::1]:8000") == ("::1", 8000)
    for bad in ("", "host", "host:", ":80", "h:99999", "[::1:80"):
        with pytest.raises(JoinError):
            parse_dist_init_addr(bad)
    assert node_tp_ranks({"tp_size": 16, "nnodes": 2, "node_rank": 1}) == range(8, 16)
    assert node_tp_ranks({"tp_size": 8, "pp_size": 2, "nnodes": 2, "node_rank": 1}) == range(0, 8)
