"""PURE: what a placement of a revision is — decided before the apply path, which only writes it
(:func:`sglang_operator.control.apply.apply_placement`).

- :func:`canary_due`: the canary start rule, once (the server's tick starts a canary by it,
  :func:`sglang_operator.decisions.canary.tick`; the reconcile handler keeps the stable revision serving by it,
  :func:`holds_back`);
- :func:`holds_back`: whether the reconcile handler keeps the serving revision in the serving workload instead of
  the spec's (a canary runs, or one is due);
- :func:`stable_share`: whether a placement is a canary's stable share (only its replicas may be written while
  the live workload runs that revision: its pods are never rolled);
- :func:`serving_replicas`: the pods of the serving workload for a placement (the stable's share during a canary).
"""

from __future__ import annotations

from sglang_operator.api.analysis import CanaryPhase
from sglang_operator.api.spec import CanaryStrategy
from sglang_operator.api.status import SGLangServerStatus


def stable_replicas(replicas: int, max_surge: int, canary: int) -> int:
    """Stable pods beside ``canary`` canary pods of a server of ``replicas``: ``replicas + max_surge − canary``, within
    ``[0, replicas]``."""
    return max(0, min(replicas, replicas + max_surge - canary))


def canary_due(policy: CanaryStrategy | None, replicas: int, wanted: str | None, runnable: bool,
               serving: str | None, stable: str | None) -> bool:
    """Whether a canary of ``wanted`` (the spec's revision; None: refused) starts: ``spec.strategy.type`` Canary
    (``policy``), at least 2 ``replicas``, ``wanted`` runnable (not held back by a rejection) and another revision
    than the one ``serving``, which is the ``stable`` one (promoted)."""
    return (policy is not None and replicas >= 2 and wanted is not None and runnable and stable is not None
            and serving is not None and wanted != serving and serving == stable)


def holds_back(status: SGLangServerStatus, policy: CanaryStrategy | None, replicas: int, wanted: str,
               target: str) -> bool:
    """Whether the reconcile handler keeps the serving revision in the serving workload instead of ``wanted`` (the
    spec's revision; ``target`` what should run): a canary runs (``status.canary``: whatever it is for, the server's
    tick settles it), or one is due (:func:`canary_due`)."""
    if status.canary is not None:
        return status.revision is not None and status.revision != wanted
    return canary_due(policy, replicas, wanted, target == wanted, status.revision, status.stable_revision)


def stable_share(status: SGLangServerStatus, policy: CanaryStrategy | None, revision: str, role: str) -> bool:
    """Whether a placement of ``revision`` in ``role`` places a canary's stable revision: one runs
    (``status.canary``) beside it, or one is due — ``policy`` set and ``revision`` the stable one serving (the
    reconcile handler holds it while the next tick starts the canary)."""
    if role != "serving":
        return False
    if status.canary is not None:
        return status.canary.stable_revision == revision
    return revision == status.revision == status.stable_revision and policy is not None


def serving_replicas(status: SGLangServerStatus, policy: CanaryStrategy | None, replicas: int, revision: str,
                     wanted: int | None) -> int | None:
    """The serving workload's pods for a placement of ``revision``: ``wanted`` when set; else, while a canary of the
    revision it runs is in progress, the stable's share beside the canary's pods with the object's ``replicas`` (a
    scale during a canary changes the stable workload only; all of them while the canary is being removed); else
    None (the spec's)."""
    if wanted is not None:
        return wanted
    canary = status.canary
    if canary is None or canary.stable_revision != revision:
        return None
    if canary.phase is CanaryPhase.REMOVING:
        return replicas
    return stable_replicas(replicas, policy.max_surge if policy else 0, canary.canary_replicas)
