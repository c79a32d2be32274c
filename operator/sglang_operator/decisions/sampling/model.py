"""The typed value a sampling interval produces: :class:`Sample` (no I/O, no clock of its own).

One sample covers one revision of one SGLangServer over one interval (``start`` → ``end``). Its ``kind`` says
whether the figures are usable: ``Measured`` (counters increased: real figures), ``Inconclusive`` (no data is
not a failure: idle, below the traffic floor, a pod set different from the revision's Ready pods, stale gauges)
or ``Error`` (a scrape or probe failed while the pods are Ready; ``reason`` says why). The rollback decision
(``decisions.rollback.step``) consumes it; the operator's ``/metrics`` and ``status`` show its figures.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from enum import StrEnum

from sglang_operator.api.rollback import Signal as Signal


class SampleKind(StrEnum):
    """What a sample is worth to the rollback decision."""

    MEASURED = "Measured"
    INCONCLUSIVE = "Inconclusive"
    ERROR = "Error"


@dataclass(frozen=True)
class Figures:
    """What one interval measured; ``None`` where the release or the interval has no value.

    Units: tok/s for speeds, seconds for latencies, a 0..1 fraction for rates and usage, counts for requests.
    """

    generation_tokens_per_second: float | None = None
    """Aggregate generation throughput, tok/s: increase of ``sglang:generation_tokens_total`` ÷ interval
    (counter resets handled as Prometheus' ``rate()``), summed over the revision's pods."""
    decode_tokens_per_second: float | None = None
    """Per-request decode speed, tok/s: the probe's single-stream speed (signal ``probe``) or
    1 / mean inter-token latency from ``sglang:inter_token_latency_seconds`` increases (signal ``traffic``).
    This, not the aggregate, is what the rollback compares: it does not move with load."""
    accept_length: float | None = None
    """Mean acceptance length (accepted drafts + 1 per verify step): generation-token increase ÷
    ``sglang:spec_verify_calls_total`` increase where the release has that counter, else the
    ``sglang:spec_accept_length`` gauge (mean over pods)."""
    accept_rate: float | None = None
    """Acceptance rate (``sglang:spec_accept_rate`` gauge; its formula differs between releases)."""
    running_requests: float | None = None
    """``sglang:num_running_reqs``, summed over pods (at the end of the interval)."""
    queued_requests: float | None = None
    """``sglang:num_queue_reqs``, summed over pods."""
    kv_cache_usage: float | None = None
    """``sglang:token_usage`` (KV-cache token pool usage, 0..1), max over pods."""
    kv_cache_usage_summed: float | None = None
    """``sglang:token_usage`` of each pod (its fullest data-parallel rank), summed over pods (0..pods): the KV cache
    the revision uses in replicas' worth, what autoscaling's ``kvCacheUsage`` divides by its target."""
    ttft_p50_seconds: float | None = None
    """Time to first token, median, from ``sglang:time_to_first_token_seconds`` bucket increases."""
    ttft_p95_seconds: float | None = None
    itl_p50_seconds: float | None = None
    """Inter-token latency, median, from ``sglang:inter_token_latency_seconds`` bucket increases."""
    itl_p95_seconds: float | None = None
    cache_hit_rate: float | None = None
    """``sglang:cache_hit_rate`` (prefix cache), mean over pods."""
    num_steps: float | None = None
    """``sglang:spec_num_steps`` where the release reports it."""
    num_draft_tokens: float | None = None
    """``sglang:spec_num_draft_tokens`` where the release reports it."""


@dataclass(frozen=True)
class PodView:
    """One pod of the sampled revision as the sampler saw it (multi-node: one per group, named by its leader pod,
    Ready when the whole group is; ``decisions.groups.pod_views``)."""

    name: str
    ready: bool
    restarts: int
    """Sum of its containers' ``restartCount`` (multi-node: of the pod reported for the group, a troubled worker's
    when the leader is Ready)."""
    uid: str | None = None
    """``metadata.uid`` (multi-node: the leader's); another uid under the same name is a recreated pod."""
    leader_restarts: int | None = None
    """Multi-node: the restarts of the group's leader pod alone (what ``maxRestartsBeforeReady`` counts; workers
    may restart while the leader loads). None: ``restarts`` (a single pod is its own leader)."""
    crash: str | None = None
    """The end of its last crash (multi-node: the leader's), from ``lastState.terminated`` or a ``terminated``
    state: ``container NAME exited with code N: <termination message tail>`` (``decisions.pods.crash_text``)."""
    waiting: str | None = None
    """Its container waits for a reason no wait fixes (multi-node: the leader's), the kubelet's reason and message:
    ``ImagePullBackOff: Back-off pulling image "…"`` (``decisions.pods.never_starts``); None otherwise."""

    @property
    def start_restarts(self) -> int:
        """The restarts that count towards ``maxRestartsBeforeReady``: :attr:`leader_restarts`, else
        :attr:`restarts`."""
        return self.restarts if self.leader_restarts is None else self.leader_restarts


@dataclass(frozen=True)
class Sample:
    """One interval of one revision of one SGLangServer.

    ``pods``: the pods the figures cover (names; Ready pods that answered). ``revision_pods``: every live pod of
    the revision with readiness and restart counts, so the decision can tell a crash under load (a restart or a
    pod leaving Ready) from a quiet interval. ``reason``: why a sample is Inconclusive or an Error (plain words).
    """

    kind: SampleKind
    revision: str
    start: dt.datetime
    end: dt.datetime
    figures: Figures = field(default_factory=Figures)
    pods: tuple[str, ...] = ()
    revision_pods: tuple[PodView, ...] = ()
    signal: Signal = Signal.PROBE
    reason: str = ""

    @property
    def interval_seconds(self) -> float:
        """Length of the interval, seconds."""
        return (self.end - self.start).total_seconds()
