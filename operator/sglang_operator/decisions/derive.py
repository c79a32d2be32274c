"""The conditions the observer owns, computed each tick in one pure function from pod health and the analysis.

Pod health (:func:`sglang_operator.decisions.pods.pod_health`) says ``Degraded=False`` whenever the pods are fine;
after a rollback the pods ARE fine, so the analysis must win or a rollback would be erased within a tick.
:func:`derive` therefore overrides pod health's ``Degraded`` with the analysis' (``RolledBack`` / ``Regressed`` /
``Canary<reason>``)
unless the pods themselves are in trouble (their reason is the more urgent one), and adds ``StableRegressed`` and
``SpeculativeDecodingActive``. Conditions use the ``metav1.Condition`` dict shape of
:mod:`sglang_operator.decisions.conditions`; the observer merges the result into ``status.conditions``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sglang_operator.api.analysis import AnalysisPhase
from sglang_operator.api.base import truncate
from sglang_operator.api.rollback import RollbackAction
from sglang_operator.api.status import ConditionType
from sglang_operator.decisions.conditions import Condition, condition
from sglang_operator.decisions.rollback import RETRY_ANNOTATION
from sglang_operator.decisions.rollback_state import CANARY_REASON_PREFIX, PAUSED_FAILED_REASONS, RollbackState

ANALYSIS_PAUSED = "AnalysisPaused"
"""``Degraded`` reason while the rollback analysis is Paused without a failed revision (it judges nothing)."""


def analysis_conditions(
    state: RollbackState, action: RollbackAction, generation: int, now: dt.datetime
) -> list[Condition]:
    """``Degraded`` (only when the analysis says True) and ``StableRegressed`` (once a stable revision exists);
    none for action DryRun.

    ``Degraded=True`` reason ``RolledBack`` while RollingBack / RolledBack (message: the rejected revision's
    numbers against the baseline's, e.g. ``9f4c2d9294: 36.0 tok/s, accept length 1.75 < 0.85 × 51.6 tok/s, 0.9 ×
    2.73 of 9699b6738c``); the analysis' reason (``CanaryRegressed``, ``CanaryAborted``…) while the spec asks for a
    revision its canary failed (never ``RolledBack``: the stable revision never stopped serving); reason
    ``Regressed`` while a failed revision is left running (Paused: action Alert, no stable revision, maxRollbacks
    reached); reason :data:`ANALYSIS_PAUSED` while the analysis is Paused for another reason (``NotSGLang``: the
    image answers HTTP but not as SGLang, the message names ``spec.sglang.image``; ``MeasurementErrors``: the pods
    answer but cannot be measured; ``SimulatedAcceptance``): the revision runs unjudged, the message names the
    analysis' reason.
    """
    if action == RollbackAction.DRY_RUN:
        return []
    out: list[Condition] = []
    a = state.analysis
    if a is not None:
        message = truncate(a.message or "")
        if a.phase in (AnalysisPhase.ROLLING_BACK, AnalysisPhase.ROLLED_BACK):
            out.append(condition(ConditionType.DEGRADED, "True", "RolledBack", message, generation, now))
        elif a.phase == AnalysisPhase.STABLE and (a.reason or "").startswith(CANARY_REASON_PREFIX):
            out.append(condition(ConditionType.DEGRADED, "True", str(a.reason), truncate(
                f"the spec's revision was removed as a canary: {a.message}; the stable revision {a.revision} "
                f"serves (no rollback); change the annotation {RETRY_ANNOTATION} (kubectl sglang retry) to try it "
                f"again"), generation, now))
        elif a.phase == AnalysisPhase.PAUSED and a.reason in PAUSED_FAILED_REASONS:
            out.append(condition(ConditionType.DEGRADED, "True", "Regressed", message, generation, now))
        elif a.phase == AnalysisPhase.PAUSED:  # not judged (MeasurementErrors, SimulatedAcceptance): say so
            out.append(condition(ConditionType.DEGRADED, "True", ANALYSIS_PAUSED, truncate(
                f"analysis Paused ({a.reason}): {a.message or a.revision}; change the annotation {RETRY_ANNOTATION} "
                f"(kubectl sglang retry) to verify again"), generation, now))
    if state.stable_revision is not None:
        regression = a.stable_regression if a is not None and a.revision == state.stable_revision else None
        if regression is not None:
            out.append(condition(ConditionType.STABLE_REGRESSED, "True", "BelowBaseline",
                                 truncate(regression.message), generation, now))
        else:
            out.append(condition(ConditionType.STABLE_REGRESSED, "False", "MeetsBaseline",
                                 f"stable revision {state.stable_revision} meets its baseline or is not running",
                                 generation, now))
    return out


def speculative_condition(
    requested_algorithm: str | None, effective: Mapping[str, Any] | None, accept_length_reported: bool | None,
    ready: bool, generation: int, now: dt.datetime,
) -> Condition | None:
    """``SpeculativeDecodingActive``, or None while it cannot be told (not Ready, nothing read yet).

    ``requested_algorithm``: ``spec.speculative.algorithm`` of the serving revision (None: not asked for).
    ``effective``: ``status.effective`` (keys as ``decisions.effective.FIELDS``; ``algorithm`` absent when
    ``/server_info`` shows ``speculative_algorithm`` None). ``accept_length_reported``: whether the last scrape had
    acceptance-length series (``sglang:spec_accept_length`` or ``sglang:spec_verify_calls_total``), None when
    unknown. NEXTN reported as EAGLE is the same algorithm (SGLang's ``server_args.py`` rewrites it).
    """
    if not ready:
        return None
    t = ConditionType.SPECULATIVE_DECODING_ACTIVE
    if requested_algorithm is None:
        return condition(t, "False", "NotRequested", "spec.speculative is not set", generation, now)
    if effective is not None and not effective.get("algorithm"):
        return condition(t, "False", "NotRunning", f"the spec asks for {requested_algorithm}; SGLang's "
                         "/server_info shows no speculative algorithm", generation, now)
    if accept_length_reported is False:
        return condition(t, "False", "NoAcceptLength", f"the spec asks for {requested_algorithm}; SGLang reports "
                         "no acceptance length (no sglang:spec_accept_length series)", generation, now)
    if accept_length_reported and effective is not None:
        return condition(t, "True", "AcceptLengthReported", f"SGLang runs {effective['algorithm']} and reports "
                         "an acceptance length", generation, now)
    return None


def derive(
    pod_conditions: list[Condition], state: RollbackState, action: RollbackAction, generation: int,
    now: dt.datetime, speculative: Condition | None = None,
) -> list[Condition]:
    """Every condition the observer owns: pod health's (Ready, Available, Progressing, Degraded), with Degraded
    taken from the analysis when pod health does not report trouble itself, plus StableRegressed and
    ``speculative`` (from :func:`speculative_condition`) when given."""
    analysis = analysis_conditions(state, action, generation, now)
    override = next((c for c in analysis if c["type"] == ConditionType.DEGRADED), None)
    out = []
    for c in pod_conditions:
        pods_in_trouble = c["type"] == ConditionType.DEGRADED and c["status"] == "True"
        out.append(override if override is not None and c["type"] == ConditionType.DEGRADED
                   and not pods_in_trouble else c)
    if override is not None and not any(c["type"] == ConditionType.DEGRADED for c in pod_conditions):
        out.append(override)
    out += [c for c in analysis if c["type"] != ConditionType.DEGRADED]
    if speculative is not None:
        out.append(speculative)
    return out
