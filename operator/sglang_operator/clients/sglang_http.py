"""HTTP client for a running SGLang server: server info and a Prometheus ``/metrics`` scrape.

Endpoints (``python/sglang/srt/entrypoints/http_server.py``): ``/server_info`` (0.5.x; older builds
``/get_server_info``), ``/metrics`` (only with ``--enable-metrics``). Metric names
(``python/sglang/srt/observability/metrics_collector.py``, same path in 0.5.10 and 0.5.23):
``sglang:spec_accept_length`` and ``sglang:spec_accept_rate`` (gauges), ``sglang:gen_throughput``
(gauge, tok/s), ``sglang:num_running_reqs`` (gauge). Any failure (transport, HTTP status, size, a bad URL,
unparsable text) raises :class:`ScrapeError` only and bumps ``sglang_operator_scrape_errors_total``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client import Counter
from prometheus_client.parser import text_string_to_metric_families

SCRAPE_ERRORS = Counter(
    "sglang_operator_scrape_errors", "Failed scrapes of SGLang endpoints, by endpoint and cause.",
    ["endpoint", "cause"],
)
MAX_BODY_BYTES = 8 * 1024 * 1024


class ScrapeError(Exception):
    """An SGLang endpoint could not be read: timeout, HTTP error, oversize or unparsable body."""


@dataclass(frozen=True)
class MetricsSample:
    """One ``/metrics`` reading; ``None`` where SGLang did not report the metric.

    ``accept_length`` (tokens per verify step), ``accept_rate`` (0..1), ``gen_throughput`` (tok/s),
    ``running_requests`` (count).
    """

    accept_length: float | None
    accept_rate: float | None
    gen_throughput: float | None
    running_requests: float | None


_GAUGES = {
    "sglang:spec_accept_length": "accept_length",
    "sglang:spec_accept_rate": "accept_rate",
    "sglang:gen_throughput": "gen_throughput",
    "sglang:num_running_reqs": "running_requests",
}


_client: httpx.AsyncClient | None = None


def _http() -> httpx.AsyncClient:
    """One client for all scrapes (creating one costs ~65 ms of CPU: CA bundle); plain HTTP to pod IPs."""
    global _client
    if _client is None or _client.is_closed:
        _client = httpx.AsyncClient(verify=False, limits=httpx.Limits(max_connections=64))
    return _client


async def close() -> None:
    """Close the shared client (operator shutdown)."""
    global _client
    if _client is not None:
        await _client.aclose()
        _client = None


async def _get(url: str, endpoint: str, timeout: float, headers: dict[str, str] | None = None) -> bytes:
    try:
        async with _http().stream("GET", url, timeout=timeout, headers=headers) as resp:
            if resp.status_code != 200:
                SCRAPE_ERRORS.labels(endpoint, "http_status").inc()
                raise ScrapeError(f"GET {url}: HTTP {resp.status_code}")
            body = bytearray()
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    SCRAPE_ERRORS.labels(endpoint, "too_large").inc()
                    raise ScrapeError(f"GET {url}: body over {MAX_BODY_BYTES} bytes")
            return bytes(body)
    except ScrapeError:
        raise
    except Exception as exc:  # transport errors, bad URLs, broken encodings: all a counted scrape error
        SCRAPE_ERRORS.labels(endpoint, "transport").inc()
        raise ScrapeError(f"GET {url}: {type(exc).__name__}: {exc}") from exc


async def fetch_server_info(
    base_url: str, path: str = "/server_info", timeout: float = 5.0, api_key: str | None = None
) -> dict[str, Any]:
    """``GET base_url + path`` and return its JSON object. Raises :class:`ScrapeError`."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = await _get(base_url + path, "server_info", timeout, headers)
    try:
        data = json.loads(body)
    except ValueError as exc:
        SCRAPE_ERRORS.labels("server_info", "parse").inc()
        raise ScrapeError(f"{base_url}{path}: not JSON") from exc
    if not isinstance(data, dict):
        SCRAPE_ERRORS.labels("server_info", "parse").inc()
        raise ScrapeError(f"{base_url}{path}: JSON is not an object")
    return data


_SAMPLE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?\s+[-+]?(\d|\.\d|NaN|Inf)\S*(\s+-?\d+)?\s*$")


def _check_format(text: str) -> None:
    """Raise ``ValueError`` when the first sample line is not a Prometheus sample."""
    first = next((ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")), None)
    if first is not None and not _SAMPLE.match(first):
        raise ValueError(f"not Prometheus text: {first[:80]!r}")


def _wanted(line: str) -> bool:
    if line.startswith("#"):
        parts = line.split(None, 3)
        return len(parts) > 2 and parts[1] in ("HELP", "TYPE") and parts[2] in _GAUGES
    return line.split("{", 1)[0].split(" ", 1)[0] in _GAUGES


def parse_metrics(text: str) -> MetricsSample:
    """Read the gauges of :data:`_GAUGES` from Prometheus text; averages over label sets (DP ranks).

    Only those families' lines are parsed (a server exposes hundreds of series); non-finite values are
    ignored. Raises ``ValueError`` for text the Prometheus parser refuses.
    """
    _check_format(text)
    values: dict[str, list[float]] = {}
    kept = "\n".join(line for line in text.splitlines() if _wanted(line)) + "\n"
    for family in text_string_to_metric_families(kept):
        for s in family.samples:
            if s.name in _GAUGES and math.isfinite(s.value):
                values.setdefault(_GAUGES[s.name], []).append(float(s.value))
    avg = {k: sum(v) / len(v) for k, v in values.items() if v}
    return MetricsSample(
        avg.get("accept_length"), avg.get("accept_rate"), avg.get("gen_throughput"),
        avg.get("running_requests"),
    )


async def scrape_metrics(base_url: str, timeout: float = 5.0) -> MetricsSample:
    """Scrape ``base_url/metrics``. Raises :class:`ScrapeError` (counted) on any failure."""
    body = await _get(base_url + "/metrics", "metrics", timeout)
    try:
        return parse_metrics(body.decode("utf-8", errors="strict"))
    except (ValueError, UnicodeDecodeError) as exc:
        SCRAPE_ERRORS.labels("metrics", "parse").inc()
        raise ScrapeError(f"{base_url}/metrics: unparsable: {exc}") from exc
