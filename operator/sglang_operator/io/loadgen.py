"""Load generator and probe client for SGLang's OpenAI-compatible API (async httpx).

:func:`probe` sends the fixed coding request (:data:`CODING_PROMPT`, "implement a red-black tree", about 512
tokens: what an empty ``spec.rollback.probe.prompt``, its default, sends), asking for ``max_tokens`` = 512 output
tokens, as a streaming ``POST /v1/chat/completions`` and measures time to first token (seconds) and single-stream
speed (tok/s); :func:`hold_concurrency` keeps N such streams in flight for a duration. Token counts come from the
server's ``usage`` (``stream_options.include_usage``); SGLang sends it in a last chunk with empty ``choices``
(``python/sglang/srt/entrypoints/openai/serving_chat.py``).
Errors never raise out of the measuring functions: a failed stream is a :class:`StreamResult` with ``error``.

The pod runs any image, so its answer is untrusted: the body is read incrementally (raw bytes, ``Accept-Encoding:
identity``, lines split here) under :class:`~sglang_operator.decisions.sampling.limits.ProbeLimits` on the total
bytes, the length of one line and the number of ``data:`` chunks; reaching one stops the read with ``error`` set
to its name (``probe_body_too_large``, ``probe_line_too_long``, ``probe_too_many_chunks``), and the gaps between
chunks are counted in a fixed-size :class:`~sglang_operator.decisions.sampling.loghist.LogHistogram`, never kept
one by one.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx

from sglang_operator.api.rollback import PROBE_PROMPT
from sglang_operator.decisions.sampling.limits import (
    BODY_TOO_LARGE,
    LINE_TOO_LONG,
    TOO_MANY_CHUNKS,
    ProbeLimits,
)
from sglang_operator.decisions.sampling.loghist import LogHistogram

CODING_PROMPT = PROBE_PROMPT
"""The fixed coding request (about 512 tokens) of the published measurements and the operator's probe."""
DEFAULT_MAX_TOKENS = 512
YIELD_BYTES = 256 * 1024
"""Bytes of a probe answer read between two yields to the event loop (a socket with data buffered does not yield;
256 KiB of one-token chunks is ~5 000 chunks, a few ms of parsing)."""
YIELD_SECONDS = 0.001
"""Seconds of reading one answer between two yields at most: with many streams whose sockets all have data buffered
(a trial's level of 256 on a busy operator) each turn of the event loop stays short, so its lag stays bounded."""

@dataclass
class StreamResult:
    """One streamed request: TTFT and total time (s), completion tokens, the gaps between content chunks (s) as a
    :class:`LogHistogram`, ``bytes_read`` (of the body), ``error`` (None: complete; a name of
    :data:`~sglang_operator.decisions.sampling.limits.LIMIT_REASONS` when a cap stopped it)."""

    ttft_s: float | None = None
    e2e_s: float = 0.0
    completion_tokens: int = 0
    chunk_gaps: LogHistogram = field(default_factory=LogHistogram)
    bytes_read: int = 0
    error: str | None = None

    @property
    def tok_s(self) -> float:
        """Output tokens per second over the whole request (0 on error)."""
        return self.completion_tokens / self.e2e_s if self.e2e_s > 0 and not self.error else 0.0

    @property
    def decode_tok_s(self) -> float:
        """Output tokens per second after the first token (0 on error or < 2 tokens)."""
        if self.error or self.ttft_s is None or self.completion_tokens < 2:
            return 0.0
        span = self.e2e_s - self.ttft_s
        return (self.completion_tokens - 1) / span if span > 0 else 0.0


