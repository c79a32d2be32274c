"""What the sampler reads from SGLang's ``/metrics``: one role per figure, mapped to the family name the
release's metric table declares (:func:`sglang_operator.sglang.metrics.load_metrics`).

:data:`ROLE_NAMES` is the only place on the operator side that spells SGLang metric names; a role whose family is
missing from a release's table (``sglang:spec_verify_calls_total`` is absent from 0.5.10's) is simply absent from
that release's :class:`MetricRoles`, and the computation falls back (accept length from the gauge).
Names and types: ``python/sglang/srt/observability/metrics_collector.py`` (0.5.10 and 0.5.23).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cache

from sglang_operator.sglang.metrics import load_metrics
from sglang_operator.sglang.versions import SGLangVersion


class Role(StrEnum):
    """A figure's source in SGLang's metrics."""

    GENERATION_TOKENS = "generation_tokens"
    SPEC_VERIFY_CALLS = "spec_verify_calls"
    ACCEPT_LENGTH = "accept_length"
    ACCEPT_RATE = "accept_rate"
    RUNNING_REQUESTS = "running_requests"
    QUEUED_REQUESTS = "queued_requests"
    TOKEN_USAGE = "token_usage"
    CACHE_HIT_RATE = "cache_hit_rate"
    NUM_STEPS = "num_steps"
    NUM_DRAFT_TOKENS = "num_draft_tokens"
    TIME_TO_FIRST_TOKEN = "time_to_first_token"
    INTER_TOKEN_LATENCY = "inter_token_latency"
    E2E_REQUEST_LATENCY = "e2e_request_latency"


ROLE_NAMES: dict[Role, tuple[str, str]] = {
    Role.GENERATION_TOKENS: ("sglang:generation_tokens_total", "counter"),
    Role.SPEC_VERIFY_CALLS: ("sglang:spec_verify_calls_total", "counter"),
    Role.ACCEPT_LENGTH: ("sglang:spec_accept_length", "gauge"),
    Role.ACCEPT_RATE: ("sglang:spec_accept_rate", "gauge"),
    Role.RUNNING_REQUESTS: ("sglang:num_running_reqs", "gauge"),
    Role.QUEUED_REQUESTS: ("sglang:num_queue_reqs", "gauge"),
    Role.TOKEN_USAGE: ("sglang:token_usage", "gauge"),
    Role.CACHE_HIT_RATE: ("sglang:cache_hit_rate", "gauge"),
    Role.NUM_STEPS: ("sglang:spec_num_steps", "gauge"),
    Role.NUM_DRAFT_TOKENS: ("sglang:spec_num_draft_tokens", "gauge"),
    Role.TIME_TO_FIRST_TOKEN: ("sglang:time_to_first_token_seconds", "histogram"),
    Role.INTER_TOKEN_LATENCY: ("sglang:inter_token_latency_seconds", "histogram"),
    Role.E2E_REQUEST_LATENCY: ("sglang:e2e_request_latency_seconds", "histogram"),
}
"""Role → (declared family name in the metric table, expected type)."""
DRAIN_ROLES = frozenset({Role.RUNNING_REQUESTS, Role.TIME_TO_FIRST_TOKEN, Role.E2E_REQUEST_LATENCY})
"""What the drain before a Recreate reads (:func:`sglang_operator.decisions.sampling.compute.requests_in_flight`);
the sampler's roles (:data:`SAMPLER_ROLES`) leave out the end-to-end latency it never uses."""
SAMPLER_ROLES = frozenset(ROLE_NAMES) - {Role.E2E_REQUEST_LATENCY}

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


class MetricTableError(ValueError):
    """A release's metric table declares a role's family with another type than the sampler expects."""


@dataclass(frozen=True)
class MetricRoles:
    """The roles one SGLang release can fill, and the exposition sample names that carry them.

    ``names``: role → declared family name (counters with ``_total``, as exposed); ``kinds``: role → counter,
    gauge or histogram; ``samples``: exposition sample name (bytes, as on the wire) → (role, suffix), the suffix
    being ``""`` for counters and gauges and ``_bucket``/``_sum``/``_count`` for histograms.
    """

    names: dict[Role, str]
    kinds: dict[Role, str]
    samples: dict[bytes, tuple[Role, str]]

    @property
    def prefixes(self) -> tuple[bytes, ...]:
        """Every wanted sample name, for a cheap ``bytes.startswith`` pre-filter of exposition lines."""
        return tuple(self.samples)

    def has(self, role: Role) -> bool:
        """Whether the release defines ``role``'s family."""
        return role in self.names


def build_roles(declared: dict[str, str], wanted: frozenset[Role] = SAMPLER_ROLES) -> MetricRoles:
    """:class:`MetricRoles` of the ``wanted`` roles from a table's ``{declared name: type}``; raises
    :class:`MetricTableError` when a role's family has an unexpected type."""
    names: dict[Role, str] = {}
    kinds: dict[Role, str] = {}
    samples: dict[bytes, tuple[Role, str]] = {}
    for role, (name, kind) in ROLE_NAMES.items():
        if name not in declared or role not in wanted:
            continue
        if declared[name] != kind:
            raise MetricTableError(f"{name} is a {declared[name]} in the metric table; the sampler reads a {kind}")
        names[role], kinds[role] = name, kind
        if kind == "histogram":
            for suffix in HISTOGRAM_SUFFIXES:
                samples[(name + suffix).encode()] = (role, suffix)
        else:
            samples[name.encode()] = (role, "")
    return MetricRoles(names, kinds, samples)


@cache
def roles_for(version: SGLangVersion, wanted: frozenset[Role] = SAMPLER_ROLES) -> MetricRoles:
    """The ``wanted`` roles (default: the sampler's) of ``version``'s nearest supported metric table (raises
    ``SGLangVersionError`` if unsupported)."""
    return build_roles({m.name: m.type for m in load_metrics(version).values()}, wanted)
