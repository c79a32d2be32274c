"""The trial measurement of an SGLangTuning (docs/tuning.md, "What is measured, and how"): drive one trial's pods at
each concurrency level of ``spec.workload`` with streamed requests and measure what users see, plus SGLang's own figures
over the same windows. Returns the API's :class:`~sglang_operator.api.tuning_status.LevelFigures`, one per level.

How a level is measured (:func:`measure_trial`):

- ``level`` workers (spread over the pods in turn) each send streamed chat completions back to back
  (:func:`sglang_operator.io.loadgen.stream_once`, read under the operator's
  :class:`~sglang_operator.decisions.sampling.limits.ProbeLimits`), the prompts of the workload in turn (default
  :data:`DEFAULT_PROMPTS`), ``max_tokens`` = ``workload.maxOutputTokens``, greedy (no ``ignore_eos``: an answer
  may end early at an end-of-sequence token). A worker whose request failed waits :data:`FAILURE_PAUSE_SECONDS`
  before the next one, so a pod answering errors is not hammered.
- The requests a trial starts, all its workers together, are capped in rate (``--trial-request-rate``, default
  :data:`~sglang_operator.decisions.tuning.trialload.TRIAL_REQUEST_RATE` per second,
  :attr:`~sglang_operator.io.trialstreams.TrialStreams.request_rate`): before each request a worker takes a token
  of the level's :class:`~sglang_operator.decisions.tuning.trialload.RequestPacer` (one second of the rate at once,
  then the rate) and sleeps until it is due (no polling; the stop of the load wakes it). An honest pod never reaches
  the cap; a pod answering at once is sent the cap's rate, not what the event loop can make.
- Workers start :data:`RAMP_SECONDS` apart (a level of 256 within half a second).
- Settling: the first level starts with ``workload.warmupSeconds`` of load that is not measured; a later level
  settles until every worker has finished its first request at that level (the ramp is over), at most
  ``warmupSeconds``.
- Then ``workload.repetitions`` windows of ``workload.secondsPerLevel`` each follow back to back. At each window
  boundary every pod's ``/metrics`` is scraped with the sampler's own code (:func:`sglang_operator.io.sampler
  .scrape_pod`, under :class:`~sglang_operator.decisions.sampling.limits.ScrapeLimits`) and its ``/server_info``
  (``/get_server_info`` before 0.5.6) read.
- The level holds ``level`` of the operator's trial streams (``--trial-streams``, all trials together:
  :class:`~sglang_operator.io.trialstreams.TrialStreams`) while it runs, waiting its turn for them first; a level
  over the whole cap fails the trial before any load.
- After the last window no new request is sent and the ones in flight finish (their tokens inside the window
  count; nothing of them is measured after it), so the next level starts on an idle server.

Figures of one window (client side unless said otherwise), aggregated online as each request ends
(:class:`~sglang_operator.decisions.tuning.tally.LevelTally`: no request is kept once it ended, whatever the
window's length):

- ``outputTokensPerSecond``: output tokens streamed inside the window ÷ its length. A request's first token is
  placed at its time to first token and the rest spread evenly up to its end (the client sees the usage count
  only at the end of a stream), so requests crossing a boundary count for their share.
- ``decodeTokensPerSecond``: median over the requests that finished in the window of (tokens − 1) ÷ (end − first
  token), tok/s (:attr:`~sglang_operator.io.loadgen.StreamResult.decode_tok_s`), from a histogram of 1 % buckets
  (within 0.5 %).
- ``interTokenLatency p50/p95``: quantiles of the gaps between content chunks of those requests (with speculative
  decoding a chunk carries every token a verify step accepted: the stall a user sees), seconds, from the
  :class:`~sglang_operator.decisions.sampling.loghist.LogHistogram` (within ~4.5 %).
- ``timeToFirstToken p50/p95``: of the requests that finished in the window, seconds (same histogram).
- ``requests`` / ``failedRequests``: requests that ended in the window, and those of them that failed (HTTP
  status, transport error, a breached limit, a malformed stream).
- ``acceptLength``: ``sglang:generation_tokens_total`` increase ÷ ``sglang:spec_verify_calls_total`` increase over
  the window, summed over the pods (both grow when a request finishes), else the ``sglang:spec_accept_length``
  gauge (0.5.10) — :func:`sglang_operator.decisions.sampling.compute.figures`, the sampler's computation;
  ``acceptRate``: the ``sglang:spec_accept_rate`` gauge at the window's end. ``None`` without speculative decoding
  or when a scrape failed.
- ``stepTimeP20Seconds``: SGLang's own figure the sweep script (``scripts/playground/bench_speculative.py``) scores
  by (accept length ÷ it): the 20th percentile (numpy's linear rule) of the ``step_time_dict`` entries SGLang
  appended during the window (``/server_info`` ``internal_states[].step_time_dict``: running requests → the mean
  decode step time of each ``--decode-log-interval`` window, seconds). SGLang records it only when the pod runs
  with ``SGLANG_RECORD_STEP_TIME=1`` (``scheduler_components/metrics_reporter.py``); per DP rank the batch size with
  the most new entries is taken (the steady batch, ``level`` on one rank without a ``--max-running-requests``
  below it). ``None`` when the pod does not report it.

Repetitions are combined into one :class:`LevelFigures`: the median of each figure over the windows that have it,
``requests`` and ``failedRequests`` summed, and ``spread`` = (max − min) ÷ median of the ``score`` of the windows
(default :func:`default_score`: the figure the objective reads), the noise estimate. ``objective`` is left unset:
the search scores a trial (``decisions/tuning``).

Every pod is untrusted: bodies are bounded as above, numbers that are not finite are ignored, and nothing the pod
answers raises out of :func:`measure_trial` — a level whose requests or scrapes failed records it (``failedRequests``,
figures ``None``) — but :class:`InvalidMeasurement`, after a level whose load was no measurement
(:mod:`sglang_operator.decisions.tuning.trialload`; :func:`measure_pods` fails the trial with its reason):

- its successful answers' median completion tokens (counted in the windows) are below
  :data:`~sglang_operator.decisions.tuning.trialload.SHORT_ANSWER_FRACTION` (¼) of ``maxOutputTokens``: the level
  measured prefill and HTTP, not decoding ("answers of N tokens median ..., maxOutputTokens M: not a measurement of
  decoding"). A median, never one answer: an honest server may stop some answers early at an end-of-sequence token;
- its workers waited for the rate cap more than
  :data:`~sglang_operator.decisions.tuning.trialload.HELD_BACK_LIMIT` (5 %) of its measured stream-seconds
  (concurrency × the windows' seconds): it did not run at its concurrency.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sglang_operator.api.rollback import PROBE_PROMPT
from sglang_operator.api.server import SGLangServer
from sglang_operator.api.tuning_spec import SGLangTuningSpec as TuningSpec
from sglang_operator.api.tuning_spec import Workload
from sglang_operator.api.tuning_status import LevelFigures
from sglang_operator.decisions.sampling.cache import SeriesCache
from sglang_operator.decisions.sampling.compute import Scrape, ScrapeFailure
from sglang_operator.decisions.sampling.limits import ProbeLimits, ScrapeLimits
from sglang_operator.decisions.sampling.roles import MetricRoles, roles_for
from sglang_operator.decisions.tuning import trials as trials_plan
from sglang_operator.decisions.tuning.tally import LevelTally
from sglang_operator.decisions.tuning.trialload import RequestPacer, held_back, short_answers
from sglang_operator.decisions.tuning.windows import (
    STEP_TIME_QUANTILE as STEP_TIME_QUANTILE,
)
from sglang_operator.decisions.tuning.windows import (
    Finished as Finished,
)
from sglang_operator.decisions.tuning.windows import (
    combine as combine,
)
from sglang_operator.decisions.tuning.windows import (
    default_score as default_score,
)
from sglang_operator.decisions.tuning.windows import (
    new_step_times as new_step_times,
)
from sglang_operator.decisions.tuning.windows import (
    percentile as percentile,
)
from sglang_operator.decisions.tuning.windows import (
    step_time_lists as step_time_lists,
)
from sglang_operator.decisions.tuning.windows import (
    tokens_within as tokens_within,
)
from sglang_operator.decisions.tuning.windows import (
    window_figures as window_figures,
)
from sglang_operator.io import kube, loadgen
from sglang_operator.io.sampler import scrape_pod
from sglang_operator.io.sglang_http import ScrapeError, SGLangHTTP, base_url
from sglang_operator.io.trialstreams import OverCap
from sglang_operator.sglang.versions import SGLangVersion, dialect

DEFAULT_PROMPTS: tuple[str, ...] = (
    PROBE_PROMPT,
    "Write a complete FastAPI service for a to-do list with SQLite storage, request validation and tests. Show "
    "the full Python code.",
    "Explain step by step how to solve x^2 + 1 = 0 over the complex numbers, then generalise to any quadratic "
    "equation. Give a long, detailed explanation.",
    "Write a long travel blog post about a two-week trip through Hawaii, day by day.",
    "Tell a long story for children about perseverance, with several chapters and a moral at the end.",
    "Write a Solidity smart contract that stores a public message, lets only its owner update it and counts the "
    "updates; explain every function.",
    "Describe the history of the printing press in the style of an encyclopaedia article, with sections.",
    "Introduce yourself: write some code, a short proof and a poem that together explain what you can do.",
)
"""Eight prompts asking for long answers, like the fixed set of SGLang's ``scripts/playground/bench_speculative.py``
(code, maths, a blog post, a story, a contract, an article), the rollback probe's coding prompt first: what an empty
``spec.workload.prompts`` sends."""
FAILURE_PAUSE_SECONDS = 0.5
"""A worker's pause after a failed request (a pod answering 500 at once is not sent thousands a second)."""
SERVER_INFO_TIMEOUT_SECONDS = 10.0
RAMP_SECONDS = 0.002
"""Seconds between the starts of two workers of a level (256 workers start within half a second, in the warm-up)."""


