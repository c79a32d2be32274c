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

from sglang_operator import children
from sglang_operator.children import (
    ApplyFailure,
    ChildApplyError,
    apply_failure,
    drain,
    draining,
    refused_by_api_server,
)


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
    (403, 'deployments.apps "x" is forbidden: User "system:serviceaccount:ops:op" cannot patch', False),
    (409, "the object has been modified", False),
])
def test_api_errors_are_classified(code: int, message: str, spec_fault: bool) -> None:
    failure = apply_failure("Deployment", api_error(code, message))
    assert failure == ApplyFailure("Deployment", code, message, spec_fault)
    text = failure.describe()
    assert "Deployment" in text and f"HTTP {code}" in text and message in text
    assert text.endswith("; retrying") is (not spec_fault)
    assert (refused_by_api_server(ChildApplyError(failure)) is not None) is spec_fault


def test_transport_errors_are_not_the_specs_fault() -> None:
    failure = apply_failure("Service", httpx.ConnectError("connection refused"))
    assert not failure.spec_fault and failure.code is None
    assert failure.describe() == "applying the Service failed (no answer): ConnectError: connection refused; retrying"


async def _metrics_server(counts: list[int]) -> tuple[web.AppRunner, str]:
    """A /metrics answering ``sglang:num_running_reqs`` = the next value of ``counts`` (the last one repeats)."""
    async def metrics(_: web.Request) -> web.Response:
        value = counts.pop(0) if len(counts) > 1 else counts[0]
        body = ("# HELP sglang:num_running_reqs The number of running requests.\n"
                "# TYPE sglang:num_running_reqs gauge\n"
                f'sglang:num_running_reqs{{model_name="m",engine_type="unified",tp_rank="0"}} {value}.0\n')
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
    try:
        async def watch() -> None:
            while True:
                seen.append(draining("ns", "srv"))
                await asyncio.sleep(0.05)
        watcher = asyncio.create_task(watch())
        result = await drain("ns", "srv", [url], seconds=10, poll=0.1)
        watcher.cancel()
    finally:
        await runner.cleanup()
    assert result.idle and result.running == 0 and 0.15 < result.seconds < 5
    assert True in seen and not draining("ns", "srv")


async def test_drain_gives_up_after_drain_seconds() -> None:
    runner, url = await _metrics_server([3])
    try:
        started = time.monotonic()
        result = await drain("ns", "busy", [url], seconds=0.5, poll=0.1)
        elapsed = time.monotonic() - started
    finally:
        await runner.cleanup()
    assert not result.idle and result.running == 3 and 0.5 <= elapsed < 3
    assert ("ns", "busy") not in children.DRAINING


async def test_a_pod_that_does_not_answer_runs_nothing() -> None:
    result = await drain("ns", "gone", ["http://127.0.0.1:9"], seconds=5, poll=0.1)
    assert result.idle and result.seconds < 4
