"""``sglang-operator run`` with a liveness port another process holds: one line naming the port, exit status 1, no
traceback (kopf's own bind error is a 261-line traceback), before anything talks to a cluster."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from sglang_operator.entry.runner import check_liveness_port


def listening() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_busy_liveness_port_is_one_line_naming_it() -> None:
    with listening() as busy:
        port = busy.getsockname()[1]
        url = f"http://127.0.0.1:{port}/healthz"
        out = subprocess.run([sys.executable, "-m", "sglang_operator.entry.cli", "run", "--namespace", "default",
                              "--liveness", url, "--metrics-port", "0"],
                             env={"KUBECONFIG": "/nonexistent", "PATH": "/usr/bin:/bin"},
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out
    assert out.stderr.splitlines() == [
        f"sglang-operator run: cannot serve the liveness endpoint --liveness {url}: port {port} on 127.0.0.1: in use "
        "by another process"], out.stderr
    assert out.stdout == ""


def test_a_free_liveness_port_passes_and_stays_free() -> None:
    with listening() as probe:
        port = probe.getsockname()[1]
    check_liveness_port(f"http://127.0.0.1:{port}/healthz")
    check_liveness_port(None)  # no liveness endpoint: nothing to check
    with socket.socket() as sock:  # released: kopf can listen on it next
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()


def test_an_unresolvable_host_is_one_line_too() -> None:
    with pytest.raises(SystemExit, match=r"--liveness http://no-such-host\.invalid:8080/healthz: host "
                                         r"no-such-host\.invalid"):
        check_liveness_port("http://no-such-host.invalid:8080/healthz")