class InvalidMeasurement(Exception):
    """A level's load was no measurement (the module docstring): ``reason`` says which rule and its figures."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class TrialPod:
    """One pod of a trial: its name and base URL (``http://IP:port``)."""

    name: str
    base_url: str


@dataclass(frozen=True)
class BenchPlan:
    """What :func:`measure_trial` does, in seconds and requests; :meth:`from_workload` reads
    ``spec.workload``. ``levels``: the concurrency levels in order; ``server_info_path``: the release's route
    (``Dialect.server_info_path``)."""

    levels: tuple[int, ...]
    prompts: tuple[str, ...] = DEFAULT_PROMPTS
    max_output_tokens: int = 512
    seconds_per_level: float = 30.0
    warmup_seconds: float = 10.0
    repetitions: int = 2
    server_info_path: str = "/server_info"
    request_timeout_seconds: float = 600.0
    scrape_timeout_seconds: float = 5.0

    def __post_init__(self) -> None:
        if not self.levels or min(self.levels) < 1 or self.repetitions < 1 or self.seconds_per_level <= 0:
            raise ValueError(f"a bench plan needs levels >= 1, repetitions >= 1 and a window > 0 s: {self}")

    @classmethod
    def from_workload(cls, workload: Workload, *, server_info_path: str = "/server_info") -> BenchPlan:
        """The plan of ``spec.workload`` (empty prompts: :data:`DEFAULT_PROMPTS`)."""
        return cls(levels=workload.levels(), prompts=tuple(workload.prompts) or DEFAULT_PROMPTS,
                   max_output_tokens=workload.max_output_tokens, seconds_per_level=float(workload.seconds_per_level),
                   warmup_seconds=float(workload.warmup_seconds), repetitions=workload.repetitions,
                   server_info_path=server_info_path)


# --- I/O ----------------------------------------------------------------------------------------------------


@dataclass
class _PodState:
    pod: TrialPod
    cache: SeriesCache
    scrape: Scrape | ScrapeFailure | None = None
    steps: list[dict[str, list[float]]] | None = None


@dataclass
class _Level:
    concurrency: int
    tally: LevelTally
    pacer: RequestPacer
    first_done: set[int] = field(default_factory=set)
    ramped: asyncio.Event = field(default_factory=asyncio.Event)
    waited: float = 0.0
    """Seconds the workers waited for the rate cap inside the windows, all together."""


class TrialBench:
    """Measures one trial's pods (:meth:`measure`); ``http``: the operator's :class:`SGLangHTTP` (its aiohttp session
    reads ``/metrics`` and ``/server_info``; the requests of a level go through an aiohttp session of its own with
    ``level`` + 4 connections (:func:`~sglang_operator.io.loadgen.stream_once_aiohttp`: httpx's pool walks every
    connection at each request, quadratic in the level, 10 s of event-loop lag at 256): 60 s at most between two
    chunks, ``plan.request_timeout_seconds`` per request); ``roles``: the metric roles
    of the pods' SGLang release; ``model``: the served model name; ``api_key``: the server's, when it has one. The
    requests of a level start at most at ``http.trial_streams.request_rate`` per second (``--trial-request-rate``)."""

    def __init__(self, http: SGLangHTTP, pods: Sequence[TrialPod], model: str, roles: MetricRoles, plan: BenchPlan,
                 *, api_key: str | None = None, probe_limits: ProbeLimits | None = None,
                 scrape_limits: ScrapeLimits | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        if not pods:
            raise ValueError("a trial bench needs at least one pod")
        self.http, self.model, self.roles, self.plan, self.api_key = http, model, roles, plan, api_key
        self.probe_limits = probe_limits or ProbeLimits()
        self.scrape_limits = scrape_limits or ScrapeLimits()
        self.clock = clock
        self.pods = [_PodState(p, SeriesCache(self.scrape_limits.cache_bytes)) for p in pods]
        self._prompt = 0

    async def measure(self, score: Callable[[LevelFigures], float | None] | None = None) -> list[LevelFigures]:
        """Every level of the plan in order, each as one :class:`LevelFigures` (see the module docstring). Raises
        :class:`InvalidMeasurement` after a level whose load was no measurement, never for what a pod answers
        otherwise; cancellation propagates."""
        score = score or default_score()
        out = []
        for i, level in enumerate(self.plan.levels):
            out.append(combine(await self._level(level, first=i == 0), score))
        return out

    def _verdict(self, state: _Level) -> str | None:
        """Why the level just measured is no measurement (:mod:`~sglang_operator.decisions.tuning.trialload`), or
        None."""
        bounds = state.tally.bounds
        return short_answers(state.concurrency, state.tally.answers.median(), self.plan.max_output_tokens) \
            or held_back(state.concurrency, state.waited, bounds[-1] - bounds[0], state.pacer.rate)

    async def _paced(self, state: _Level, delay: float, stop: asyncio.Event) -> None:
        """Wait ``delay`` s for the rate cap (or until the load stops), counting the part inside the windows."""
        t0 = self.clock()
        try:
            async with asyncio.timeout(delay):
                await stop.wait()
        except TimeoutError:
            pass
        bounds, t1 = state.tally.bounds, self.clock()
        if bounds:
            hi = min(t1, bounds[-1]) if len(bounds) > self.plan.repetitions else t1
            state.waited += max(0.0, hi - max(t0, bounds[0]))

    def _next_prompt(self) -> str:
        prompt = self.plan.prompts[self._prompt % len(self.plan.prompts)]
        self._prompt += 1
        return prompt

    async def _level(self, concurrency: int, *, first: bool) -> list[LevelFigures]:
        async with self.http.trial_streams.hold(concurrency):  # the process-wide cap: the whole level or nothing
            return await self._load(concurrency, first=first)

    async def _load(self, concurrency: int, *, first: bool) -> list[LevelFigures]:
        plan = self.plan
        state = _Level(concurrency, LevelTally(concurrency, plan.repetitions, plan.max_output_tokens),
                       RequestPacer(self.http.trial_streams.request_rate))
        stop = asyncio.Event()
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency + 4, limit_per_host=0, use_dns_cache=False),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=60.0, sock_read=60.0), trust_env=False,
            auto_decompress=False)

        async def worker(index: int) -> None:
            pod = self.pods[index % len(self.pods)].pod
            await asyncio.sleep(index * RAMP_SECONDS)  # 256 connections opened at once would stall the loop
            while not stop.is_set():
                if (delay := state.pacer.reserve(self.clock())) > 0:
                    await self._paced(state, delay, stop)
                    if stop.is_set():
                        break
                start = self.clock()
                try:
                    async with asyncio.timeout(plan.request_timeout_seconds):
                        res = await loadgen.stream_once_aiohttp(session, pod.base_url, self.model,
                                                        prompt=self._next_prompt(), max_tokens=plan.max_output_tokens,
                                                        api_key=self.api_key, limits=self.probe_limits,
                                                        clock=self.clock)
                except TimeoutError:
                    res = loadgen.StreamResult(error=f"no complete answer within {plan.request_timeout_seconds:g} s")
                state.tally.add(Finished(start, self.clock(), res.ttft_s, res))  # aggregated now, not kept
                if index not in state.first_done:
                    state.first_done.add(index)
                    if len(state.first_done) == concurrency:
                        state.ramped.set()
                if res.error is not None and not stop.is_set():
                    await asyncio.sleep(FAILURE_PAUSE_SECONDS)

        tasks = [asyncio.create_task(worker(i), name=f"trial load {i}") for i in range(concurrency)]
        try:
            if first:
                await asyncio.sleep(plan.warmup_seconds)
            elif plan.warmup_seconds > 0:
                try:
                    async with asyncio.timeout(plan.warmup_seconds):
                        await state.ramped.wait()
                except TimeoutError:
                    pass
            state.tally.bound(self.clock())
            await self._read_pods()
            marks = [self._marks()]
            for k in range(1, plan.repetitions + 1):
                await asyncio.sleep(max(0.0, state.tally.bounds[0] + plan.seconds_per_level * k - self.clock()))
                state.tally.bound(self.clock())
                await self._read_pods()
                marks.append(self._marks())
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await session.close()
        windows = []
        for k in range(plan.repetitions):
            pairs, steps = self._window_server(marks[k], marks[k + 1])
            windows.append(state.tally.figures(k, pairs, self.roles, steps))
        if (reason := self._verdict(state)) is not None:
            raise InvalidMeasurement(reason)
        return windows

    def _marks(self) -> list[tuple[Scrape | ScrapeFailure | None, list[dict[str, list[float]]] | None]]:
        return [(p.scrape, p.steps) for p in self.pods]

    def _window_server(self, start: Sequence[tuple[Scrape | ScrapeFailure | None, Any]],
                       end: Sequence[tuple[Scrape | ScrapeFailure | None, Any]],
                       ) -> tuple[list[tuple[Scrape, Scrape]] | None, list[float] | None]:
        pairs: list[tuple[Scrape, Scrape]] | None = []
        steps: list[float] | None = []
        for (s0, t0), (s1, t1) in zip(start, end, strict=True):
            if pairs is not None and isinstance(s0, Scrape) and isinstance(s1, Scrape):
                pairs.append((s0, s1))
            else:
                pairs = None
            if steps is not None and t0 is not None and t1 is not None:
                steps.extend(new_step_times(t0, t1))
            else:
                steps = None
        return pairs, steps or None

    async def _read_pods(self) -> None:
        await asyncio.gather(*(self._read_pod(p) for p in self.pods))

    async def _read_pod(self, p: _PodState) -> None:
        p.scrape = await scrape_pod(self.http, p.pod.name, p.pod.base_url, self.roles, p.cache, self.scrape_limits,
                                    timeout=self.plan.scrape_timeout_seconds)
        try:
            body = await self.http.server_info(p.pod.base_url, self.plan.server_info_path,
                                               timeout=SERVER_INFO_TIMEOUT_SECONDS, api_key=self.api_key)
        except ScrapeError:
            p.steps = None
            return
        lists = step_time_lists(body)
        p.steps = lists if lists else None


