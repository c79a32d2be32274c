"""A server the tests run as a child process (the operator, Prometheus, the Prometheus Operator): started in its own
process group with its output appended to a log file, waited for until an HTTP endpoint answers, stopped with a
signal to the group (SIGKILL after a grace period), its log's tail shown in errors.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any


def spawn(argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None,
          stdin: int | IO[Any] | None = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (its own process group), stdout and stderr appended to ``log_path``;
    ``env``: the whole environment (None: this process')."""
    with log_path.open("ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=stdin,
                                env=None if env is None else dict(env), start_new_session=True)


def answers_ok(url: str) -> bool:
    """True when ``GET url`` answers 200 within a second; False when it answers otherwise or not at all."""
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except (OSError, http.client.HTTPException):
        return False


def wait_serving(proc: subprocess.Popen[bytes], answers: Callable[[], bool], name: str, state: str,
                 log_tail: Callable[[], str], timeout: float) -> None:
    """Poll ``answers()`` every 0.3 s until it is true (it returns False, never raises, while the endpoint does not
    answer). Raises RuntimeError with ``log_tail()`` when ``proc`` exits first or after ``timeout`` seconds
    (``<name> not <state> after …``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log_tail()}")
        if answers():
            return
        time.sleep(0.3)
    raise RuntimeError(f"{name} not {state} after {timeout} s:\n{log_tail()}")


def stop_group(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
    """Send ``sig`` to ``proc``'s process group, wait up to ``timeout`` seconds, then SIGKILL the group (no-op when
    it is not running)."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def log_tail(log_path: Path, lines: int) -> str:
    """The last ``lines`` lines of ``log_path``, ``(no log)`` when it cannot be read."""
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
