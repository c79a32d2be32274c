"""HTTP clients for running SGLang servers: one shared aiohttp session for ``/metrics`` scrapes and
``/server_info``, one shared ``httpx.AsyncClient`` for the probe's streaming chat completion
(:func:`sglang_operator.io.loadgen.stream_once` speaks httpx).

Endpoints (``python/sglang/srt/entrypoints/http_server.py``): ``/server_info`` (0.5.x; older builds
``/get_server_info``; guarded by ``--api-key``), ``/metrics`` (only with ``--enable-metrics``; never guarded,
``sglang/srt/utils/auth.py``). A body is streamed into a :class:`BodyConsumer` chunk by chunk, under a total
deadline (a server that drips bytes cannot hold a scrape longer than ``timeout``), a size cap on the decoded body,
and a concurrency bound shared by every scrape on the bodies read at once (waiting for a pod's answer takes no
slot: a pod that never answers holds only its own socket, until its deadline). ``Accept-Encoding: identity`` is
sent: SGLang's prometheus_client app would otherwise gzip every scrape at level 9 on the server's own CPU.

Why aiohttp for scrapes: reading a 0.5.23 server's ~200 KiB ``/metrics`` costs ~0.5 ms of CPU with aiohttp and
2.5–4.5 ms with httpx (h11 in pure Python, and httpcore's pool walks every connection on each request), which at
1 000 pods is the difference between a 15 s interval's scrape taking under or over the operator's budget
(``bench/scrape.py``).

Every failure raises :class:`ScrapeError` with a ``reason`` (the label value the caller counts it under):
``timeout``, ``connection`` (refused, reset, DNS), ``transport`` (protocol errors, a body cut short),
``http_status``, ``too_large``, ``bad_url``, or the consumer's own reason (``parse``, ``truncated``, a breached
limit: ``too_many_samples``, ``too_many_labels``, ``label_value_too_long``), raised from :meth:`BodyConsumer.feed`
(the read stops there) or :meth:`BodyConsumer.finish`. This module
counts nothing: the glue that calls it does (``sglang_operator.process.telemetry``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol, TypeVar

import aiohttp
import httpx

from sglang_operator.decisions.sampling.limits import BODY_BYTES
from sglang_operator.decisions.tuning.trialload import TRIAL_REQUEST_RATE
from sglang_operator.io.trialstreams import TRIAL_STREAMS, TrialStreams

T = TypeVar("T", covariant=True)
MAX_BODY_BYTES = BODY_BYTES
"""Default cap on a decoded body, bytes (``--scrape-body-limit``; a real 0.5.23 server's ``/metrics`` is a few
hundred KiB, :mod:`sglang_operator.decisions.sampling.limits`)."""
READ_TIMEOUT_SECONDS = 2.0
"""Default deadline of one read (``/metrics``, ``/server_info``), seconds: a real SGLang answers both in
milliseconds; a pod that never answers costs its own server's observation this long, and nobody else."""
CONCURRENCY = 32
"""Default number of bodies read at the same time (bounds memory; sockets are bounded by ``max_connections``)."""


