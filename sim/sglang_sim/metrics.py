"""``GET /metrics``: Prometheus text for the emulated version.

Which families exist, their types and extra label keys come from the project's extracted metric tables
(:func:`sglang_operator.sglang.metrics.load_metrics`, made from the wheels'
``python/sglang/srt/observability/metrics_collector.py``); the simulator only decides which of them it has a
value for (:data:`EMITTED`). Collector labels: scheduler metrics carry ``model_name, engine_type, tp_rank,
pp_rank, moe_ep_rank`` (``scheduler_metrics_mixin.py`` / ``metrics_reporter.py``); tokenizer metrics carry
``model_name`` (0.5.10 ``tokenizer_manager.py``) or ``model_name, engine_type`` (0.5.23
``metrics_collector.py:tokenizer_metric_labels``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from sglang_operator.sglang.metrics import load_metrics
from sglang_operator.sglang.versions import parse_version
from sglang_sim.stats import Histogram, Stats

TOKENIZER_ENGINE_TYPE_FROM = parse_version("0.5.11")  # tokenizer_manager.py adds engine_type to its labels


@dataclass(frozen=True)
class MetricSpec:
    """One family of the extracted list: exposition ``name`` (counters end in ``_total``), ``family``
    (without ``_total``), ``type`` (gauge/counter/histogram/summary), ``collector``, extra ``labels``."""

    name: str
    family: str
    type: str
    collector: str
    labels: tuple[str, ...]
    help: str


@cache
def metric_specs(table_version: str) -> dict[str, MetricSpec]:
    """The extracted metric list of a release's table (``"0.5.10"``, ``"0.5.23"``), by family
    (:func:`sglang_operator.sglang.metrics.load_metrics`). Raises ``SGLangVersionError`` for an unknown one."""
    return {m.family: MetricSpec(m.name, m.family, m.type, m.collector, m.labels, m.help)
            for m in load_metrics(parse_version(table_version)).values()}


@dataclass(frozen=True)
class MetricsContext:
    """Static facts the exposition needs besides :class:`Stats`."""

    table_version: str
    served_model_name: str
    hybrid_mamba: bool
    spec_num_steps: int
    spec_num_draft_tokens: int
    max_total_num_tokens: int
    context_len: int
    load_seconds: float
    startup_seconds: float
    extra_labels: tuple[tuple[str, str], ...] = ()


Sample = tuple[dict[str, str], float]
Provider = Callable[[Stats, MetricsContext], "list[Sample] | Histogram | dict[str, Histogram]"]


def _g(value: Callable[[Stats, MetricsContext], float]) -> Provider:
    return lambda s, c: [({}, float(value(s, c)))]


def _streaming(d: Callable[[Stats], dict[str, int]]) -> Provider:
    return lambda s, c: [({"is_streaming": k}, float(v)) for k, v in d(s).items()]


EMITTED: dict[str, Provider] = {
    "sglang:num_running_reqs": _g(lambda s, c: s.gauges.num_running_reqs),
    "sglang:num_queue_reqs": _g(lambda s, c: s.gauges.num_queue_reqs),
    "sglang:gen_throughput": _g(lambda s, c: s.gauges.gen_throughput),
    "sglang:spec_accept_length": _g(lambda s, c: s.gauges.spec_accept_length),
    "sglang:spec_accept_rate": _g(lambda s, c: s.gauges.spec_accept_rate),
    "sglang:spec_num_steps": _g(lambda s, c: c.spec_num_steps if s.gauges.spec_num_steps is None
                                else s.gauges.spec_num_steps),
    "sglang:spec_num_draft_tokens": _g(lambda s, c: c.spec_num_draft_tokens if s.gauges.spec_num_draft_tokens is None
                                       else s.gauges.spec_num_draft_tokens),
    "sglang:token_usage": _g(lambda s, c: s.gauges.token_usage),
    "sglang:full_token_usage": _g(lambda s, c: s.gauges.token_usage),
    "sglang:mamba_usage": _g(lambda s, c: s.gauges.mamba_usage if c.hybrid_mamba else 0.0),
    "sglang:num_used_tokens": _g(lambda s, c: s.gauges.num_used_tokens),
    "sglang:cache_hit_rate": _g(lambda s, c: s.gauges.cache_hit_rate),
    "sglang:max_total_num_tokens": _g(lambda s, c: c.max_total_num_tokens),
    "sglang:context_len": _g(lambda s, c: c.context_len),
    "sglang:is_cuda_graph": _g(lambda s, c: 1.0),
    "sglang:engine_load_weights_time": _g(lambda s, c: c.load_seconds),
    "sglang:engine_startup_time": _g(lambda s, c: c.startup_seconds),
    "sglang:weight_load_duration_seconds": lambda s, c: [({"source": "disk"}, c.load_seconds)],
    "sglang:startup_time_seconds": lambda s, c: [({"phase": "load_weight"}, c.load_seconds),
                                                 ({"phase": "tokenizer_e2e"}, c.startup_seconds)],
    "sglang:realtime_tokens": lambda s, c: [({"mode": "prefill_compute"}, float(s.realtime_prefill_tokens)),
                                            ({"mode": "decode"}, float(s.realtime_decode_tokens))],
    "sglang:prompt_tokens": _streaming(lambda s: s.prompt_tokens),
    "sglang:generation_tokens": _streaming(lambda s: s.generation_tokens),
    "sglang:num_requests": _streaming(lambda s: s.num_requests),
    "sglang:num_aborted_requests": _g(lambda s, c: s.num_aborted_requests),
    # the simulator never runs out of KV cache, so it never retracts (SGLang's counter exists from start-up)
    "sglang:num_retracted_requests": _g(lambda s, c: 0.0),
    "sglang:spec_verify_calls": _streaming(lambda s: s.spec_verify_calls),
    "sglang:time_to_first_token_seconds": lambda s, c: s.ttft,
    "sglang:e2e_request_latency_seconds": lambda s, c: s.e2e,
    "sglang:inter_token_latency_seconds": lambda s, c: s.itl,
}


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) + "}" if labels else ""


def base_labels(spec: MetricSpec, ctx: MetricsContext) -> dict[str, str]:
    """The collector's own labels for ``spec`` (see module docstring)."""
    labels = {"model_name": ctx.served_model_name}
    if spec.collector == "SchedulerMetricsCollector":
        labels.update(engine_type="unified", tp_rank="0", pp_rank="0", moe_ep_rank="0")
    elif parse_version(ctx.table_version) >= TOKENIZER_ENGINE_TYPE_FROM:
        labels["engine_type"] = "unified"
    labels.update(dict(ctx.extra_labels))
    return labels


