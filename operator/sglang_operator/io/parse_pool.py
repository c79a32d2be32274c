"""The parse of scraped sample lines off the event loop: a pool of worker processes.

The sampler reads a pod's ``/metrics`` on the event loop and keeps only the lines it wants, at C speed
(:class:`~sglang_operator.decisions.sampling.parse.KeptFilter`); parsing those lines (label sets, values) and hashing
the series keys (:func:`~sglang_operator.decisions.sampling.retain.compact`) is pure Python, 0.3-0.4 s of CPU for a body
of 10 000 long-labelled lines, and would hold the loop that every other server, the Lease renewal and the watches share
(the GIL: a thread would not help). :class:`ParsePool` hands the kept lines (one ``bytes`` object) to one of
``ScrapeLimits.parse_workers`` processes (``--scrape-parse-workers``; spawned, so nothing of the operator's threads is
forked) and gets back the compact scrape only, with the CPU seconds the parse took in the worker
(:func:`time.thread_time`): what the per-server budget counts (:mod:`sglang_operator.decisions.sampling.budget`).

With 0 workers the parse runs on the loop, with the pod's label-set cache (tests, and a fallback). A worker parses
with a fresh cache each time (``--scrape-cache-bytes``): a pod's label sets are not kept between its scrapes there. A
worker that dies (killed, out of memory) fails that parse with reason ``worker_lost`` and the pool is started again at
the next parse.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import signal
import sys
import time
import types
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from sglang_operator.decisions.sampling.cache import SeriesCache
from sglang_operator.decisions.sampling.limits import ScrapeLimits
from sglang_operator.decisions.sampling.parse import Kept, Parsed, ParseError, parse_lines
from sglang_operator.decisions.sampling.retain import RetainError, compact
from sglang_operator.decisions.sampling.roles import MetricRoles

WORKER_LOST = "worker_lost"
"""Reason of a parse whose worker process died."""


@dataclass(frozen=True)
class ParseResult:
    """One pod's parsed scrape: ``parsed`` (compact: series keys hashed; None when it failed), ``reason`` and
    ``message`` of a failure (``reason`` a scrape-error reason, e.g. ``parse``, ``too_many_labels``; or
    ``too_many_series``, then ``retained`` is False: a retention breach, not a parse error), ``cpu_seconds`` (CPU
    seconds the parse took where it ran)."""

    parsed: Parsed | None
    cpu_seconds: float
    reason: str = ""
    message: str = ""
    retained: bool = True


def parse_kept(kept: Kept, roles: MetricRoles, limits: ScrapeLimits, cache: SeriesCache | None = None) -> ParseResult:
    """Parse ``kept`` lines of ``roles`` under ``limits`` (label sets through ``cache``; None: a fresh one of
    ``limits.cache_bytes``) and :func:`~sglang_operator.decisions.sampling.retain.compact` them: what a worker runs.
    Never raises for the lines' content (a :class:`ParseResult` with the reason)."""
    started = time.thread_time()
    try:
        parsed = compact(parse_lines(kept.split(), roles, kept.size, cache, limits), limits.retained_series)
    except ParseError as err:
        return ParseResult(None, time.thread_time() - started, err.reason, str(err))
    except RetainError as err:
        return ParseResult(None, time.thread_time() - started, err.reason, str(err), retained=False)
    return ParseResult(parsed, time.thread_time() - started)


def _worker_started() -> None:
    """A worker ignores SIGINT: a Ctrl-C to the operator's process group (a terminal, the e2e harness) leaves the
    shutdown to the operator, which stops its pool (:meth:`ParsePool.close`); the worker no longer dies first with a
    ``KeyboardInterrupt`` traceback in the operator's log."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _light_main() -> Iterator[None]:
    """While the pool's workers are spawned, ``sys.modules["__main__"]`` is an empty module (no ``__spec__``, no
    ``__file__``). A spawned process first imports its parent's ``__main__`` (``multiprocessing.spawn.prepare``): the
    operator's, its console script or ``python -m sglang_operator.entry.cli``, imports every module of the operator,
    about a second of CPU per worker at every operator start; a worker needs only this module (its function is
    pickled by name). The swap lasts the synchronous ``submit`` calls that spawn (Python ≥ 3.9 spawns on demand, in
    the caller's thread), on the event loop's thread."""
    real = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = real


class ParsePool:
    """Parses kept lines in ``workers`` processes (0: on the loop), started at the first parse; :meth:`close` stops
    them."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> Executor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_worker_started)
            with _light_main():  # start them all now, none importing the operator's __main__
                for _ in range(self.workers):
                    self._pool.submit(_worker_started)
        return self._pool

    async def parse(self, kept: Kept, roles: MetricRoles, limits: ScrapeLimits,
                    cache: SeriesCache | None = None) -> ParseResult:
        """:func:`parse_kept` in a worker (``cache`` is used only on the loop, with 0 workers). Never raises for the
        lines' content; a dead worker is a :class:`ParseResult` of reason :data:`WORKER_LOST`."""
        if self.workers == 0:
            return parse_kept(kept, roles, limits, cache)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor(), parse_kept, kept, roles, limits)
        except BrokenProcessPool as err:
            self.close()
            return ParseResult(None, 0.0, WORKER_LOST, f"the parse worker died: {err}")

    def pids(self) -> list[int]:
        """The worker processes' ids (none before the first parse)."""
        procs = getattr(self._pool, "_processes", None) or {}
        return sorted(procs)

    def close(self) -> None:
        """Stop the workers (a parse under way is abandoned); the next parse starts them again."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
