"""Leader election against the real API server (issue 10): two ``sglang-operator run --leader-elect`` processes,
each with its own ServiceAccount token so the API server's audit log tells their requests apart.

- only the Lease holder reconciles and observes: while both run, the candidate makes no write at all (audit log)
  and logs no handler; the leader applies the children and brings the sample to Ready;
- SIGKILL of the leader: the candidate holds the Lease within the lease duration plus one retry period
  (printed), then reconciles a spec change;
- SIGTERM of a leader releases the Lease (empty holder) and exits 0;
- a leader whose Lease is taken from it exits with status 1 within the renew deadline.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import audit
from e2e.conftest import K8sCluster, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.tests.test_chart_rbac import token_kubeconfig

# local_cluster: the audit log and the simulator image mapping exist on the local control plane only.
pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "qwen3.6-27b-known-good.yaml"
FAST_SIM = [{"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"}, {"name": "SGLANG_SIM_TIME_SCALE", "value": "20"}]
LEASE = "sglang-operator-e2e"
DURATION, DEADLINE, RETRY = 6.0, 4.0, 1.0  # seconds: short, so the test is quick; ratios as the defaults


@pytest.fixture
def accounts(k8s_cluster: K8sCluster, namespace: str, tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Kubeconfigs of two ServiceAccounts ``op-a`` and ``op-b`` of ``namespace``, bound to cluster-admin."""
    k8s_cluster.run("apply", "--server-side", "-f", str(ROOT / "crds" / "sglangservers.yaml"))
    wait_for("the CRD Established", lambda: k8s_cluster.run(  # status.conditions may not exist yet
        "wait", "--for=condition=Established", "crd/sglangservers.sglang-operator.io", check=False).returncode == 0)
    out = {}
    binding = f"leader-e2e-{namespace}"
    k8s_cluster.run("create", "clusterrolebinding", binding, "--clusterrole=cluster-admin",
                    f"--serviceaccount={namespace}:op-a", f"--serviceaccount={namespace}:op-b")
    try:
        for sa in ("op-a", "op-b"):
            k8s_cluster.run("create", "serviceaccount", sa, "-n", namespace)
            token = k8s_cluster.run("create", "token", sa, "-n", namespace, "--duration=1h").stdout.strip()
            out[sa] = token_kubeconfig(k8s_cluster, token, tmp_path / f"{sa}.kubeconfig")
        yield out
    finally:
        k8s_cluster.run("delete", "clusterrolebinding", binding, "--ignore-not-found", check=False)


def operator(kubeconfig: Path, namespace: str, log: Path) -> OperatorProcess:
    return OperatorProcess(kubeconfig, log, args=[
        "--namespace", namespace, "--leader-elect", f"--leader-elect-resource-name={LEASE}",
        f"--leader-elect-resource-namespace={namespace}", f"--leader-elect-lease-duration={DURATION}",
        f"--leader-elect-renew-deadline={DEADLINE}", f"--leader-elect-retry-period={RETRY}"])


def identity(op: OperatorProcess) -> str:
    """The holderIdentity the process logged (``waiting for lease ns/name as <identity>``)."""
    return wait_for("the operator's lease identity", lambda: next(
        (line.rsplit(" as ", 1)[1].strip() for line in op.log_text().splitlines() if "waiting for lease" in line),
        None), timeout=20)


def lease_spec(k8s: K8sCluster, namespace: str) -> dict[str, Any] | None:
    proc = k8s.run("get", "lease", LEASE, "-n", namespace, "-o", "json", check=False)
    if proc.returncode != 0:
        return None
    spec: dict[str, Any] = json.loads(proc.stdout)["spec"]
    return spec


def holder(k8s: K8sCluster, namespace: str) -> str | None:
    spec = lease_spec(k8s, namespace)
    return None if spec is None else str(spec.get("holderIdentity") or "")


def micro(value: str) -> dt.datetime:
    """A Lease's MicroTime (``2026-12-02T16:19:25.074123Z``)."""
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def ready(k8s: K8sCluster, namespace: str, name: str, not_revision: str | None = None) -> dict[str, Any] | None:
    st: dict[str, Any] = k8s.get("sglangserver", name, "-n", namespace).get("status", {})
    ok = st.get("phase") == "Ready" and st.get("effective") and st.get("revision") != not_revision
    return st if ok else None


