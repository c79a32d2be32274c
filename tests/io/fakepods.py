"""Real HTTP servers on loopback standing in for SGLang pods: one aiohttp app listening on many 127.77.x.y addresses
(one per pod, same port, as pod IPs are), each address with its own ``/metrics`` behaviour."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from aiohttp import web

from e2e.cluster.procs import free_port
from sglang_operator.decisions.sampling.model import Sample
from sglang_operator.io.pods import Target
from sglang_operator.io.sampler import Sampler, SamplingParams, ServerRef
from sglang_operator.io.sglang_http import SGLangHTTP

Behaviour = Callable[[web.Request, int], Awaitable[web.StreamResponse]]
_ips = (f"127.77.{i // 250}.{i % 250 + 1}" for i in itertools.count())


@dataclass
class FakePods:
    """Pods by IP: ``add(name, behaviour)`` gives a Ready :class:`Target`; ``targets`` is the live view the sampler
    reads (a test removes or flips pods in it). ``hits[name]`` counts scrapes."""

    port: int = field(default_factory=free_port)
    behaviours: dict[str, tuple[str, Behaviour]] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    hits: dict[str, int] = field(default_factory=dict)
    _runner: web.AppRunner | None = None

    def add(self, name: str, behaviour: Behaviour, revision: str = "r1") -> Target:
        ip = next(_ips)
        self.behaviours[ip] = (name, behaviour)
        t = Target(name, revision, ip, True, 0)
        self.targets.append(t)
        return t

    def remove(self, name: str) -> None:
        self.targets[:] = [t for t in self.targets if t.name != name]

    def view(self, names: set[str] | None = None) -> Callable[[], list[Target]]:
        return lambda: [t for t in self.targets if names is None or t.name in names]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        ip = request.transport.get_extra_info("sockname")[0] if request.transport else ""
        name, behaviour = self.behaviours[ip]
        self.hits[name] = self.hits.get(name, 0) + 1
        return await behaviour(request, self.hits[name])

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        for ip in self.behaviours:
            await web.TCPSite(self._runner, ip, self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FakePods]:
        """The pods added so far, served until the block ends."""
        await self.start()
        try:
            yield self
        finally:
            await self.stop()


def serving(behaviours: Mapping[str, Behaviour]) -> contextlib.AbstractAsyncContextManager[FakePods]:
    """One pod per ``name: behaviour``, served until the block ends (``async with serving({...}) as pods``)."""
    pods = FakePods()
    for name, behaviour in behaviours.items():
        pods.add(name, behaviour)
    return pods.running()


@contextlib.asynccontextmanager
async def sampling() -> AsyncIterator[Sampler]:
    """A :class:`Sampler` with the default limits over its own :class:`SGLangHTTP` client, closed when the block
    ends."""
    http = SGLangHTTP()
    try:
        yield Sampler(http)
    finally:
        await http.aclose()


async def last_sample(sampler: Sampler, server: ServerRef, pods: Callable[[], Sequence[Target]],
                      params: SamplingParams, intervals: int = 2) -> Sample:
    """Samples ``server`` over ``pods`` for ``intervals`` intervals, each one sample (asserted); the last one."""
    for _ in range(intervals):
        [sample] = await sampler.sample(server, pods, params)
    return sample


def text(body: str | Callable[[int], str]) -> Behaviour:
    """Answer ``body`` (or ``body(n)`` for the n-th scrape) as Prometheus text."""
    async def answer(request: web.Request, n: int) -> web.StreamResponse:
        return web.Response(text=body(n) if callable(body) else body, content_type="text/plain")
    return answer


def status(code: int) -> Behaviour:
    async def answer(request: web.Request, n: int) -> web.StreamResponse:
        return web.Response(status=code, text="Internal Server Error")
    return answer


def hang(seconds: float) -> Behaviour:
    async def answer(request: web.Request, n: int) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return web.Response(text="")
    return answer


def stream(chunks: Callable[[], object], total: int | None = None, cut: bool = False) -> Behaviour:
    """Stream ``chunks()`` (an iterable of bytes); ``total`` sets Content-Length; ``cut`` closes the connection
    before the declared length was sent."""
    async def answer(request: web.Request, n: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        if total is not None:
            resp.content_length = total
        await resp.prepare(request)
        for chunk in chunks():  # type: ignore[attr-defined]
            await resp.write(chunk)
        if cut and request.transport is not None:
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp
    return answer
