"""The rollback decision's state and inputs (:mod:`sglang_operator.decisions.rollback`): the analysis as stored in
``status`` (:class:`RollbackState`), what the observer saw besides the sample (:class:`Observation`), the revision
that should run (:class:`Target`), the bounds of the stored lists (:func:`kept_rejections`) and a spec's
:class:`~sglang_operator.api.analysis.Setup` (:func:`setup_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field
from pydantic.alias_generators import to_camel

from sglang_operator.api.analysis import GPU_PRODUCT_LABEL as GPU_PRODUCT_LABEL
from sglang_operator.api.analysis import (
    Analysis,
    Baseline,
    CanaryState,
    Rejection,
    RollbackRecord,
    Setup,
)
from sglang_operator.api.analysis import setup_of as setup_of
from sglang_operator.api.base import StatusModel
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions import canary
from sglang_operator.decisions.sampling.model import PodView

FIGURES_KEPT = 120
"""Valid samples kept for the baseline median (the most recent)."""
REJECTIONS_KEPT = 20
"""Rejections kept in ``status.rejectedRevisions``: the newest, but the rejection of the spec's own revision is never
evicted (an older one goes in its place). Evicting one posts a Warning event ``RejectionForgotten``
(:func:`kept_rejections`): that revision would run again, unjudged by its old rejection, should a spec ask for it."""
ROLLBACKS_KEPT = 10
"""Rollback records kept (at least ``maxRollbacks``, so the window count stays right)."""
PAUSED_FAILED_REASONS = ("NoStableRevision", "NotRolledBack", "MaxRollbacksReached")
"""Paused reasons for a failed revision left running (``Degraded`` reason ``Regressed``)."""
CANARY_REASON_PREFIX = "Canary"
"""Prefix of the analysis' reason (phase ``Stable``) and of ``Degraded``'s while the spec asks for a revision its
canary failed: ``Canary`` + the canary's reason (``CanaryRegressed``, ``CanaryAborted``…). A removed canary is no
rollback, so never ``RolledBack``."""


@dataclass(frozen=True)
class Observation:
    """What the observer saw this tick, besides the sample.

    ``revision``: the revision applied (``status.revision``), whose pods are judged. ``desired_pods``: its spec's
    replicas. ``pods``: its live pods (readiness, restart counts). ``spec_revision``: what the object's spec
    renders to now (None when the spec is refused: the applied revision stands for it). ``retry_token``: value of
    the annotation :data:`~sglang_operator.api.base.RETRY_ANNOTATION` (None when absent). ``setup``: the model,
    GPU product and parallelism ``revision`` runs with (:func:`setup_of`); relative criteria apply only when it
    equals the baseline's. ``canary``: the canary's observation (:mod:`sglang_operator.decisions.canary`).
    """

    revision: str
    desired_pods: int
    setup: Setup
    pods: tuple[PodView, ...] = ()
    spec_revision: str | None = None
    retry_token: str | None = None
    canary: canary.CanaryObservation | None = None
    """What was seen for a canary (``spec.strategy.type: Canary``, or one in progress); None: no canary policy."""
    not_sglang: str | None = None
    """Why the serving revision's pod is not SGLang, one sentence naming ``spec.sglang.image``
    (:func:`~sglang_operator.decisions.effective.not_sglang`): its ``/server_info`` answered, but not as SGLang; None:
    SGLang, or not known this tick."""


@dataclass(frozen=True)
class Target:
    """The revision that should run, and why when it is not the spec's."""

    revision: str
    reason: str = ""


class RollbackState(StatusModel):
    """The rollback analysis as stored in ``status``: the six keys it owns (the same names and models as
    :class:`~sglang_operator.api.status.SGLangServerStatus`'s, checked by ``tests/decisions/test_rollback_state.py``).
    Its own small model, not the status model's subclass: built and copied every observation, a subclass carried the
    status model's every field and rule (+65 µs per observation, ``bench/observe.py``)."""

    stable_revision: str | None = None
    baseline: Baseline | None = None
    analysis: Analysis | None = None
    rejected_revisions: list[Rejection] = Field(default_factory=list)
    rollbacks: list[RollbackRecord] = Field(default_factory=list)
    canary: CanaryState | None = None

    @classmethod
    def from_status(cls, status: SGLangServerStatus | None) -> RollbackState:
        """The state held in a parsed ``status`` (empty when None); its lists are copies."""
        if status is None:
            return cls()
        return cls(stable_revision=status.stable_revision, baseline=status.baseline, analysis=status.analysis,
                   rejected_revisions=list(status.rejected_revisions), rollbacks=list(status.rollbacks),
                   canary=status.canary)

    def status_patch(self) -> dict[str, Any]:
        """The camelCase status keys this state owns, None for a cleared one (a merge patch deletes it)."""
        dumped = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        return {key: dumped.get(key) for key in _ALIASES}

    def rejection(self, revision: str | None) -> Rejection | None:
        """The rejection of ``revision``, if any."""
        return next((r for r in self.rejected_revisions if r.revision == revision), None)


ROLLBACK_KEYS = tuple(RollbackState.model_fields)
"""The fields of ``status`` the rollback analysis owns (:class:`RollbackState`), in the order of its patch."""
_ALIASES = tuple(map(to_camel, ROLLBACK_KEYS))
"""The camelCase keys of :data:`ROLLBACK_KEYS` (computed once)."""


def kept_rejections(rejections: list[Rejection], wanted: str | None,
                    limit: int = REJECTIONS_KEPT) -> tuple[list[Rejection], list[Rejection]]:
    """``(kept, evicted)`` of ``rejections`` (oldest first, as in ``status``): at most ``limit`` kept, the oldest
    evicted first, except the rejection of ``wanted`` (the spec's revision), which is never evicted (an older one
    goes in its place): the revision the spec asks for must never run again only because newer rejections pushed
    its own out. Both lists keep the given order. Raises ``ValueError`` when ``limit`` is below 2 (the newest
    rejection, just made, would be the one evicted)."""
    if limit < 2:
        raise ValueError(f"kept_rejections: limit {limit} is below 2")
    surplus = max(0, len(rejections) - limit)
    evicted = {id(r) for r in [r for r in rejections if r.revision != wanted][:surplus]}
    return ([r for r in rejections if id(r) not in evicted], [r for r in rejections if id(r) in evicted])


