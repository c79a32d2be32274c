"""The rollback criteria as a table (:data:`CRITERIA`, one :class:`Criterion` row each) and the pure check of one
measured sample against ``spec.rollback``'s limits and the baseline, with the words.

Rows: decode speed in tok/s (``Figures.decode_tokens_per_second``: probe single-stream speed or 1 / mean ITL, never
aggregate throughput), mean acceptance length in tokens per verify step, and median time to first token in seconds
(from the pods' histogram ``sglang:time_to_first_token_seconds``; off unless its policy field is set). Each row
names its figure's key in status, where the sampler's :class:`~sglang_operator.decisions.sampling.model.Figures`
has it, its direction, its ``spec.rollback`` fields (an absolute limit, a fraction or multiple of the other side),
its words, its ``kubectl sglang history`` column and its dashboard series; the rollback's judgement, the canary's
side-by-side verdict, the ledger, ``history`` and the conditions' messages iterate the table, so a new criterion is
one row (``docs/rollback.md``, "Criteria"). Relative criteria apply only when the baseline was measured with the
same signal on the same :class:`~sglang_operator.api.analysis.Setup` (model path and revision, GPU product,
parallelism); the absolute limits always. Messages name both numbers, e.g. ``36.0 tok/s, accept length 1.75 < 0.85 ×
51.6 tok/s, 0.9 × 2.73 of 9699b6738c``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pydantic.alias_generators import to_snake

from sglang_operator.api.analysis import Baseline, CanaryStepRecord, SampleFigures, Setup, figure, figure_fields
from sglang_operator.api.rollback import RollbackPolicy
from sglang_operator.api.status import Verdict
from sglang_operator.decisions.actions import RecordVerdict
from sglang_operator.decisions.sampling.model import Figures, Sample, SampleKind


@dataclass(frozen=True)
class Criterion:
    """One rollback criterion: a figure of every measured sample, judged against an absolute limit and against
    the other side (the baseline, or the stable pods of the same interval in a canary)."""

    key: str
    """The figure's key in status (camelCase): a field of ``SampleFigures``, ``Baseline`` and ``status.revisions[]``
    of that name where they have one (``tokensPerSecond``, ``acceptLength``), else their ``extraFigures[key]``."""
    read: Callable[[Figures], float | None]
    """Where the sampler's figures have it (None: not measured in the interval)."""
    unit: str
    """Appended to a value in words, with its space: ``" tok/s"``, ``" s"``, ``""``."""
    digits: int
    """Decimals of a value in words and in ``history``."""
    column: str
    """Header of its column in ``kubectl sglang history``."""
    series: str
    """The operator's Prometheus series that shows it (the dashboard's, ``docs/metrics.md``)."""
    label: str = ""
    """Words before a value: ``accept length`` (``""``: the unit says it, ``36.0 tok/s``)."""
    higher_is_better: bool = True
    """True: a value below the limit fails (a speed); False: above (a latency)."""
    limit: str | None = None
    """The ``spec.rollback`` field (camelCase) of its absolute limit: a floor (``minTokensPerSecond``) or a ceiling
    (``maxTimeToFirstTokenSeconds``); None: none."""
    relative: str | None = None
    """The ``spec.rollback`` field (camelCase) of its limit relative to the other side's figure: a fraction
    (``minRelativeTokensPerSecond``) or a multiple (``maxRelativeTimeToFirstToken``); None: none."""
    required: bool = False
    """A sample without this figure (or with one ≤ 0) is no measurement (Inconclusive): decode speed."""

    def bare(self, value: float) -> str:
        """``51.6 tok/s``, ``2.73``, ``0.412 s``."""
        return f"{value:.{self.digits}f}{self.unit}"

    def shown(self, value: float) -> str:
        """``36.0 tok/s``, ``accept length 1.75``, ``TTFT 0.412 s``."""
        return f"{self.label} {self.bare(value)}" if self.label else self.bare(value)

    def setting(self, policy: RollbackPolicy, name: str | None) -> float | None:
        """The value of ``policy``'s field ``name`` (camelCase; None, or a field the policy has not: unset)."""
        value = getattr(policy, to_snake(name), None) if name else None
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def applies(self, policy: RollbackPolicy) -> bool:
        """Whether ``policy`` sets either of its limits: a criterion without one is off (not judged, its figure not
        kept)."""
        return self.setting(policy, self.limit) is not None or self.setting(policy, self.relative) is not None

    def worse(self, value: float, limit: float) -> bool:
        """Whether ``value`` fails ``limit`` (below it, or above it for a latency)."""
        return value < limit if self.higher_is_better else value > limit

    @property
    def fails(self) -> str:
        """The sign of a failure: ``<`` (below the floor), ``>`` (above the ceiling)."""
        return "<" if self.higher_is_better else ">"

    @property
    def meets(self) -> str:
        """The sign of a pass: ``≥`` or ``≤``."""
        return "≥" if self.higher_is_better else "≤"


