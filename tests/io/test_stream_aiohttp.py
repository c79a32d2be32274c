"""A trial's streams through aiohttp (:func:`stream_once_aiohttp`) read what :func:`stream_once` (httpx) reads, under
the same caps."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import httpx
from aiohttp import web

from sglang_operator.decisions.sampling.limits import LINE_TOO_LONG, ProbeLimits
from sglang_operator.io.loadgen import stream_once, stream_once_aiohttp


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if body["model"] == "endless":  # one line that never ends
        for _ in range(1000):
            await resp.write(b"data: " + b"x" * 4096)
        return resp
    for _ in range(body["max_tokens"]):
        await resp.write(b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n')
        await asyncio.sleep(0.001)
    usage = {"choices": [], "usage": {"completion_tokens": body["max_tokens"]}}
    await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
    return resp


async def fail(_: web.Request) -> web.Response:
    return web.Response(status=503)


def test_the_same_answer_and_the_same_caps_as_httpx() -> None:
    async def run() -> None:
        app = web.Application()
        app.add_routes([web.post("/v1/chat/completions", chat), web.post("/down/v1/chat/completions", fail)])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}"
        limits = ProbeLimits(line_bytes=65536)
        try:
            async with aiohttp.ClientSession(auto_decompress=False) as session, httpx.AsyncClient() as client:
                a = await stream_once_aiohttp(session, url, "m", max_tokens=40, limits=limits)
                b = await stream_once(client, url, "m", max_tokens=40, limits=limits)
                assert a.error is None and b.error is None
                assert a.completion_tokens == b.completion_tokens == 40 and a.ttft_s is not None
                assert a.chunk_gaps.count == b.chunk_gaps.count == 39 and a.decode_tok_s > 0
                long = await stream_once_aiohttp(session, url, "endless", limits=limits)
                assert long.error == LINE_TOO_LONG and long.bytes_read < 1000 * 4096 // 4  # stopped early
                down = await stream_once_aiohttp(session, url + "/down", "m", limits=limits)
                assert down.error == "HTTP 503"
                gone = await stream_once_aiohttp(session, "http://127.0.0.1:1", "m", limits=limits)
                assert gone.error is not None and gone.error.startswith("ClientConnectorError")
        finally:
            await runner.cleanup()

    asyncio.run(run())