async def measure_trial(http: SGLangHTTP, pods: Sequence[TrialPod], model: str, roles: MetricRoles,
                        plan: BenchPlan, *, api_key: str | None = None,
                        score: Callable[[LevelFigures], float | None] | None = None,
                        probe_limits: ProbeLimits | None = None,
                        scrape_limits: ScrapeLimits | None = None) -> list[LevelFigures]:
    """Measure a trial's ``pods`` under ``plan``: one :class:`LevelFigures` per level (see the module docstring).
    Raises ``ValueError`` for an empty pod list, :class:`InvalidMeasurement` after a level whose load was no
    measurement; never for what a pod answers otherwise."""
    bench = TrialBench(http, pods, model, roles, plan, api_key=api_key, probe_limits=probe_limits,
                       scrape_limits=scrape_limits)
    return await bench.measure(score)


@dataclass(frozen=True)
class TrialMeasurement:
    """What :func:`measure_pods` found: ``levels`` measured, ``pruned`` (the rule's reason when the trial stopped
    after its first level: verdict Pruned), ``failure`` (every request failed, no request finished even in the
    longest window, or a level's load was no measurement: :class:`InvalidMeasurement`)."""

    levels: list[LevelFigures]
    pruned: str | None = None
    failure: str | None = None


async def measure_pods(http: SGLangHTTP, tuning: TuningSpec, server_object: SGLangServer,
                       pods: Sequence[Mapping[str, Any]], version: SGLangVersion,
                       probe_limits: ProbeLimits | None = None, scrape_limits: ScrapeLimits | None = None,
                       prune: Callable[[list[LevelFigures]], str | None] | None = None) -> TrialMeasurement:
    """Measure a trial's Ready ``pods`` (API JSON, each with a pod IP) of SGLang ``version`` running SGLangServer
    ``server_object``'s spec (its API key read from its Secret) under the SGLangTuning spec ``tuning``'s workload
    and objective (:func:`measure_trial`): the first level, then ``prune``
    (:func:`sglang_operator.decisions.tuning.trials.prune_verdict`) says whether the trial stops there, then the
    other levels. A measurement in which no request finished is no data, not a failure: it is measured again with a
    longer window (:func:`~sglang_operator.decisions.tuning.trials.longer_window`) until one finishes or the
    longest window passed (:func:`~sglang_operator.decisions.tuning.trials.measurement`). A level whose load was no
    measurement (:class:`InvalidMeasurement`) fails the trial with its reason."""
    server = server_object.spec
    ref = server.api_key_secret_ref  # SGLang's --api-key guards the chat API: the trial's requests carry it
    api_key = await kube.secret_value(server_object.namespace, ref.name, ref.key) if ref is not None else None
    targets = [TrialPod(str(p["metadata"]["name"]), base_url(str(p["status"]["podIP"]), server.port)) for p in pods]
    plan = BenchPlan.from_workload(tuning.workload, server_info_path=dialect(version).server_info_path)
    model, roles = server.model.served_model_name or server.model.path, roles_for(version)
    if max(plan.levels) > http.trial_streams.limit:  # it could never run: say so now, not after the first levels
        return TrialMeasurement([], failure=str(OverCap(
            f"concurrency {max(plan.levels)} is over the operator's cap of {http.trial_streams.limit} trial streams "
            "(sglang-operator run --trial-streams)")))
    window: int | None = int(plan.seconds_per_level)
    levels: list[LevelFigures] = []
    while window is not None:
        todo = plan.levels[len(levels):]
        first = dataclasses.replace(plan, levels=todo[:1] if prune is not None and not levels else todo,
                                    seconds_per_level=float(window))
        try:
            got = await measure_trial(http, targets, model, roles, first, api_key=api_key,
                                      score=default_score(tuning.objective), probe_limits=probe_limits,
                                      scrape_limits=scrape_limits)
        except InvalidMeasurement as invalid:
            return TrialMeasurement(levels, failure=invalid.reason)
        outcome, message = trials_plan.measurement(got)
        if outcome is trials_plan.Measured.FAILED:
            return TrialMeasurement([*levels, *got], failure=message)
        if outcome is trials_plan.Measured.NO_DATA:
            window = trials_plan.longer_window(window)
            if window is None:
                return TrialMeasurement(levels, failure=message)
            continue
        levels.extend(got)
        if len(levels) == len(plan.levels):
            return TrialMeasurement(levels)
        if prune is not None and len(levels) == 1 and (reason := prune(levels)) is not None:
            return TrialMeasurement(levels, pruned=reason)
    return TrialMeasurement(levels)