TOKENS_PER_SECOND = Criterion(
    key="tokensPerSecond", read=lambda f: f.decode_tokens_per_second, unit=" tok/s", digits=1, column="TOK/S",
    series="sglang_operator_server_decode_tokens_per_second", limit="minTokensPerSecond",
    relative="minRelativeTokensPerSecond", required=True)
"""Decode speed, tok/s: the probe's single-stream speed or 1 / mean inter-token latency."""
ACCEPT_LENGTH = Criterion(
    key="acceptLength", read=lambda f: f.accept_length, unit="", digits=2, column="ACCEPT LEN",
    series="sglang_operator_server_accept_length", label="accept length", limit="minAcceptLength",
    relative="minRelativeAcceptLength")
"""Mean acceptance length, tokens per verify step (skipped where either side has none)."""
TIME_TO_FIRST_TOKEN = Criterion(
    key="timeToFirstTokenSeconds", read=lambda f: f.ttft_p50_seconds, unit=" s", digits=3, column="TTFT",
    series="sglang_operator_server_time_to_first_token_seconds", label="TTFT", higher_is_better=False,
    limit="maxTimeToFirstTokenSeconds", relative="maxRelativeTimeToFirstToken")
"""Median time to first token, seconds, from ``sglang:time_to_first_token_seconds`` bucket increases; off unless
``maxTimeToFirstTokenSeconds`` or ``maxRelativeTimeToFirstToken`` is set."""

CRITERIA: tuple[Criterion, ...] = (TOKENS_PER_SECOND, ACCEPT_LENGTH, TIME_TO_FIRST_TOKEN)
"""Every rollback criterion, in the order messages and ``history`` name them. The first ``required`` row's figure
is ``SampleFigures.tokensPerSecond`` (required by the models)."""
ACCEPT_RATE = "acceptRate"
"""Kept beside the criteria's figures (a median in the ledger and the baseline), never judged: SGLang's formula of
``sglang:spec_accept_rate`` differs between releases."""
DEFAULT_POLICY = RollbackPolicy()
"""The policy of a spec without ``spec.rollback``: which criteria words show by default (:func:`figures_text`)."""


def active(policy: RollbackPolicy) -> tuple[Criterion, ...]:
    """The rows of :data:`CRITERIA` that ``policy`` sets a limit of (:meth:`Criterion.applies`)."""
    return tuple(c for c in CRITERIA if c.applies(policy))


@dataclass(frozen=True)
class SampleCheck:
    """Whether figures pass, and why in words (the failed criteria with both numbers, or what they passed)."""

    passed: bool
    reason: str


def tps(value: float) -> str:
    """``36.0 tok/s``."""
    return TOKENS_PER_SECOND.bare(value)


def length(value: float) -> str:
    """An acceptance length with two decimals, ``2.73``."""
    return ACCEPT_LENGTH.bare(value)


def finite(value: float | None) -> float | None:
    """``value`` when it is a finite number, else None (NaN and infinities are no measurement)."""
    return value if value is not None and math.isfinite(value) else None


def setup_differences(baseline: Baseline, setup: Setup | None, signal: str) -> list[str]:
    """What differs between the baseline's measurement and a revision's, e.g. ``gpuProduct A6000 → H100``;
    empty when relative criteria apply. An unknown setup on either side is a difference."""
    diffs = [] if baseline.signal == signal else [f"signal {baseline.signal} → {signal}"]
    if baseline.setup is None or setup is None:
        return [*diffs, "setup unknown"]
    old, new = baseline.setup.dump(), setup.dump()
    return diffs + [f"{k} {old.get(k)} → {new.get(k)}" for k in sorted(old.keys() | new.keys())
                    if old.get(k) != new.get(k)]


