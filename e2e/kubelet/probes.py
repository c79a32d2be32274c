"""Container probes (readiness, liveness, startup) as the kubelet runs them, always against the
pod IP: httpGet (2xx/3xx is success), tcpSocket (connect), grpc (connect only). exec probes
cannot run in a fake container and count as success.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

import httpx

from e2e.kubelet.rest import JSON


def _port(value: int | str, container: JSON) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for p in container.get("ports") or []:
        if p.get("name") == value:
            return int(p["containerPort"])
    raise ValueError(f"named port {value!r} not found in container {container.get('name')}")


def probe_once(probe: JSON, pod_ip: str, container: JSON) -> tuple[bool, str]:
    """Run ``probe`` once; return (success, failure message)."""
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            h = probe["httpGet"]
            port = _port(h["port"], container)
            scheme = str(h.get("scheme", "HTTP")).lower()
            headers = {x["name"]: x["value"] for x in h.get("httpHeaders") or []}
            url = f"{scheme}://{pod_ip}:{port}{h.get('path', '/')}"
            r = httpx.get(url, headers=headers, timeout=timeout, verify=False, follow_redirects=False,
                          trust_env=False)
            if 200 <= r.status_code < 400:
                return True, ""
            return False, f"HTTP probe failed with statuscode: {r.status_code}"
        if "tcpSocket" in probe or "grpc" in probe:
            port = _port((probe.get("tcpSocket") or probe["grpc"])["port"], container)
            with socket.create_connection((pod_ip, port), timeout=timeout):
                return True, ""
        return True, ""  # exec: nothing to run it in
    except (httpx.HTTPError, OSError, ValueError) as exc:
        return False, f"probe failed: {exc}"


@dataclass
class ProbeState:
    """One probe of one container: when it runs next and its consecutive results."""

    probe: JSON
    next_at: float
    successes: int = 0
    failures: int = 0
    result: bool = False
    message: str = field(default="")

    @classmethod
    def create(cls, probe: JSON, started: float) -> ProbeState:
        return cls(probe, started + float(probe.get("initialDelaySeconds", 0)))

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def record(self, ok: bool, message: str, now: float) -> None:
        """Count one result; ``result`` flips after successThreshold / failureThreshold in a row."""
        self.next_at = now + float(self.probe.get("periodSeconds", 10))
        self.message = message
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= int(self.probe.get("successThreshold", 1)):
                self.result = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= int(self.probe.get("failureThreshold", 3)):
                self.result = False

    @property
    def failed(self) -> bool:
        """failureThreshold consecutive failures (liveness/startup: the container is killed)."""
        return self.failures >= int(self.probe.get("failureThreshold", 3))

    def run(self, pod_ip: str, container: JSON, now: float | None = None) -> None:
        ok, msg = probe_once(self.probe, pod_ip, container)
        self.record(ok, msg, time.monotonic() if now is None else now)
