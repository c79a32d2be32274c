"""docs/development.md "Local cluster" (the old README's section), as written: ``python -m e2e.cluster up`` in one
shell; in a second shell that has not activated the virtualenv, its two ``export`` lines, then the operator, the
fast-policy sample, ``kubectl get sgls`` and ``kubectl sglang history``. The CRDs come installed, and
``sglang-operator`` and ``kubectl sglang`` are found through the printed PATH."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e.cluster.procs import free_port
from e2e.conftest import local_bin_dir

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]


def second_shell(exports: list[str], script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``script`` in a new bash whose PATH has no virtualenv, after ``exports``."""
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/local/bin:/usr/bin:/bin"}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join([*exports, script])], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_local_cluster_steps_work_in_a_second_shell(tmp_path: Path) -> None:
    up = subprocess.Popen([sys.executable, "-m", "e2e.cluster", "up", "--nodes", "1", "--gpus", "2",
                           "--bin-dir", str(local_bin_dir()), "--pod-cidr", "127.200.0.0/16"],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
    operator: subprocess.Popen[str] | None = None
    try:
        assert up.stdout is not None
        exports = [up.stdout.readline().strip(), up.stdout.readline().strip()]
        assert exports[0].startswith("export KUBECONFIG=") and exports[1].startswith("export PATH="), exports
        crds = second_shell(exports, "kubectl get crd -o name")
        assert "customresourcedefinition.apiextensions.k8s.io/sglangservers.sglang-operator.io" in crds.stdout, crds
        found = second_shell(exports, "command -v sglang-operator kubectl-sglang kubectl")
        assert found.returncode == 0, found.stderr
        log = (tmp_path / "operator.log").open("w")
        operator = subprocess.Popen(
            ["bash", "-c", "\n".join([*exports, f"exec sglang-operator run --namespace default --liveness "
                                      f"http://127.0.0.1:{free_port()}/healthz --metrics-port {free_port()}"])],
            cwd=ROOT, env={"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/bin:/bin"},
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        applied = second_shell(exports, "kubectl apply -f samples/local/qwen3.6-27b-known-good.yaml")
        assert applied.returncode == 0, applied.stderr
        deadline, revisions = time.monotonic() + 120, [""]
        while time.monotonic() < deadline:  # promoted: the serving revision became the stable one
            got = second_shell(exports, "kubectl get sgls qwen36-27b "
                                        "-o jsonpath='{.status.stableRevision} {.status.revision}'")
            revisions = got.stdout.split()
            if len(revisions) == 2 and revisions[0] == revisions[1]:
                break
            time.sleep(1)
        else:
            raise AssertionError(f"not promoted in 120 s: {revisions}\n"
                                 + (tmp_path / "operator.log").read_text()[-3000:])
        table = second_shell(exports, "kubectl get sgls")
        assert "qwen36-27b" in table.stdout, table
        history = second_shell(exports, "COLUMNS=200 kubectl sglang history qwen36-27b")
        assert history.returncode == 0, history.stderr
        assert revisions[0][:8] in history.stdout and "Promoted" in history.stdout, history.stdout
    finally:
        if operator is not None:
            os.killpg(operator.pid, signal.SIGTERM)
            operator.wait(30)
        os.killpg(up.pid, signal.SIGINT)
        assert up.wait(60) == 0, up.stderr.read() if up.stderr else ""
