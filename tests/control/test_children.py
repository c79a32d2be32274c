"""Applying children: every failure is classified (the spec's fault → SpecValid=False, else Degraded and a
retry), and the drain before a Recreate waits for the old pods' running requests (a loopback /metrics server)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from aiohttp import web
from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from sglang_operator.control.children import ApplyFailure, apply_failure
from sglang_operator.control.drain import drain
from sglang_operator.control.memory import Memories


def api_error(code: int, message: str) -> ApiError:
    return ApiError(status=Status(code=code, message=message, reason="x", status="Failure"))


# What the API server answered (k8s 1.36) for `securityContext: {runAsUsr: 1000}` applied server-side.
SCHEMA_500 = ('failed to create typed patch object (/qwen36-27b; apps/v1, Kind=Deployment): '
              '.spec.template.spec.containers[name="sglang"].securityContext.runAsUsr: field not declared in schema')


@pytest.mark.parametrize(("code", "message", "spec_fault"), [
    (422, 'Deployment.apps "x" is invalid: spec.template.spec.containers[0].volumeMounts[0].name: Not found: "v"',
     True),
    (400, "bad request", True),
    (500, SCHEMA_500, True),  # HTTP 500, yet the request is at fault: no retry loop
    (500, "etcdserver: request timed out", False),
    # a Deployment rendered from a fat spec: the spec's fault, reported as SpecValid=False and not retried
    (500, "etcdserver: request is too large", True),
    (413, "Request entity too large: limit is 3145728", True),
    (403, 'deployments.apps "x" is forbidden: User "system:serviceaccount:ops:op" cannot patch', False),
    (409, "the object has been modified", False),
])
def test_api_errors_are_classified(code: int, message: str, spec_fault: bool) -> None:
    failure = apply_failure("Deployment", api_error(code, message))
    assert failure == ApplyFailure("Deployment", code, message, spec_fault)
    text = failure.describe()
    assert "Deployment" in text and f"HTTP {code}" in text and message in text
    assert text.endswith("; retrying") is (not spec_fault)


def test_transport_errors_are_not_the_specs_fault() -> None:
    failure = apply_failure("Service", httpx.ConnectError("connection refused"))
    assert not failure.spec_fault and failure.code is None
    assert failure.describe() == "applying the Service failed (no answer): ConnectError: connection refused; retrying"


def _histogram(name: str, count: int) -> str:
    labels = 'model_name="m"'
    return (f"# HELP {name} x\n# TYPE {name} histogram\n"
            f'{name}_bucket{{{labels},le="+Inf"}} {count}.0\n{name}_count{{{labels}}} {count}.0\n'
            f"{name}_sum{{{labels}}} {count * 0.5}\n")


async def _metrics_server(counts: list[int], started: list[int] | None = None,
                          finished: list[int] | None = None) -> tuple[web.AppRunner, str]:
    """A /metrics answering ``sglang:num_running_reqs`` = the next value of ``counts`` (the last one repeats) and,
    when given, the TTFT and e2e-latency histogram counts (requests started / finished) the same way."""
    def take(values: list[int]) -> int:
        return values.pop(0) if len(values) > 1 else values[0]

    async def metrics(_: web.Request) -> web.Response:
        body = ("# HELP sglang:num_running_reqs The number of running requests.\n"
                "# TYPE sglang:num_running_reqs gauge\n"
                f'sglang:num_running_reqs{{model_name="m",engine_type="unified",tp_rank="0"}} {take(counts)}.0\n')
        if started is not None and finished is not None:
            body += _histogram("sglang:time_to_first_token_seconds", take(started))
            body += _histogram("sglang:e2e_request_latency_seconds", take(finished))
        return web.Response(text=body, content_type="text/plain")
    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def test_drain_waits_until_no_request_runs_and_flags_the_server() -> None:
    runner, url = await _metrics_server([2, 1, 0])
    seen: list[bool] = []
    memories = Memories()
    memory = memories.of(("ns", "srv"))
    try:
        async def watch() -> None:
            while True:
                seen.append(memories.draining("ns", "srv"))
                await asyncio.sleep(0.05)
        watcher = asyncio.create_task(watch())
        result = await drain([url], seconds=10, poll=0.1, memory=memory)
        watcher.cancel()
    finally:
        await runner.cleanup()
    assert result.idle and result.running == 0 and 0.15 < result.seconds < 5
    assert True in seen and not memories.draining("ns", "srv") and not memories.draining("ns", "other")


async def test_drain_gives_up_after_drain_seconds() -> None:
    runner, url = await _metrics_server([3])
    try:
        started = time.monotonic()
        memory = Memories().of(("ns", "busy"))
        result = await drain([url], seconds=0.5, poll=0.1, memory=memory)
        elapsed = time.monotonic() - started
    finally:
        await runner.cleanup()
    assert not result.idle and result.running == 3 and 0.5 <= elapsed < 3
    assert not memory.draining


async def test_a_pod_that_does_not_answer_runs_nothing() -> None:
    result = await drain(["http://127.0.0.1:9"], seconds=5, poll=0.1)
    assert result.idle and result.seconds < 4


async def test_drain_reads_requests_in_flight_not_the_stale_gauge() -> None:
    """SGLang refreshes num_running_reqs at decode-log intervals: it still reads 1 after the last request ended,
    and may read 0 before a started request's first decode log. The TTFT / e2e counts are live."""
    runner, url = await _metrics_server([1], started=[5], finished=[4, 4, 5])
    try:
        result = await drain([url], seconds=10, poll=0.1)
    finally:
        await runner.cleanup()
    assert result.idle and 0.15 < result.seconds < 5  # waited for the 5th request, not for the gauge
    runner, url = await _metrics_server([0], started=[3], finished=[2])
    try:
        result = await drain([url], seconds=0.5, poll=0.1)
    finally:
        await runner.cleanup()
    assert not result.idle and result.running == 1  # the gauge's 0 is not believed while one is in flight
