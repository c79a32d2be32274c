"""Scraping SGLang: a broken endpoint is a counted error, never a crash."""

import asyncio

import pytest
from aiohttp import web

from sglang_operator.clients.sglang_http import (
    SCRAPE_ERRORS,
    ScrapeError,
    fetch_server_info,
    parse_metrics,
    scrape_metrics,
)

METRICS = """# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="qwen",tp_rank="0"} 1.75
# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{model_name="qwen"} 0.75
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="qwen"} 35.8
"""


def test_parse_metrics_reads_the_gauges():
    s = parse_metrics(METRICS)
    assert (s.accept_length, s.accept_rate, s.gen_throughput, s.running_requests) == (1.75, 0.75, 35.8, None)


async def _serve(handler):
    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


def _errors(endpoint, cause):
    return SCRAPE_ERRORS.labels(endpoint, cause)._value.get()


async def test_scrape_ok_and_http_500_counted():
    async def ok(request):
        if request.path == "/metrics":
            return web.Response(text=METRICS)
        return web.Response(status=500)

    runner, url = await _serve(ok)
    try:
        assert (await scrape_metrics(url)).accept_length == 1.75
        before = _errors("server_info", "http_status")
        with pytest.raises(ScrapeError, match="HTTP 500"):
            await fetch_server_info(url)
        assert _errors("server_info", "http_status") == before + 1
    finally:
        await runner.cleanup()


async def test_garbage_and_hanging_metrics_are_counted_errors():
    async def bad(request):
        if request.query.get("x") == "hang" or request.path == "/hang/metrics":
            await asyncio.sleep(5)
        return web.Response(text="this is { not prometheus\n")

    runner, url = await _serve(bad)
    try:
        before = _errors("metrics", "parse")
        with pytest.raises(ScrapeError, match="unparsable"):
            await scrape_metrics(url)
        assert _errors("metrics", "parse") == before + 1
        before = _errors("metrics", "transport")
        with pytest.raises(ScrapeError, match="Timeout"):
            await scrape_metrics(url + "/hang", timeout=0.3)
        assert _errors("metrics", "transport") == before + 1
    finally:
        await runner.cleanup()


def test_non_finite_gauges_are_ignored_and_other_families_skipped():
    text = METRICS.replace("35.8", "NaN") + 'sglang:other_total{a="b"} 5\n'
    s = parse_metrics(text)
    assert s.gen_throughput is None and s.accept_length == 1.75


def test_ipv6_pod_ips_are_bracketed():
    from sglang_operator.observer import base_url

    assert base_url("fd00::1", 30000) == "http://[fd00::1]:30000"
    assert base_url("127.1.0.2", 30000) == "http://127.1.0.2:30000"
