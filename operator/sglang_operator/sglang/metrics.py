"""The Prometheus metric families of a known SGLang release (:mod:`.catalog`, ``data/metrics.json``).

Extracted statically by ``scripts/extract_sglang.py`` from the release's collector module:
``sglang/srt/metrics/collector.py`` (0.4.6–0.5.9) or ``sglang/srt/observability/metrics_collector.py`` (0.5.10 on).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from sglang_operator.sglang import catalog
from sglang_operator.sglang._version import SGLangVersion

__all__ = ["MetricFamily", "load_metrics"]


@dataclass(frozen=True)
class MetricFamily:
    """One metric family.

    ``name`` as declared (``sglang:prompt_tokens_total``); ``family`` as prometheus_client's text parser
    names it (counters without ``_total``); ``type`` counter/gauge/histogram/summary/info;
    ``collector_labels``: the collector's base labels (``model_name``, ``engine_type``, ``tp_rank``, ...)
    come first; ``labels``: the extra label names; ``multiprocess_mode``: gauges only (``all`` adds ``pid``).
    """

    name: str
    family: str
    type: str
    collector: str
    collector_labels: bool
    labels: tuple[str, ...]
    multiprocess_mode: str | None
    help: str


@cache
def _load(table: SGLangVersion) -> dict[str, MetricFamily]:
    return {
        m["name"]: MetricFamily(
            name=m["name"], family=m["family"], type=m["type"], collector=m["collector"],
            collector_labels=m["collector_labels"], labels=tuple(m["labels"]),
            multiprocess_mode=m.get("multiprocess_mode"), help=m["help"],
        )
        for m in catalog.metric_records(table)
    }


def load_metrics(version: SGLangVersion) -> dict[str, MetricFamily]:
    """Metric families by declared name for ``version`` (raises ``SGLangVersionError`` if unsupported)."""
    return _load(catalog.resolve(version).release.metrics_table)
