"""What the sampler keeps of a pod's scrape until the next one, and its bounds.

The figures of an interval need, of the previous scrape, only each counter's and each histogram's value per series
(an increase is computed per series, so a restarted pod's reset counter is seen as a reset): never the gauges, never
the label text. :func:`compact` turns a parsed scrape into that form, each series key replaced by a 64-bit hash
(:func:`series_hash`, 16 hex characters, whatever the length of the labels), and refuses a scrape with more than
``retained_series`` series of one role (:class:`RetainError`, reason ``too_many_series``; a legitimate SGLang pod
has one series per role and rank, 64 GPUs at most); :func:`retained` drops what the next interval does not need
(the gauges) and :func:`retained_bytes` measures what it holds, which the sampler charges against the process-wide
budget ``ScrapeLimits.retained_bytes`` (a breach: that pod's scrape is not kept, its next interval is inconclusive,
and it is counted; never memory taken).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from typing import TypeVar

from sglang_operator.decisions.sampling.parse import Parsed
from sglang_operator.decisions.sampling.roles import Role

TOO_MANY_SERIES = "too_many_series"
"""Reason of a scrape with more series of one role than ``ScrapeLimits.retained_series``."""
BUDGET = "retained_budget"
"""Reason of a scrape not kept because the process-wide budget (``ScrapeLimits.retained_bytes``) is spent."""


class RetainError(ValueError):
    """A scrape the sampler does not keep; ``reason`` is the reason it is counted under."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def series_hash(key: str) -> str:
    """A series key (the sorted ``name="value"`` label pairs) as 16 hex characters (BLAKE2b, 64 bits)."""
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


_V = TypeVar("_V")


def _hashed(by_role: Mapping[Role, Mapping[str, _V]], limit: int, kind: str) -> dict[Role, dict[str, _V]]:
    out: dict[Role, dict[str, _V]] = {}
    for role, series in by_role.items():
        if len(series) > limit:
            raise RetainError(TOO_MANY_SERIES, f"{len(series)} {kind} series of {role.value}, over {limit} (the "
                                               "operator's --scrape-retained-series)")
        out[role] = {series_hash(k): v for k, v in series.items()}
    return out


def compact(parsed: Parsed, retained_series: int) -> Parsed:
    """``parsed`` with every series key hashed (:func:`series_hash`): what the figures of this interval and the next
    need, without the label text. Raises :class:`RetainError` (``too_many_series``) when a role has more than
    ``retained_series`` series."""
    return Parsed(counters=_hashed(parsed.counters, retained_series, "counter"),
                  gauges=_hashed(parsed.gauges, retained_series, "gauge"),
                  histograms=_hashed(parsed.histograms, retained_series, "histogram"),
                  duplicates=parsed.duplicates, size=parsed.size)


def retained(parsed: Parsed) -> Parsed:
    """What is kept until the next interval of a :func:`compact` scrape: its counters and histograms (the gauges of
    the previous scrape are never read)."""
    return Parsed(counters=parsed.counters, histograms=parsed.histograms)


def retained_bytes(parsed: Parsed) -> int:
    """Bytes a :func:`retained` scrape holds, measured (``sys.getsizeof``; the RSS outgrew an estimate
    per series 2-3 times): the scrape and its mappings, every series key (a 16-character hash), value, histogram
    (:class:`~sglang_operator.decisions.sampling.parse.HistogramSeries`, its bucket tuples and their floats). The
    roles, shared by every scrape, are not counted."""
    total = sys.getsizeof(parsed) + sys.getsizeof(parsed.counters) + sys.getsizeof(parsed.histograms)
    for counters in parsed.counters.values():
        total += sys.getsizeof(counters) + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in counters.items())
    for histograms in parsed.histograms.values():
        total += sys.getsizeof(histograms)
        for key, h in histograms.items():
            total += sys.getsizeof(key) + sys.getsizeof(h) + sys.getsizeof(h.buckets) + sys.getsizeof(h.sum) + \
                sys.getsizeof(h.count) + sum(sys.getsizeof(b) + sys.getsizeof(b[0]) + sys.getsizeof(b[1])
                                             for b in h.buckets)
    return total
