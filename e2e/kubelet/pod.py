"""One pod on a fake node: a worker thread that runs its containers and writes its status.

The worker owns the pod from binding to removal: it takes a 127.x IP, pulls and starts every container
(``spec.containers``; init containers are not run; an image ``images.yaml`` says no registry serves fails to pull
as on a kubelet), polls exits and probes every 0.25 s, patches
``pods/<name>/status`` (merge patch) whenever the status changes, and on ``deletionTimestamp``
stops the processes (SIGTERM, SIGKILL after the grace period) and deletes the pod with grace 0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from e2e.kubelet.container import ContainerRunner
from e2e.kubelet.images import ImageRule, container_env, launch_spec, pull_error
from e2e.kubelet.nodes import now
from e2e.kubelet.rest import JSON, ApiError, Rest

log = logging.getLogger("kubelet.pod")
OUR_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
MAX_GRACE = 30.0


@dataclass
class PodContext:
    """What a pod worker needs from its kubelet."""

    rest: Rest
    rules: list[ImageRule]
    workdir: Path
    backoff_base: float
    host_ip: Callable[[str], str]  # node name → node IP
    gpu_product: Callable[[str], str]  # node name → nvidia.com/gpu.product
    allocate_ip: Callable[[], str]
    release_ip: Callable[[str], None]


class PodWorker(threading.Thread):
    def __init__(self, ctx: PodContext, pod: JSON) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.ctx = ctx
        self.pod = pod
        self.uid: str = meta["uid"]
        self.ref = f"{meta['name']}_{meta['namespace']}({self.uid})"
        self.path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        self.wake = threading.Event()
        self.gone = False  # the API object is deleted
        self.shutdown = False  # the kubelet stops
        self.lock = threading.Lock()
        self.ip = ""
        self.runners: list[ContainerRunner] = []
        self.transitions: dict[str, tuple[str, str]] = {}
        self.sent: JSON | None = None
        self.start_time = now()

    def update(self, pod: JSON) -> None:
        with self.lock:
            self.pod = pod
        self.wake.set()

    def mark_gone(self) -> None:
        self.gone = True
        self.wake.set()

    def stop(self) -> None:
        self.shutdown = True
        self.wake.set()

    def pids(self) -> list[int]:
        return [r.proc.pid for r in self.runners if r.proc is not None]

    def run(self) -> None:
        self.ip = self.ctx.allocate_ip()
        pod_dir = self.ctx.workdir / f"{self.pod['metadata']['namespace']}_{self.pod['metadata']['name']}_{self.uid}"
        pod_dir.mkdir(parents=True, exist_ok=True)
        policy = self.pod["spec"].get("restartPolicy", "Always")
        self.runners = [ContainerRunner(c, pod_dir, policy, self.ctx.backoff_base)
                        for c in self.pod["spec"]["containers"]]
        try:
            while True:
                with self.lock:
                    pod = self.pod
                if self.shutdown:
                    self._kill_all(2.0)
                    return
                if self.gone or pod["metadata"].get("deletionTimestamp"):
                    self._terminate(pod)
                    return
                try:
                    self._sync(pod, pod_dir)
                except ApiError as exc:
                    if exc.status == 404:
                        self.gone = True
                        continue
                    log.warning("%s: %s", self.ref, exc)
                except Exception:
                    log.exception("%s: sync failed", self.ref)
                self.wake.wait(0.25)
                self.wake.clear()
        finally:
            self._kill_all(0.5)
            self.ctx.release_ip(self.ip)

    def _grace(self, pod: JSON) -> float:
        g = pod["metadata"].get("deletionGracePeriodSeconds")
        if g is None:
            g = pod["spec"].get("terminationGracePeriodSeconds", 30)
        return min(float(g), MAX_GRACE)

    def _kill_all(self, grace: float) -> None:
        threads = [threading.Thread(target=r.kill, args=(grace,)) for r in self.runners]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _terminate(self, pod: JSON) -> None:
        self._kill_all(self._grace(pod))
        if self.gone:
            return
        try:
            self.ctx.rest.delete(self.path, {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}})
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("%s: delete: %s", self.ref, exc)

    def _sync(self, pod: JSON, pod_dir: Path) -> None:
        t = time.monotonic()
        node = pod["spec"]["nodeName"]
        for r in self.runners:
            r.poll(self.ref)
            r.tick(t)
            if r.wants_start(t):
                failed = pull_error(self.ctx.rules, r.spec.get("image", ""))
                if failed is not None:  # the kubelet pulls before it makes the container's config
                    r.pull_failed(failed)
                    continue
                try:
                    env = container_env(self.ctx.rest, pod, r.spec)
                    argv, full_env = launch_spec(self.ctx.rules, pod, r.spec, env, self.ip,
                                                 self.ctx.gpu_product(node))
                except (ApiError, KeyError, LookupError) as exc:
                    r.config_error("CreateContainerConfigError", str(exc))
                    continue
                r.start(argv, full_env, pod_dir)
            r.run_probes(self.ip, self._grace(pod))
        status = self._status(pod)
        if status != self.sent:
            self.ctx.rest.merge_patch(f"{self.path}/status", {"status": status})
            self.sent = status

    def _cond(self, kind: str, ok: bool, reason: str = "") -> JSON:
        value = "True" if ok else "False"
        old = self.transitions.get(kind)
        if old is None or old[0] != value:
            self.transitions[kind] = (value, now())
        c: JSON = {"type": kind, "status": value, "lastProbeTime": None,
                   "lastTransitionTime": self.transitions[kind][1]}
        if reason:
            c["reason"] = reason
        return c

    def _status(self, pod: JSON) -> JSON:
        statuses = [r.status() for r in self.runners]
        all_ready = all(r.ready for r in self.runners)
        ever = any(r.pid for r in self.runners)
        if all(r.done for r in self.runners):
            ok = all(r.state["terminated"]["exitCode"] == 0 for r in self.runners)
            phase = "Succeeded" if ok else "Failed"
        else:
            phase = "Running" if ever else "Pending"
        gates = [g["conditionType"] for g in pod["spec"].get("readinessGates") or []]
        foreign = [c for c in pod.get("status", {}).get("conditions") or [] if c["type"] not in OUR_CONDITIONS]
        gates_ok = all(any(c["type"] == g and c["status"] == "True" for c in foreign) for g in gates)
        not_ready = "" if all_ready else ("PodCompleted" if phase in ("Succeeded", "Failed")
                                          else "ContainersNotReady")
        conditions = [
            self._cond("PodReadyToStartContainers", True), self._cond("Initialized", True),
            self._cond("ContainersReady", all_ready, not_ready),
            self._cond("Ready", all_ready and gates_ok, not_ready or ("" if gates_ok else "ReadinessGatesNotReady")),
            *([] if any(c["type"] == "PodScheduled" for c in foreign) else [self._cond("PodScheduled", True)]),
            *foreign,
        ]
        host_ip = self.ctx.host_ip(pod["spec"]["nodeName"])
        return {"phase": phase, "conditions": conditions, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
                "podIP": self.ip, "podIPs": [{"ip": self.ip}], "startTime": self.start_time,
                "containerStatuses": statuses}
