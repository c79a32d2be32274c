"""Run ``sglang-operator run`` as a child process against a cluster (tests, demo).

The process gets ``KUBECONFIG``, a free loopback liveness port, ``SGLANG_OPERATOR_STATUS_INTERVAL`` and, unless
``args`` set them, ``--metrics-port`` (a free port: concurrent test runs never share 9808), ``--sample-interval`` and
``--allowed-prometheus-address=*`` (the tests' Prometheus listen on free ports that their servers name; the
allow-list itself is ``e2e/tests/test_admission.py``'s and the unit tests'); its log goes to a file.
:meth:`OperatorProcess.readyz` and :meth:`OperatorProcess.wait_ready` read its ``/readyz``, over HTTPS when
``args`` hold ``--metrics-secure`` (:attr:`OperatorProcess.metrics_scheme`; the certificate is not verified, as the
kubelet's probe does not).
:meth:`OperatorProcess.stop` ends it (SIGINT, then SIGKILL) and leaves no process behind.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from e2e import background
from e2e.cluster.procs import free_port


class OperatorProcess:
    """One operator process; ``start()`` waits for kopf's liveness endpoint to answer."""

    def __init__(self, kubeconfig: Path, log_path: Path, status_interval: float = 1.0,
                 args: Sequence[str] = (), sample_interval: float | None = 2.0,
                 env: dict[str, str] | None = None) -> None:
        """``args``: extra ``sglang-operator run`` arguments (e.g. ``["--namespace", "ns"]``);
        ``sample_interval``: seconds between two samples of a server (``--sample-interval``; None: each server's
        ``spec.rollback.intervalSeconds``); ``env``: extra environment (e.g. ``SGLANG_OPERATOR_EXIT_AT``)."""
        self.kubeconfig = kubeconfig
        self.args = list(args)
        given = [a.split("=", 1)[1] if "=" in a else self.args[i + 1] for i, a in enumerate(self.args)
                 if a.split("=", 1)[0] == "--metrics-port"]
        self.metrics_port = int(given[-1]) if given else free_port()
        if not given:
            self.args += ["--metrics-port", str(self.metrics_port)]
        secure = [a for a in self.args if a in ("--metrics-secure", "--no-metrics-secure")]
        self.metrics_scheme = "https" if secure and secure[-1] == "--metrics-secure" else "http"
        """``https`` when the metrics port speaks TLS (``--metrics-secure``), else ``http``."""
        self.env = dict(env or {})
        if sample_interval is not None and not any(a.split("=", 1)[0] == "--sample-interval" for a in self.args):
            self.args += ["--sample-interval", str(sample_interval)]
        if not any(a.split("=", 1)[0] == "--allowed-prometheus-address" for a in self.args):
            self.args += ["--allowed-prometheus-address=*"]
        self.log_path = log_path
        self.status_interval = status_interval
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, timeout: float = 60) -> None:
        self.port = free_port()
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig),
               "SGLANG_OPERATOR_STATUS_INTERVAL": str(self.status_interval), **self.env}
        self.proc = background.spawn(
            [sys.executable, "-m", "sglang_operator.entry.cli", "run", "--liveness",
             f"http://127.0.0.1:{self.port}/healthz", *self.args], self.log_path, env, stdin=None)
        background.wait_serving(self.proc, lambda: background.answers_ok(f"http://127.0.0.1:{self.port}/healthz"),
                                "operator", "live", self.log_tail, timeout)

    def wait_exit(self, timeout: float) -> int:
        """Wait for the process to end by itself (a test hook); its exit code. Raises TimeoutError."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except Exception as exc:
            raise TimeoutError(f"operator still running after {timeout} s:\n{self.log_tail()}") from exc

    def stop(self, timeout: float = 15) -> None:
        background.stop_group(self.proc, signal.SIGINT, timeout)

    def metrics_url(self, path: str) -> str:
        """The URL of ``path`` on the metrics port, in its scheme."""
        return f"{self.metrics_scheme}://127.0.0.1:{self.metrics_port}{path}"

    def readyz(self) -> tuple[int, str] | None:
        """``GET /readyz`` on the metrics port (HTTPS without verifying the certificate when the port speaks TLS):
        (HTTP status, body without its line feed), None while nothing answers."""
        context = None
        if self.metrics_scheme == "https":
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with urllib.request.urlopen(self.metrics_url("/readyz"), timeout=2, context=context) as r:
                return r.status, r.read().decode().strip()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode().strip()
        except OSError:
            return None

    def wait_ready(self, timeout: float, interval: float = 0.05) -> tuple[list[tuple[int, str]], str, float]:
        """Poll ``/readyz`` until it answers 200 ``ok: …``. Returns the answers in order (repeats dropped, the ok
        last), the log as it was right after the first ok, and the seconds waited. Raises TimeoutError."""
        t0 = time.monotonic()
        answers: list[tuple[int, str]] = []
        while time.monotonic() - t0 < timeout:
            got = self.readyz()
            if got is not None and (not answers or answers[-1] != got):
                answers.append(got)
            if got is not None and got[0] == 200 and got[1].startswith("ok:"):
                return answers, self.log_text(), time.monotonic() - t0
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(interval)
        raise TimeoutError(f"/readyz not ok after {time.monotonic() - t0:.0f} s (answers {answers}):\n"
                           f"{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        return background.log_tail(self.log_path, lines)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
