"""The server's loop and a tuning's runner driven over the matrix' fake world (:mod:`matrix_world`): every tick moves
the shared clock one sampling interval, hands the server's newest object and the tunings' newest bodies to the
observer (as its watches would), observes once and carries out the job it started. Every wait is bounded by a
number of ticks and fails with the server's state when the condition never came: nothing loops."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable
from typing import Any

from matrix_world import NS, Clock, FakeSGLang, Kubelet, WorldKube

from sglang_operator.control import handlers
from sglang_operator.control import tuning as ctl
from sglang_operator.control.observer import Observer
from sglang_operator.decisions.tuning import queue
from sglang_operator.io.sampler import Sampler
from sglang_operator.process import telemetry

NAME, TUNING = "s", "tune"
PROM = "http://prometheus.monitoring.svc:9090"
"""Prometheus' address: the operator's ``--prometheus-address`` (KEDA's discovery) and the KEDA value's own."""
INTERVAL = 5.0
"""Seconds the clock moves per tick: the matrix server's ``spec.rollback.intervalSeconds``."""


class Stuck(AssertionError):
    """A condition the loop waited for never came within its ticks."""


class World:
    """One server's fake cluster: the API, the kubelet, the SGLang pods, the observer and the clock."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.kube = WorldKube().install()
        self.kubelet = Kubelet(self.kube, self.clock)
        self.kube.kubelet = self.kubelet
        self.sglang = FakeSGLang(self.kubelet)
        self.obs = Observer(1.0)
        self.kubelet.observer = self.obs
        self.obs._sampler = Sampler(self.obs.http, clock=self.clock.now, draining=self.obs.memories.draining)
        self.memo = type("Memo", (), {"observer": self.obs})()
        self.ticks = 0
        self.runner: ctl.TuningRunner | None = None
        self.findings: dict[str, str] = {}
        """What went wrong, by what it is about (the first time each), reported together at the end."""
        self.watch: Callable[[World], None] | None = None
        """Checked after every tick (the invariants: no figure lost or wrong at any time)."""

    def note(self, key: str, message: str) -> None:
        """Record a finding (the first of each ``key``), with the tick it was seen at."""
        self.findings.setdefault(key, f"tick {self.ticks}: {message}")

    async def close(self) -> None:
        await self.obs.stop()
        self.obs.series.forget(NS, NAME)  # the metrics registry is the process's: no series left to other tests
        telemetry.forget_tuning(NS, TUNING)

    # --- the server ------------------------------------------------------------------------------------------

    def server(self) -> dict[str, Any]:
        return self.kube.server(NAME, NS)

    def status(self) -> dict[str, Any]:
        return dict(self.server().get("status") or {})

    async def create(self, body: dict[str, Any]) -> None:
        """The user's create, reconciled by the handler (which writes the children: the kubelet starts the pods)."""
        obj = copy.deepcopy(body)
        obj["metadata"] = {"name": NAME, "namespace": NS}
        stored = self.kube.put(obj)
        await handlers.reconcile(body=stored, meta=stored["metadata"], status={}, patch={}, reason="create",
                                 logger=logging.getLogger("matrix"), memo=self.memo)
        self.obs.track("MODIFIED", self.server())

    def _tunings_seen(self) -> None:
        """The tuning watch: every tuning's newest body recorded, the queue's admission (no off-tick observation:
        the tick observes with the world's clock)."""
        bodies = [o for (k, _, _), o in self.kube.objects.items() if k == "SGLangTuning"]
        for body in bodies:
            self.obs.tunings.apply("MODIFIED", copy.deepcopy(body))
        if bodies:
            servers = {m.key for m in self.obs.memories.values() if m.body is not None}
            self.obs.tunings.admit(queue.admit(self.obs.tunings.candidates(), servers, queue.DEFAULT_LIMIT).run)

    async def tick(self, seconds: float = INTERVAL) -> None:
        """One observation of the server at the clock moved by ``seconds``, then its job to its end."""
        self.ticks += 1
        now = self.clock.advance(seconds)
        self._tunings_seen()
        self.obs.track("MODIFIED", self.server())
        mem = self.obs.memory(self.server())
        async with mem.lock:
            view = mem.view()
            assert view is not None
            await self.obs.observe(view, now)
        if mem.job is not None:
            await mem.job
            mem.job = None
        self.obs.track("MODIFIED", self.server())
        if self.watch is not None:
            self.watch(self)

    async def until(self, done: Callable[[], bool], what: str, ticks: int = 80) -> None:
        """Tick until ``done()``; :class:`Stuck` with the server's state when ``ticks`` ticks did not bring it."""
        for _ in range(ticks):
            if done():
                return
            await self.tick()
        if not done():
            raise Stuck(f"{what}: not reached in {ticks} ticks of {INTERVAL:g} s; {self.state()}"
                        + "".join(f"\n  {m}" for m in self.findings.values()))

    def state(self) -> str:
        s = self.status()
        analysis = s.get("analysis") or {}
        conds = {c["type"]: f"{c['status']}/{c.get('reason')}: {c.get('message', '')[:200]}"
                 for c in s.get("conditions") or []}
        tuning = self.kube.get("SGLangTuning", NS, TUNING)
        tun = (tuning or {}).get("status") or {}
        trials = [(t.get("name"), t.get("verdict"), t.get("reason")) for t in tun.get("trials") or []]
        running = [(c.get("reason"), c.get("message")) for c in tun.get("conditions") or []]
        return (f"phase {s.get('phase')}, analysis {analysis.get('phase')} ({analysis.get('message', '')[:200]}), "
                f"revision {s.get('revision')}, stable {s.get('stableRevision')}, hold {s.get('tuningHold')}, "
                f"conditions {conds}, tuning {tun.get('phase')} {trials} {running}")

    # --- a tuning --------------------------------------------------------------------------------------------

    def tuning(self) -> dict[str, Any]:
        got = self.kube.get("SGLangTuning", NS, TUNING)
        assert got is not None
        return got

    async def tune(self, tuning: dict[str, Any], ticks: int = 120) -> dict[str, Any]:
        """Create ``tuning`` and run its runner to its end beside the server's ticks (an InPlace trial is applied
        by the server's loop while the runner waits for it); the tuning's final object."""
        self.kube.put(copy.deepcopy(tuning))
        self.runner = ctl.TuningRunner(NS, TUNING, self.obs)
        task = asyncio.get_running_loop().create_task(self.runner.run(), name="tuning runner")
        try:
            for _ in range(ticks):
                await self.tick()
                for _ in range(8):  # the runner's own steps until it waits (its polls yield, never sleep)
                    if task.done():
                        break
                    await asyncio.sleep(0)
                if task.done():
                    break
            if not task.done():
                raise Stuck(f"the tuning did not end in {ticks} ticks; {self.state()}")
            task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._tunings_seen()
        return self.tuning()

