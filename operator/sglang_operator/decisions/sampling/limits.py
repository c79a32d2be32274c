"""Bounds on one ``/metrics`` scrape of an SGLang pod, after Prometheus' scrape-config limits: the pod runs any image
(``spec.sglang.image``), so its exposition is untrusted input to the shared operator.

=========================  ===========================  ==========================  ==========================
limit                      Prometheus                   operator flag               reason counted on a breach
=========================  ===========================  ==========================  ==========================
``body_bytes``             ``body_size_limit``          ``--scrape-body-limit``     ``too_large``
``samples``                ``sample_limit``             ``--scrape-sample-limit``   ``too_many_samples``
``labels``                 ``label_limit``              ``--scrape-label-limit``    ``too_many_labels``
``label_value_length``     ``label_value_length_limit`` ``--scrape-label-value-``   ``label_value_too_long``
                                                        ``length-limit``
``cache_bytes``            (none)                       ``--scrape-cache-bytes``    (not an error)
=========================  ===========================  ==========================  ==========================

A breach fails that pod's scrape (``sglang_operator_scrape_errors_total{endpoint="metrics", reason}``), as
Prometheus fails the scrape. ``samples`` counts every line of the body that is not a comment (blank lines too),
wanted or not; ``labels`` and ``label_value_length`` apply to the sample lines the sampler reads
(:mod:`.roles`), which are the only ones it parses. ``cache_bytes``: the per-pod memory of label sets seen before
(:class:`~sglang_operator.decisions.sampling.cache.SeriesCache`).
"""

from __future__ import annotations

from dataclasses import dataclass

# The simulator's largest /metrics body (DP 8 x TP 8, 0.5.23, after traffic) is 21 661 bytes: 147 samples, at most
# 6 labels, label values of at most 16 characters (a real 0.5.23 server's is ~200 KiB). Defaults are >= 10 x that.
BODY_BYTES = 8 * 1024 * 1024
"""Default ``body_bytes``: bytes of one decoded body."""
SAMPLES = 50_000
"""Default ``samples``: non-comment lines of one body."""
LABELS = 64
"""Default ``labels``: labels of one sample (``le`` included)."""
LABEL_VALUE_LENGTH = 2048
"""Default ``label_value_length``: characters of one label value."""
CACHE_BYTES = 256 * 1024
"""Default ``cache_bytes``: bytes of label sets remembered per pod (the simulator's wanted series take ~40 KiB)."""
REASONS = ("too_large", "too_many_samples", "too_many_labels", "label_value_too_long")
"""The scrape-error reasons of a breached limit (in the order of the table above)."""


@dataclass(frozen=True)
class ScrapeLimits:
    """The limits of the module docstring; all positive. Raises ``ValueError`` when one is below 1."""

    body_bytes: int = BODY_BYTES
    samples: int = SAMPLES
    labels: int = LABELS
    label_value_length: int = LABEL_VALUE_LENGTH
    cache_bytes: int = CACHE_BYTES

    def __post_init__(self) -> None:
        if min(self.body_bytes, self.samples, self.labels, self.label_value_length, self.cache_bytes) < 1:
            raise ValueError(f"scrape limits must be positive: {self}")
