"""The operator's tuning queue: one worker runs the SGLangTunings the queue admits, and nothing for the others.

The SGLangTuning watch (:func:`tuning_event`) keeps the index of what every tuning asks
(:class:`~sglang_operator.control.memory.TuningRequests`, no body kept) and wakes the worker. The worker
(:class:`TuningWorker`) decides, from that index and the SGLangServers the observer tracks, who may run
(:func:`sglang_operator.decisions.tuning.queue.admit`: a tuning whose server is missing waits, one tuning per
server, at most ``--max-running-tunings`` in the operator, shared across namespaces) and then:

- starts a runner (:class:`~sglang_operator.control.tuning.TuningRunner`, one asyncio task) for each admitted
  tuning and cancels the runner of a tuning no longer admitted (ended, deleted, its server deleted); a runner the
  queue says is ``yielding`` (over its namespace's share while another namespace waits) is told so and stops by
  itself at its next trial boundary, then decides again;
- writes the ``Running=False`` condition (reason ``ServerNotFound`` or ``Queued``, phase ``Pending`` when it had
  none) of each waiting tuning whose stored condition says otherwise — once, when it starts waiting or why it waits
  changes, never while nothing changes: a waiting tuning costs one small request in the index and no task, no
  timer, no request to the API server;
- wakes the servers whose tuning's admission changed (a server gives its hold only to an admitted InPlace tuning)
  and the runners that wait (:meth:`TuningRunner.wake`) when their tuning or server changed.

It decides again at every tuning event and at least every :data:`DECIDE_SECONDS` (a server created or deleted).
No kopf daemon, timer or change handler is registered for SGLangTunings, so kopf puts no finalizer on them:
deleting one never waits for the operator (kopf removes the finalizer an older operator put, at the first event).
The worker starts with the observer (:func:`start_tunings`) and stops with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

import kopf

from sglang_operator.api import GROUP, VERSION
from sglang_operator.api import tuning as api
from sglang_operator.api.tuning_status import TuningPhase
from sglang_operator.api.view import ServerView, TuningView
from sglang_operator.control import tuning_status
from sglang_operator.control.memory import Key
from sglang_operator.control.tuning import WAIT_SECONDS, TuningRunner
from sglang_operator.decisions.sampling.limits import ProbeLimits, ScrapeLimits
from sglang_operator.decisions.tuning import lifecycle
from sglang_operator.decisions.tuning import queue as tuning_queue
from sglang_operator.io import kube
from sglang_operator.process import telemetry

if TYPE_CHECKING:
    from sglang_operator.control.observer import Observer

log = logging.getLogger("sglang_operator.tuning")

DECIDE_SECONDS = 5.0
"""Seconds at most between two decisions of the queue (a tuning event decides at once)."""


class TuningWorker:
    """Runs the admitted SGLangTunings (see the module docstring) over ``views``, the operator's observer (its
    tracked servers, its tuning index ``tunings``, its pod cache and HTTP client); ``limit``: tunings running at
    once (``--max-running-tunings``); ``probe_limits``, ``scrape_limits``: the bounds on what a trial reads from a
    pod; ``duration_cap``: seconds a tuning may run at most (``--max-tuning-duration-seconds``; None: its budget
    alone)."""

    def __init__(self, views: Observer, limit: int = tuning_queue.DEFAULT_LIMIT, *,
                 probe_limits: ProbeLimits | None = None, scrape_limits: ScrapeLimits | None = None,
                 duration_cap: float | None = None) -> None:
        self.views, self.limit = views, limit
        self.probe_limits, self.scrape_limits = probe_limits, scrape_limits
        self.duration_cap = duration_cap
        self.runners: dict[Key, tuple[TuningRunner, asyncio.Task[None]]] = {}
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._known: set[Key] = set()  # the tunings of the last decision (a deleted one's series go)
        self._seen_servers: dict[Key, str] = {}  # resourceVersion of each admitted tuning's server, last decision
        self.writes = 0
        """Status writes of waiting tunings so far (a test's and a benchmark's figure)."""

    def poke(self, tuning: Key | None = None) -> None:
        """Decide again soon (a tuning changed); ``tuning``'s runner, if any, looks again now."""
        self._wanted.set()
        got = self.runners.get(tuning) if tuning is not None else None
        if got is not None:
            got[0].wake()

    def start(self) -> None:
        """Start the worker's loop on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sglang-tunings")

    async def stop(self) -> None:
        """Cancel the loop and every runner and wait for them."""
        tasks = [t for t in [self._task, *(task for _, task in self.runners.values())] if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._task = None
        self.runners.clear()

    async def _run(self) -> None:
        await asyncio.sleep(DECIDE_SECONDS)  # kopf's first listings of the servers and tunings come in meanwhile
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), DECIDE_SECONDS)
            self._wanted.clear()
            try:
                await self.decide()
            except Exception:  # never let the loop die: the next decision tries again
                log.exception("the tuning queue's decision failed")

    async def decide(self) -> tuning_queue.Admission:
        """Decide who runs now and act on it (see the module docstring); returns the decision."""
        candidates = self.views.tunings.candidates()
        servers = {view.key: view for view in (m.view() for m in self.views.memories.values()) if view is not None}
        running = {key for key, (_, task) in self.runners.items() if not task.done()}
        admission = tuning_queue.admit(candidates, servers, self.limit, running)
        for server in self.views.tunings.admit(admission.run):
            self.views.wake(server)
        for key, (runner, task) in list(self.runners.items()):
            if key not in admission.run or task.done():
                task.cancel()
                del self.runners[key]
            elif runner.yielding != (key in admission.yielding):
                runner.yielding = key in admission.yielding
                runner.wake()
        for c in candidates:
            if c.key in admission.run:
                self._run_admitted(c, servers)
        self._seen_servers = {k: v for k, v in self._seen_servers.items() if k in admission.run}
        missing: dict[Key, bool] = {}  # servers not tracked, confirmed by one GET each (not listed yet?)
        for c in candidates:  # one write at a time: 600 new tunings are 600 small writes in a row, not at once
            wait = admission.waiting.get(c.key)
            if wait is None or c.request.waiting == (wait.reason, wait.message):
                continue
            if wait.reason == tuning_queue.SERVER_NOT_FOUND:
                if c.server_key not in missing:
                    missing[c.server_key] = await kube.get_sglangserver(*c.server_key) is None
                if not missing[c.server_key]:
                    continue  # it exists; the watch brings it to the observer, the next decision admits
            await self._say(c.key, wait)
        known = {c.key for c in candidates}
        for gone in self._known - known:
            telemetry.forget_tuning(*gone)
        self._known = known
        return admission

    def _run_admitted(self, c: tuning_queue.Candidate, servers: dict[Key, ServerView]) -> None:
        """Start ``c``'s runner if none runs; wake it when its server changed since the last decision."""
        server = servers.get(c.server_key)
        rv = server.resource_version if server is not None else ""
        got = self.runners.get(c.key)
        if got is None:
            runner = TuningRunner(c.namespace, c.request.name, self.views, probe_limits=self.probe_limits,
                                  scrape_limits=self.scrape_limits, duration_cap=self.duration_cap)
            task = asyncio.get_running_loop().create_task(self._drive(runner),
                                                          name=f"tuning {c.namespace}/{c.request.name}")
            self.runners[c.key] = (runner, task)
        elif self._seen_servers.get(c.key) != rv:
            got[0].wake()
        self._seen_servers[c.key] = rv

    async def _drive(self, runner: TuningRunner) -> None:
        """Run ``runner`` until its tuning ends; a failed step (a transient API error) is decided again from the
        stored status after :data:`~sglang_operator.control.tuning.WAIT_SECONDS`."""
        while True:
            try:
                await runner.run()
                self._wanted.set()  # it ended or yielded its slot: decide again now
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("SGLangTuning %s/%s: step failed; tried again", runner.namespace, runner.name)
                await asyncio.sleep(WAIT_SECONDS)

    async def _say(self, key: Key, wait: tuning_queue.Waiting) -> None:
        """Write ``Running=False`` (``wait``'s reason and message; phase ``Pending`` unless it has one) on tuning
        ``key``: one GET for its resourceVersion and status, one patch. Gone, or refused as stale: nothing (its
        event brings the next decision)."""
        got = await kube.get_sglangtuning(*key)
        tuning = TuningView.of(got) if got is not None else None
        if tuning is None or tuning.deleting:
            return
        status = tuning.status
        said = next((c for c in status.conditions if c.type == "Running"), None)
        if said is not None and (said.status, said.reason, said.message) == ("False", wait.reason, wait.message):
            return  # written already (its event is on the way)
        cond = lifecycle.condition("Running", "False", wait.reason, wait.message, tuning.generation,
                                   dt.datetime.now(dt.UTC))
        new = status.model_copy(update={"phase": status.phase or TuningPhase.PENDING.value})
        if await tuning_status.write(tuning, new, [cond]) is not None:
            self.writes += 1


