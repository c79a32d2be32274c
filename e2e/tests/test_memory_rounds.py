"""Every per-server memory leaves with its server (issue 15 "Done when"): two rounds of creating and deleting 200
SGLangServers (``replicas: 0``: the control loop's memory, no simulator) on the local control plane; the operator's
RSS after the second round is within 5 % of its RSS after the first, and after each round it tracks no server
(``sglang_operator_servers`` sums to 0 on its ``/metrics``)."""

from __future__ import annotations

import copy
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
COUNT = 200


@pytest.fixture
def operator(k8s_cluster: K8sCluster, tmp_path: Path) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path, status_interval=1.0, sample_interval=None) as op:
        yield op


def rss_mib(pid: int) -> float:
    line = next(v for v in Path(f"/proc/{pid}/status").read_text().splitlines() if v.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def tracked(op: OperatorProcess) -> float:
    """``sum(sglang_operator_servers)``: the servers the observer holds a memory of."""
    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=2) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "sglang_operator_servers")


def one_round(k8s: K8sCluster, ns: str, op: OperatorProcess, round_: int) -> float:
    base: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    base["spec"]["replicas"] = 0
    items = []
    for i in range(COUNT):
        obj = copy.deepcopy(base)
        obj["metadata"] = {"name": f"round{round_}-{i:03d}", "namespace": ns}
        items.append(obj)
    for start in range(0, COUNT, 50):
        k8s.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                      "items": items[start:start + 50]}), timeout=300)

    def observed() -> bool:
        got = k8s.get("sglangservers", "-n", ns)["items"]
        return len(got) == COUNT and all((o.get("status") or {}).get("analysis") for o in got)

    wait_for(f"round {round_}: {COUNT} servers reconciled and observed", observed, timeout=300, interval=2)
    assert tracked(op) == COUNT
    k8s.run("delete", "sglangservers", "--all", "-n", ns, "--wait=true", timeout=300)
    wait_for(f"round {round_}: every server forgotten", lambda: tracked(op) == 0, timeout=60, interval=1)
    time.sleep(3)  # a few ticks with nothing left
    assert op.proc is not None
    return rss_mib(op.proc.pid)


def test_two_rounds_of_200_servers_leave_the_operators_memory_where_it_was(
        k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess) -> None:
    first = one_round(k8s_cluster, namespace, operator, 1)
    second = one_round(k8s_cluster, namespace, operator, 2)
    print(f"\noperator RSS after round 1: {first:.1f} MiB, after round 2: {second:.1f} MiB "
          f"({100 * (second - first) / first:+.1f} %)")
    assert second <= 1.05 * first, (first, second)
