"""The Prometheus metric families of a supported SGLang release (``data/metrics-<v>.json``).

Extracted statically from ``sglang/srt/observability/metrics_collector.py`` by ``scripts/extract_sglang.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from sglang_operator.sglang.versions import SGLangVersion, nearest_supported

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
    path = resources.files("sglang_operator.sglang") / "data" / f"metrics-{table}.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {
        m["name"]: MetricFamily(
            name=m["name"], family=m["family"], type=m["type"], collector=m["collector"],
            collector_labels=m["collector_labels"], labels=tuple(m["labels"]),
            multiprocess_mode=m.get("multiprocess_mode"), help=m["help"],
        )
        for m in doc["metrics"]
    }


def load_metrics(version: SGLangVersion) -> dict[str, MetricFamily]:
    """Metric families by declared name for ``version`` (raises ``SGLangVersionError`` if unsupported)."""
    return _load(nearest_supported(version))