def worker_of(memo: Any) -> TuningWorker | None:
    """The operator's tuning worker (kopf's ``memo.tunings``, built by :func:`start_tunings`), None before."""
    worker = getattr(memo, "tunings", None)
    return worker if isinstance(worker, TuningWorker) else None


@kopf.on.event(GROUP, VERSION, api.PLURAL)
async def tuning_event(event: kopf.RawEvent, body: kopf.Body, memo: Any = None, **_: Any) -> None:
    """Every SGLangTuning change reaches the server it names (its loop reads what the tuning asks — the hold, a
    trial, the release — from the watched index, and the change wakes it: :meth:`Observer.tuning_event`) and the
    tuning queue (:meth:`TuningWorker.poke`); a re-list (event type None of a known tuning) asks for the observer's
    resync, which forgets the tunings deleted meanwhile."""
    observer = getattr(memo, "observer", None)
    if observer is None:
        raise kopf.TemporaryError("the operator is starting: no observer yet", delay=1)
    kind = event.get("type")
    meta = body.get("metadata") or {}
    key = (str(meta.get("namespace") or "default"), str(meta.get("name")))
    if kind is None and key in observer.tunings:  # kopf re-lists after a watch restart: deletions come as no event
        observer.relisted = True
    observer.tuning_event(None if kind is None else str(kind), dict(body))
    worker = worker_of(memo)
    if worker is not None:
        worker.poke(key)


def start_tunings(memo: Any, observer: Observer) -> TuningWorker:
    """Build the tuning worker from ``memo.config`` (``max_running_tunings``, the probe and scrape limits) into
    ``memo.tunings`` and start it."""
    config = getattr(memo, "config", None)
    worker = TuningWorker(observer, getattr(config, "max_running_tunings", tuning_queue.DEFAULT_LIMIT),
                          probe_limits=getattr(config, "probe_limits", None),
                          scrape_limits=getattr(config, "scrape_limits", None),
                          duration_cap=getattr(config, "max_tuning_duration_seconds", None))
    memo.tunings = worker
    worker.start()
    return worker
