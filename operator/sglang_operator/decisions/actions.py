"""PURE: the actions the rollback and canary decisions ask the observer to carry out (no I/O here).

:class:`Apply`, :class:`Event` and :class:`RecordVerdict` come from :func:`sglang_operator.decisions.rollback.step`;
:class:`PlaceCanary` and :class:`PromoteCanary` from its canary companion, :mod:`sglang_operator.decisions.canary`;
:class:`WriteScaledObject` from :mod:`sglang_operator.decisions.autoscaling` (the child the tick writes after its
status patch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sglang_operator.api.status import Verdict


@dataclass(frozen=True)
class Apply:
    """Apply this revision's recorded spec (ledger / ControllerRevision; the stable one pinned to its image
    digest), without editing the object's spec."""

    revision: str
    reason: str


@dataclass(frozen=True)
class Event:
    """Post a Kubernetes Event on the SGLangServer."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class RecordVerdict:
    """Write ``verdict`` for ``revision`` into ``status.revisions`` (``decisions.status.judged``); figures in tok/s
    and tokens per verify step, medians of ``samples`` samples, where known; ``canary_steps``: the steps of its
    canary (camelCase ``CanaryStepRecord`` dicts), when it ran as one."""

    revision: str
    verdict: Verdict
    reason: str
    tokens_per_second: float | None = None
    accept_length: float | None = None
    samples: int | None = None
    canary_steps: tuple[dict[str, Any], ...] | None = None
    accept_rate: float | None = None
    """The median acceptance rate (0..1) of the same samples; None: none of them had one (the ledger then takes
    the rate of the revision's own last sample, :func:`sglang_operator.decisions.judging.accept_rate`)."""
    extra_figures: dict[str, float] = field(default_factory=dict)
    """The medians of the criteria with no field of their own (``decisions.criteria.CRITERIA``), by criterion key
    (``status.revisions[].extraFigures``)."""


@dataclass(frozen=True)
class PlaceCanary:
    """Run the stable revision (``status.revision``) on ``stable_replicas`` pods of the serving workload and the
    canary ``revision`` on ``canary_replicas`` pods of Deployment ``workload`` (0: delete that workload). Applied
    only where the live workloads differ."""

    revision: str
    workload: str
    canary_replicas: int
    stable_replicas: int
    reason: str


@dataclass(frozen=True)
class PromoteCanary:
    """The canary workload ``workload`` serves ``revision`` on every replica: it becomes the serving workload
    (``status.servingWorkload``, ``status.revision``) and the other one is deleted. No pod restarts."""

    revision: str
    workload: str
    reason: str


@dataclass(frozen=True)
class WriteScaledObject:
    """Write the server's KEDA ScaledObject after the tick's status patch (through the apply path,
    :func:`sglang_operator.control.apply.apply_scaled_object`; decided by
    :func:`sglang_operator.decisions.autoscaling.decided`): server-side apply ``manifest`` (rendered, not adopted:
    the apply path adds the owner reference and checks the controller owner's uid), or, ``manifest`` None, delete the
    operator's one. ``digest``: SHA-256 (hex) of the rendering (:func:`sglang_operator.decisions.autoscaling.digest`;
    ``delete`` for a delete), what the server's memory records of the outcome."""

    manifest: dict[str, Any] | None
    digest: str


Action = Apply | Event | RecordVerdict | PlaceCanary | PromoteCanary
