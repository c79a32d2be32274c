"""``python -m e2e.cluster up``: start the local control plane with fake GPU nodes, install the project's CRDs
(``crds/*.yaml``, server-side apply; ``--no-crds`` leaves them out), print the ``export KUBECONFIG=...`` and
``export PATH=...`` lines for a second shell and run until Ctrl-C (or SIGTERM, or ``python -m e2e.cluster down``),
then tear everything down.

``up --keda`` also starts KEDA v2.21.0 (its operator and metrics API server, registered with the API server) and a
Prometheus 3 on 127.0.0.1:9090 (``--prometheus-port``) scraping the SGLang pods and the operator at 127.0.0.1:9808
(``sglang-operator run``'s ``--metrics-port``; ``--operator-port``) (``sglang-operator prometheus-config``):
:func:`e2e.cluster.autoscale.start`, so ``samples/local/qwen3.6-27b-autoscaling.yaml`` (the
README's autoscaling example) scales for real. Both are built first when missing (``python -m e2e.build_keda``,
``python -m e2e.tools prometheus``).

``down`` stops the running ``up`` (each ``up`` records its pid under ``~/.cache/sglang-operator/cluster-up/``): SIGTERM,
the same clean-up as Ctrl-C, and waits until it has exited.

The PATH line puts the control plane's ``kubectl`` and this interpreter's ``bin`` directory first, so
``sglang-operator`` and ``kubectl sglang`` (the plugin ``kubectl-sglang``, installed into the virtualenv by
``pip install -e .``) are found in a shell that has not activated the virtualenv.
Binaries come from ``python -m e2e.build_k8s`` (its cache, or ``KUBEBUILDER_ASSETS``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from e2e.cluster import autoscale
from e2e.cluster.launcher import Cluster, ClusterError, NodeOptions

CRDS = Path(__file__).resolve().parents[2] / "crds"
"""The project's generated CRDs, installed by ``up``."""


def exports(cluster: Cluster) -> list[str]:
    """The two ``export`` lines a second shell needs: the cluster's kubeconfig, and a PATH with the control
    plane's binaries (``kubectl``) and this interpreter's ``bin`` directory (``sglang-operator``,
    ``kubectl-sglang``) first."""
    return [f"export KUBECONFIG={cluster.kubeconfig}",
            f"export PATH={cluster.bin_dir}:{Path(sys.executable).parent}:$PATH"]


def install_crds(cluster: Cluster, directory: Path = CRDS, timeout: float = 60) -> list[str]:
    """Server-side apply every ``*.yaml`` in ``directory`` and wait until each CRD is Established. Returns the
    CRD names. Raises ``subprocess.CalledProcessError`` when kubectl fails."""
    files = sorted(directory.glob("*.yaml"))
    kubectl = [str(cluster.kubectl), f"--kubeconfig={cluster.kubeconfig}"]
    out = subprocess.run([*kubectl, "apply", "--server-side", *(a for f in files for a in ("-f", str(f))),
                          "-o", "name"], capture_output=True, text=True, check=True, timeout=timeout).stdout
    names = out.split()
    subprocess.run([*kubectl, "wait", "--for=condition=Established", f"--timeout={int(timeout)}s", *names],
                   capture_output=True, text=True, check=True, timeout=timeout + 5)
    return [n.split("/", 1)[-1] for n in names]


def runs_dir() -> Path:
    """Where each running ``up`` records itself (``<pid>.json``: its pid and workdir) for ``down``."""
    from e2e.build_k8s import cache_root

    return cache_root() / "cluster-up"


def record_run(cluster: Cluster) -> Path:
    d = runs_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{os.getpid()}.json"
    path.write_text(json.dumps({"pid": os.getpid(), "workdir": str(cluster.workdir)}))
    return path