def check(
    figures: SampleFigures, policy: RollbackPolicy, baseline: Baseline | None, comparable: bool
) -> SampleCheck:
    """Check one sample's ``figures`` against every criterion ``policy`` sets (:func:`active`): the absolute limits
    always, the relative ones when ``comparable`` and a baseline exists. A criterion is skipped where either side
    has no figure of it (an acceptance length without speculative decoding)."""
    rows = [(c, figure(figures, c.key)) for c in active(policy)]
    measured = [(c, v) for c, v in rows if v is not None]
    shown = ", ".join(c.shown(v) for c, v in measured)
    failed: list[str] = []
    for c, v in measured:
        limit = c.setting(policy, c.limit)
        if limit is not None and c.worse(v, limit):
            failed.append(f"{c.shown(v)} {c.fails} {c.limit} {limit:g}")
    if baseline is None or not comparable:
        scope = "no baseline yet" if baseline is None else f"not comparable with {baseline.revision}"
        if failed:
            return SampleCheck(False, "; ".join(failed))
        return SampleCheck(True, f"{shown}: passes the floors ({scope})")
    worse: dict[bool, tuple[list[str], list[str]]] = {True: ([], []), False: ([], [])}
    met: dict[bool, tuple[list[str], list[str]]] = {True: ([], []), False: ([], [])}
    for c, v in measured:
        rel, other = c.setting(policy, c.relative), figure(baseline, c.key)
        if rel is None or other is None:
            continue
        side = f"{rel:g} × {c.bare(other)}"
        met[c.higher_is_better][0].append(c.shown(v))
        met[c.higher_is_better][1].append(side)
        if c.worse(v, rel * other):
            worse[c.higher_is_better][0].append(c.shown(v))
            worse[c.higher_is_better][1].append(side)
    lost = [f"{', '.join(lhs)} {'<' if up else '>'} {', '.join(rhs)}" for up, (lhs, rhs) in worse.items() if lhs]
    if lost:
        failed.insert(0, f"{', '.join(lost)} of {baseline.revision}")
    if failed:
        return SampleCheck(False, "; ".join(failed))
    if not met[False][0]:  # speeds only: every figure shown, ``36.0 tok/s, accept length 2.70 ≥ 0.85 × …``
        return SampleCheck(True, f"{shown} ≥ {', '.join(met[True][1])} of {baseline.revision}")
    kept = [f"{', '.join(lhs)} {'≥' if up else '≤'} {', '.join(rhs)}" for up, (lhs, rhs) in met.items() if lhs]
    return SampleCheck(True, f"{', '.join(kept)} of {baseline.revision}")


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def medians(figures: Iterable[SampleFigures]) -> SampleFigures | None:
    """The median of every criterion's figure and of the acceptance rate, each of the samples that have one (a
    sample whose pods had not refreshed SGLang's gauges yet has none, never a 0); None when empty."""
    items = list(figures)
    if not items:
        return None
    keys = [*(c.key for c in CRITERIA), ACCEPT_RATE]
    values = {k: _median([figure(f, k) for f in items]) for k in keys}
    values[TOKENS_PER_SECOND.key] = statistics.median(f.tokens_per_second for f in items)
    return SampleFigures.model_validate(figure_fields(SampleFigures, values))


def measured(sample: Sample | None, policy: RollbackPolicy = DEFAULT_POLICY) -> SampleFigures | None:
    """A measured sample's figures (:func:`figures_of`); None: not measured, or a ``required`` criterion's figure
    missing or ≤ 0 (no decode speed)."""
    if sample is None or sample.kind is not SampleKind.MEASURED:
        return None
    speed = finite(sample.figures.decode_tokens_per_second)
    if speed is None or speed <= 0 or not usable(sample):
        return None
    return figures_of(sample, speed, policy)


def usable(sample: Sample) -> bool:
    """Whether ``sample`` has every ``required`` criterion's figure, finite and > 0."""
    values = [finite(c.read(sample.figures)) for c in CRITERIA if c.required]
    return all(v is not None and v > 0 for v in values)


def figures_of(sample: Sample, speed: float, policy: RollbackPolicy = DEFAULT_POLICY) -> SampleFigures:
    """``sample``'s figures kept for a median: ``speed`` (its decode tok/s, checked by the caller), the finite
    figure of every other criterion ``policy`` sets (:func:`active`; tok/s and accept length always, the models' own
    fields) and its acceptance rate."""
    values: dict[str, float | None] = {c.key: finite(c.read(sample.figures)) for c in CRITERIA
                                       if c in (TOKENS_PER_SECOND, ACCEPT_LENGTH) or c.applies(policy)}
    values[TOKENS_PER_SECOND.key] = speed
    values[ACCEPT_RATE] = finite(sample.figures.accept_rate)
    return SampleFigures.model_validate(figure_fields(SampleFigures, values))


def figures_text(fig: SampleFigures | None, policy: RollbackPolicy = DEFAULT_POLICY) -> str:
    """``36.0 tok/s, accept length 1.75`` (the figures of the criteria ``policy`` sets), or ``no figures``."""
    if fig is None:
        return "no figures"
    values = [(c, figure(fig, c.key)) for c in active(policy)]
    return ", ".join(c.shown(v) for c, v in values if v is not None) or tps(fig.tokens_per_second)


def baseline_of(revision: str, fig: SampleFigures, samples: int, signal: str) -> Baseline:
    """A canary's other side: the stable pods' figures ``fig`` (medians of ``samples`` intervals) as a
    :class:`Baseline` of ``revision`` measured with ``signal``."""
    values = {k: figure(fig, k) for k in [*(c.key for c in CRITERIA), ACCEPT_RATE]}
    return Baseline.model_validate({**figure_fields(Baseline, values), "revision": revision, "samples": samples,
                                    "signal": signal})


def record(revision: str, verdict: Verdict, reason: str, med: SampleFigures | None, samples: int | None = None,
           canary_steps: Sequence[CanaryStepRecord] = ()) -> RecordVerdict:
    """The ledger verdict of ``revision`` with ``med``'s figures (medians of ``samples`` samples), every criterion's
    and the acceptance rate, where given; ``canary_steps``: the steps of its canary, when it ran as one."""
    steps = tuple(h.dump() for h in canary_steps) or None
    if med is None:
        return RecordVerdict(revision, verdict, reason, samples=samples, canary_steps=steps)
    return RecordVerdict(revision, verdict, reason, med.tokens_per_second, med.accept_length, samples, steps,
                         accept_rate=med.accept_rate, extra_figures=dict(med.extra_figures or {}))
