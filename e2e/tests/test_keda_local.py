"""KEDA brought up beside a running operator, as ``python -m e2e.cluster up --keda`` does, and the README's autoscaling
example end to end (issue 40 item 2):

- The operator starts (``--resync-seconds 10``) while KEDA's CRDs are absent; the README's sample
  (``samples/local/qwen3.6-27b-autoscaling.yaml``, the path read from the README) serves with ``Autoscaling=False``,
  reason ``KEDANotInstalled``.
- KEDA and Prometheus start the way ``up --keda`` starts them (:func:`e2e.cluster.autoscale.start`, Prometheus at the
  sample's ``spec.autoscaling.prometheus.address``). The operator, not restarted, notices KEDA's CRDs within one
  resync (plus a margin for the server's 1 s tick and the status write): ``Autoscaling=True ScaledObjectApplied``.
- The README's load command (``python -m e2e.load …`` as the README writes it, run as a process in the test's
  namespace) makes KEDA's HPA scale the server 1 → 3, 3 pods Ready.

Scale-down and Prometheus' loss are ``test_keda_scaling.py``'s.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from e2e.cluster import autoscale
from e2e.cluster.procs import free_port
from e2e.conftest import K8sCluster, wait_for
from e2e.load import Server
from e2e.operator_proc import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RESYNC = 10.0  # the operator's --resync-seconds
MARGIN = 5.0  # seconds past one resync: the server's tick (1 s), the ScaledObject's apply, the status patch, the poll


def readme_example() -> tuple[str, list[str]]:
    """The README's autoscaling section: the sample it applies and the arguments of its load command."""
    section = README.read_text().split("## Autoscaling, locally", 1)[1].split("\n## ", 1)[0]
    assert "python -m e2e.cluster up --keda" in section
    sample = re.search(r"kubectl apply -f (samples/\S+)", section)
    load = re.search(r"python -m e2e\.load ([^#\n]+)", section)
    assert sample and load, section
    return sample.group(1), shlex.split(load.group(1))


def condition(k8s: K8sCluster, ns: str, name: str, kind: str) -> dict[str, Any]:
    proc = k8s.run("get", "sglangserver", name, "-n", ns, "-o", "json", check=False)
    if proc.returncode != 0:
        return {}
    conds = (yaml.safe_load(proc.stdout).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == kind), {})


def hpa_active(k8s: K8sCluster, ns: str, name: str) -> bool:
    proc = k8s.run("get", "hpa", f"keda-hpa-{name}", "-n", ns, "-o", "json", check=False)
    conds = (yaml.safe_load(proc.stdout).get("status") or {}).get("conditions") or [] if proc.returncode == 0 else []
    return any(c["type"] == "ScalingActive" and c["status"] == "True" for c in conds)


def without_keda_crds(k8s: K8sCluster) -> None:
    """Delete KEDA's CRDs a module before this one left (KedaStack.stop keeps them): the operator must start
    without them."""
    crds = [n for n in k8s.run("get", "crd", "-o", "name").stdout.split() if n.endswith(".keda.sh")]
    if crds:
        k8s.run("delete", *crds, "--wait=true", "--timeout=60s", timeout=90)
    assert k8s.run("get", "crd", "scaledobjects.keda.sh", check=False).returncode != 0