@dataclass
class LoadResult:
    """Results of many requests; speeds in tok/s, times in seconds."""

    results: list[StreamResult]
    wall_s: float

    @property
    def ok(self) -> list[StreamResult]:
        return [r for r in self.results if r.error is None]

    @property
    def errors(self) -> int:
        return len(self.results) - len(self.ok)

    @property
    def median_tok_s(self) -> float:
        return statistics.median([r.tok_s for r in self.ok]) if self.ok else 0.0

    @property
    def median_ttft_s(self) -> float:
        ttfts = [r.ttft_s for r in self.ok if r.ttft_s is not None]
        return statistics.median(ttfts) if ttfts else 0.0

    @property
    def total_tok_s(self) -> float:
        return sum(r.completion_tokens for r in self.ok) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def chunk_gaps(self) -> LogHistogram:
        """The inter-chunk gaps of every successful request, seconds, in one histogram."""
        merged = LogHistogram()
        for r in self.ok:
            merged.merge(r.chunk_gaps)
        return merged

    def gap_quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of all inter-chunk gaps, seconds (0 when there are none)."""
        return self.chunk_gaps.quantile(q)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def served_model(client: httpx.AsyncClient, base_url: str, api_key: str | None = None) -> str:
    """The first model id of ``GET /v1/models``. Raises ``httpx.HTTPError`` / ``KeyError``."""
    resp = await client.get(f"{base_url}/v1/models", headers=_headers(api_key))
    resp.raise_for_status()
    return str(resp.json()["data"][0]["id"])


class _Stop(Exception):
    """A :class:`ProbeLimits` cap was reached; ``args[0]`` is its name."""


_DATA = re.compile(rb"^data:[ ]?([^\r\n]*)", re.MULTILINE)


class _Reader:
    """Consumes the raw body chunk by chunk: splits it into lines (keeping only the partial last one between
    chunks), measures each ``data:`` chunk into ``res``. Raises :class:`_Stop` at a cap, ``ValueError`` /
    ``KeyError`` / ``TypeError`` for a chunk that is not the expected JSON."""

    def __init__(self, res: StreamResult, limits: ProbeLimits, clock: Callable[[], float], t0: float) -> None:
        self.res, self.limits, self.clock, self.t0 = res, limits, clock, t0
        self.carry = b""
        self.chunks = 0
        self.last: float | None = None

    def feed(self, data: bytes) -> None:
        self.res.bytes_read += len(data)
        if self.res.bytes_read > self.limits.body_bytes:
            raise _Stop(BODY_TOO_LARGE)
        cut = data.rfind(b"\n")
        if cut == -1:  # no line ends here: the partial line grows, up to the cap
            if len(self.carry) + len(data) > self.limits.line_bytes:
                raise _Stop(LINE_TOO_LONG)
            self.carry += data
            return
        complete, rest = self.carry + data[:cut], data[cut + 1:]
        if len(rest) > self.limits.line_bytes:
            raise _Stop(LINE_TOO_LONG)
        self.carry = rest
        for m in _DATA.finditer(complete):  # in C: lines other than data: cost nothing here
            self.chunk(m[1])

    def finish(self) -> None:
        if self.carry.strip():
            for m in _DATA.finditer(self.carry):
                self.chunk(m[1])

    def chunk(self, payload: bytes) -> None:
        if len(payload) > self.limits.line_bytes:
            raise _Stop(LINE_TOO_LONG)
        if payload == b"[DONE]":
            return
        self.chunks += 1
        if self.chunks > self.limits.chunks:
            raise _Stop(TOO_MANY_CHUNKS)
        chunk: Any = json.loads(payload)
        if not isinstance(chunk, dict):
            raise ValueError(f"chunk {self.chunks} is not a JSON object")
        res = self.res
        if chunk.get("usage"):
            res.completion_tokens = int(chunk["usage"]["completion_tokens"])
        choices = chunk.get("choices") or []
        if choices and (choices[0].get("delta") or {}).get("content"):
            now = self.clock()
            if res.ttft_s is None:
                res.ttft_s = now - self.t0
            elif self.last is not None:
                res.chunk_gaps.add(now - self.last)
            self.last = now


def _stream_body(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """The JSON body of one streaming chat completion (greedy, usage in the last chunk)."""
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}


async def _read(status: int, headers: Mapping[str, str], chunks: AsyncIterator[bytes], reader: _Reader) -> bool:
    """Read one answer into ``reader.res``: an HTTP status other than 200 or a compressed body is its ``error``
    (the body unread; False: the result is final, without ``e2e_s``), else the body is consumed (:func:`_consume`;
    True)."""
    if status != 200:
        reader.res.error = f"HTTP {status}"
        return False
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        reader.res.error = f"unsupported Content-Encoding {encoding[:40]!r}"
        return False
    await _consume(chunks, reader)
    return True


async def stream_once(client: httpx.AsyncClient, base_url: str, model: str, *, prompt: str = CODING_PROMPT,
                      max_tokens: int = DEFAULT_MAX_TOKENS, api_key: str | None = None,
                      limits: ProbeLimits | None = None,
                      clock: Callable[[], float] = time.perf_counter) -> StreamResult:
    """One streaming chat completion read under ``limits`` (default :class:`ProbeLimits`); never raises for
    HTTP/transport errors, malformed chunks or a reached cap (see ``error``). ``clock``: seconds, monotonic."""
    limits, body = limits or ProbeLimits(), _stream_body(model, prompt, max_tokens)
    res, t0 = StreamResult(), clock()
    try:
        async with client.stream("POST", f"{base_url}/v1/chat/completions", json=body,
                                 headers={**_headers(api_key), "Accept-Encoding": "identity"}) as resp:
            if not await _read(resp.status_code, resp.headers, resp.aiter_raw(), _Reader(res, limits, clock, t0)):
                return res
    except _Stop as stop:
        res.error = str(stop.args[0])
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    res.e2e_s = clock() - t0
    return res


async def _consume(chunks: AsyncIterator[bytes], reader: _Reader) -> None:
    """Feed the raw body to ``reader``, yielding to the event loop every :data:`YIELD_BYTES` or
    :data:`YIELD_SECONDS`: a fast server, or many streams with data buffered, never hold the loop for long."""
    pause, since = YIELD_BYTES, time.perf_counter()
    async for data in chunks:
        reader.feed(data)
        if reader.res.bytes_read >= pause or time.perf_counter() - since >= YIELD_SECONDS:
            pause = reader.res.bytes_read + YIELD_BYTES
            await asyncio.sleep(0)
            since = time.perf_counter()
    reader.finish()


async def stream_once_aiohttp(session: aiohttp.ClientSession, base_url: str, model: str, *,
                              prompt: str = CODING_PROMPT, max_tokens: int = DEFAULT_MAX_TOKENS,
                              api_key: str | None = None, limits: ProbeLimits | None = None,
                              clock: Callable[[], float] = time.perf_counter) -> StreamResult:
    """:func:`stream_once` through an aiohttp session (what a tuning trial's load uses: aiohttp parses HTTP in C,
    httpx's h11 in Python, about half of the load's CPU at concurrency 256); the same request, reading, caps and
    results (create ``session`` with ``auto_decompress=False``: the body is read raw). Never raises for HTTP/transport
    errors, malformed chunks or a reached cap (see ``error``)."""
    limits, body = limits or ProbeLimits(), _stream_body(model, prompt, max_tokens)
    res, t0 = StreamResult(), clock()
    try:
        async with session.post(f"{base_url}/v1/chat/completions", json=body, allow_redirects=False,
                                headers={**_headers(api_key), "Accept-Encoding": "identity"}) as resp:
            if not await _read(resp.status, resp.headers, resp.content.iter_any(), _Reader(res, limits, clock, t0)):
                return res
    except _Stop as stop:
        res.error = str(stop.args[0])
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError, KeyError, TypeError, AttributeError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    res.e2e_s = clock() - t0
    return res


async def probe(base_url: str, *, model: str | None = None, api_key: str | None = None, runs: int = 1,
                max_tokens: int = DEFAULT_MAX_TOKENS, timeout_s: float = 300.0) -> LoadResult:
    """Single-stream probe: ``runs`` sequential requests of the coding prompt; see :class:`LoadResult`."""
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        name = model or await served_model(client, base_url, api_key)
        t0 = time.perf_counter()
        results = [await stream_once(client, base_url, name, max_tokens=max_tokens, api_key=api_key)
                   for _ in range(runs)]
        return LoadResult(results, time.perf_counter() - t0)


async def hold_concurrency(base_url: str, concurrency: int, *, duration_s: float | None = None,
                           requests_per_worker: int = 1, model: str | None = None, api_key: str | None = None,
                           max_tokens: int = DEFAULT_MAX_TOKENS, timeout_s: float = 600.0) -> LoadResult:
    """Keep ``concurrency`` streams in flight: each worker sends requests back to back until ``duration_s``
    has passed (if given) or it has sent ``requests_per_worker`` requests."""
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        name = model or await served_model(client, base_url, api_key)
        t0 = time.perf_counter()
        results: list[StreamResult] = []

        async def worker() -> None:
            sent = 0
            while True:
                if duration_s is not None and time.perf_counter() - t0 >= duration_s:
                    return
                if duration_s is None and sent >= requests_per_worker:
                    return
                results.append(await stream_once(client, base_url, name, max_tokens=max_tokens, api_key=api_key))
                sent += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return LoadResult(results, time.perf_counter() - t0)
