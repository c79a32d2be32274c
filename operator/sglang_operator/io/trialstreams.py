"""The process-wide cap on the streamed requests of tuning trials in flight (``sglang-operator run
--trial-streams``): every trial's load runs inside the operator, on its event loop, so the streams of all trials
together are bounded; with it, the rate each trial's requests may start at (``--trial-request-rate``,
:attr:`TrialStreams.request_rate`, paced by :class:`sglang_operator.decisions.tuning.trialload.RequestPacer` in
:mod:`sglang_operator.io.trialbench`), so a pod answering at once costs the operator no more than that rate.

A level of ``n`` streams takes ``n`` at once before its load starts (:meth:`TrialStreams.hold`) and gives them back
when its requests have ended, so its concurrency is exactly what the spec asks while it is measured; levels wait
their turn in order (first come, first served: a large level is not passed over by small ones forever). A level
asking more than the whole cap is refused (:class:`OverCap`): it could never run.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
from collections.abc import AsyncIterator

from sglang_operator.decisions.tuning.trialload import TRIAL_REQUEST_RATE

TRIAL_STREAMS = 256
"""Default cap: streamed trial requests in flight at once, all trials together."""


class OverCap(ValueError):
    """A level asks more streams than the operator's cap allows at all."""


class TrialStreams:
    """``limit`` streams shared by every trial of the process (FIFO); ``request_rate``: requests per second each
    trial may start at most, all its streams together. Create it on the event loop that uses it."""

    def __init__(self, limit: int = TRIAL_STREAMS, request_rate: float = TRIAL_REQUEST_RATE) -> None:
        if limit < 1:
            raise ValueError(f"the trial stream cap must be positive: {limit}")
        if not math.isfinite(request_rate) or request_rate <= 0:
            raise ValueError(f"the trial request rate must be positive: {request_rate}")
        self.limit = limit
        self.request_rate = request_rate
        self.in_use = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @contextlib.asynccontextmanager
    async def hold(self, n: int) -> AsyncIterator[None]:
        """Hold ``n`` streams for the block, waiting (in order) until they are free. Raises :class:`OverCap` when
        ``n`` is over :attr:`limit`, ``ValueError`` when below 1."""
        if n < 1:
            raise ValueError(f"a level holds at least one stream: {n}")
        if n > self.limit:
            raise OverCap(f"concurrency {n} is over the operator's cap of {self.limit} trial streams "
                          "(sglang-operator run --trial-streams)")
        if self._waiting or self.in_use + n > self.limit:
            fut = asyncio.get_running_loop().create_future()
            entry = (n, fut)
            self._waiting.append(entry)
            try:
                await fut
            except BaseException:
                if entry in self._waiting:
                    self._waiting.remove(entry)
                    self._wake()  # the ones behind it may fit now
                elif fut.done() and not fut.cancelled():  # granted just as it was cancelled: give them back
                    self.in_use -= n
                    self._wake()
                raise
        else:
            self.in_use += n
        try:
            yield
        finally:
            self.in_use -= n
            self._wake()

    def _wake(self) -> None:
        while self._waiting and self.in_use + self._waiting[0][0] <= self.limit:
            n, fut = self._waiting.popleft()
            if fut.done():
                continue
            self.in_use += n
            fut.set_result(None)