def test_keda_started_after_the_operator_is_noticed_within_one_resync_and_the_readme_example_scales(
        k8s_cluster: K8sCluster, namespace: str, tmp_path: Path) -> None:
    k8s, ns = k8s_cluster, namespace
    if k8s.local is None:
        pytest.fail("needs the local control plane (its launcher registers KEDA's metrics API server)", pytrace=False)
    sample, load_args = readme_example()
    body = yaml.safe_load((ROOT / sample).read_text())
    name = body["metadata"]["name"]
    address = body["spec"]["autoscaling"]["prometheus"]["address"]
    assert address == autoscale.prometheus_url()  # the README's sample names the Prometheus `up --keda` starts
    port = urlsplit(address).port or 0
    if not autoscale.port_free(port):  # a developer's own `up --keda` holds it: the same Prometheus elsewhere
        port = free_port()
        body["spec"]["autoscaling"]["prometheus"]["address"] = autoscale.prometheus_url(port)
        print(f"127.0.0.1:{autoscale.PROMETHEUS_PORT} is taken; Prometheus on {port}")
    without_keda_crds(k8s)
    k8s.install_crd()
    k8s.install_crd(ROOT / "crds" / "sglangtunings.yaml", "sglangtunings.sglang-operator.io")  # as `up` installs both
    op = OperatorProcess(k8s.kubeconfig, tmp_path / "operator.log", args=["--resync-seconds", str(RESYNC)])
    op.start()
    scaling: autoscale.Autoscaling | None = None
    t_op = time.monotonic()
    try:
        k8s.apply(body, ns)
        missing = wait_for("Autoscaling=False KEDANotInstalled", lambda: (
            c := condition(k8s, ns, name, "Autoscaling")).get("reason") == "KEDANotInstalled" and c, timeout=120)
        assert missing["status"] == "False", missing
        scaling = autoscale.start(k8s.local, prometheus_port=port, operator_port=op.metrics_port)
        t_crds = scaling.keda.crds_established_at
        applied = wait_for("the operator noticing KEDA (Autoscaling=True ScaledObjectApplied)", lambda: (
            c := condition(k8s, ns, name, "Autoscaling")).get("reason") == "ScaledObjectApplied" and c,
            timeout=RESYNC + 60, interval=0.25)
        noticed = time.monotonic() - t_crds
        assert applied["status"] == "True", applied
        assert noticed <= RESYNC + MARGIN, f"KEDA noticed {noticed:.1f} s after its CRDs, resync {RESYNC:.0f} s"
        assert op.proc is not None and op.proc.poll() is None  # the same process: no restart
        wait_for("KEDA's HPA reading the metric (ScalingActive)", lambda: hpa_active(k8s, ns, name), timeout=180,
                 interval=1)
        server = Server(name, ns, str(k8s.kubectl), str(k8s.kubeconfig))
        wait_for("the server's Ready pod", server.ready_urls, timeout=60)
        assert server.replicas() == 1
        env = {**os.environ, "KUBECONFIG": str(k8s.kubeconfig),
               "PATH": os.pathsep.join([str(k8s.local.bin_dir), os.environ.get("PATH", "")])}
        t_load = time.monotonic()
        load = subprocess.Popen([sys.executable, "-m", "e2e.load", *load_args, "-n", ns], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for("KEDA's HPA scaling the server to 3", lambda: server.replicas() == 3, timeout=180, interval=1)
            up_spec = time.monotonic() - t_load
            wait_for("3 Ready pods", lambda: len(server.ready_urls()) == 3, timeout=180, interval=1)
            up_ready = time.monotonic() - t_load
        finally:
            load.send_signal(signal.SIGTERM)
            out, _ = load.communicate(timeout=60)
        print(f"--- python -m e2e.load {shlex.join(load_args)} -n {ns}\n{out}")
        assert load.returncode == 0 and "streams of up to" in out, out
        print(f"KEDA's CRDs Established {t_crds - t_op:.1f} s after the operator started; noticed by the operator "
              f"{noticed:.1f} s later (--resync-seconds {RESYNC:.0f}); KEDA up in "
              f"{scaling.keda.startup_seconds:.1f} s; under the README's load: spec.replicas 3 after {up_spec:.1f} s, "
              f"3 pods Ready after {up_ready:.1f} s")
    finally:
        op.stop()  # first: it would apply again the ScaledObjects KEDA's stop deletes
        print(op.log_tail(30))
        if scaling is not None:
            print(scaling.keda.log_tail(10))
            scaling.stop()
