"""The demo: the operator on a local control plane, serving the published known-good sample.

    python -m e2e.demo               # build/reuse binaries, start the cluster and the operator, apply the
                                     # known-good sample, watch it become Ready, measure it, then exit
    python -m e2e.demo --regress     # ... then apply the regressed configuration and measure again
    python -m e2e.demo --keep        # keep everything running until Ctrl-C (prints the KUBECONFIG export)

Every SGLang pod runs the project's simulator (``sglang-sim``) on a fake GPU node; throughput figures are
the simulator's calibrated model of Qwen3.6-27B on 2×A6000, not a real GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.build_k8s import build
from e2e.cluster import Cluster, NodeOptions
from e2e.operator_proc import OperatorProcess
from sglang_operator.clients.loadgen import probe

ROOT = Path(__file__).resolve().parents[1]
NAME = "qwen36-27b"


def kubectl(cluster: Cluster, *args: str, input: str | None = None) -> str:
    out = subprocess.run([str(cluster.kubectl), f"--kubeconfig={cluster.kubeconfig}", *args], input=input,
                         capture_output=True, text=True, check=True)
    return out.stdout


def status(cluster: Cluster) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(kubectl(cluster, "get", "sgls", NAME, "-o", "json"))
    return obj.get("status") or {}


def wait_ready(cluster: Cluster, revision: str | None, timeout: float = 180) -> dict[str, Any]:
    """Poll until the server is Ready at a revision other than ``revision``; print the table on change."""
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        lines = kubectl(cluster, "get", "sgls", NAME).splitlines()
        row = lines[1].rsplit(None, 1)[0]  # without AGE, which changes every poll
        if row != last:
            print(lines[0] if not last else "", lines[1], sep="\n" if not last else "")
            last = row
        st = status(cluster)
        if st.get("phase") == "Ready" and st.get("effective") and (revision is None or st["revision"] != revision):
            return st
        time.sleep(2)
    raise SystemExit(f"demo: {NAME} not Ready after {timeout:.0f} s; status: {json.dumps(status(cluster))}")


def show_effective(st: dict[str, Any]) -> None:
    eff = {k: v for k, v in st["effective"].items() if k != "observedAt"}
    print("\n-- what SGLang reports it runs (GET /server_info; SGLang reports NEXTN as EAGLE):")
    print("   " + ", ".join(f"{k}={v}" for k, v in sorted(eff.items())))
    print(f"-- command: {st['command']}")


def measure(cluster: Cluster) -> dict[str, Any]:
    """One single-stream 512-token coding request; returns the figures for the summary."""
    pods = json.loads(kubectl(cluster, "get", "pods", "-l", f"app.kubernetes.io/instance={NAME}", "-o", "json"))
    ip = next(p["status"]["podIP"] for p in pods["items"] if not p["metadata"].get("deletionTimestamp"))
    print(f"\n-- one 512-token coding request to http://{ip}:30000 (single stream)")
    res = asyncio.run(probe(f"http://{ip}:30000", max_tokens=512)).results[0]
    print(f"   {res.completion_tokens} tokens, TTFT {res.ttft_s or 0:.2f} s, {res.decode_tok_s:.1f} tok/s (wall clock)")
    time.sleep(3)
    st = status(cluster)
    print(kubectl(cluster, "get", "sgls", NAME).rstrip())
    return {"steps": st["effective"].get("numSteps"), "draft": st["effective"].get("numDraftTokens"),
            "accept": st.get("acceptLength"), "tps": st.get("tokensPerSecond"), "client": res.decode_tok_s}


def summary(rows: dict[str, dict[str, Any]]) -> None:
    print("\n-- summary (simulated Qwen3.6-27B, TP 2 on 2x RTX A6000; published: 47-57 vs 35.8 tok/s)")
    print(f"   {'config':<12}{'steps':>6}{'draft':>7}{'accept len':>12}{'tok/s (metrics)':>17}{'tok/s (client)':>16}")
    for name, r in rows.items():
        print(f"   {name:<12}{r['steps']!s:>6}{r['draft']!s:>7}{r['accept']!s:>12}{r['tps']!s:>17}"
              f"{r['client']:>16.1f}")


def apply_sample(cluster: Cluster, name: str) -> None:
    obj = yaml.safe_load((ROOT / "samples" / name).read_text())
    print(f"\n-- kubectl apply -f samples/{name}")
    print(kubectl(cluster, "apply", "-f", "-", input=json.dumps(obj)).rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m e2e.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--regress", action="store_true", help="then apply the regressed configuration")
    parser.add_argument("--keep", action="store_true", help="keep running until Ctrl-C")
    args = parser.parse_args()
    cluster = Cluster(build(), NodeOptions())
    op: OperatorProcess | None = None
    workdir: Path | None = None
    try:
        cluster.start()
        print(f"-- local control plane ready in {cluster.startup_seconds:.1f} s")
        print(kubectl(cluster, "get", "nodes", "-L", "nvidia.com/gpu.product").rstrip())
        print(kubectl(cluster, "apply", "--server-side", "-f", str(ROOT / "crds" / "sglangservers.yaml")).rstrip())
        kubectl(cluster, "wait", "--for=condition=Established", "crd/sglangservers.sglang-operator.io")
        workdir = Path(tempfile.mkdtemp(prefix="sglang-demo-"))
        op = OperatorProcess(cluster.kubeconfig, workdir / "operator.log", status_interval=2)
        op.start()
        print(f"-- operator running (log: {op.log_path})")
        apply_sample(cluster, "qwen3.6-27b-known-good.yaml")
        st = wait_ready(cluster, None)
        show_effective(st)
        rows = {"known-good": measure(cluster)}
        if args.regress:
            apply_sample(cluster, "qwen3.6-27b-regressed.yaml")
            st = wait_ready(cluster, st["revision"])
            show_effective(st)
            rows["regressed"] = measure(cluster)
        summary(rows)
        if args.keep:
            print(f"\nexport KUBECONFIG={cluster.kubeconfig}\nexport PATH={cluster.bin_dir}:$PATH\n"
                  "# Ctrl-C stops the operator and the cluster")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        if op is not None:
            op.stop()
        cluster.stop()
        if workdir is not None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
