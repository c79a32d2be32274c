"""``python -m e2e.cluster up``: start the local control plane with fake GPU nodes, print the
``export KUBECONFIG=...`` line and run until Ctrl-C (or SIGTERM), then tear everything down.

Binaries come from ``python -m e2e.build_k8s`` (its cache, or ``KUBEBUILDER_ASSETS``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from e2e.cluster.launcher import Cluster, ClusterError, NodeOptions


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
    a = p.parse_args(argv)
    if a.bin_dir is None:
        from e2e.build_k8s import build
        a.bin_dir = build()
    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # during start-up: unwind, start() cleans up
    cluster = Cluster(a.bin_dir, NodeOptions(a.nodes, a.gpus, a.gpu_product, backoff_base=a.backoff_base),
                      workdir=a.workdir)
    try:
        cluster.start()
    except ClusterError as exc:
        print(f"cluster start failed: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"# cluster ready in {cluster.startup_seconds:.1f} s; logs in {cluster.workdir}/logs; "
          "Ctrl-C stops it", file=sys.stderr)
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    print(f"export PATH={a.bin_dir}:$PATH")
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
