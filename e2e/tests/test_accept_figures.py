"""A 4-replica Canary server keeps its accept length and accept rate (issue 38), on the oldest and the newest release
the simulator emulates: 0.5.10 (gauges only: no ``sglang:spec_verify_calls_total``) and 0.5.23 (the length from the
counters, the rate still a gauge). SGLang writes ``sglang:spec_accept_length`` / ``sglang:spec_accept_rate`` every 40
decode steps only; the fast policy's 64-token probe is about 24 steps, and probes sent round robin over 4 pods left
every pod's gauges unwritten for the 15 s a first revision is judged in (``acceptLength: null`` in the ledger and the
baseline, ``acceptRate: 0``), and a canary's verdict looked its rate up in the stable revision's sample.

Per release (:data:`RELEASES`), in a namespace of its own: the regressed sample (1/1/2) is the first revision,
promoted on 4 replicas; then the known-good sample (3/1/4) is rolled out as a canary of one step and promoted. Both
revisions' ledger records, the baseline each set and ``kubectl sglang history -o json`` carry both figures within 10 %
of what the simulator computes for their settings (``e2e/accept_figures.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.accept_figures import off_by
from e2e.conftest import K8sCluster, running_operator
from e2e.policies import BAD, GOOD, sample
from e2e.tests.objects import wait_server_status

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
NAME = "qwen36-27b"
IMAGES = {"0.5.10": "lmsysorg/sglang:v0.5.10-cu129", "0.5.23": "lmsysorg/sglang:v0.5.23-cu130"}
QUICK = {"replicas": 1, "samples": 2, "judgeSeconds": 10}
"""One canary step of one replica judged on 2 intervals (as ``test_canary.py``'s quick steps)."""


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # sample_interval None: each server's own intervalSeconds (the fast policy's 5 s, a probe timeout of 4 s), the
    # 15 s a first revision is judged in; the default 2 s override would cut the probe at 2 s
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("operator"), sample_interval=None) as op:
        yield op


def spec_of(name: str, version: str) -> dict[str, Any]:
    """Sample ``name`` on 4 replicas with the Canary strategy (one quick step) and SGLang ``version``'s image."""
    obj = sample(name)
    obj["spec"]["sglang"] = {"image": IMAGES[version]}
    obj["spec"]["replicas"] = 4
    obj["spec"]["strategy"] = {"type": "Canary", "canary": {"steps": [QUICK]}}
    return obj


def history(k8s: K8sCluster, ns: str) -> dict[str, dict[str, Any]]:
    """``kubectl sglang history NAME -o json`` by revision."""
    out = subprocess.run([sys.executable, "-m", "sglang_operator.entry.cli", "history", NAME, "-n", ns, "-o", "json"],
                         capture_output=True, text=True, env={**os.environ, "KUBECONFIG": str(k8s.kubeconfig)},
                         check=False)
    assert out.returncode == 0, out.stderr
    return {row["revision"]: row for row in json.loads(out.stdout)}


RELEASES = os.environ.get("E2E_ACCEPT_RELEASES", "0.5.23").split(",")
"""The releases run (``E2E_ACCEPT_RELEASES=0.5.10,0.5.23`` for both): CI runs 0.5.23 here; 0.5.10 runs in
``test_canary.py``, whose module server is the same scenario (the regressed revision first on 4 replicas, then a
promoted canary of the known-good one) and asserts the same figures, at no extra cost."""


@pytest.mark.parametrize("version", RELEASES)
def test_a_first_revision_and_a_canary_promoted_one_keep_both_figures(k8s_cluster: K8sCluster, namespace: str,
                                                                      operator: Any, version: str) -> None:
    k8s, started = k8s_cluster, time.monotonic()
    first = spec_of(BAD, version)
    k8s.apply(first, namespace)
    s = wait_server_status(k8s, namespace, NAME, "the first revision promoted on 4 replicas",
                           lambda s: s.get("stableRevision") and s.get("stableRevision") == s.get("revision")
                           and s.get("readyReplicas") == 4 and (s.get("analysis") or {}).get("phase") == "Stable",
                           timeout=240)
    one = s["revision"]
    record = next(r for r in s["revisions"] if r["revision"] == one)
    assert record["verdict"] == "Promoted", record
    assert not off_by(record, first["spec"], version), (off_by(record, first["spec"], version), record)
    assert not off_by(s["baseline"], first["spec"], version), (off_by(s["baseline"], first["spec"], version),
                                                               s["baseline"])
    print(f"{version}: first revision {one} promoted {time.monotonic() - started:.0f} s after the apply: "
          f"{record['acceptLength']} / {record['acceptRate']}")

    good = spec_of(GOOD, version)
    k8s.apply(good, namespace)
    s = wait_server_status(k8s, namespace, NAME, "the canary promoted to every replica",
                           lambda s: s.get("stableRevision") not in (None, one) and not s.get("canary")
                           and s.get("revision") == s.get("stableRevision") and s.get("readyReplicas") == 4,
                           timeout=300)
    two = s["revision"]
    record = next(r for r in s["revisions"] if r["revision"] == two)
    assert record["verdict"] == "Promoted" and record.get("canarySteps"), record
    assert not off_by(record, good["spec"], version), (off_by(record, good["spec"], version), record)
    assert s["baseline"]["revision"] == two
    assert not off_by(s["baseline"], good["spec"], version), (off_by(s["baseline"], good["spec"], version),
                                                              s["baseline"])
    rows = history(k8s, namespace)
    for rev, obj in ((one, first), (two, good)):
        assert not off_by(rows[rev], obj["spec"], version), (rev, off_by(rows[rev], obj["spec"], version), rows[rev])
    print(f"{version}: canary {two} promoted {time.monotonic() - started:.0f} s after the first apply: "
          f"{record['acceptLength']} / {record['acceptRate']}")