class ScrapeError(Exception):
    """An SGLang endpoint could not be read; ``reason`` is a short label value, the message says what happened."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class BodyConsumer(Protocol[T]):
    """Receives a body chunk by chunk; :meth:`feed` (to stop the read early) and :meth:`finish` (which returns
    the result) raise ``ValueError`` with an optional ``reason`` attribute (default ``parse``) for a bad body."""

    def feed(self, chunk: bytes) -> None: ...

    def finish(self) -> T: ...


class _Collect:
    def __init__(self) -> None:
        self.body = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.body += chunk

    def finish(self) -> bytes:
        return bytes(self.body)


class SGLangHTTP:
    """The operator's HTTP clients for SGLang pods (plain HTTP to pod IPs): :attr:`session` (aiohttp) for
    scrapes and ``/server_info``, :attr:`http` (httpx) for probe streams.

    ``concurrency``: bodies read at once; ``max_connections``: sockets open at once; ``trial_streams``: the
    process-wide cap on tuning trials' streamed requests in flight and ``trial_request_rate`` the requests per second
    one trial may start (:attr:`trial_streams`, :class:`~sglang_operator.io.trialstreams.TrialStreams`). Idle
    connections are kept ``keepalive_seconds`` (5 s, as long as SGLang's uvicorn keeps them: with samples 30 s
    apart a connection is reused within an interval, not across intervals). Create it on the event loop that uses
    it (inside a coroutine); :meth:`aclose` at shutdown.
    """

    def __init__(self, *, concurrency: int = CONCURRENCY, max_body_bytes: int = MAX_BODY_BYTES,
                 max_connections: int = 1024, keepalive_seconds: float = 5.0,
                 trial_streams: int = TRIAL_STREAMS, trial_request_rate: float = TRIAL_REQUEST_RATE) -> None:
        self.max_body_bytes = max_body_bytes
        self.trial_streams = TrialStreams(trial_streams, trial_request_rate)
        connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=8, keepalive_timeout=keepalive_seconds,
                                         use_dns_cache=False)
        self.session = aiohttp.ClientSession(connector=connector, trust_env=False, raise_for_status=False,
                                             headers={"Accept-Encoding": "identity"},
                                             timeout=aiohttp.ClientTimeout(total=None, sock_connect=30))
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=concurrency,
                              keepalive_expiry=keepalive_seconds)
        self.http = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(30.0, pool=None), trust_env=False)
        self._slots = asyncio.Semaphore(concurrency)

    async def aclose(self) -> None:
        """Close every connection."""
        await self.session.close()
        await self.http.aclose()

    async def get(self, url: str, consumer: BodyConsumer[T], *, timeout: float = READ_TIMEOUT_SECONDS,
                  headers: dict[str, str] | None = None, max_bytes: int | None = None) -> T:
        """``GET url`` streamed into ``consumer`` within ``timeout`` seconds in total; the consumer's result.

        Raises :class:`ScrapeError` (see the module docstring for the reasons).
        """
        cap = self.max_body_bytes if max_bytes is None else max_bytes
        try:
            async with asyncio.timeout(timeout):
                async with self.session.get(url, headers=headers, allow_redirects=False) as resp:
                    if resp.status != 200:
                        raise ScrapeError("http_status", f"GET {url}: HTTP {resp.status}")
                    async with self._slots:  # the body is read in a slot; waiting for the answer holds none
                        size = 0
                        async for chunk in resp.content.iter_chunked(65536):
                            size += len(chunk)
                            if size > cap:
                                raise ScrapeError("too_large", f"GET {url}: body over {cap} bytes")
                            try:
                                consumer.feed(chunk)
                            except ValueError as exc:  # a limit of the consumer's, breached: stop reading now
                                raise ScrapeError(getattr(exc, "reason", "parse"), f"GET {url}: {exc}") from exc
        except ScrapeError:
            raise
        except TimeoutError as exc:
            raise ScrapeError("timeout", f"GET {url}: no complete answer within {timeout:g} s") from exc
        except aiohttp.InvalidURL as exc:
            raise ScrapeError("bad_url", f"GET {url}: {exc}") from exc
        except (aiohttp.ClientConnectorError, ConnectionError) as exc:
            raise ScrapeError("connection", f"GET {url}: {type(exc).__name__}: {exc}") from exc
        except (aiohttp.ClientError, OSError, ValueError) as exc:  # protocol errors, cut bodies, bad encodings
            raise ScrapeError("transport", f"GET {url}: {type(exc).__name__}: {exc}") from exc
        try:
            return consumer.finish()
        except ValueError as exc:
            raise ScrapeError(getattr(exc, "reason", "parse"), f"GET {url}: {exc}") from exc

    async def server_info(self, base_url: str, path: str = "/server_info", *, timeout: float = READ_TIMEOUT_SECONDS,
                          api_key: str | None = None) -> dict[str, Any]:
        """``GET base_url + path`` as a JSON object. Raises :class:`ScrapeError` (reason ``parse`` for a body that
        is not a JSON object)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        body = await self.get(base_url + path, _Collect(), timeout=timeout, headers=headers)
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise ScrapeError("parse", f"{base_url}{path}: not JSON") from exc
        if not isinstance(data, dict):
            raise ScrapeError("parse", f"{base_url}{path}: JSON is not an object")
        return data


def base_url(pod_ip: str, port: int) -> str:
    """``http://IP:port`` with IPv6 addresses in brackets."""
    return f"http://[{pod_ip}]:{port}" if ":" in pod_ip else f"http://{pod_ip}:{port}"
