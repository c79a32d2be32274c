"""The simulated scheduler: continuous batching of decode/verify steps on a virtual clock.

One :meth:`Engine.step` is one scheduler iteration (``python/sglang/srt/managers/scheduler.py``
``event_loop_normal/overlap``): a prefill batch when requests wait and slots are free, else one decode (verify)
step for every running request. Time is simulated (seconds) and paced against wall time by :meth:`Engine.run`
(``time_scale`` simulated seconds per wall second). Accepted drafts per request and step are drawn by error
diffusion around the expected value, so a log window of ``--decode-log-interval`` steps reports the model's
accept length (e.g. exactly 1.75 for α 0.75 and one draft step); step times get seeded Gaussian jitter.

Timing follows SGLang: a step's tokens reach the clients when the step ends (:meth:`Engine.run` wakes the
requests after pacing), so time to first token is queueing plus prefill and grows with the prompt; a request's
arrival is stamped with the virtual clock mapped from the wall clock, also while the engine idles. Request
counters (``prompt_tokens``, ``generation_tokens``, ``num_requests``, ``spec_verify_calls``) grow when a request
finishes or is aborted, as ``TokenizerMetricsCollector.observe_one_finished_request`` does
(``python/sglang/srt/observability/metrics_collector.py``, called from ``tokenizer_manager.py``); time to first
token and inter-token latency are observed as tokens arrive.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field

from sglang_sim import perf
from sglang_sim.adaptive import AdaptiveTiers
from sglang_sim.faults import Faults
from sglang_sim.logfmt import SimLogger, decode_line, prefill_line, usage_parts
from sglang_sim.profiles import GPUProfile, ModelProfile
from sglang_sim.stats import Stats

VOCAB = (" def", " self", ".", "left", " =", " None", "\n", "    ", " if", " node", ".color", " ==", " RED",
         ":", " return", " rotate", "(", ")", " parent", ",", " right", " #", " fix", " insert", " tree",
         " while", " not", " else", " class", " Node", " key", " BLACK", " and", " is", " grand")


@dataclass
class EngineConfig:
    """What the scheduler needs: profiles, resolved shape and pool sizes, logging and pacing options."""

    model: ModelProfile
    gpu: GPUProfile
    tp_size: int
    shape: perf.SpecShape | None
    max_running_requests: int
    max_total_num_tokens: int
    decode_log_interval: int = 40
    accept_rate_formula: str = "drafts_over_ndt_minus_1"
    log_prefix: str = ""
    seed: int = 0
    time_scale: float = 1.0
    jitter: float = 0.03
    chunked_prefill_size: int = 8192
    adaptive: AdaptiveTiers | None = None
    """SGLang's adaptive controller (``--speculative-adaptive``): the steps switch by the measured acceptance."""
    speed_factor: float = 1.0
    """Multiplies every step's duration (a trial's draw of the GPU's clocks and neighbours; 1.0 in a server)."""
    graph_max_bs: int | None = None
    """The largest CUDA-graph batch size; bigger decode batches run eagerly (``None``: no memory check)."""
    eager_token_limit: int | None = None
    """Tokens an eager decode/verify batch may hold before PyTorch runs out of memory (see :class:`EngineCrash`)."""
    record_step_time: bool = False
    """``SGLANG_RECORD_STEP_TIME``: every decode log window appends its mean step time (seconds) to
    ``stats.step_time_dict[running requests]`` (``/server_info`` ``internal_states[].step_time_dict``)."""


class EngineCrash(Exception):
    """The scheduler died: an eager batch of ``tokens`` tokens (running requests × draft tokens) did not fit in
    the memory left outside the static pools and the CUDA graphs (SGLang then exits with PyTorch's error)."""

    def __init__(self, tokens: int) -> None:
        super().__init__(f"eager batch of {tokens} tokens out of memory")
        self.tokens = tokens


