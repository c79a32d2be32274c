"""A fixed log-bucket histogram of positive durations (seconds), for quantiles of many observations in fixed memory.

The probe's inter-token gaps (:class:`sglang_operator.io.loadgen.StreamResult`) are kept here instead of a list of
every gap: a hostile server sending millions of chunks then costs a bounded dict, not one float per chunk.
Buckets are ``PER_OCTAVE`` per doubling from :data:`LOW` to :data:`HIGH` (each about 9 % wide), plus one below
and one above; a quantile is interpolated geometrically inside its bucket and clamped to the observed minimum and
maximum, so its relative error is under half a bucket's width (about 4.5 %).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

LOW = 1e-5
"""Lower bound of the first regular bucket, seconds (10 µs); smaller observations share the bucket below."""
HIGH = 100.0
"""Upper bound of the last regular bucket, seconds; larger observations share the bucket above."""
PER_OCTAVE = 8
_SCALE = PER_OCTAVE / math.log(2)
_LAST = math.ceil(math.log(HIGH / LOW) * _SCALE)  # index of the bucket above HIGH; 0 is the one below LOW
BUCKETS = _LAST + 1
"""Number of buckets at most (regular ones plus the two open-ended): the bound on a histogram's memory."""


def _index(value: float) -> int:
    if value < LOW:
        return 0
    if value >= HIGH:
        return _LAST
    return min(_LAST - 1, 1 + int(math.log(value / LOW) * _SCALE))


def _bounds(index: int) -> tuple[float, float]:
    """(lower, upper) bound of regular bucket ``index`` (1 .. BUCKETS - 2), seconds."""
    return LOW * math.exp((index - 1) / _SCALE), min(HIGH, LOW * math.exp(index / _SCALE))


@dataclass
class LogHistogram:
    """Counts of observations per log bucket (``counts``: bucket index → count, at most :data:`BUCKETS` keys),
    their ``count``, ``total`` (seconds), ``min`` and ``max``. Non-finite and negative observations are ignored."""

    counts: dict[int, int] = field(default_factory=dict)
    count: int = 0
    total: float = 0.0
    min: float = math.inf
    max: float = 0.0

    def add(self, value: float) -> None:
        """Count one observation of ``value`` seconds."""
        if not math.isfinite(value) or value < 0:
            return
        i = _index(value)
        self.counts[i] = self.counts.get(i, 0) + 1
        self.count += 1
        self.total += value
        self.min = min(self.min, value)
        self.max = max(self.max, value)

    def merge(self, other: LogHistogram) -> None:
        """Add every observation of ``other`` to this histogram."""
        for i, n in other.counts.items():
            self.counts[i] = self.counts.get(i, 0) + n
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the observations, seconds, interpolated inside its bucket; 0 when there
        are none. Raises ``ValueError`` when ``q`` is outside [0, 1]."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile {q} is outside [0, 1]")
        if self.count == 0:
            return 0.0
        rank = q * self.count
        seen = 0
        for i in sorted(self.counts):
            n = self.counts[i]
            if seen + n >= rank:
                lower, upper = (self.min, LOW) if i == 0 else (HIGH, self.max) if i == _LAST else _bounds(i)
                lower, upper = max(lower, self.min), min(upper, self.max)
                if lower <= 0 or upper <= lower:
                    return max(self.min, min(self.max, upper))
                return float(lower * (upper / lower) ** ((rank - seen) / n))
            seen += n
        return self.max

    @property
    def p50(self) -> float:
        """The median, seconds (0 without observations)."""
        return self.quantile(0.5)

    @property
    def p95(self) -> float:
        """The 95th percentile, seconds (0 without observations)."""
        return self.quantile(0.95)

    @property
    def mean(self) -> float:
        """The mean, seconds (0 without observations)."""
        return self.total / self.count if self.count else 0.0
