"""Load generator and probe client for SGLang's OpenAI-compatible API (async httpx).

:func:`probe` sends the fixed coding request (:data:`CODING_PROMPT`, "implement a red-black tree", about 512
tokens: the default of ``spec.rollback.probe.prompt``), asking for ``max_tokens`` = 512 output tokens, as a
streaming ``POST /v1/chat/completions`` and measures time to first token (seconds) and single-stream speed
(tok/s); :func:`hold_concurrency` keeps N such streams in flight for a duration. Token counts come from the
server's ``usage`` (``stream_options.include_usage``); SGLang sends it in a last chunk with empty ``choices``
(``python/sglang/srt/entrypoints/openai/serving_chat.py``).
Errors never raise out of the measuring functions: a failed stream is a :class:`StreamResult` with ``error``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field

import httpx

from sglang_operator.api.rollback import PROBE_PROMPT

CODING_PROMPT = PROBE_PROMPT
"""The fixed coding request (about 512 tokens) of the published measurements and the operator's probe."""
DEFAULT_MAX_TOKENS = 512


@dataclass
class StreamResult:
    """One streamed request: TTFT and total time (s), completion tokens, gaps between chunks (s)."""

    ttft_s: float | None = None
    e2e_s: float = 0.0
    completion_tokens: int = 0
    chunk_gaps_s: list[float] = field(default_factory=list)
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

    def gap_quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of all inter-chunk gaps, seconds (0 when there are none)."""
        gaps = sorted(g for r in self.ok for g in r.chunk_gaps_s)
        if not gaps:
            return 0.0
        return gaps[min(len(gaps) - 1, int(q * len(gaps)))]


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def served_model(client: httpx.AsyncClient, base_url: str, api_key: str | None = None) -> str:
    """The first model id of ``GET /v1/models``. Raises ``httpx.HTTPError`` / ``KeyError``."""
    resp = await client.get(f"{base_url}/v1/models", headers=_headers(api_key))
    resp.raise_for_status()
    return str(resp.json()["data"][0]["id"])


async def stream_once(client: httpx.AsyncClient, base_url: str, model: str, *, prompt: str = CODING_PROMPT,
                      max_tokens: int = DEFAULT_MAX_TOKENS, api_key: str | None = None) -> StreamResult:
    """One streaming chat completion; never raises for HTTP/transport errors (see ``error``)."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    res = StreamResult()
    t0 = time.perf_counter()
    last: float | None = None
    try:
        async with client.stream("POST", f"{base_url}/v1/chat/completions", json=body,
                                 headers=_headers(api_key)) as resp:
            if resp.status_code != 200:
                res.error = f"HTTP {resp.status_code}"
                return res
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    res.completion_tokens = int(chunk["usage"]["completion_tokens"])
                choices = chunk.get("choices") or []
                if choices and (choices[0].get("delta") or {}).get("content"):
                    now = time.perf_counter()
                    if res.ttft_s is None:
                        res.ttft_s = now - t0
                    elif last is not None:
                        res.chunk_gaps_s.append(now - last)
                    last = now
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    res.e2e_s = time.perf_counter() - t0
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
