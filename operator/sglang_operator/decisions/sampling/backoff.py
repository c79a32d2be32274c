"""PURE: when the observer reads a server's pods again after its reads timed out (the per-server back-off).

A server whose pods do not answer (a hung process, a pod that accepts connections and never replies, a blackholed
address) costs every observation a read timeout per endpoint. Its pods are then read less often: after ``n``
observations in a row whose reads all timed out, the next read waits ``interval × 2ⁿ`` seconds, at most
:data:`MAX_SECONDS` (never less than one interval). Any answer (even an error status) resets it, and so does a
change of the pods read (a new revision's pods, a restart elsewhere): those are read at once. The rest of the
observation (pod health from the watch, status) is not backed off: it reads no pod.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MAX_SECONDS = 60.0
"""The longest wait between two reads of a server whose pods time out, seconds (or one interval, if longer)."""


@dataclass(frozen=True)
class Backoff:
    """One server's back-off: ``failures`` (observations in a row whose reads all timed out), ``until``
    (monotonic seconds before which its pods are not read) and ``pods`` (the names of the pods those reads went
    to, sorted)."""

    failures: int = 0
    until: float = 0.0
    pods: tuple[str, ...] = ()


def delay(failures: int, interval: float, cap: float = MAX_SECONDS) -> float:
    """Seconds to wait before the next read after ``failures`` timed-out observations in a row (0: none):
    ``interval × 2**failures``, at most ``max(cap, interval)``."""
    if failures <= 0:
        return 0.0
    return min(interval * 2.0 ** min(failures, 32), max(cap, interval))


def may_read(state: Backoff, now: float, pods: Iterable[str]) -> bool:
    """Whether the pods named ``pods`` may be read at monotonic time ``now`` (seconds)."""
    return state.failures == 0 or now >= state.until or tuple(sorted(pods)) != state.pods


def after_reads(state: Backoff, now: float, interval: float, pods: Iterable[str], *, answered: int,
                timed_out: int) -> Backoff:
    """The back-off after one observation's reads at monotonic time ``now``: ``answered`` reads got an answer,
    ``timed_out`` got none within their timeout (other failures, such as a refused connection, count as
    neither). Reset by any answer; unchanged when nothing was read; else one more failure, the next read
    :func:`delay` seconds from ``now``."""
    if answered > 0:
        return Backoff()
    if timed_out <= 0:
        return state
    names = tuple(sorted(pods))
    failures = state.failures + 1 if names == state.pods else 1
    return Backoff(failures, now + delay(failures, interval), names)