def leader_then_candidate(k8s: K8sCluster, namespace: str, a: OperatorProcess,
                          b: OperatorProcess) -> tuple[str, str]:
    """Start ``a`` and wait until it holds the Lease, then start ``b`` (a candidate: it answers /healthz); the
    identities of ``a`` and ``b``."""
    a.start()
    id_a = identity(a)
    wait_for("op-a holding the Lease", lambda: holder(k8s, namespace) == id_a, timeout=20)
    b.start()
    return id_a, identity(b)


def sample_ready(k8s: K8sCluster, namespace: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """Apply the known-good sample (the fast simulator) and wait until it is Ready under the first leader: (the
    applied body, its name, its status)."""
    body: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    body["spec"].setdefault("env", []).extend(copy.deepcopy(FAST_SIM))
    name = body["metadata"]["name"]
    k8s.apply(copy.deepcopy(body), namespace=namespace)
    first = wait_for(f"{name} Ready (op-a)", lambda: ready(k8s, namespace, name), timeout=120)
    return body, name, first


def print_logs(*ops: OperatorProcess) -> None:
    """The end of each operator's log (80 lines, the HTTP request lines left out), for a failing test."""
    for op in ops:
        print(f"--- {op.log_path.name}\n" + "\n".join(
            line for line in op.log_tail(80).splitlines() if "HTTP Request" not in line))


def user(namespace: str, sa: str) -> str:
    return f"system:serviceaccount:{namespace}:{sa}"


def test_one_leader_reconciles_and_a_killed_leader_is_replaced(
        k8s_cluster: K8sCluster, namespace: str, accounts: dict[str, Path], tmp_path: Path) -> None:
    assert k8s_cluster.local is not None
    log = k8s_cluster.local.audit_log
    start = audit.size(log)
    a = operator(accounts["op-a"], namespace, tmp_path / "a.log")
    b = operator(accounts["op-b"], namespace, tmp_path / "b.log")
    try:
        id_a, id_b = leader_then_candidate(k8s_cluster, namespace, a, b)
        assert id_b != id_a

        body, name, first = sample_ready(k8s_cluster, namespace)
        time.sleep(3 * RETRY)  # a few observer ticks and renewals with both running

        by_a = audit.writes(log, user(namespace, "op-a"), start)
        by_b = audit.writes(log, user(namespace, "op-b"), start)
        assert {"deployments", "services", "sglangservers/status"} <= {w.resource for w in by_a}, by_a
        assert any(w.resource == "leases" for w in by_a)  # renewals are writes too
        assert by_b == [], "the candidate wrote:\n" + "\n".join(map(str, by_b))
        assert "Handler" not in b.log_text() and "acquired lease" not in b.log_text()
        assert holder(k8s_cluster, namespace) == id_a

        # SIGKILL the leader: no release; the candidate waits out the lease on its own clock
        assert a.proc is not None
        os.killpg(a.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        a.proc.wait(5)
        last = lease_spec(k8s_cluster, namespace)  # op-a's last renewal, final now
        assert last is not None and last["holderIdentity"] == id_a
        wait_for("op-b holding the Lease", lambda: holder(k8s_cluster, namespace) == id_b,
                 timeout=DURATION + 4 * RETRY, interval=0.05)
        handover = time.monotonic() - killed
        taken = lease_spec(k8s_cluster, namespace)
        assert taken is not None
        # on the Lease's own clock (both processes write the machine's time): the candidate takes over within the
        # lease duration plus one retry period (its last look at op-a's renewal may be that old) of that renewal;
        # the seconds until kubectl saw it are the machine's (a poll's process start), not the election's
        gap = (micro(taken["acquireTime"]) - micro(last["renewTime"])).total_seconds()
        print(f"\nleader election: SIGKILL of the leader -> new holder {gap:.2f} s after its last renewal on the "
              f"Lease, seen by kubectl {handover:.2f} s after the kill (lease duration {DURATION:.0f} s, retry "
              f"period {RETRY:.0f} s)")
        assert DURATION <= gap <= DURATION + RETRY + 0.5, (gap, last, taken)
        assert handover <= DURATION + 3 * RETRY, handover

        # the new leader reconciles: a spec change reaches a new Ready revision
        body["spec"]["env"].append({"name": "SGLANG_SIM_EXTRA", "value": "1"})
        after_kill = audit.size(log)
        k8s_cluster.apply(copy.deepcopy(body), namespace=namespace)
        wait_for(f"{name} Ready at a new revision (op-b)",
                 lambda: ready(k8s_cluster, namespace, name, not_revision=first["revision"]), timeout=120)
        assert "deployments" in {w.resource for w in audit.writes(log, user(namespace, "op-b"), after_kill)}
        assert audit.writes(log, user(namespace, "op-a"), after_kill) == []

        # SIGTERM: graceful stop, Lease released
        assert b.proc is not None
        os.killpg(b.proc.pid, signal.SIGTERM)
        assert b.proc.wait(30) == 0, b.log_tail()
        assert holder(k8s_cluster, namespace) == ""
    except AssertionError:
        print_logs(a, b)
        raise
    finally:
        a.stop()
        b.stop()


def test_a_leader_that_loses_its_lease_exits(k8s_cluster: K8sCluster, namespace: str,
                                             accounts: dict[str, Path], tmp_path: Path) -> None:
    op = operator(accounts["op-a"], namespace, tmp_path / "a.log")
    op.start()
    try:
        me = identity(op)
        wait_for("the operator holding the Lease", lambda: holder(k8s_cluster, namespace) == me, timeout=20)
        assert "acquired lease" in op.log_text()
        taken = time.monotonic()  # another holder takes the Lease (a merge patch: no resourceVersion precondition)
        k8s_cluster.run("patch", "lease", LEASE, "-n", namespace, "--type=merge",
                        "-p", json.dumps({"spec": {"holderIdentity": "intruder"}}))
        assert op.proc is not None
        code = op.proc.wait(DEADLINE + 3 * RETRY)
        elapsed = time.monotonic() - taken
        print(f"\nleader election: Lease taken -> exit {code} after {elapsed:.2f} s (renew deadline {DEADLINE:.0f} s)")
        assert code == 1, op.log_tail()
        assert "leader election lost" in op.log_text()
        assert holder(k8s_cluster, namespace) == "intruder"
    finally:
        op.stop()


def test_a_leader_frozen_past_the_takeover_writes_nothing_after_it(
        k8s_cluster: K8sCluster, namespace: str, accounts: dict[str, Path], tmp_path: Path) -> None:
    """Fencing (issue 15): the leader is stopped with SIGSTOP until the candidate holds the Lease, a spec change
    waits for whoever leads, then SIGCONT: the old leader's identity writes nothing after the takeover (its first
    write attempt finds the Lease run out by its own clock and ends the process); the new leader reconciles."""
    assert k8s_cluster.local is not None
    log = k8s_cluster.local.audit_log
    a = operator(accounts["op-a"], namespace, tmp_path / "a.log")
    b = operator(accounts["op-b"], namespace, tmp_path / "b.log")
    try:
        _, id_b = leader_then_candidate(k8s_cluster, namespace, a, b)
        body, name, first = sample_ready(k8s_cluster, namespace)

        assert a.proc is not None
        os.kill(a.proc.pid, signal.SIGSTOP)
        wait_for("op-b holding the Lease", lambda: holder(k8s_cluster, namespace) == id_b,
                 timeout=DURATION + 4 * RETRY, interval=0.05)
        takeover = audit.size(log)
        body["spec"]["env"].append({"name": "SGLANG_SIM_EXTRA", "value": "1"})  # a's watch gets it on SIGCONT
        k8s_cluster.apply(copy.deepcopy(body), namespace=namespace)
        time.sleep(2 * RETRY)
        os.kill(a.proc.pid, signal.SIGCONT)
        code = a.proc.wait(DEADLINE + 3 * RETRY)
        assert code == 1, a.log_tail()
        wait_for(f"{name} Ready at a new revision (op-b)",
                 lambda: ready(k8s_cluster, namespace, name, not_revision=first["revision"]), timeout=120)
        late = audit.writes(log, user(namespace, "op-a"), takeover)
        assert late == [], "the old leader wrote after the takeover:\n" + "\n".join(map(str, late))
        assert "deployments" in {w.resource for w in audit.writes(log, user(namespace, "op-b"), takeover)}
    except AssertionError:
        print_logs(a, b)
        raise
    finally:
        if a.proc is not None and a.proc.poll() is None:
            os.kill(a.proc.pid, signal.SIGCONT)
        a.stop()
        b.stop()
