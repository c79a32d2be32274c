"""The fake kubelet: registers the nodes, then list-watches pods bound to them and runs one
:class:`PodWorker` per pod (see ``pod.py``). Pod IPs come from 127.1.0.0/16, handed out in order from a
random start and not reused while the range has unused addresses left.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from e2e.kubelet.images import ImageRule
from e2e.kubelet.nodes import NodeSpec, heartbeat, register
from e2e.kubelet.pod import PodContext, PodWorker
from e2e.kubelet.rest import JSON, ApiError, Rest
from e2e.kubelet.server import serve

log = logging.getLogger("kubelet")
POD_CIDR = ipaddress.ip_network("127.1.0.0/16")


class IPAllocator:
    """Loopback pod IPs, round-robin over ``POD_CIDR`` skipping addresses in use, from a random start: two local
    clusters on one machine (parallel test sessions) would otherwise hand out the same first addresses and
    their pods' ports would collide."""

    def __init__(self, cidr: ipaddress.IPv4Network = POD_CIDR) -> None:
        self.cidr = cidr
        self.hosts = [str(h) for h in cidr.hosts()][1:]  # skip the network's first address (127.1.0.1)
        self.used: set[str] = set()
        self.next = random.randrange(len(self.hosts))
        self.lock = threading.Lock()

    def allocate(self) -> str:
        with self.lock:
            for _ in range(len(self.hosts)):
                ip = self.hosts[self.next]
                self.next = (self.next + 1) % len(self.hosts)
                if ip not in self.used:
                    self.used.add(ip)
                    return ip
        raise RuntimeError(f"no free pod IP left in {self.cidr}")

    def release(self, ip: str) -> None:
        with self.lock:
            self.used.discard(ip)


class Kubelet:
    def __init__(self, rest: Rest, nodes: list[NodeSpec], rules: list[ImageRule], workdir: Path,
                 backoff_base: float, pod_cidr: ipaddress.IPv4Network = POD_CIDR) -> None:
        self.rest = rest
        self.nodes = {n.name: n for n in nodes}
        self.workers: dict[str, PodWorker] = {}
        self.finished: set[str] = set()  # uids whose worker has ended: never restarted
        self.stop_event = threading.Event()
        ips = IPAllocator(pod_cidr)
        self.ctx = PodContext(rest, rules, workdir, backoff_base,
                              host_ip=lambda n: self.nodes[n].ip,
                              gpu_product=lambda n: self.nodes[n].gpu_product,
                              allocate_ip=ips.allocate, release_ip=ips.release)

    def run(self) -> None:
        """Serve container logs, register nodes, start the heartbeat and the pod informer (daemon
        threads); return."""
        port = serve([n.ip for n in self.nodes.values()], self._log_lookup, self.stop_event, self.ctx.workdir)
        self.nodes = {k: replace(n, kubelet_port=port) for k, n in self.nodes.items()}
        for spec in self.nodes.values():
            register(self.rest, spec)
        threading.Thread(target=heartbeat, args=(self.rest, list(self.nodes.values()), self.stop_event),
                         name="heartbeat", daemon=True).start()
        threading.Thread(target=self._informer, name="informer", daemon=True).start()
        log.info("registered %s", ", ".join(self.nodes))

    def _log_lookup(self, ns: str, pod: str, container: str) -> tuple[Path, Callable[[], bool]] | None:
        for w in list(self.workers.values()):
            meta = w.pod["metadata"]
            if meta["namespace"] == ns and meta["name"] == pod:
                for r in w.runners:
                    if r.name == container:
                        return r.log_path, w.is_alive
        return None

    def shutdown(self) -> None:
        """Stop every pod's processes (short grace) and wait for the workers."""
        self.stop_event.set()
        workers = list(self.workers.values())
        for w in workers:
            w.stop()
        for w in workers:
            w.join(10)

    def _handle(self, kind: str, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if kind == "DELETED" or pod["spec"].get("nodeName") not in self.nodes:
            if worker is not None:
                worker.mark_gone()
                del self.workers[uid]
                self.finished.add(uid)
            return
        if worker is None:
            if uid in self.finished:
                return
            worker = self.workers[uid] = PodWorker(self.ctx, pod)
            worker.start()
        else:
            worker.update(pod)
        for u in [u for u, w in self.workers.items() if not w.is_alive() and u != uid]:
            self.finished.add(u)
            del self.workers[u]

    def _informer(self) -> None:
        while not self.stop_event.is_set():
            try:
                listing = self.rest.get("/api/v1/pods", fieldSelector="spec.nodeName!=")
                seen = set()
                for pod in listing["items"]:
                    seen.add(pod["metadata"]["uid"])
                    self._handle("ADDED", pod)
                for uid in [u for u in self.workers if u not in seen]:
                    self._handle("DELETED", self.workers[uid].pod)
                rv = listing["metadata"]["resourceVersion"]
                while not self.stop_event.is_set():
                    for ev in self.rest.watch("/api/v1/pods", rv, fieldSelector="spec.nodeName!="):
                        rv = ev["object"]["metadata"]["resourceVersion"]
                        if ev["type"] != "BOOKMARK":
                            self._handle(ev["type"], ev["object"])
            except ApiError as exc:
                if exc.status != 410:
                    log.warning("pod watch: %s; relisting", exc)
                    time.sleep(1)
            except Exception as exc:
                if self.stop_event.is_set():
                    return
                log.warning("pod watch: %s; relisting", exc)
                time.sleep(1)
