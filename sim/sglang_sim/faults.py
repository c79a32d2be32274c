"""Fault injection for tests: set at start-up by ``--sim-fault-*`` flags / ``SGLANG_SIM_FAULT_*`` env, and at
run time by ``POST /sim/admin/faults`` (JSON object with any of the fields below; ``GET`` returns them).

The hostile modes (``long_label``, ``many_series``, ``endless_line``, ``tiny_chunks``) write their bodies in blocks
made on the fly (:data:`BLOCK_BYTES` at most held per request), each write waiting for the client to drain the
previous one, and stop when the client goes away: the simulator's memory and CPU stay bounded whatever the client
reads (issue 16's hostile pods, ``e2e/tests/test_hostile.py``, ``bench/hostile.py``).

Fields:
- ``accept_alpha`` (0..1 or null): per-position acceptance override; e.g. 0.05 collapses accept length to ≈1.05
- ``throughput_drop_pct`` (0..99): decode steps take 1 / (1 - pct/100) as long
- ``crash_after_s`` (seconds of wall time after the fault is set, or null): the process exits with code 1
  (after logging a scheduler exception like SGLang's ``Scheduler hit an exception``)
- ``metrics_mode``: ``ok`` | ``hang`` (never answers) | ``slow`` (answers after ``metrics_delay_s``) |
  ``garbage`` (not Prometheus text) | ``huge`` (``metrics_huge_mb`` MB of valid series) | ``long_label`` (the
  real body, then one more ``sglang:num_running_reqs`` sample whose label ``evil`` is ``metrics_label_mb`` MiB long)
  | ``many_series`` (the real body, then ``metrics_series`` more series of ``sglang:num_running_reqs``)
- ``probe_mode`` (the streamed answers of ``/v1/chat/completions`` and ``/v1/completions``, what the operator's probe
  calls; the request never reaches the engine): ``ok`` | ``endless_line`` (HTTP 200, then one ``data:`` line of
  ``probe_line_mb`` MiB that ends only after that) | ``tiny_chunks`` (``probe_chunks`` valid chunks of one
  character each, then the usage chunk and ``[DONE]``) | ``instant`` (HTTP 200 at once: one content chunk of one
  token, the usage chunk with ``completion_tokens`` 1 and ``[DONE]``, no engine time; counted in
  ``sglang:num_requests_total`` as a finished request, so a client can tell the rate it was sent: the trial pod
  answering at once of issue 42, whose trial must fail as an invalid measurement, ``bench/hostile.py fast-trial``)
- ``server_info_string_mb`` (MiB or null): ``/server_info`` reports ``speculative_algorithm`` as a string of
  that size (``NEXTN``, then ``x`` repeated; the operator puts it in ``status.effective.algorithm``)
- ``http_500_rate`` (0..1): fraction of API requests (all but ``/sim/admin/*``) answered with HTTP 500
- ``ready_flap_period_s`` (seconds or null): health/readiness endpoints alternate 200 / 503 every period
"""

from __future__ import annotations

import os
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MetricsMode = Literal["ok", "hang", "slow", "garbage", "huge", "long_label", "many_series"]
ProbeMode = Literal["ok", "endless_line", "tiny_chunks", "instant"]
BLOCK_BYTES = 64 * 1024
"""Bytes of one write of a hostile body (the most a hostile mode holds per request)."""


class Faults(BaseModel):
    """The active faults (mutable; validated on assignment)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    accept_alpha: float | None = Field(default=None, ge=0.0, lt=1.0)
    throughput_drop_pct: float = Field(default=0.0, ge=0.0, lt=100.0)
    crash_after_s: float | None = Field(default=None, ge=0.0)
    metrics_mode: MetricsMode = "ok"
    metrics_delay_s: float = Field(default=5.0, ge=0.0)
    metrics_huge_mb: float = Field(default=20.0, gt=0.0)
    metrics_label_mb: float = Field(default=7.0, gt=0.0, le=1024.0)
    metrics_series: int = Field(default=100_000, ge=1, le=100_000_000)
    probe_mode: ProbeMode = "ok"
    probe_line_mb: float = Field(default=1024.0, gt=0.0, le=1024.0 * 1024)
    probe_chunks: int = Field(default=5_000_000, ge=1, le=1_000_000_000)
    server_info_string_mb: float | None = Field(default=None, gt=0.0, le=64.0)
    http_500_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    ready_flap_period_s: float | None = Field(default=None, gt=0.0)
    crash_at_wall: float | None = None
    flap_epoch_wall: float = Field(default_factory=time.monotonic)

    def slowdown(self) -> float:
        """Multiplier (≥ 1) on the decode step time."""
        return 1.0 / (1.0 - self.throughput_drop_pct / 100.0)

    def ready_now(self, now: float | None = None) -> bool:
        """False during the "down" half of a readiness flap."""
        if self.ready_flap_period_s is None:
            return True
        t = (time.monotonic() if now is None else now) - self.flap_epoch_wall
        return int(t // self.ready_flap_period_s) % 2 == 0

    def update(self, changes: dict[str, Any]) -> None:
        """Apply a partial update (admin endpoint); raises ``pydantic.ValidationError`` or ``KeyError``."""
        for key, value in changes.items():
            if key not in type(self).model_fields or key in ("crash_at_wall", "flap_epoch_wall"):
                raise KeyError(key)
            setattr(self, key, value)
        if "crash_after_s" in changes:
            self.crash_at_wall = None if self.crash_after_s is None else time.monotonic() + self.crash_after_s
        if "ready_flap_period_s" in changes:
            self.flap_epoch_wall = time.monotonic()

    def public(self) -> dict[str, Any]:
        """The fields a client may set."""
        return self.model_dump(exclude={"crash_at_wall", "flap_epoch_wall"})


ENV_PREFIX = "SGLANG_SIM_FAULT_"


def faults_from(options: dict[str, Any], env: dict[str, str] | None = None) -> Faults:
    """Build :class:`Faults` from CLI options (field names) overriding ``SGLANG_SIM_FAULT_<FIELD>`` env."""
    env = dict(os.environ) if env is None else env
    merged: dict[str, Any] = {}
    for name in Faults.model_fields:
        if name in ("crash_at_wall", "flap_epoch_wall"):
            continue
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            merged[name] = raw
        if options.get(name) is not None:
            merged[name] = options[name]
    faults = Faults()
    faults.update(merged)
    return faults
