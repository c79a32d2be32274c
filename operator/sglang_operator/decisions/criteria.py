"""Pure check of one measured sample against ``spec.rollback``'s floors and the baseline, with the words.

Figures: decode speed in tok/s (``Figures.decode_tokens_per_second``: probe single-stream speed or 1 / mean ITL,
never aggregate throughput) and mean acceptance length in tokens per verify step. Relative criteria
(``minRelativeTokensPerSecond``, ``minRelativeAcceptLength``) apply only when the baseline was measured with the
same signal on the same :class:`~sglang_operator.api.analysis.Setup` (model path and revision, GPU product,
parallelism); the absolute floors (``minTokensPerSecond``, ``minAcceptLength``) always. Messages name both
numbers, e.g. ``36.0 tok/s, accept length 1.75 < 0.85 × 51.6 tok/s, 0.9 × 2.73 of 9699b6738c``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from sglang_operator.api.analysis import Baseline, SampleFigures, Setup
from sglang_operator.api.rollback import RollbackPolicy
from sglang_operator.decisions.sampling.model import Sample, SampleKind


@dataclass(frozen=True)
class SampleCheck:
    """Whether figures pass, and why in words (the failed criteria with both numbers, or what they passed)."""

    passed: bool
    reason: str


def tps(value: float) -> str:
    """``36.0 tok/s``."""
    return f"{value:.1f} tok/s"


def length(value: float) -> str:
    """An acceptance length with two decimals, ``2.73``."""
    return f"{value:.2f}"


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
    """Check one sample's ``figures``: the floors always, the relative criteria when ``comparable`` and a
    baseline exists. Acceptance-length criteria are skipped when either side has no acceptance length."""
    speed, accept = figures.tokens_per_second, figures.accept_length
    shown = tps(speed) + ("" if accept is None else f", accept length {length(accept)}")
    failed: list[str] = []
    if policy.min_tokens_per_second is not None and speed < policy.min_tokens_per_second:
        failed.append(f"{tps(speed)} < minTokensPerSecond {policy.min_tokens_per_second:g}")
    if policy.min_accept_length is not None and accept is not None and accept < policy.min_accept_length:
        failed.append(f"accept length {length(accept)} < minAcceptLength {policy.min_accept_length:g}")
    if baseline is None or not comparable:
        scope = "no baseline yet" if baseline is None else f"not comparable with {baseline.revision}"
        if failed:
            return SampleCheck(False, "; ".join(failed))
        return SampleCheck(True, f"{shown}: passes the floors ({scope})")
    lhs, rhs, ok_rhs = [], [], []
    rel_tps = policy.min_relative_tokens_per_second
    if speed < rel_tps * baseline.tokens_per_second:
        lhs.append(tps(speed))
        rhs.append(f"{rel_tps:g} × {tps(baseline.tokens_per_second)}")
    ok_rhs.append(f"{rel_tps:g} × {tps(baseline.tokens_per_second)}")
    if accept is not None and baseline.accept_length is not None:
        rel_len = policy.min_relative_accept_length
        if accept < rel_len * baseline.accept_length:
            lhs.append(f"accept length {length(accept)}")
            rhs.append(f"{rel_len:g} × {length(baseline.accept_length)}")
        ok_rhs.append(f"{rel_len:g} × {length(baseline.accept_length)}")
    if lhs:
        failed.insert(0, f"{', '.join(lhs)} < {', '.join(rhs)} of {baseline.revision}")
    if failed:
        return SampleCheck(False, "; ".join(failed))
    return SampleCheck(True, f"{shown} ≥ {', '.join(ok_rhs)} of {baseline.revision}")


def medians(figures: Iterable[SampleFigures]) -> SampleFigures | None:
    """Median decode speed, median acceptance length and median acceptance rate (each of the samples that have
    one: a sample whose pods had not refreshed SGLang's gauges yet has none, never a 0); None when empty."""
    items = list(figures)
    if not items:
        return None
    lengths = [f.accept_length for f in items if f.accept_length is not None]
    rates = [f.accept_rate for f in items if f.accept_rate is not None]
    return SampleFigures(
        tokens_per_second=statistics.median(f.tokens_per_second for f in items),
        accept_length=statistics.median(lengths) if lengths else None,
        accept_rate=statistics.median(rates) if rates else None,
    )


def measured(sample: Sample | None) -> SampleFigures | None:
    """A measured sample's figures (decode tok/s, accept length); None: not measured, no decode speed."""
    if sample is None or sample.kind is not SampleKind.MEASURED:
        return None
    speed = finite(sample.figures.decode_tokens_per_second)
    if speed is None or speed <= 0:
        return None
    return figures_of(sample, speed)


def figures_of(sample: Sample, speed: float) -> SampleFigures:
    """``sample``'s figures kept for a median: ``speed`` (its decode tok/s, checked by the caller), its finite
    acceptance length and rate."""
    return SampleFigures(tokens_per_second=speed, accept_length=finite(sample.figures.accept_length),
                         accept_rate=finite(sample.figures.accept_rate))


def figures_text(fig: SampleFigures | None) -> str:
    """``36.0 tok/s, accept length 1.75``, or ``no figures``."""
    if fig is None:
        return "no figures"
    accept = "" if fig.accept_length is None else f", accept length {length(fig.accept_length)}"
    return tps(fig.tokens_per_second) + accept
