"""PURE: where a stable revision's baseline comes from, and the rule that keeps a passing slowdown from lowering it.

The baseline (``status.baseline``) is what the relative criteria compare a new revision with, so a baseline measured
while every pod ran slower (a noisy neighbour, a thermal cap, a busy hour) would let a later revision lose that much
speed unnoticed. Three sources (``status.baseline.source``, :class:`~sglang_operator.api.analysis.BaselineSource`):

- ``measured`` (:func:`measured`): the medians of the revision's own measured samples at its promotion (a revision
  verified alone, a user's promotion, a canary with no usable stable baseline). The first revision has nothing to
  compare with; a later one verified alone is judged against the stored baseline, so a slowdown of more than
  ``1 − minRelativeTokensPerSecond`` fails it rather than lowering the baseline.
- ``canaryRatio`` (:func:`from_canary`): a canary compared side by side is promoted with the stable revision's
  baseline × the median of the canary ÷ stable decode-speed ratios of the same intervals. A slowdown of every pod
  (both revisions) cancels out of the ratio, so the baseline is the canary's speed at the conditions the stable
  baseline was measured at. Used when the stored baseline is the stable revision's (same revision) and of the same
  signal, and at least one interval was compared; otherwise ``measured``. The accept length and rate are the
  canary's own medians (a slowdown does not move acceptance).
- ``refreshed`` (:func:`refresh`): the stable revision's baseline is raised, never lowered, from its own samples,
  only when all hold: the signal is ``probe`` for both (a ``traffic`` speed follows the users' load: a quiet hour is
  not the revision's speed); the setup is comparable; the stable revision is not regressed; a run of consecutive
  passing measured samples (any failing interval empties it) lasts at least ``verifySeconds`` and holds at least
  :func:`window` samples (``max(minSamples, 20, ⌈verifySeconds ÷ intervalSeconds⌉)``, at most
  :data:`REFRESH_MAX_SAMPLES`: a full verify window); and the median decode speed of its last :func:`window` samples
  is above the baseline by more than :data:`REFRESH_MARGIN` (3 %). The baseline becomes that median; the accept length
  and rate are kept; the run goes on (a refresh does not empty it).

What holds for signal ``probe`` (``python -m pytest -q -p no:randomly tests/decisions/test_baseline.py`` shows it):

- Never lowered: a refresh only ever sets a median above ``1.03 ×`` the baseline, so no slow window, however long,
  lowers it.
- A slowdown leaves at most 3 % behind. After every passing sample of the stable revision that completes a full window
  (its last :func:`window` samples, an unbroken run over at least ``verifySeconds``), its baseline is at least the
  median of that window ÷ 1.03. So once the slowdown has passed and the stable revision has run one window at its
  real speed ``S``, the baseline is at least ``S ÷ 1.03 ≈ 0.971 S``, whatever slowdown it was measured under
  (``measured`` during a drift of any depth, a ``canaryRatio`` scaled from such a baseline), and with
  ``minRelativeTokensPerSecond`` ``r`` every sample of a revision slower than ``r ÷ 1.03 × S`` (``0.825 × S`` at the
  default 0.85) fails: it is rejected. Until then (the slowdown still on, or less than a window since it ended) the
  drifted figure stands; a window holding some slow samples raises it part of the way.
- Noise raises it only to a window median: a refreshed baseline is the median of a window of the stable revision's own
  passing samples, so it never exceeds the highest such median (with ±3 % jitter per sample, never more than 3 %
  above the real speed, and a baseline at the real speed is never raised at all), and each raise is by more than 3 %.
  With the σ 5 % Gaussian noise of ``tests/decisions/test_rollback_noise.py`` a baseline at the real speed was raised
  once, to at most 3.5 % above it, in a simulated day or week of the default policy.
- With signal ``traffic``, another setup or a stable regression nothing is refreshed: a baseline measured during a
  slowdown stays until the next promotion.

The ledger record of the baseline's revision says which (``status.revisions[].baselineSource`` and
``baselineTokensPerSecond``, :func:`noted`); ``kubectl sglang history`` shows it.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Sequence
from typing import Any

from sglang_operator.api.analysis import Analysis, AnalysisPhase, Baseline, BaselineSource, SampleFigures, Setup
from sglang_operator.api.rollback import RollbackPolicy
from sglang_operator.decisions import criteria

REFRESH_MARGIN = 0.03
"""A stable baseline is raised only when the median of a full window of its passing samples exceeds it by more than
this fraction. Small enough that a slowdown leaves little behind (a baseline at least ``S ÷ 1.03`` of the stable's
real speed ``S`` still fails every sample slower than ``0.85 ÷ 1.03 = 0.825 × S``; with 0.10 a baseline measured
during a 9 % slowdown stayed and 0.78 × S passed), large enough that noise hardly moves it: the median of 20 samples
each off by N(0, 5 %) (the noise model of ``tests/decisions/test_rollback_noise.py``) has a standard error of about
1.4 %, so 3 % is two of them, and each refresh raises the baseline by more than 3 % (the next needs a median 6 %
above the real speed, more than four standard errors)."""
REFRESH_MIN_SAMPLES = 20
"""Least passing samples in a row behind a refresh (``minSamples`` when larger): see :func:`window`. The σ 5 % noise
model, a simulated week of 30 s intervals, 8 seeds, a baseline at the real speed: with 20, one raise within the
first day in each, to 3.0–3.5 % above, and none after; with 10 (a median's standard error ≈ 2 %), a second raise in
6 of 8, to 7.5 % above."""
REFRESH_MAX_SAMPLES = 60
"""Most samples a refresh takes the median of (``analysis.refreshFigures`` is kept in the status)."""
PROBE = "probe"


def measured(revision: str, figures: Sequence[SampleFigures], signal: str, setup: Setup | None,
             now: dt.datetime) -> Baseline | None:
    """The ``measured`` baseline of ``revision``: the medians of ``figures`` (every criterion's, accept rate); None
    when there are none."""
    med = criteria.medians(figures)
    if med is None:
        return None
    return criteria.baseline_of(revision, med, len(figures), signal).model_copy(
        update={"setup": setup, "at": now, "source": BaselineSource.MEASURED})


def from_canary(stable: Baseline | None, stable_revision: str, revision: str, figures: Sequence[SampleFigures],
                ratios: Sequence[float], signal: str, setup: Setup | None, now: dt.datetime) -> Baseline | None:
    """The baseline of a canary ``revision`` promoted over ``stable_revision``: ``stable`` (the stored baseline)
    × the median of ``ratios`` (canary ÷ stable tok/s of the compared intervals), ``canaryRatio``; the
    :func:`measured` medians of ``figures`` when ``stable`` is not ``stable_revision``'s, is of another signal, or
    no ratio was measured. None without figures (a user's promotion before any compared interval: the stored baseline
    stands)."""
    own = measured(revision, figures, signal, setup, now)
    usable = [r for r in ratios if criteria.finite(r) is not None and r > 0]
    if own is None or stable is None or stable.revision != stable_revision or stable.signal != signal or not usable:
        return own
    ratio = statistics.median(usable)
    return own.model_copy(update={"tokens_per_second": stable.tokens_per_second * ratio,
                                  "source": BaselineSource.CANARY_RATIO, "ratio": ratio,
                                  "scaled_from": stable_revision})


def window(policy: RollbackPolicy) -> int:
    """How many of the stable revision's latest passing samples a refresh takes the median of: a full verify window,
    ``max(minSamples, 20, ⌈verifySeconds ÷ intervalSeconds⌉)``, at most :data:`REFRESH_MAX_SAMPLES` (the default
    policy and the fast one of the e2e tests: 20)."""
    full = math.ceil(policy.verify_seconds / policy.interval_seconds)
    return min(REFRESH_MAX_SAMPLES, max(policy.min_samples, REFRESH_MIN_SAMPLES, full))


def interrupt(analysis: Analysis) -> None:
    """A failing interval of the analysed revision: the passing run a refresh needs starts over."""
    analysis.refresh_figures, analysis.refresh_since = [], None


def refresh(base: Baseline | None, analysis: Analysis, stable: str | None, policy: RollbackPolicy,
            figures: SampleFigures, start: dt.datetime, setup: Setup, now: dt.datetime) -> Baseline | None:
    """One passing measured sample (``figures``, its interval starting at ``start``) of the analysed revision: when
    it is the stable revision, it joins the passing run (``analysis.refreshFigures``, modified here: its last
    :func:`window` samples) and, when the run meets the module's conditions, the raised (``refreshed``) baseline, the
    median of those samples, is returned. The run goes on (a refresh does not empty it): a window that held some
    samples of a slowdown raises the baseline part of the way, and the next samples at the real speed the rest.
    None: the baseline stands."""
    a = analysis
    if (base is None or a.revision != stable or base.revision != stable or a.stable_regression is not None
            or a.phase not in (AnalysisPhase.STABLE, AnalysisPhase.ROLLED_BACK)
            or policy.signal.value != PROBE or criteria.setup_differences(base, setup, PROBE)):
        interrupt(a)
        return None
    size = window(policy)
    a.refresh_since = a.refresh_since or start
    a.refresh_figures = [*a.refresh_figures, figures][-size:]
    med = criteria.medians(a.refresh_figures)
    enough = len(a.refresh_figures) >= size and (now - a.refresh_since).total_seconds() >= policy.verify_seconds
    if med is None or not enough or med.tokens_per_second <= base.tokens_per_second * (1 + REFRESH_MARGIN):
        return None
    return base.model_copy(update={"tokens_per_second": med.tokens_per_second, "samples": len(a.refresh_figures),
                                   "at": now, "source": BaselineSource.REFRESHED, "ratio": None, "scaled_from": None})


def origin(base: Baseline) -> str:
    """Where ``base`` came from, in words: ``54.7 tok/s (canaryRatio: 52.6 tok/s of 9699b6738c × 1.04)``,
    ``54.7 tok/s (measured, median of 6 samples)``, ``54.7 tok/s (refreshed, median of 20 passing samples)``."""
    head = criteria.tps(base.tokens_per_second)
    if base.source is BaselineSource.CANARY_RATIO and base.ratio is not None and base.ratio > 0:
        was = base.tokens_per_second / base.ratio
        return f"{head} (canaryRatio: {criteria.tps(was)} of {base.scaled_from} × {base.ratio:.2f})"
    if base.source is BaselineSource.REFRESHED:
        return f"{head} (refreshed, median of {base.samples} passing samples)"
    return f"{head} (measured, median of {base.samples} samples)"


def noted(ledger: list[dict[str, Any]], base: Baseline) -> list[dict[str, Any]]:
    """``status.revisions`` (camelCase dicts) with the record of ``base.revision`` given ``baselineSource`` and
    ``baselineTokensPerSecond``; the others (and a ledger without that record) unchanged."""
    return [{**r, "baselineSource": base.source.value, "baselineTokensPerSecond": round(base.tokens_per_second, 3)}
            if r.get("revision") == base.revision else r for r in ledger]
