"""The observer's tick: when each server is observed, and the shared slots observations take turns in.

:class:`Ticker` is the collaborator of :class:`~sglang_operator.control.observer.Observer` that schedules: every
interval one loop walks the servers in phase order and starts each observation at its own fixed point of the
interval (:func:`offset_in_interval`), at most :data:`CONCURRENCY` observations at a time (the shared slots, across
ticks). An observation that waits on its server's pods gives its slot back while it waits (:func:`slot_released`),
so a server whose pods never answer never keeps another server from being observed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime as dt
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from sglang_operator.api.status import Phase
from sglang_operator.api.view import ServerView
from sglang_operator.control.memory import Key, Memories
from sglang_operator.process import telemetry

log = logging.getLogger("sglang_operator.control.observer")
CONCURRENCY = 8
"""Observations under way at once (the shared slots), not counting those waiting on their pods."""
SPREAD = 0.8
"""Fraction of the interval over which one tick's observations are spread."""


class Slot:
    """One of the observer's shared slots, held by one observation (:meth:`released` gives it back for a while)."""

    def __init__(self, slots: asyncio.Semaphore) -> None:
        self.slots = slots
        self.held = False

    async def __aenter__(self) -> Slot:
        await self.slots.acquire()
        self.held = True
        return self

    async def __aexit__(self, *_: object) -> None:
        if self.held:
            self.held = False
            self.slots.release()

    @contextlib.asynccontextmanager
    async def released(self) -> AsyncIterator[None]:
        """The block runs without the slot; it is taken again (waiting its turn) after it."""
        if not self.held:
            yield
            return
        self.held = False
        self.slots.release()
        try:
            yield
        finally:
            await self.slots.acquire()
            self.held = True


_SLOT: contextvars.ContextVar[Slot | None] = contextvars.ContextVar("observer_slot", default=None)


@contextlib.asynccontextmanager
async def slot_released() -> AsyncIterator[None]:
    """Run the block (a wait on a server's pods) without the shared slot the current observation holds, if any."""
    slot = _SLOT.get()
    if slot is None:
        yield
        return
    async with slot.released():
        yield


def offset_in_interval(meta: Mapping[str, Any]) -> float:
    """Where in the observer's interval a server is observed, in [0, 1): fixed per server (a hash of its uid, else
    of its namespace and name), so the first observations of servers created together (a status patch and an
    event each) spread over the interval like the servers' own hashes, not in bursts (why and the figures:
    docs/architecture.md, "Under load")."""
    key = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
    return zlib.crc32(key.encode()) / 2**32


class Ticker:
    """The observer's tick (:attr:`Observer.ticker <sglang_operator.control.observer.Observer.ticker>`, a
    collaborator; see the module docstring): every ``interval`` s it walks the servers of ``memories`` and runs
    ``observe`` (the observer's observation of one view, looked up at each call) for each in its worker, at most
    :data:`CONCURRENCY` at a time. Writes :attr:`ServerMemory.observation <sglang_operator.control.memory.
    ServerMemory.observation>` (the observation under way)."""

    def __init__(self, memories: Memories, interval: float,
                 observe: Callable[[ServerView, dt.datetime], Awaitable[None]]) -> None:
        self.memories, self.interval, self.observe = memories, interval, observe
        self._slots: asyncio.Semaphore | None = None  # CONCURRENCY observations at a time, across ticks
        self._woken: set[asyncio.Task[None]] = set()  # observations started off the tick (kept referenced)

    def _shared_slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(CONCURRENCY)
        return self._slots

    async def tick(self) -> None:
        """Observe every tracked server once, spread over :data:`SPREAD` of the interval (at most
        :data:`CONCURRENCY` at a time), each at its own fixed point of it (:func:`offset_in_interval`), in its own
        worker (a server whose worker is busy is skipped this tick). One loop walks the servers in phase order and
        starts each observation when its point comes (not a sleeping task per server: docs/architecture.md,
        "Under load"). Returns when every observation ended or the interval is over, whichever is first: an
        observation still under way (a slow or hostile pod, up to its read's timeout) goes on in its server's
        memory (:attr:`ServerMemory.observation`), and the next tick starts on time for every other server."""
        sem = self._shared_slots()
        servers = [view for view in (m.view() for m in self.memories.values()) if view is not None]
        telemetry.set_servers((view.status.phase for view in servers), [p.value for p in Phase])
        spread = SPREAD * self.interval
        loop = asyncio.get_running_loop()
        started = loop.time()

        running: set[asyncio.Task[None]] = set()
        order = sorted((offset_in_interval({"uid": v.uid, "namespace": v.namespace, "name": v.name}) * spread, v.key)
                       for v in servers)
        try:
            for point, key in order:
                if (wait := started + point - loop.time()) > 0:
                    await asyncio.sleep(wait)
                task = loop.create_task(self._observe_one(key, sem))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.wait(set(running), timeout=max(0.0, started + self.interval - loop.time()))
        except asyncio.CancelledError:  # the operator stops: so do the observations this tick started
            for task in list(running):
                task.cancel()
            raise

    async def _observe_one(self, key: Key, sem: asyncio.Semaphore) -> None:
        """Observe server ``key`` now in its worker, unless its worker is busy or its view was refused as stale."""
        mem = self.memories.get(key)  # the newest view at its point; gone if deleted meanwhile
        view = mem.view() if mem is not None else None
        if mem is None or view is None or mem.busy:
            return
        if mem.stale_rv is not None and mem.stale_rv == view.resource_version:
            return  # refused as stale: a newer view (another resourceVersion) is observed
        mem.observation = asyncio.current_task()
        async with Slot(sem) as slot, mem.lock:
            view = mem.view()  # the newest: the watch may have brought another while this waited
            if view is None or self.memories.get(key) is not mem:
                return
            _SLOT.set(slot)  # this task's own context: the gather gives the slot back while it reads pods
            try:
                await self.observe(view, dt.datetime.now(dt.UTC))
            except Exception:  # one server's failure must not stop the others
                log.exception("observing %s/%s failed", *key)

    def wake(self, key: Key) -> None:
        """Observe server ``key`` now, off the tick (a feature asked something of it: a tuning's hold, trial or
        release); nothing when it is unknown or its worker is busy (its next tick decides)."""
        mem = self.memories.get(key)
        if mem is None or mem.body is None or mem.busy:
            return
        task = asyncio.get_running_loop().create_task(self._observe_one(key, self._shared_slots()),
                                                      name=f"observe {key[0]}/{key[1]}")
        self._woken.add(task)
        task.add_done_callback(self._woken.discard)
