"""The sampler end to end (issue 7 "Done when"): the known-good sample on the local control plane, under load from
``io/loadgen.py``, shows ``sglang_operator_server_accept_length`` ≈ 2.7 with its revision label on the
operator's own ``/metrics``, with the other per-revision series; status carries the same figures; deleting the
server removes its series."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from sglang_operator.io.loadgen import hold_concurrency

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
NAME = "qwen36-27b"
FAST_SIM = [{"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"}, {"name": "SGLANG_SIM_TIME_SCALE", "value": "20"}]


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("operator"), sample_interval=2) as op:
        yield op


def operator_series(op: OperatorProcess, namespace: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The operator's ``sglang_operator_server_*`` samples of ``namespace``: (name, sorted labels) → value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("sglang_operator_server_") and s.labels.get("namespace") == namespace:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def pick(series: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float | None:
    return next((v for (n, ls), v in series.items() if n == name and labels.items() <= dict(ls).items()), None)


def test_known_good_under_load_exports_its_accept_length_per_revision(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    obj: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    obj["spec"].setdefault("env", []).extend(copy.deepcopy(FAST_SIM))
    k8s_cluster.apply(obj, namespace)

    def ready() -> tuple[str, str] | None:
        st = k8s_cluster.get("sglangserver", NAME, "-n", namespace).get("status", {})
        pods = k8s_cluster.get("pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={NAME}")["items"]
        ips = [p["status"]["podIP"] for p in pods if p["status"].get("podIP") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
        return (st["revision"], ips[0]) if st.get("phase") == "Ready" and ips else None
    revision, ip = wait_for("the known-good server Ready", ready, timeout=120)

    done = threading.Event()

    def load() -> None:  # 4 streams in flight while the operator samples every 2 s
        while not done.is_set():
            try:
                asyncio.run(hold_concurrency(f"http://{ip}:30000", 4, duration_s=3, max_tokens=256))
            except httpx.HTTPError as err:
                errors.append(err)
                time.sleep(0.5)
    errors: list[Exception] = []
    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        series = wait_for("accept length on the operator's /metrics", lambda: (
            s := operator_series(operator, namespace)) and pick(s, "sglang_operator_server_accept_length",
                                                                 revision=revision) and pick(
            s, "sglang_operator_server_time_to_first_token_seconds", revision=revision) and s, timeout=60)
    finally:
        done.set()
        loader.join(30)
    labels = {"namespace": namespace, "sglang_server": NAME, "revision": revision}
    accept = pick(series, "sglang_operator_server_accept_length", **labels)
    assert accept == pytest.approx(2.725, abs=0.15), series
    assert len(errors) < 3, errors
    for name in ("generation_tokens_per_second", "decode_tokens_per_second", "accept_rate",
                 "sample_timestamp_seconds", "kv_cache_usage", "running_requests", "queued_requests"):
        name = f"sglang_operator_server_{name}"
        assert pick(series, name, **labels) is not None, name
    assert (pick(series, "sglang_operator_server_generation_tokens_per_second", **labels) or 0) > 0
    for q in ("0.5", "0.95"):
        ttft = pick(series, "sglang_operator_server_time_to_first_token_seconds", quantile=q, **labels)
        itl = pick(series, "sglang_operator_server_inter_token_latency_seconds", quantile=q, **labels)
        assert ttft is not None and 0 < ttft < 5 and itl is not None and 0 < itl < 1, (q, ttft, itl)

    st = wait_for("figures in status", lambda: (s := k8s_cluster.get("sglangserver", NAME, "-n", namespace)
                                                ["status"]).get("acceptLength") and s, timeout=30)
    assert st["acceptLength"] == pytest.approx(2.725, abs=0.15) and st["tokensPerSecond"] > 0
    assert st["metricsUpdatedAt"]

    k8s_cluster.run("delete", "sglangserver", NAME, "-n", namespace)
    wait_for("the server's series removed", lambda: not any(
        dict(ls).get("sglang_server") == NAME for (_, ls) in operator_series(operator, namespace)), timeout=30)
