"""``python -m e2e.cluster up``: start the local control plane with fake GPU nodes, install the project's CRDs
(``crds/*.yaml``, server-side apply; ``--no-crds`` leaves them out), print the ``export KUBECONFIG=...`` and
``export PATH=...`` lines for a second shell and run until Ctrl-C (or SIGTERM), then tear everything down.

The PATH line puts the control plane's ``kubectl`` and this interpreter's ``bin`` directory first, so
``sglang-operator`` and ``kubectl sglang`` (the plugin ``kubectl-sglang``, installed into the virtualenv by
``pip install -e .``) are found in a shell that has not activated the virtualenv.
Binaries come from ``python -m e2e.build_k8s`` (its cache, or ``KUBEBUILDER_ASSETS``).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a cluster and keep it running until Ctrl-C")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--gpus", type=int, default=8, help="nvidia.com/gpu per node")
    up.add_argument("--gpu-product", default="NVIDIA-RTX-A6000")
    up.add_argument("--backoff-base", type=float, default=10.0, help="CrashLoopBackOff start, seconds")
    up.add_argument("--workdir", type=Path, default=None, help="default: a new temp dir")
    up.add_argument("--bin-dir", type=Path, default=None, help="default: python -m e2e.build_k8s")
    up.add_argument("--keep", action="store_true", help="keep the workdir (logs, etcd) at exit")
    up.add_argument("--pod-cidr", default=None, help="loopback network for pod IPs (default: 127.1.0.0/16)")
    up.add_argument("--no-crds", action="store_true", help="do not install the project's CRDs (crds/)")
    a = p.parse_args(argv)
    if a.bin_dir is None:
        from e2e.build_k8s import build
        a.bin_dir = build()
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
    if not a.no_crds:
        try:
            crds = install_crds(cluster)
        except subprocess.CalledProcessError as exc:
            print(f"CRD install failed: {exc.stderr}", file=sys.stderr)
            cluster.stop(keep_workdir=a.keep)
            return 1
        print(f"# CRDs installed: {', '.join(crds)}", file=sys.stderr)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"# cluster ready in {cluster.startup_seconds:.1f} s; logs in {cluster.workdir}/logs; "
          "Ctrl-C stops it", file=sys.stderr)
    print("\n".join(exports(cluster)))
    sys.stdout.flush()
    try:
        while not stop.wait(1.0):
            dead = [c.name for c in cluster.components if not c.alive()]
            if dead:
                print(f"component(s) exited: {', '.join(dead)}; stopping", file=sys.stderr)
                break
    finally:
        left = cluster.stop(keep_workdir=a.keep)
        print(f"# stopped{'; killed stragglers ' + str(left) if left else ''}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
