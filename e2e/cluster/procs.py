"""Processes of the local cluster: start each in its own process group with its log in a file,
stop it (SIGTERM to the group, SIGKILL after a grace period), and find stragglers.

Every process the cluster starts carries ``E2E_CLUSTER_ID=<id>`` in its environment (the fake
kubelet passes it on to the pod processes it runs), so :func:`marked_pids` finds all of them through
``/proc/<pid>/environ``, whatever their parent. Components also get ``PR_SET_PDEATHSIG`` (SIGKILL; the
fake kubelet SIGTERM, so it stops its pod processes), so they stop even when the launcher itself is
killed with SIGKILL (a SIGTERMed kube-apiserver whose etcd is gone may never exit).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

MARKER = "E2E_CLUSTER_ID"
_PR_SET_PDEATHSIG = 1
_prctl: Callable[..., int] | None
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def _death_signal(sig: int) -> Callable[[], None]:
    def setup() -> None:
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, sig)
    return setup


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Component:
    """One process of the control plane (etcd, kube-apiserver, ...), logging to ``<dir>/<name>.log``."""

    def __init__(self, name: str, argv: Sequence[str], log_dir: Path, env: dict[str, str],
                 cwd: Path | None = None, death_signal: int = signal.SIGKILL) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=cwd, start_new_session=True,
            preexec_fn=_death_signal(death_signal),
        )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the component's log."""
        try:
            data = self.log_path.read_bytes()[-64 * 1024:]
        except OSError:
            return ""
        return "\n".join(data.decode(errors="replace").splitlines()[-lines:])

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, wait up to ``grace`` seconds, then SIGKILL the group."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):  # nothing else may stay in the group
            os.killpg(self.pid, signal.SIGKILL)
        self._log.close()


def marked_pids(cluster_id: str) -> list[int]:
    """PIDs of live (non-zombie) processes whose environment holds ``E2E_CLUSTER_ID=cluster_id``."""
    needle = f"{MARKER}={cluster_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
            if needle not in env.split(b"\0"):
                continue
            if pid_alive(int(entry)):
                found.append(int(entry))
        except OSError:
            continue
    return found


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def kill_pids(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def wait_http(url: str, component: Component, timeout: float,
              ssl_ctx: ssl.SSLContext | None = None) -> None:
    """Poll ``url`` until it answers 200; raise RuntimeError with the log tail if the component
    exits or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not component.alive():
            raise RuntimeError(f"{component.name} exited with {component.proc.returncode}; "
                               f"log {component.log_path}:\n{component.tail()}")
        try:
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),  # never via a proxy
                                                 urllib.request.HTTPSHandler(context=ssl_ctx))
            with opener.open(url, timeout=2) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except Exception as exc:  # any failure means "not yet"
            last = str(exc)
        time.sleep(0.2)
    raise RuntimeError(f"{component.name} not ready at {url} after {timeout:.0f} s ({last}); "
                       f"log {component.log_path}:\n{component.tail()}")
