"""``python -m e2e.kubelet``: run the fake kubelet until SIGTERM/SIGINT (then stop every pod process)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import threading
from pathlib import Path

from e2e.kubelet.images import load_rules
from e2e.kubelet.kubelet import POD_CIDR, Kubelet
from e2e.kubelet.nodes import NodeSpec
from e2e.kubelet.rest import Rest

DEFAULT_IMAGES = Path(__file__).resolve().parents[1] / "images.yaml"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m e2e.kubelet", description=__doc__)
    p.add_argument("--kubeconfig", type=Path, required=True)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--node-prefix", default="gpu-node-")
    p.add_argument("--gpus", type=int, default=8, help="nvidia.com/gpu per node")
    p.add_argument("--gpu-product", default="NVIDIA-RTX-A6000", help="nvidia.com/gpu.product label")
    p.add_argument("--cpu", default="64")
    p.add_argument("--memory", default="512Gi")
    p.add_argument("--backoff-base", type=float, default=10.0, help="CrashLoopBackOff start, seconds")
    p.add_argument("--images", type=Path, default=DEFAULT_IMAGES)
    p.add_argument("--pod-cidr", type=ipaddress.IPv4Network, default=POD_CIDR,
                   help="loopback network the pod IPs come from (one per parallel test worker)")
    p.add_argument("--workdir", type=Path, required=True, help="per-pod directories and container logs")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    a.workdir.mkdir(parents=True, exist_ok=True)
    nodes = [NodeSpec(f"{a.node_prefix}{i + 1}", f"127.0.1.{i + 1}", a.gpus, a.gpu_product, a.cpu, a.memory)
             for i in range(a.nodes)]
    kubelet = Kubelet(Rest(a.kubeconfig), nodes, load_rules(a.images), a.workdir, a.backoff_base,
                      a.pod_cidr)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    kubelet.run()
    while not stop.wait(1.0):
        pass
    logging.info("stopping: killing pod processes")
    kubelet.shutdown()


if __name__ == "__main__":
    main()
