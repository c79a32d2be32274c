"""``undo`` end to end (issue 19 item 4), on the local control plane with the simulator at real speed: after an
automatic rollback, ``undo`` writes the stable revision's spec back and no pod restarts (the image stays pinned to
the digest the rollback restored), the patched ``spec.rollback`` is left alone and no revision event is posted; then
the user's own file applied again replaces what ``undo`` wrote, field for field: client-side (the last-applied
annotation) on one server, ``--server-side`` (field manager ``kubectl``, no ``--force-conflicts``) on the other, side
by side. Also (item 7): the object carries no copy of the built-in probe prompt.

Fast policy (5 s intervals, 5 s warm-up, 3 samples): about three minutes for both servers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.policies import BAD, GOOD, INTERVAL, sample
from sglang_operator.api.rollback import PROBE_PROMPT

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
CLIENT, SERVER = "undo-csa", "undo-ssa"
"""One server applied client-side (``kubectl apply``), one server-side (``kubectl apply --server-side``)."""


@pytest.fixture
def operator(k8s_cluster: K8sCluster, tmp_path: Path) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path, status_interval=1.0, sample_interval=None) as op:
        yield op


def obj(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = k8s.get("sglangserver", name, "-n", ns)
    return out


def status(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any]:
    return obj(k8s, ns, name).get("status") or {}


def cond(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c["type"] == type_), {})


def wait_status(k8s: K8sCluster, ns: str, name: str, what: str, pred: Any, timeout: float = 150) -> dict[str, Any]:
    try:
        return wait_for(f"{name}: {what}", lambda: (s := status(k8s, ns, name)) and pred(s) and s, timeout=timeout,
                        interval=1)
    except AssertionError:
        print(json.dumps(status(k8s, ns, name), indent=1)[:6000])
        raise


def manifest(file: str, name: str) -> dict[str, Any]:
    out = sample(file)
    out["metadata"]["name"] = name
    return out


def apply(k8s: K8sCluster, ns: str, name: str, body: dict[str, Any]) -> None:
    """``kubectl apply`` of ``body``: client-side for :data:`CLIENT`, ``--server-side`` (no forcing) for
    :data:`SERVER`."""
    mode = ["--server-side"] if name == SERVER else []
    k8s.run("apply", "-n", ns, *mode, "-f", "-", input=json.dumps(body))


def pods(k8s: K8sCluster, ns: str, name: str) -> dict[str, tuple[str, int]]:
    """The server's pods: name -> (revision label, restarts)."""
    items = k8s.get("pods", "-n", ns, "-l", f"app.kubernetes.io/instance={name}")["items"]
    return {p["metadata"]["name"]: (p["metadata"]["labels"].get("sglang-operator.io/revision", ""),
                                    sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or []))
            for p in items if not p["metadata"].get("deletionTimestamp")}


