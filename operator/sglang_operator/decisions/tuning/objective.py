"""Trial results and objectives: what one trial measured, and the figure a tuning maximises, as pure functions.

A trial is measured like users experience the server (client side, streamed requests; docs/tuning.md, "What is measured,
and how"): per concurrency level, the median per-request decode speed after the first token, output tok/s over the
window, p50/p95 inter-token latency and time to first token, and SGLang's accept length over the same window.
Objectives (Katib's ``objective``), never the accept length alone (vllm-project/vllm#26504: acceptance stayed flat
while the best choice flipped):

- ``decodeTokensPerSecond``: the median per-request decode tok/s at concurrency 1 (single stream, what the
  published case and the rollback probe measure);
- ``outputTokensPerSecond``: output tok/s of the whole server at ``concurrency``;
- ``goodput``: the highest output tok/s over the measured levels whose p95 ITL and p95 TTFT stay under the limits
  (0 when no level does).

With two or more weighted concurrency levels (``Objective.weights``, the workload's ``concurrency[].weight``) the
decode and output objectives are *relative*: a trial's value is the weighted mean over the levels of its level
objective ÷ the reference trial's at that level (:func:`objective_value`); the reference is the control trial
(:func:`reference_trial`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Annotated

from pydantic import Field, model_validator

from sglang_operator.api.tuning_status import TrialVerdict as TrialVerdict
from sglang_operator.api.tuning_status import speedup_of
from sglang_operator.decisions.tuning.space import Point, TuningModel


class TrialLevelFigures(TuningModel):
    """One concurrency level of one trial: tok/s, seconds, tokens per verify step."""

    concurrency: Annotated[int, Field(ge=1)]
    decode_tokens_per_second: float = 0.0
    """Median over requests of (output tokens − 1) / (last token − first token), tok/s."""
    output_tokens_per_second: float = 0.0
    """All output tokens / the level's window, tok/s."""
    itl_p50_seconds: float = 0.0
    itl_p95_seconds: float = 0.0
    ttft_p50_seconds: float = 0.0
    ttft_p95_seconds: float = 0.0
    accept_length: float | None = None
    """SGLang's accepted tokens per verify step (incl. the bonus token) over the window; 1.0 without speculation."""


class TrialResult(TuningModel):
    """One finished trial: its point (``None``: the control trial without speculative decoding), verdict,
    figures per concurrency level and, when it failed, the reason."""

    point: Point | None
    verdict: TrialVerdict = TrialVerdict.COMPLETED
    figures: tuple[TrialLevelFigures, ...] = ()
    reason: str | None = None

    def level(self, concurrency: int) -> TrialLevelFigures | None:
        """The figures measured at ``concurrency`` (``None`` when that level was not measured)."""
        return next((f for f in self.figures if f.concurrency == concurrency), None)


class ObjectiveKind(StrEnum):
    DECODE_TOKENS_PER_SECOND = "decodeTokensPerSecond"
    OUTPUT_TOKENS_PER_SECOND = "outputTokensPerSecond"
    GOODPUT = "goodput"


class LevelWeight(TuningModel):
    """One concurrency level of the workload and its weight in the overall objective (``concurrency[].weight``)."""

    concurrency: Annotated[int, Field(ge=1)]
    weight: Annotated[float, Field(gt=0)] = 1.0


class Objective(TuningModel):
    """What to maximise. ``concurrency`` is the level for ``outputTokensPerSecond`` (1 for
    ``decodeTokensPerSecond``); ``goodput`` needs both limits (seconds). ``weights``: the workload's levels with
    their weights; with two or more of them (and a decode or output objective) the objective is the weighted mean
    of the levels' ratios to the reference trial (:attr:`weighted`, :func:`objective_value`), and ``concurrency``
    is only the level of the headline speedup."""

    kind: ObjectiveKind = ObjectiveKind.DECODE_TOKENS_PER_SECOND
    concurrency: Annotated[int, Field(ge=1)] = 1
    itl_p95_limit_seconds: Annotated[float | None, Field(gt=0)] = None
    ttft_p95_limit_seconds: Annotated[float | None, Field(gt=0)] = None
    weights: tuple[LevelWeight, ...] = ()

    @model_validator(mode="after")
    def _limits(self) -> Objective:
        if self.kind is ObjectiveKind.GOODPUT and (self.itl_p95_limit_seconds is None
                                                   or self.ttft_p95_limit_seconds is None):
            raise ValueError("goodput needs itlP95LimitSeconds and ttftP95LimitSeconds")
        if self.kind is ObjectiveKind.DECODE_TOKENS_PER_SECOND and self.concurrency != 1:
            raise ValueError("decodeTokensPerSecond is measured at concurrency 1")
        return self

    @property
    def weighted(self) -> bool:
        """Whether the objective is the weighted mean of several levels' ratios (two or more ``weights``, not
        goodput, which picks the best level within its limits and takes no weights)."""
        return len(self.weights) > 1 and self.kind is not ObjectiveKind.GOODPUT

    @property
    def unit(self) -> str:
        return "× the control trial" if self.weighted else "tok/s"

    def level_value(self, figures: TrialLevelFigures) -> float:
        """One level's objective: decode tok/s at concurrency 1 for ``decodeTokensPerSecond``, output tok/s
        otherwise (the figure the level is scored by in a weighted objective and in ``bestPerLevel``)."""
        if self.kind is ObjectiveKind.DECODE_TOKENS_PER_SECOND and figures.concurrency == 1:
            return figures.decode_tokens_per_second
        return figures.output_tokens_per_second


