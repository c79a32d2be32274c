"""``spec.rollback``: the policy the rollback controller follows (defaults make the CRD stable now).

The controller measures each revision (decode throughput in tok/s and acceptance length, from SGLang's
Prometheus metrics ``sglang:gen_throughput`` / ``sglang:spec_accept_length``, or from its own probe requests)
and rolls back to the last good revision when the new one is worse than the good one by more than the
thresholds below, over ``windowSeconds`` with at least ``minSamples`` samples.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sglang_operator.api.base import ApiModel, CelRule


class ProbePolicy(ApiModel):
    """Synthetic load the operator sends to measure a revision when there is no traffic of its own."""

    enabled: bool = True
    """Send probe requests (a fixed prompt, greedy decoding) to measure throughput."""
    interval_seconds: Annotated[int, Field(ge=5, le=3600)] = 30
    """Seconds between two probe requests."""
    prompt_tokens: Annotated[int, Field(ge=1, le=32768)] = 512
    """Approximate prompt length in tokens (the published case measured on a 512-token coding prompt)."""
    max_tokens: Annotated[int, Field(ge=16, le=8192)] = 256
    """Tokens generated per probe request."""
    timeout_seconds: Annotated[int, Field(ge=1, le=600)] = 60
    """Timeout of one probe request, in seconds."""


class RollbackPolicy(ApiModel):
    """When to judge a new revision regressed and return to the last good one. Not acted on yet: this release
    records every revision in status.revisions (verdict Recorded) but neither judges nor rolls back; the
    policy is defined now so the CRD stays stable when automatic rollback lands."""

    enabled: bool = True
    """Roll back automatically. When false, a regression is only reported (Degraded condition, event)."""
    min_tokens_per_second_ratio: Annotated[float, Field(gt=0, le=1)] = 0.85
    """A revision is regressed when its decode throughput (tok/s) is below this fraction of the last good
    revision's (0.85 = more than 15 % slower)."""
    min_accept_length_ratio: Annotated[float, Field(gt=0, le=1)] = 0.85
    """A revision is regressed when its mean acceptance length is below this fraction of the last good
    revision's (speculative decoding only; compare lengths, not rates, across SGLang releases)."""
    warmup_seconds: Annotated[int, Field(ge=0, le=7200)] = 120
    """Seconds after a revision becomes Ready before samples count (CUDA graphs, caches)."""
    window_seconds: Annotated[int, Field(ge=30, le=86400)] = 300
    """Length of the measurement window, in seconds."""
    min_samples: Annotated[int, Field(ge=1, le=10000)] = 10
    """Samples needed in the window before a verdict."""
    cooldown_seconds: Annotated[int, Field(ge=0, le=86400)] = 600
    """Seconds after a rollback before another automatic rollback may happen."""
    max_rollbacks: Annotated[int, Field(ge=0, le=100)] = 3
    """Automatic rollbacks allowed per SGLangServer before the operator only reports (0 = unlimited)."""
    history_limit: Annotated[int, Field(ge=1, le=50)] = 10
    """Revisions kept in ``status.revisions``."""
    probe: ProbePolicy = Field(default_factory=ProbePolicy, json_schema_extra={"default": {}})
    """Probe requests used to measure a revision."""

    cel_rules = (
        CelRule(
            "!has(self.windowSeconds) || !has(self.probe) || !has(self.probe.intervalSeconds) || "
            "(has(self.probe.enabled) && !self.probe.enabled) || self.windowSeconds >= 2 * self.probe.intervalSeconds",
            "spec.rollback.windowSeconds must cover at least two probe intervals",
            lambda m: not m.probe.enabled or m.window_seconds >= 2 * m.probe.interval_seconds,
            ".windowSeconds",
        ),
    )