@dataclass
class SimRequest:
    """One generation request; the engine appends text pieces to ``chunks`` as a step computes them and, once the
    step's time has passed on the wall clock (:meth:`Engine.publish`), marks them out (``published_chunks``,
    ``published_finished``) and sets ``event``. Handlers send only what is out: the engine computes the next step
    before it sleeps, so its chunks exist a step early (sending them then made every request's last token, and so
    its decode speed, one verify step early)."""

    rid: str
    prompt_tokens: int
    max_new_tokens: int
    stream: bool
    natural_len: int | None = None
    """Where the text would stop by itself (``finish_reason`` ``stop``); ``None``: only at ``max_new_tokens``."""
    arrival: float = 0.0
    """Seconds on the engine's virtual clock when :meth:`Engine.submit` queued it."""
    chunks: list[list[str]] = field(default_factory=list)
    generated: int = 0
    finished: bool = False
    finish_reason: str | None = None
    aborted: bool = False
    first_token_at: float | None = None
    """Virtual-clock seconds of the first output token (``None`` before it)."""
    last_token_at: float | None = None
    finished_at: float | None = None
    verify_ct: int = 0
    """Verify steps so far (SGLang's ``spec_verify_ct``)."""
    accepted_drafts: int = 0
    """Draft tokens accepted so far, the bonus token of each verify step not counted."""
    carry: float = 0.5
    """The fraction of an accepted draft token not yet emitted: each verify step adds the expected accept length
    − 1 and emits its whole part (starting at 0.5 rounds the running sum)."""
    published_chunks: int = 0
    published_finished: bool = False
    event: asyncio.Event = field(default_factory=asyncio.Event)