def events(k8s: K8sCluster, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = k8s.get("events", "-n", ns, "--field-selector",
                                          f"involvedObject.name={name},reason={reason}")["items"]
    return items


def cli(k8s: K8sCluster, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "sglang_operator.entry.cli", *args], capture_output=True, text=True,
                          timeout=60, env={**__import__("os").environ, "KUBECONFIG": str(k8s.kubeconfig)})
    assert proc.returncode == 0, f"sglang-operator {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def test_undo_after_a_rollback_restarts_nothing_and_the_users_next_apply_replaces_it_both_ways(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    ns, names = namespace, (CLIENT, SERVER)
    explained = wait_for("kubectl explain of the probe prompt", lambda: k8s_cluster.run(
        "explain", "sglangserver.spec.rollback.probe.prompt", check=False).stdout, timeout=30)
    assert "Empty (the default): the operator's built-in prompt" in " ".join(explained.split()), explained
    for name in names:
        apply(k8s_cluster, ns, name, manifest(GOOD, name))
    good = {n: wait_status(k8s_cluster, ns, n, "the known-good revision promoted",
                           lambda s: s.get("stableRevision") and s.get("stableRevision") == s.get("revision")
                           and (s.get("analysis") or {}).get("phase") == "Stable")["revision"] for n in names}
    for name in names:
        body = obj(k8s_cluster, ns, name)
        size = len(json.dumps(body))
        assert PROBE_PROMPT[:60] not in json.dumps(body), "the built-in probe prompt was copied into the object"
        assert body["spec"]["rollback"]["probe"]["prompt"] == ""
        print(f"{name}: {size} bytes as stored, ledger of {len(body['status']['revisions'])}")
        assert size < 12_000, size
        apply(k8s_cluster, ns, name, manifest(BAD, name))
    spec_bad = {n: obj(k8s_cluster, ns, n)["spec"] for n in names}  # what the user's file makes of the object
    for name in names:
        wait_status(k8s_cluster, ns, name, "the regressed revision rolled back",
                    lambda s, n=name: s.get("revision") == good[n] and cond(s, "Degraded").get("reason") == "RolledBack"
                    and cond(s, "Ready").get("status") == "True")
        container = k8s_cluster.get("deployment", name, "-n", ns)["spec"]["template"]["spec"]["containers"][0]
        assert "@sha256:" in container["image"]  # the rollback pinned the digest the stable revision ran

    # a policy-only change (kubectl patch of spec.rollback), kept by undo; no revision event for it
    rejected = len(events(k8s_cluster, ns, CLIENT, "RevisionRejected"))
    k8s_cluster.run("patch", "sglangserver", CLIENT, "-n", ns, "--type=merge", "-p",
                    json.dumps({"spec": {"rollback": {"historyLimit": 9}}}))
    wait_status(k8s_cluster, ns, CLIENT, "the policy change observed",
                lambda s: s.get("observedGeneration") == obj(k8s_cluster, ns, CLIENT)["metadata"]["generation"],
                timeout=30)
    time.sleep(2)  # the handler posts its events after its status patch
    assert len(events(k8s_cluster, ns, CLIENT, "RevisionRejected")) == rejected  # said once, not per change
    updated = {n: len(events(k8s_cluster, ns, n, "Updated")) for n in names}
    before = {n: pods(k8s_cluster, ns, n) for n in names}
    templates = {n: k8s_cluster.get("deployment", n, "-n", ns)["spec"]["template"] for n in names}
    for name in names:
        out = cli(k8s_cluster, "undo", name, "-n", ns)
        print(out)
        assert f"spec set to revision {good[name]}" in out
        assert "runs already, its pods are kept" in out and "@sha256:" in out
        assert ("last-applied-configuration" in out) == (name == CLIENT)
        assert ("field manager kubectl owns it" in out) == (name == SERVER)
    for name in names:
        generation = obj(k8s_cluster, ns, name)["metadata"]["generation"]
        wait_status(k8s_cluster, ns, name, "the undo observed",
                    lambda s, g=generation: s.get("observedGeneration") == g, timeout=30)
    deadline = time.monotonic() + 4 * INTERVAL  # several observations and samples later: the same pods, unrestarted
    while time.monotonic() < deadline:
        for name in names:
            assert pods(k8s_cluster, ns, name) == before[name], name
        time.sleep(1)
    for name in names:
        assert k8s_cluster.get("deployment", name, "-n", ns)["spec"]["template"] == templates[name]
        st = status(k8s_cluster, ns, name)
        assert st["revision"] == good[name] and cond(st, "Ready").get("status") == "True"
        assert len(events(k8s_cluster, ns, name, "Updated")) == updated[name]  # the revision did not change
        spec = obj(k8s_cluster, ns, name)["spec"]
        assert spec["speculative"]["numDraftTokens"] == 4 and spec["speculative"]["numSteps"] == 3
    assert obj(k8s_cluster, ns, CLIENT)["spec"]["rollback"]["historyLimit"] == 9  # the patched policy, kept

    # the user's own file again: nothing undo wrote stays behind, client-side and server-side alike
    for name in names:
        apply(k8s_cluster, ns, name, manifest(BAD, name))
    for name in names:
        spec = obj(k8s_cluster, ns, name)["spec"]
        want = dict(spec_bad[name])
        if name == CLIENT:  # patched, never in the user's file: a later apply leaves it as any apply would
            want["rollback"] = {**want["rollback"], "historyLimit": 9}
        assert "numDraftTokens" not in spec["speculative"], spec["speculative"]
        assert spec == want
