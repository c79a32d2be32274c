"""PURE: the one start-up check of a revision's pods, for the rollback analysis' warm-up and a canary's step.

A pod that was never Ready in the analysis (multi-node: a group's leader pod) fails its revision at once, without
waiting for ``progressDeadlineSeconds``, when:

- **it crash-loops**: it restarted ``maxRestartsBeforeReady`` times (the rise of its restart count, plus one when
  the same name comes back with another uid: a LeaderWorkerSet group recreated); its last crash is quoted
  (cause ``CrashLoop``);
- **it never starts**: its container has waited for :data:`NEVER_STARTS_SECONDS` with a kubelet reason no wait
  fixes (:data:`~sglang_operator.decisions.pods.NEVER_STARTS`: ``ImagePullBackOff``, ``ErrImagePull``,
  ``CreateContainerConfigError``, ``InvalidImageName``, …); the kubelet's reason is the cause and its message is
  quoted, e.g. ``ImagePullBackOff: Back-off pulling image "lmsysorg/sglang:v0.5.99"``.

A pod that has been Ready once is left to the deadline (readiness blips). The state per pod is
:class:`~sglang_operator.api.analysis.PodStart` (``status.analysis.podStarts``, ``status.canary.podStarts``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from sglang_operator.api.analysis import PodStart
from sglang_operator.decisions.sampling.model import PodView

NEVER_STARTS_SECONDS = 30
"""How long a pod's container may wait with a never-start reason before its revision fails (the kubelet retries an
image pull after 10 s, 20 s, …: a registry hiccup clears within that; a wrong tag or a missing Secret does not)."""
GONE_KEPT = 16
"""Pods no longer seen kept in the state (a LeaderWorkerSet leader being recreated is absent for a while; its
restarts must still add up), the most recently added."""


@dataclass(frozen=True)
class StartFailure:
    """Why a revision fails at start-up: ``cause`` (``CrashLoop`` or the kubelet's reason) and ``message``."""

    cause: str
    message: str


def check(starts: Mapping[str, PodStart], pods: tuple[PodView, ...], limit: int, now: dt.datetime, revision: str,
          canary: bool = False) -> tuple[dict[str, PodStart], StartFailure | None]:
    """Count ``pods`` (the revision's live pods) into ``starts`` (per pod name, as stored): the new state and the
    failure when a pod never Ready crash-loops (``limit``: ``maxRestartsBeforeReady``) or never starts (see the
    module docstring). Every restart of a pod first seen counts (it belongs to this revision). ``canary`` words the
    message for a canary pod."""
    seen: dict[str, PodStart] = {}
    for p in pods:
        count, before = p.start_restarts, starts.get(p.name)
        if before is None:
            counted = count
        elif before.ready:
            counted = before.restarts
        elif p.uid and before.uid and p.uid != before.uid:
            counted = before.restarts + 1 + count
        else:
            counted = before.restarts + max(0, count - before.restart_count)
        ready = p.ready or (before is not None and before.ready)
        stuck = None if ready else p.waiting
        since = (before.waiting_since if before is not None and before.waiting_since and stuck else
                 now if stuck else None)
        seen[p.name] = PodStart(uid=p.uid or (before.uid if before else None), restart_count=count,
                                restarts=counted, ready=ready, waiting=stuck, waiting_since=since,
                                crash=None if ready else p.crash or (before.crash if before else None))
    gone = [(name, s) for name, s in starts.items() if name not in seen][-GONE_KEPT:]
    out = {**dict(gone), **seen}
    what = "canary pod" if canary else "pod"
    for p in pods:
        s = seen[p.name]
        if s.ready:
            continue
        kind = "leader pod" if p.leader_restarts is not None else what
        if s.restarts >= limit:
            head = (f"{revision}: {kind} {p.name} restarted {s.restarts} times and was never Ready "
                    f"(maxRestartsBeforeReady {limit})")
            return out, StartFailure("CrashLoop", f"{head}; its last crash: {s.crash}" if s.crash else head)
        if s.waiting and s.waiting_since and (now - s.waiting_since).total_seconds() >= NEVER_STARTS_SECONDS:
            reason = s.waiting.split(":", 1)[0]
            return out, StartFailure(reason, f"{revision}: {kind} {p.name} never started: {s.waiting} (for "
                                             f"{(now - s.waiting_since).total_seconds():.0f} s, never Ready)")
    return out, None