def reference_trial(objective: Objective, trials: Sequence[TrialResult]) -> TrialResult | None:
    """The trial a weighted objective's ratios are relative to: the first completed control trial (no speculative
    decoding) that measured every weighted level; when the control trial failed (or lacks a level), the first
    completed trial that did. ``None`` when there is none yet. The first such trial, never a later repetition,
    so every trial's value stays what it was when it was measured (the search replays from them)."""
    def full(t: TrialResult) -> bool:
        return t.verdict is TrialVerdict.COMPLETED and all(
            (f := t.level(w.concurrency)) is not None and objective.level_value(f) > 0 for w in objective.weights)

    return next((t for t in trials if t.point is None and full(t)), None) or next(
        (t for t in trials if full(t)), None)


def objective_value(objective: Objective, trial: TrialResult, reference: TrialResult | None = None) -> float | None:
    """The objective of one trial; ``None`` when it failed, was pruned or did not measure a level the objective
    needs. Weighted (:attr:`Objective.weighted`): Σ_c w_c · v_c / r_c ÷ Σ_c w_c over the weighted levels c, with
    v_c the trial's level objective (:meth:`Objective.level_value`) and r_c the ``reference`` trial's
    (:func:`reference_trial`; ``None`` without one), a dimensionless ratio (1.0: as fast as the reference)."""
    if trial.verdict is not TrialVerdict.COMPLETED:
        return None
    if objective.weighted:
        if reference is None:
            return None
        total = 0.0
        for w in objective.weights:
            mine, ref = trial.level(w.concurrency), reference.level(w.concurrency)
            if mine is None or ref is None or objective.level_value(ref) <= 0:
                return None
            total += w.weight * objective.level_value(mine) / objective.level_value(ref)
        return total / sum(w.weight for w in objective.weights)
    if objective.kind is ObjectiveKind.GOODPUT:
        ok = [f.output_tokens_per_second for f in trial.figures
              if objective.itl_p95_limit_seconds is not None and f.itl_p95_seconds <= objective.itl_p95_limit_seconds
              and objective.ttft_p95_limit_seconds is not None
              and f.ttft_p95_seconds <= objective.ttft_p95_limit_seconds]
        return max(ok, default=0.0) if trial.figures else None
    level = trial.level(objective.concurrency)
    if level is None:
        return None
    if objective.kind is ObjectiveKind.DECODE_TOKENS_PER_SECOND:
        return level.decode_tokens_per_second
    return level.output_tokens_per_second


def values(objective: Objective, trials: Sequence[TrialResult]) -> list[float | None]:
    """:func:`objective_value` of every trial, in order, against :func:`reference_trial` of them all."""
    reference = reference_trial(objective, trials) if objective.weighted else None
    return [objective_value(objective, t, reference) for t in trials]


def levels(trials: Iterable[TrialResult]) -> list[int]:
    """Every concurrency level some completed trial measured, ascending."""
    return sorted({f.concurrency for t in trials if t.verdict is TrialVerdict.COMPLETED for f in t.figures})


def speedups(trials: Sequence[TrialResult], point: Point | None) -> dict[int, float]:
    """Per concurrency level: ``point``'s mean output tok/s ÷ the control trial's (what speculation buys on this
    server; below 1 it costs), two decimals (:func:`~sglang_operator.api.tuning_status.speedup_of`, the one
    computation every view shows). Levels without both figures are left out."""
    out: dict[int, float] = {}
    for c in levels(trials):
        mine = _mean_level(trials, point, c)
        control = _mean_level(trials, None, c)
        if mine is not None and control and (ratio := speedup_of(mine, control)) is not None:
            out[c] = ratio
    return out


def _mean_level(trials: Sequence[TrialResult], point: Point | None, concurrency: int) -> float | None:
    values = [lv.output_tokens_per_second for t in trials
              if t.point == point and t.verdict is TrialVerdict.COMPLETED
              and (lv := t.level(concurrency)) is not None]
    return sum(values) / len(values) if values else None
