"""Prometheus text of an SGLang 0.5.23 server, as prometheus_client writes it (one family grouped under its
HELP/TYPE lines), for the sampling tests. Only the families the sampler reads plus a few it must skip."""

from __future__ import annotations

from collections.abc import Sequence

LABELS = 'model_name="Qwen/Qwen3.6-27B",engine_type="unified"'
SCHED = LABELS + ',tp_rank="0",pp_rank="0",moe_ep_rank="0"'
TTFT_LE = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0)
ITL_LE = (0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.06, 0.1)


def _hist(name: str, labels: str, les: Sequence[float], counts: Sequence[float], total: float) -> list[str]:
    lines = [f"# HELP {name} Histogram.", f"# TYPE {name} histogram"]
    run = 0.0
    for le, c in zip(les, counts, strict=True):
        run += c
        lines.append(f'{name}_bucket{{{labels},le="{le}"}} {run}')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {run}')
    lines.append(f"{name}_count{{{labels}}} {run}")
    lines.append(f"{name}_sum{{{labels}}} {total}")
    return lines


def exposition(gen: float = 0.0, verify: float | None = 0.0, *, running: float = 0, queued: float = 0,
               accept_length: float = 0.0, accept_rate: float = 0.0, usage: float = 0.0,
               ttft: Sequence[float] = (0,) * 8, ttft_sum: float = 0.0,
               itl: Sequence[float] = (0,) * 8, itl_sum: float = 0.0, extra: Sequence[str] = ()) -> str:
    """Cumulative counters ``gen`` / ``verify`` (None: a release without the counter), per-bucket (not
    cumulative) histogram counts, and gauges."""
    lines = [
        "# HELP sglang:num_running_reqs The number of running requests.",
        "# TYPE sglang:num_running_reqs gauge",
        f"sglang:num_running_reqs{{{SCHED}}} {running}",
        "# TYPE sglang:num_queue_reqs gauge",
        f"sglang:num_queue_reqs{{{SCHED}}} {queued}",
        "# TYPE sglang:gen_throughput gauge",
        f"sglang:gen_throughput{{{SCHED}}} 51.2",
        "# TYPE sglang:spec_accept_length gauge",
        f"sglang:spec_accept_length{{{SCHED}}} {accept_length}",
        "# TYPE sglang:spec_accept_rate gauge",
        f"sglang:spec_accept_rate{{{SCHED}}} {accept_rate}",
        "# TYPE sglang:token_usage gauge",
        f"sglang:token_usage{{{SCHED}}} {usage}",
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
        "# TYPE sglang:generation_tokens_total counter",
        f'sglang:generation_tokens_total{{{LABELS},is_streaming="true"}} {gen}',
        f'sglang:generation_tokens_total{{{LABELS},is_streaming="false"}} 0.0',
        "# TYPE sglang:prompt_tokens_total counter",
        f'sglang:prompt_tokens_total{{{LABELS},is_streaming="true"}} 12345.0',
    ]
    if verify is not None:
        lines += ["# TYPE sglang:spec_verify_calls_total counter",
                  f"sglang:spec_verify_calls_total{{{LABELS}}} {verify}"]
    lines += _hist("sglang:time_to_first_token_seconds", LABELS + ',is_streaming="true"', TTFT_LE, ttft, ttft_sum)
    lines += _hist("sglang:inter_token_latency_seconds", LABELS, ITL_LE, itl, itl_sum)
    lines += _hist("sglang:e2e_request_latency_seconds", LABELS, TTFT_LE, (1,) * 8, 99.0)
    lines += list(extra)
    return "\n".join(lines) + "\n"
