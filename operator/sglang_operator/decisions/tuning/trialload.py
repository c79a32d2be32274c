"""PURE: the bound on a tuning trial's request rate and the rules that say a level's load was no measurement of
decoding, what :mod:`sglang_operator.io.trialbench` paces its workers by and checks after each level.

- :class:`RequestPacer`: a token bucket over the requests a trial's workers start, all of them together
  (``sglang-operator run --trial-request-rate``, default :data:`TRIAL_REQUEST_RATE` per second): at most
  :data:`BURST_SECONDS` × rate at once, then the rate. The trial's load runs in the operator, on its event loop: a
  pod answering at once (one token, or an error page with status 200) would otherwise be sent requests as fast as
  the loop can make them (1 142 a second at concurrency 16, half a core, for up to 7 200 s of a trial).
- :func:`short_answers`: a level whose answers were far shorter than ``maxOutputTokens`` (the median of its
  answers' completion tokens under :data:`SHORT_ANSWER_FRACTION` of it) measured prefill and HTTP, not decoding.
- :func:`held_back`: a level whose streams the rate cap kept idle more than :data:`HELD_BACK_LIMIT` of the measured
  time did not run at its concurrency.

Either fails the trial as an invalid measurement (verdict Failed with the rule's reason). Pure: times are passed in
(seconds of a monotonic clock).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

TRIAL_REQUEST_RATE = 200.0
"""Default cap on the requests a trial starts per second, all its workers together (``--trial-request-rate``). An
honest SGLang pod stays far below it: requests per second are about concurrency × each stream's decode tok/s ÷
``maxOutputTokens`` (256 streams of 40 tok/s with 512-token answers: 20 a second; the simulator of the e2e tests
at most 15 with 32-token answers at concurrency 16); 200 a second cost the operator about a tenth of a core (1 142 a
second cost half of one)."""
BURST_SECONDS = 1.0
"""Seconds of the cap a trial may start at once (the bucket's depth: ``rate × BURST_SECONDS`` requests, at least
one); a level's ramp (its workers' first requests, unmeasured) fits within it up to that concurrency."""
SHORT_ANSWER_FRACTION = 0.25
"""A level whose answers' median completion tokens are below this fraction of ``maxOutputTokens`` is no measurement
of decoding (:func:`short_answers`)."""
HELD_BACK_LIMIT = 0.05
"""Share of a level's measured stream-seconds (concurrency × the windows' seconds) its workers may wait for the rate
cap before the level is no measurement at its concurrency (:func:`held_back`)."""


class RequestPacer:
    """A token bucket of ``rate`` requests per second holding ``rate × burst_seconds`` at most (at least one), full
    at the start. :meth:`reserve` takes one request's token at ``now`` and says how long to wait before sending it
    (0: at once); tokens are taken in the order of the calls, a wait reserving a future one, so over any span of
    ``t`` seconds at most ``depth + rate × t`` requests start (:attr:`depth`)."""

    def __init__(self, rate: float, burst_seconds: float = BURST_SECONDS) -> None:
        if not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"a request rate must be positive: {rate}")
        self.rate = rate
        self.depth = max(1.0, rate * burst_seconds)
        self._tokens = self.depth
        self._at: float | None = None

    def reserve(self, now: float) -> float:
        """Take the next request's token at ``now`` (seconds, monotonic): seconds to wait before sending it."""
        if self._at is not None:
            self._tokens = min(self.depth, self._tokens + max(0.0, now - self._at) * self.rate)
        self._at = now if self._at is None else max(self._at, now)
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


@dataclass
class AnswerLengths:
    """Counts of the completion tokens of a level's answers, each clamped to ``[0, max_tokens]`` (a pod claiming
    more is counted at ``max_tokens``): at most ``max_tokens`` + 1 counts, whatever the number of requests."""

    max_tokens: int
    counts: dict[int, int] = field(default_factory=dict)
    count: int = 0

    def add(self, tokens: int) -> None:
        """Count one answer of ``tokens`` completion tokens."""
        t = min(max(tokens, 0), self.max_tokens)
        self.counts[t] = self.counts.get(t, 0) + 1
        self.count += 1

    def _nth(self, n: int) -> int:
        seen = 0
        for t in sorted(self.counts):
            seen += self.counts[t]
            if seen > n:
                return t
        return self.max_tokens

    def median(self) -> float | None:
        """The median completion tokens (``statistics.median``'s rule), None without answers."""
        if not self.count:
            return None
        if self.count % 2:
            return float(self._nth(self.count // 2))
        return (self._nth(self.count // 2 - 1) + self._nth(self.count // 2)) / 2


def short_answers(concurrency: int, median_tokens: float | None, max_output_tokens: int) -> str | None:
    """Why a level of ``concurrency`` whose successful answers had ``median_tokens`` completion tokens (median,
    None: none succeeded) under ``max_tokens = max_output_tokens`` is no measurement of decoding, or None.

    The rule is on the median, never on one answer: greedy decoding may stop early at an end-of-sequence token
    (``finish_reason`` ``stop``) and an honest server does for some prompts; the trial's requests do not send
    ``ignore_eos``. Only when most answers are shorter than :data:`SHORT_ANSWER_FRACTION` × ``maxOutputTokens`` do
    the figures measure prefill and HTTP rather than decoding: a pod answering at once, or prompts that ask for
    short answers."""
    if median_tokens is None or median_tokens >= SHORT_ANSWER_FRACTION * max_output_tokens:
        return None
    return (f"answers of {median_tokens:g} tokens median at concurrency {concurrency}, maxOutputTokens "
            f"{max_output_tokens}: not a measurement of decoding (a level's median answer must reach "
            f"{SHORT_ANSWER_FRACTION:g} × maxOutputTokens; use prompts asking for long answers, or a lower "
            "spec.workload.maxOutputTokens)")


def held_back(concurrency: int, waited_seconds: float, measured_seconds: float, rate: float) -> str | None:
    """Why a level of ``concurrency`` whose workers waited ``waited_seconds`` in all for the rate cap ``rate``
    (requests per second) during ``measured_seconds`` of windows did not run at its concurrency, or None (within
    :data:`HELD_BACK_LIMIT` of its stream-seconds)."""
    if measured_seconds <= 0 or waited_seconds <= HELD_BACK_LIMIT * concurrency * measured_seconds:
        return None
    share = min(1.0, waited_seconds / (concurrency * measured_seconds))
    return (f"the operator's cap of {rate:g} requests per second per trial (sglang-operator run "
            f"--trial-request-rate) kept concurrency {concurrency}'s streams idle {100 * share:.0f} % of the "
            "measured time: not a measurement at that concurrency (raise the cap, or "
            "spec.workload.maxOutputTokens)")
