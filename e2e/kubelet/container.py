"""One container of a pod, run as a local process: start, exit detection, restart back-off
(CrashLoopBackOff: immediate first restart, then 10 s doubling to 300 s, reset after 10 min of
running, like the kubelet), image pulls that fail (ErrImagePull, then ImagePullBackOff until the next pull: 10 s
doubling to 300 s, the kubelet's image back-off), probes, termination message, and the ContainerStatus it reports.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

from e2e.kubelet.nodes import now
from e2e.kubelet.probes import ProbeState
from e2e.kubelet.rest import JSON


def image_id(image: str) -> str:
    """The ``imageID`` a container runtime reports: the repository with the content digest the image resolved
    to (``docker.io/lmsysorg/sglang@sha256:…``). Here the digest is a hash of the reference's repository and tag,
    so a re-tagged image gets another digest; a reference that already holds a digest keeps it."""
    name, _, digest = image.partition("@")
    repo = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    if "/" not in repo or "." not in repo.split("/", 1)[0]:
        repo = "docker.io/" + (repo if "/" in repo else "library/" + repo)
    return f"{repo}@{digest or 'sha256:' + hashlib.sha256(name.encode()).hexdigest()}"

MAX_BACKOFF = 300.0
BACKOFF_RESET = 600.0
MESSAGE_BYTES, MESSAGE_LINES = 2048, 80  # FallbackToLogsOnError: whichever is smaller


class ContainerRunner:
    """Process and status of container ``spec`` (a pod's ``spec.containers[i]``)."""

    def __init__(self, spec: JSON, pod_dir: Path, restart_policy: str, backoff_base: float) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.log_path = pod_dir / f"{self.name}.log"
        self.restart_policy = restart_policy
        self.backoff_base = backoff_base
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.restart_count = 0
        self.crashes = 0
        self.next_start = 0.0
        self.started_mono = 0.0
        self.state: JSON = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: JSON = {}
        self.readiness: ProbeState | None = None
        self.liveness: ProbeState | None = None
        self.startup: ProbeState | None = None
        self.done = False  # terminated for good (restartPolicy does not restart it)
        self.pull_failures = 0
        self.pull_backoff_at = 0.0  # when a failed pull's ErrImagePull turns into ImagePullBackOff

    # -- process -----------------------------------------------------------------------------
    def wants_start(self, t: float) -> bool:
        return self.proc is None and not self.done and t >= self.next_start

    def start(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        if self.started_mono:
            self.restart_count += 1
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                         start_new_session=True)
        self.pid = self.proc.pid
        self.started_mono = time.monotonic()
        self.state = {"running": {"startedAt": now()}}
        t = self.started_mono
        sp = self.spec
        self.readiness = ProbeState.create(sp["readinessProbe"], t) if sp.get("readinessProbe") else None
        self.liveness = ProbeState.create(sp["livenessProbe"], t) if sp.get("livenessProbe") else None
        self.startup = ProbeState.create(sp["startupProbe"], t) if sp.get("startupProbe") else None

    def config_error(self, reason: str, message: str, retry_in: float = 2.0) -> None:
        """The container could not be started (bad env reference, no image rule)."""
        self.state = {"waiting": {"reason": reason, "message": message}}
        self.next_start = time.monotonic() + retry_in

    def pull_failed(self, message: str) -> None:
        """The image could not be pulled: waiting ``ErrImagePull`` with the runtime's ``message``; the next pull
        after the kubelet's image back-off (``backoff_base`` doubling to 300 s, ``image_manager.go``: the pod's
        UID and image are the key), shown as ``ImagePullBackOff`` from half of it (:meth:`tick`)."""
        t = time.monotonic()
        delay = min(MAX_BACKOFF, self.backoff_base * 2 ** self.pull_failures)
        self.pull_failures += 1
        self.state = {"waiting": {"reason": "ErrImagePull", "message": message}}
        self.next_start = t + delay
        self.pull_backoff_at = t + delay / 2

    def tick(self, t: float) -> bool:
        """Time-driven status changes; True if the status changed: a failed pull waits in ``ImagePullBackOff``
        with the kubelet's ``Back-off pulling image "<image>"``."""
        waiting = self.state.get("waiting") or {}
        if waiting.get("reason") == "ErrImagePull" and t >= self.pull_backoff_at:
            self.state = {"waiting": {"reason": "ImagePullBackOff",
                                      "message": f'Back-off pulling image "{self.spec.get("image", "")}"'}}
            return True
        return False

    def poll(self, pod_ref: str) -> bool:
        """Detect an exit; return True if the status changed."""
        if self.proc is None or self.proc.poll() is None:
            return False
        code = self.proc.returncode
        if code < 0:
            code = 128 - code  # killed by a signal: 128 + signal number, as runtimes report
        term: JSON = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                      "startedAt": self.state.get("running", {}).get("startedAt", now()),
                      "finishedAt": now(), "containerID": f"process://{self.pid}"}
        if code != 0 and self.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            term["message"] = self.log_tail()
        ran = time.monotonic() - self.started_mono
        self.proc = None
        restart = self.restart_policy == "Always" or (self.restart_policy == "OnFailure" and code != 0)
        if not restart:
            self.state, self.done = {"terminated": term}, True
            return True
        self.crashes = 0 if ran >= BACKOFF_RESET else self.crashes + 1
        delay = 0.0 if self.crashes <= 1 else min(MAX_BACKOFF, self.backoff_base * 2 ** (self.crashes - 2))
        self.next_start = time.monotonic() + delay
        self.last_state = {"terminated": term}
        self.state = {"waiting": {"reason": "CrashLoopBackOff", "message": (
            f"back-off {delay:.0f}s restarting failed container={self.name} pod={pod_ref}")}}
        return True

    def log_tail(self) -> str:
        try:
            data = self.log_path.read_bytes()[-MESSAGE_BYTES:]
        except OSError:
            return ""
        lines = data.decode(errors="replace").splitlines()[-MESSAGE_LINES:]
        return "\n".join(lines)

    def kill(self, grace: float) -> None:
        """SIGTERM the container's process group, SIGKILL after ``grace`` seconds; reaps it."""
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(max(wait, 0.1))
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    # -- probes ------------------------------------------------------------------------------
    def run_probes(self, pod_ip: str, grace: float) -> None:
        """Run the probes that are due; kill the process when liveness or startup fails."""
        if self.proc is None:
            return
        t = time.monotonic()
        if self.startup is not None and not self.startup.result:
            if self.startup.due(t):
                self.startup.run(pod_ip, self.spec, t)
                if self.startup.failed:
                    self.kill(grace)
            return
        for probe in (self.liveness, self.readiness):
            if probe is not None and probe.due(t):
                probe.run(pod_ip, self.spec, t)
        if self.liveness is not None and self.liveness.failed:
            self.kill(grace)

    @property
    def started(self) -> bool:
        return self.proc is not None and (self.startup is None or self.startup.result)

    @property
    def ready(self) -> bool:
        return self.started and (self.readiness is None or self.readiness.result)

    def status(self) -> JSON:
        """The ContainerStatus of this container."""
        out: JSON = {"name": self.name, "image": self.spec.get("image", ""),
                     "imageID": image_id(self.spec.get("image", "")), "ready": self.ready,
                     "started": self.started, "restartCount": self.restart_count,
                     "state": self.state, "lastState": self.last_state}
        if self.pid:
            out["containerID"] = f"process://{self.pid}"
        return out
