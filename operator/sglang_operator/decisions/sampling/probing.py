"""PURE: which pod of a revision the sampler's probe goes to next.

SGLang writes ``sglang:spec_accept_length`` and ``sglang:spec_accept_rate`` only every ``--decode-log-interval``
(40) decode steps (``managers/scheduler_components/metrics_reporter.py``; ``../shared/sglang/README.md``
"Refresh semantics"), and 0.5.10 has no counter to compute the accept length from. A probe of 64 tokens at an
accept length of 2.7 is about 24 decode steps, so probes sent round robin over 4 pods left every pod below 40 steps
for the 15 s a first revision is judged in, and the revision's accept length and rate were lost. Rule: the probe
stays on a pod of a speculative server until that pod's gauges have been written once (:data:`STAY_PROBES` probes at
most, so a pod that never writes them does not keep the probe), then goes on round robin; a pod whose gauges were
written keeps reading its last window (the gauges' ``mostrecent`` mode), so every later sample has a figure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

STAY_PROBES = 4
"""Most probes in a row to one pod whose speculative gauges are not written yet: 4 probes of 64 tokens cover 40
decode steps up to an accept length of 6.4 (a 64-token probe is ``max_tokens`` ÷ accept length steps)."""


@dataclass(frozen=True)
class ProbeTurn:
    """Where a revision's probes went: the ``turn`` counter of the round robin and the ``pod`` probed last with the
    number of probes in a row it got (``probes``)."""

    turn: int = 0
    pod: str = ""
    probes: int = 0


def next_target(ready: Sequence[str], last: ProbeTurn, refreshed: Collection[str],
                speculative: bool) -> tuple[str, ProbeTurn]:
    """The pod (of the revision's Ready pods ``ready``, in order; not empty) to probe now and the new
    :class:`ProbeTurn`: the pod probed last again while the server is ``speculative``, the pod is still Ready, its
    gauges were not written (not in ``refreshed``) and it had fewer than :data:`STAY_PROBES` probes in a row; else
    the next pod round robin. Raises ``ValueError`` for an empty ``ready``."""
    if not ready:
        raise ValueError("no Ready pod to probe")
    if speculative and last.pod in ready and last.pod not in refreshed and last.probes < STAY_PROBES:
        return last.pod, ProbeTurn(last.turn, last.pod, last.probes + 1)
    pod = ready[last.turn % len(ready)]
    return pod, ProbeTurn(last.turn + 1, pod, 1)
