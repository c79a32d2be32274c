"""``kubectl sglang tune`` on the local control plane (issue 17 item 5): ``tune start`` creates an SGLangTuning of a
server (refused before sending when the server does not exist, with the closest name); a tuning whose status holds
a recommendation (written here as the controller would) is shown by ``tune status`` and written into its server by
``tune apply`` with undo's writer; then the user's own file applied again leaves no field ``tune apply`` wrote
behind: client-side (the last-applied annotation) on one server, ``--server-side`` (field manager ``kubectl``, no
``--force-conflicts``) on the other. No operator runs: this is about the spec's field ownership only (a few
seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import K8sCluster
from sglang_operator.api.tuning_status import BestPoint, SGLangTuningStatus, Trial, TrialSettings

pytestmark = [pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]
CLIENT, SERVER = "tune-csa", "tune-ssa"


def manifest(name: str) -> dict[str, Any]:
    """The published regressed server (1/1/2, maxRunningRequests unset) under ``name``."""
    out: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-regressed.yaml").read_text())
    out["metadata"]["name"] = name
    return out


def apply(k8s: K8sCluster, ns: str, name: str, body: dict[str, Any]) -> None:
    mode = ["--server-side"] if name == SERVER else []
    k8s.run("apply", "-n", ns, *mode, "-f", "-", input=json.dumps(body))


def cli(k8s: K8sCluster, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "sglang_operator.entry.cli", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "KUBECONFIG": str(k8s.kubeconfig)})
    if ok:
        assert proc.returncode == 0, f"sglang-operator {' '.join(args)}: {proc.stderr}"
    return proc


def recommended(server: str) -> dict[str, Any]:
    """A finished tuning's status (API models): 3/1/4 with 16 running requests beat the control trial."""
    control = Trial(name=f"{server}-t-trial-0", settings=TrialSettings(speculative=False), verdict="Completed",
                    objective=31.0)
    won = TrialSettings(num_steps=3, eagle_topk=1, num_draft_tokens=4, max_running_requests=16)
    best = Trial(name=f"{server}-t-trial-1", settings=won, verdict="Completed", objective=52.0)
    return SGLangTuningStatus(
        phase="Succeeded", progress="1/1", trials=[control, best], control_trial=control.name,
        best=BestPoint(trial=best.name, settings=won, summary=won.summary(), objective=52.0, speedup=52.0 / 31.0),
    ).dump()


def test_tune_start_status_and_apply_then_the_users_file_replaces_it_both_ways(
    k8s_cluster: K8sCluster, namespace: str
) -> None:
    ns = namespace
    k8s_cluster.install_crd()
    k8s_cluster.install_crd(ROOT / "crds" / "sglangtunings.yaml", "sglangtunings.sglang-operator.io")
    for name in (CLIENT, SERVER):
        apply(k8s_cluster, ns, name, manifest(name))
    users = {n: k8s_cluster.get("sglangserver", n, "-n", ns)["spec"] for n in (CLIENT, SERVER)}

    missing = cli(k8s_cluster, "tune", "start", "tune-csb", "-n", ns, ok=False)
    assert missing.returncode == 1 and "did you mean tune-csa?" in missing.stderr, missing.stderr
    started = cli(k8s_cluster, "tune", "start", CLIENT, "-n", ns, "--steps", "1-6", "--concurrency", "1,16")
    created = k8s_cluster.get("sglangtunings", "-n", ns)["items"]
    assert len(created) == 1 and created[0]["metadata"]["name"].startswith(f"{CLIENT}-tune-")
    assert created[0]["metadata"]["name"] in started.stdout
    assert created[0]["spec"]["parameters"]["numSteps"] == {"min": 1, "max": 6, "step": 1}  # the CRD's default

    for name in (CLIENT, SERVER):
        tuning = f"{name}-t"
        k8s_cluster.apply({"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning",
                           "metadata": {"name": tuning}, "spec": {"serverRef": {"name": name}}}, ns)
        k8s_cluster.run("patch", "sglangtuning", tuning, "-n", ns, "--subresource=status", "--type=merge", "-p",
                        json.dumps({"status": recommended(name)}))
        shown = cli(k8s_cluster, "tune", "status", tuning, "-n", ns).stdout
        assert "best: 3/1/4 mrr 16" in shown and "1.68× no speculation" in shown, shown
        out = cli(k8s_cluster, "tune", "apply", tuning, "-n", ns).stdout
        print(out)
        assert f"sglangserver/{name} spec set to 3/1/4 mrr 16" in out
        assert ("last-applied-configuration" in out) == (name == CLIENT)
        assert ("field manager kubectl owns it" in out) == (name == SERVER)
        snippet = yaml.safe_load(out.split("for your Git repository (the fields of the winner):\n", 1)[1])
        assert snippet["spec"]["speculative"]["numDraftTokens"] == 4
        assert snippet["spec"]["memory"]["maxRunningRequests"] == 16
        spec = k8s_cluster.get("sglangserver", name, "-n", ns)["spec"]
        assert (spec["speculative"]["numSteps"], spec["speculative"]["numDraftTokens"]) == (3, 4)
        assert spec["memory"]["maxRunningRequests"] == 16
        again = cli(k8s_cluster, "tune", "apply", tuning, "-n", ns).stdout
        assert "already: nothing written" in again

    for name in (CLIENT, SERVER):  # the user's own file again: nothing tune apply wrote stays behind
        apply(k8s_cluster, ns, name, manifest(name))
        spec = k8s_cluster.get("sglangserver", name, "-n", ns)["spec"]
        assert "numDraftTokens" not in spec["speculative"] and "maxRunningRequests" not in spec["memory"], spec
        assert spec == users[name]