def _samples(spec: MetricSpec, raw: Any, base: dict[str, str]) -> list[str]:
    lines: list[str] = []
    if spec.type == "histogram":
        hists: dict[str, Histogram] = raw if isinstance(raw, dict) else {"": raw}
        for stream_key, h in hists.items():
            labels = {**base, "is_streaming": stream_key} if stream_key else dict(base)
            for le, n in h.cumulative():
                lines.append(f"{spec.family}_bucket{_fmt({**labels, 'le': le})} {float(n)}")
            lines.append(f"{spec.family}_count{_fmt(labels)} {float(h.count)}")
            lines.append(f"{spec.family}_sum{_fmt(labels)} {h.total}")
        return lines
    merged: dict[tuple[tuple[str, str], ...], float] = {}
    for extra, value in raw:
        labels = {**base, **{k: v for k, v in extra.items() if k in spec.labels}}
        key = tuple(labels.items())
        merged[key] = merged.get(key, 0.0) + value
    for key, value in merged.items():
        lines.append(f"{spec.name}{_fmt(dict(key))} {float(value)}")
    return lines


def render(stats: Stats, ctx: MetricsContext) -> str:
    """Prometheus text exposition (format 0.0.4) of every emitted family the version defines."""
    specs = metric_specs(ctx.table_version)
    out: list[str] = []
    for family, provider in EMITTED.items():
        spec = specs.get(family)
        if spec is None:
            continue
        raw = provider(stats, ctx)
        if spec.type == "histogram" and isinstance(raw, dict) and "is_streaming" not in spec.labels:
            merged = Histogram(next(iter(raw.values())).buckets)
            for h in raw.values():
                merged.counts = [a + b for a, b in zip(merged.counts, h.counts, strict=True)]
                merged.total += h.total
                merged.count += h.count
            raw = merged
        help_text = (spec.help or spec.family).replace("\\", "\\\\").replace("\n", "\\n")
        # prometheus_client's classic exposition names counters with their ``_total`` suffix in HELP/TYPE.
        header = spec.name if spec.type == "counter" else spec.family
        out.append(f"# HELP {header} {help_text}")
        out.append(f"# TYPE {header} {spec.type}")
        out.extend(_samples(spec, raw, base_labels(spec, ctx)))
    return "\n".join(out) + "\n"