def is_up_process(pid: int) -> bool:
    """Whether ``pid`` runs ``python -m e2e.cluster up`` now (not a process that reused the pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"e2e.cluster" in argv and b"up" in argv


def down(timeout: float = 180) -> int:
    """Stop every running ``up`` this user started (SIGTERM: it tears down what it started, as on Ctrl-C) and wait
    until each has exited. Exit status 0, also when none runs."""
    stopped = 0
    for path in sorted(runs_dir().glob("*.json")) if runs_dir().is_dir() else []:
        pid = int(json.loads(path.read_text())["pid"])
        if not is_up_process(pid):
            path.unlink(missing_ok=True)  # a run that ended without cleaning up (SIGKILL)
            continue
        print(f"# stopping python -m e2e.cluster up (pid {pid})", file=sys.stderr)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while is_up_process(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        if is_up_process(pid):
            print(f"# pid {pid} still running after {timeout:.0f} s", file=sys.stderr)
            return 1
        path.unlink(missing_ok=True)
        stopped += 1
    print(f"# stopped {stopped} cluster(s)" if stopped else "# no python -m e2e.cluster up is running",
          file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a cluster and keep it running until Ctrl-C (or `down`)")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--gpus", type=int, default=8, help="nvidia.com/gpu per node")
    up.add_argument("--gpu-product", default="NVIDIA-RTX-A6000")
    up.add_argument("--backoff-base", type=float, default=10.0, help="CrashLoopBackOff start, seconds")
    up.add_argument("--workdir", type=Path, default=None, help="default: a new temp dir")
    up.add_argument("--bin-dir", type=Path, default=None, help="default: python -m e2e.build_k8s")
    up.add_argument("--keep", action="store_true", help="keep the workdir (logs, etcd) at exit")
    up.add_argument("--pod-cidr", default=None, help="loopback network for pod IPs (default: 127.1.0.0/16)")
    up.add_argument("--no-crds", action="store_true", help="do not install the project's CRDs (crds/)")
    up.add_argument("--keda", action="store_true",
                    help="also start KEDA (python -m e2e.build_keda) and a Prometheus scraping the SGLang pods")
    up.add_argument("--prometheus-port", type=int, default=autoscale.PROMETHEUS_PORT,
                    help=f"with --keda: Prometheus on 127.0.0.1:PORT (default {autoscale.PROMETHEUS_PORT}, the "
                         "address samples/local/qwen3.6-27b-autoscaling.yaml names)")
    up.add_argument("--operator-port", type=int, default=autoscale.OPERATOR_METRICS_PORT,
                    help="with --keda: the operator's --metrics-port on 127.0.0.1 that Prometheus scrapes (default "
                         f"{autoscale.OPERATOR_METRICS_PORT}; autoscaling reads the operator's series)")
    up.add_argument("--scrape-interval", default=autoscale.SCRAPE_INTERVAL,
                    help=f"with --keda: Prometheus' scrape interval (default {autoscale.SCRAPE_INTERVAL})")
    sub.add_parser("down", help="stop the running `up` (as Ctrl-C in its shell does)")
    a = p.parse_args(argv)
    if a.cmd == "down":
        return down()
    if a.bin_dir is None:
        from e2e.build_k8s import build
        a.bin_dir = build()
    keda_home = prometheus_dir = None
    if a.keda:  # cached builds, or built now (KEDA cold: the better part of half an hour)
        from e2e.build_keda import build as build_keda
        from e2e.tools import build_prometheus

        keda_home, prometheus_dir = build_keda(), build_prometheus()
    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # during start-up: unwind, start() cleans up
    cluster = Cluster(a.bin_dir, NodeOptions(a.nodes, a.gpus, a.gpu_product, backoff_base=a.backoff_base,
                                                    **({"pod_cidr": a.pod_cidr} if a.pod_cidr else {})),
                      workdir=a.workdir)
    try:
        cluster.start()
    except ClusterError as exc:
        print(f"cluster start failed: {exc}", file=sys.stderr)
        return 1
    run_file: Path | None = None
    scaling: autoscale.Autoscaling | None = None
    try:
        run_file = record_run(cluster)
        if not a.no_crds:
            try:
                crds = install_crds(cluster)
            except subprocess.CalledProcessError as exc:
                print(f"CRD install failed: {exc.stderr}", file=sys.stderr)
                return 1
            print(f"# CRDs installed: {', '.join(crds)}", file=sys.stderr)
        if a.keda:
            assert keda_home is not None and prometheus_dir is not None
            try:
                scaling = autoscale.start(cluster, keda_home=keda_home, prometheus_binary=prometheus_dir / "prometheus",
                                          prometheus_port=a.prometheus_port, scrape_interval=a.scrape_interval,
                                          operator_port=a.operator_port)
            except ClusterError as exc:
                print(f"KEDA start failed: {exc}", file=sys.stderr)
                return 1
            print("\n".join(scaling.describe()), file=sys.stderr)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        print(f"# cluster ready in {cluster.startup_seconds:.1f} s; logs in {cluster.workdir}/logs; "
              f"Ctrl-C (or `python -m e2e.cluster down` in another shell) stops it"
              + (", KEDA and Prometheus" if scaling else ""), file=sys.stderr)
        print("\n".join(exports(cluster)))
        sys.stdout.flush()
        while not stop.wait(1.0):
            dead = [c.name for c in cluster.components if not c.alive()]
            if scaling is not None and "prometheus" in scaling.alive():
                dead.append("prometheus")
            if dead:
                print(f"component(s) exited: {', '.join(dead)}; stopping", file=sys.stderr)
                break
    except KeyboardInterrupt:  # SIGTERM or Ctrl-C during the start-up of the CRDs or KEDA
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up runs to its end (a second Ctrl-C cuts it short)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if scaling is not None:
            scaling.stop()
        left = cluster.stop(keep_workdir=a.keep)
        if run_file is not None:
            run_file.unlink(missing_ok=True)
        print(f"# stopped{'; killed stragglers ' + str(left) if left else ''}", file=sys.stderr)
    return 0 if scaling is not None or not a.keda else 1


if __name__ == "__main__":
    sys.exit(main())