class Engine:
    """Simulated scheduler + tokenizer manager statistics. Not thread-safe; run on one event loop."""

    def __init__(self, cfg: EngineConfig, faults: Faults, logger: SimLogger) -> None:
        self.cfg = cfg
        self.faults = faults
        self.logger = logger
        self.rng = random.Random(cfg.seed)
        self.stats = Stats()
        self.vnow = 0.0
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.decode_ct = 0
        self._win_tokens = 0
        self._win_accept = 0
        self._win_verify = 0
        self._win_start = 0.0
        self._wake = asyncio.Event()
        self._token_i = 0
        self._touched: dict[str, SimRequest] = {}
        self._anchor: tuple[float, float] | None = None  # (wall monotonic, virtual) while run() paces
        self._idle = False
        self.shape = cfg.shape
        """The speculative shape the next verify step runs (adaptive mode switches it; else ``cfg.shape``)."""

    # ---- requests -------------------------------------------------------------------------
    def virtual_now(self) -> float:
        """Now on the virtual clock: the wall clock mapped through :meth:`run`'s pacing anchor (never ahead of
        the step being simulated), or the virtual time itself when nothing paces the engine (tests)."""
        if self._anchor is None:
            return self.vnow
        wall, virtual = self._anchor
        mapped = virtual + (time.monotonic() - wall) * self.cfg.time_scale
        return mapped if self._idle else min(self.vnow, mapped)

    def submit(self, req: SimRequest) -> None:
        """Queue ``req`` (arrival = now on the virtual clock)."""
        req.arrival = max(self.virtual_now(), req.arrival)
        self.waiting.append(req)
        self._wake.set()

    def publish(self) -> None:
        """Wake the clients of every request a step touched (the step's tokens are out)."""
        for req in self._touched.values():
            req.published_chunks = len(req.chunks)
            req.published_finished = req.finished
            req.event.set()
        self._touched.clear()

    def _count_finished(self, req: SimRequest) -> None:
        key = "true" if req.stream else "false"
        st = self.stats
        st.num_requests[key] += 1
        st.prompt_tokens[key] += req.prompt_tokens
        st.generation_tokens[key] += req.generated
        st.spec_verify_calls[key] += req.verify_ct

    def alpha(self) -> float:
        """Current per-position acceptance α (profile value unless a fault overrides it)."""
        return self.cfg.model.alpha if self.faults.accept_alpha is None else self.faults.accept_alpha

    def _text(self, n: int) -> list[str]:
        out = [VOCAB[(self._token_i + i) % len(VOCAB)] for i in range(n)]
        self._token_i += n
        return out

    def _emit(self, req: SimRequest, n: int) -> None:
        limit = req.max_new_tokens if req.natural_len is None else min(req.max_new_tokens, req.natural_len)
        n = max(0, min(n, limit - req.generated))
        if n:
            req.chunks.append(self._text(n))
            req.generated += n
            key = "true" if req.stream else "false"
            if req.first_token_at is None:
                req.first_token_at = self.vnow
                self.stats.ttft[key].observe(self.vnow - req.arrival)
            elif req.last_token_at is not None:
                self.stats.itl.observe((self.vnow - req.last_token_at) / n, n)
            req.last_token_at = self.vnow
        if req.generated >= limit:
            req.finished = True
            req.finished_at = self.vnow
            req.finish_reason = "length" if req.generated >= req.max_new_tokens else "stop"
            key = "true" if req.stream else "false"
            self.stats.e2e[key].observe(self.vnow - req.arrival)
            self._count_finished(req)
        self._touched[req.rid] = req

    # ---- one iteration --------------------------------------------------------------------
    def step(self) -> float:
        """Run one scheduler iteration; returns its simulated duration in seconds (0 when idle). Raises
        :class:`EngineCrash` when a decode batch runs out of GPU memory."""
        for r in [r for r in self.running if r.aborted]:
            self.running.remove(r)
            self.stats.num_aborted_requests += 1
            self._count_finished(r)
        while self.waiting and self.waiting[0].aborted:
            self._count_finished(self.waiting.popleft())
            self.stats.num_aborted_requests += 1
        if self.waiting and len(self.running) < self.cfg.max_running_requests:
            return self._prefill()
        if self.running:
            return self._decode()
        return 0.0

    def _jitter(self) -> float:
        return min(max(self.rng.gauss(1.0, self.cfg.jitter), 0.8), 1.2) if self.cfg.jitter > 0 else 1.0

    def _prefill(self) -> float:
        batch: list[SimRequest] = []
        tokens = 0
        while (self.waiting and len(self.running) + len(batch) < self.cfg.max_running_requests
               and (not batch or tokens + self.waiting[0].prompt_tokens <= self.cfg.chunked_prefill_size)):
            req = self.waiting.popleft()
            batch.append(req)
            tokens += req.prompt_tokens
        dt = perf.prefill_seconds(self.cfg.model, self.cfg.gpu, self.cfg.tp_size, tokens) * self._jitter()
        dt *= self.cfg.speed_factor
        self.vnow += dt
        self.stats.realtime_prefill_tokens += tokens
        for req in batch:
            self.running.append(req)
            self._emit(req, 1)
        self._retire()
        self._refresh_usage()
        g = self.stats.gauges
        self.logger.log(prefill_line(len(batch), tokens, self._usage(), len(self.running), len(self.waiting),
                                     tokens / dt if dt > 0 else 0.0), self.cfg.log_prefix)
        g.num_running_reqs, g.num_queue_reqs = len(self.running), len(self.waiting)
        return dt

    def _activate(self, steps: int) -> None:
        """Run ``steps`` draft steps from the next verify step on (``AdaptiveController._activate``); 0: none."""
        if self.cfg.shape is None:
            return
        shape = perf.SpecShape(steps, 1, steps + 1) if steps > 0 else None
        if shape != self.shape:
            self.shape = shape

    def _decode(self) -> float:
        cfg = self.cfg
        bs = len(self.running)
        if cfg.adaptive is not None:
            self._activate(cfg.adaptive.steps_for(bs))
        shape = self.shape
        tokens = bs * (shape.num_draft_tokens if shape else 1)
        if (cfg.graph_max_bs is not None and cfg.eager_token_limit is not None and bs > cfg.graph_max_bs
                and tokens > cfg.eager_token_limit):
            raise EngineCrash(tokens)
        dt = perf.step_seconds(cfg.model, cfg.gpu, cfg.tp_size, shape, bs, self.faults.slowdown())
        dt *= self._jitter() * cfg.speed_factor
        self.vnow += dt
        before_win = self._win_tokens
        expect = perf.expected_accept_length(self.alpha(), shape, cfg.model.tree_candidate_decay) - 1.0
        cap = min(shape.num_steps, shape.num_draft_tokens - 1) if shape else 0
        drafts: list[int] = []
        for req in self.running:
            req.carry += expect
            accepted = min(cap, math.floor(req.carry))
            req.carry -= accepted
            req.verify_ct += 1
            req.accepted_drafts += accepted
            drafts.append(accepted)
            self._win_accept += accepted + 1
            self._win_verify += 1
            before = req.generated
            self._emit(req, accepted + 1)
            self._win_tokens += req.generated - before
        self.stats.realtime_decode_tokens += self._win_tokens - before_win
        if cfg.adaptive is not None and shape is not None:
            switched = cfg.adaptive.on_verify(drafts, bs)
            if switched is not None:
                slot = cfg.adaptive.slot(bs)
                self.logger.log(f"Adaptive spec params updated: steps {shape.num_steps} -> {switched} "
                                f"(ema_accept_len={slot.ema:.2f})", cfg.log_prefix)
                self._activate(switched)
        self.decode_ct += 1
        if self.decode_ct % cfg.decode_log_interval == 0:
            self._report(bs)
        self._retire()
        return dt

    def _retire(self) -> None:
        self.running = [r for r in self.running if not r.finished]

    def _used_tokens(self) -> int:
        return sum(r.prompt_tokens + r.generated for r in self.running)

    def _refresh_usage(self) -> None:
        g = self.stats.gauges
        g.num_used_tokens = self._used_tokens()
        g.token_usage = round(g.num_used_tokens / max(self.cfg.max_total_num_tokens, 1), 2)
        g.mamba_usage = round(len(self.running) / max(self.cfg.max_running_requests, 1), 2)

    def _usage(self) -> str:
        g = self.stats.gauges
        return usage_parts(self.cfg.model.hybrid_mamba, g.num_used_tokens, g.token_usage, len(self.running),
                           g.mamba_usage)

    def _report(self, bs: int) -> None:
        """The periodic decode log line and gauge refresh (``report_decode_stats``)."""
        gap = self.vnow - self._win_start
        g = self.stats.gauges
        g.gen_throughput = self._win_tokens / gap if gap > 0 else 0.0
        self.stats.last_gen_throughput = g.gen_throughput
        self._refresh_usage()
        spec: tuple[float, float] | None = None
        if self.cfg.shape is not None and self._win_verify:
            length = self._win_accept / self._win_verify
            rate = perf.accept_rate(length, self.shape or self.cfg.shape, self.cfg.accept_rate_formula)
            spec = (length, rate)
            g.spec_accept_length, g.spec_accept_rate = length, rate
            self.stats.total_accept_tokens += self._win_accept
            self.stats.total_verify_ct += self._win_verify
        if self.cfg.adaptive is not None:  # the active tier, as report_decode_stats reads it from the draft worker
            g.spec_num_steps = self.shape.num_steps if self.shape else 0
            g.spec_num_draft_tokens = self.shape.num_draft_tokens if self.shape else 0
        g.num_running_reqs, g.num_queue_reqs = bs, len(self.waiting)
        if self.cfg.record_step_time:  # RECORD_STEP_TIME in report_decode_stats: gap / decode_log_interval
            self.stats.step_time_dict.setdefault(bs, []).append(gap / self.cfg.decode_log_interval)
        self.logger.log(decode_line(bs, self._usage(), spec, g.gen_throughput, len(self.waiting)),
                        self.cfg.log_prefix)
        self._win_tokens = self._win_accept = self._win_verify = 0
        self._win_start = self.vnow

    # ---- pacing ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Step forever, sleeping so that simulated time advances ``time_scale`` × wall time."""
        scale = self.cfg.time_scale
        self._anchor = (time.monotonic(), self.vnow)
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                self._anchor = (time.monotonic(), self.vnow)
                self._idle = True
                await self._wake.wait()
                self.vnow = max(self.vnow, self.virtual_now())
                self._idle = False
                self._anchor = (time.monotonic(), self.vnow)
            self.step()
            wall, virtual = self._anchor
            delay = wall + (self.vnow - virtual) / scale - time.monotonic()
            if delay < -1.0:  # fell behind (a busy machine): re-anchor rather than rush
                self._anchor = (time.monotonic(), self.vnow)
            await asyncio.sleep(max(delay, 0.0))
            self.publish()
