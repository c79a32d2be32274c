"""PURE: the per-server CPU budget of parsing its scrapes, and the back-off of a server over it.

Every ``/metrics`` body the sampler reads is parsed (the kept sample lines, :mod:`.parse`) in a worker process, where
the parse of each pod's lines is timed in CPU seconds. A server whose pods' parses cost more than
``ScrapeLimits.cpu_budget_seconds`` in one interval, all its pods together, is sampled less often: after ``n``
intervals in a row over the budget, its next sample waits ``interval × 2ⁿ`` seconds, at most
:data:`~sglang_operator.decisions.sampling.backoff.MAX_SECONDS` (the delay of the read timeouts' back-off,
:func:`~sglang_operator.decisions.sampling.backoff.delay`). A sample within the budget resets it. That back-off is what
keeps the other servers on time: the workers' CPU goes to them, not to the heavy server's bodies. The server is told
in its ``SamplingBackedOff`` condition (:func:`condition`): ``True`` reason ``ParseBudgetExceeded`` while backed off,
``False`` reason ``WithinBudget`` once a sample fits again (written only after it was ``True``: a server that never
went over carries no such condition).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sglang_operator.api.status import ConditionType
from sglang_operator.decisions.conditions import Condition
from sglang_operator.decisions.conditions import condition as make_condition
from sglang_operator.decisions.sampling.backoff import delay

OVER = "ParseBudgetExceeded"
"""Reason of ``SamplingBackedOff=True``."""
WITHIN = "WithinBudget"
"""Reason of ``SamplingBackedOff=False`` after it was True."""


@dataclass(frozen=True)
class CostBackoff:
    """One server's CPU back-off: ``over`` (samples in a row over the budget), ``until`` (before it, the server is
    not sampled; None: no wait), ``cpu_seconds`` (the parse CPU of its last sample, seconds), ``pods`` (how many pods'
    parses that was) and ``wait_seconds`` (the wait decided after it, seconds; 0: none)."""

    over: int = 0
    until: dt.datetime | None = None
    cpu_seconds: float = 0.0
    pods: int = 0
    wait_seconds: float = 0.0


def after_sample(state: CostBackoff, now: dt.datetime, interval: float, cpu_seconds: float, pods: int,
                 budget: float) -> CostBackoff:
    """The back-off after a sample ending at ``now`` whose ``pods`` parses cost ``cpu_seconds`` (CPU seconds) against
    ``budget`` (CPU seconds per interval), the server's interval being ``interval`` seconds: reset when within the
    budget, else one more interval over it and the next sample :func:`~.backoff.delay` seconds from ``now``."""
    if cpu_seconds <= budget:
        return CostBackoff(cpu_seconds=cpu_seconds, pods=pods)
    over = state.over + 1
    wait = delay(over, interval)
    return CostBackoff(over, now + dt.timedelta(seconds=wait), cpu_seconds, pods, wait)


def may_sample(state: CostBackoff, now: dt.datetime) -> bool:
    """Whether a server with back-off ``state`` may be sampled at ``now``."""
    return state.until is None or now >= state.until


def condition(state: CostBackoff, budget: float, interval: float, was_backed_off: bool, generation: int,
              now: dt.datetime) -> Condition | None:
    """The ``SamplingBackedOff`` condition of a server with back-off ``state`` (``budget``: CPU seconds per interval;
    ``interval``: the server's interval, seconds; ``was_backed_off``: whether its stored status has the condition
    ``True``), or None when there is nothing to say (never over the budget)."""
    t = ConditionType.SAMPLING_BACKED_OFF
    if state.over > 0:
        return make_condition(
            t, "True", OVER, f"parsing the /metrics of its {state.pods} pods cost {state.cpu_seconds:.2f} s of CPU "
            f"in one interval, over the operator's {budget:g} s per server (--scrape-cpu-budget-seconds): sampled "
            f"again in {state.wait_seconds:g} s instead of {interval:g} s ({state.over} intervals in a row over "
            "it); the pods' bodies are too large to parse that often (fewer sample lines, fewer pods or a longer "
            "spec.rollback.intervalSeconds)", generation, now)
    if was_backed_off:
        return make_condition(t, "False", WITHIN, f"parsing the /metrics of its {state.pods} pods cost "
                              f"{state.cpu_seconds:.2f} s of CPU, within the operator's {budget:g} s per server and "
                              "interval", generation, now)
    return None
