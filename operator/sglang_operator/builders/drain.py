"""PURE: the drain of a pod a canary removes (``spec.strategy.type: Canary`` with ``drainSeconds``; docs/canary.md).

During a canary pods leave at every move: a stable pod scaled away for a canary pod (maxSurge 0), the canary's pods
when it is removed, the old serving workload's pods during the promotion. The Deployment controller picks which pod
goes, so the drain runs in the pod itself: a ``preStop`` hook that waits until the server runs no request
(``sglang:num_running_reqs`` 0 on its own ``/metrics``), at most ``drainSeconds``. Kubernetes takes a deleted pod out
of the Service's endpoints as its deletion starts (the EndpointSlice marks it terminating), so no new request
reaches it while the hook waits, and the container gets SIGTERM only once the hook has ended
(``terminationGracePeriodSeconds`` covers the hook: ``drainSeconds`` + :data:`GRACE_AFTER_DRAIN_SECONDS`). A server
that cannot be read counts as idle (the operator's Recreate drain reads pods the same way,
:mod:`sglang_operator.control.drain`). The hook is rendered only for Canary with ``drainSeconds`` > 0, so no other
revision's pod template (and hash) changes; Recreate keeps the operator-side drain before it replaces the pods.
"""

from __future__ import annotations

from typing import Any

from sglang_operator.api.spec import SGLangServerSpec, StrategyType

DEFAULT_GRACE_SECONDS = 60
"""``terminationGracePeriodSeconds`` of every pod without a drain hook, seconds."""
GRACE_AFTER_DRAIN_SECONDS = 30
"""Seconds the container has after the drain hook to stop on SIGTERM."""
RUNNING_REQUESTS = "sglang:num_running_reqs"
"""The gauge the hook reads (every supported SGLang release exports it: ``decisions/sampling/roles.py``)."""

_SCRIPT = """import sys, time, urllib.request
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    try:
        text = urllib.request.urlopen(sys.argv[2], timeout=2).read().decode()
    except Exception:
        break
    running = sum(float(line.rsplit(None, 1)[-1]) for line in text.splitlines()
                  if line.startswith(sys.argv[3]) and line[len(sys.argv[3]):len(sys.argv[3]) + 1] in ("{", " "))
    if running <= 0:
        break
    time.sleep(1)
"""


def drain_seconds(spec: SGLangServerSpec) -> int:
    """The seconds a removed pod waits for its running requests: ``spec.strategy.drainSeconds`` with Canary, else 0
    (Recreate drains from the operator, before it replaces the pods)."""
    s = spec.strategy
    return s.drain_seconds if s.type is StrategyType.CANARY else 0


def pre_stop(spec: SGLangServerSpec) -> dict[str, Any] | None:
    """The container's ``lifecycle`` (a ``preStop`` exec of ``python3``, which every SGLang image has) that waits at
    most :func:`drain_seconds` until the server on ``spec.port`` runs no request; None without a drain."""
    seconds = drain_seconds(spec)
    if seconds <= 0:
        return None
    url = f"http://127.0.0.1:{spec.port}/metrics"
    return {"preStop": {"exec": {"command": ["python3", "-c", _SCRIPT, str(seconds), url, RUNNING_REQUESTS]}}}


def grace_seconds(spec: SGLangServerSpec) -> int:
    """The pod's ``terminationGracePeriodSeconds``: :data:`DEFAULT_GRACE_SECONDS`, or with a drain hook its
    ``drainSeconds`` + :data:`GRACE_AFTER_DRAIN_SECONDS` when that is longer."""
    seconds = drain_seconds(spec)
    return max(DEFAULT_GRACE_SECONDS, seconds + GRACE_AFTER_DRAIN_SECONDS) if seconds > 0 else DEFAULT_GRACE_SECONDS
