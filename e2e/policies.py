"""The fast rollback policy and simulator settings shared by the rollback e2e tests, the demo and the rollback bench.

Production defaults stay in ``samples/`` (earliest rollback 120 + 3 × 30 = 210 s after all pods are Ready); the
tests, ``python -m e2e.demo --regress`` and ``bench/rollback.py`` patch in :data:`FAST_POLICY` (earliest rollback
5 + 3 × 5 = 20 s) and run the simulator at real speed (time scale 1) with a one-second model load.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from sglang_operator.api.rollback import RollbackPolicy

ROOT = Path(__file__).resolve().parents[1]
GOOD, BAD = "qwen3.6-27b-known-good.yaml", "qwen3.6-27b-regressed.yaml"
"""The published known-good and regressed samples (``samples/``)."""

INTERVAL = 5
"""``intervalSeconds`` of the fast policy, seconds."""
FAST_POLICY: dict[str, Any] = {
    "warmupSeconds": 5, "intervalSeconds": INTERVAL, "minSamples": 3, "verifySeconds": 15, "failureThreshold": 3,
    "errorThreshold": 4, "progressDeadlineSeconds": 120, "probe": {"maxTokens": 64, "timeoutSeconds": 4},
}
"""``spec.rollback`` for demos and tests (camelCase, as written in the object); unset fields keep their defaults."""
SIM_ENV: list[dict[str, str]] = [{"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"}]
"""``spec.env`` for the simulator: real speed (time scale 1), a one-second model load."""


def policy(overrides: dict[str, Any] | None = None) -> RollbackPolicy:
    """:data:`FAST_POLICY` with ``overrides`` as the typed model, defaults filled in. Raises
    ``pydantic.ValidationError`` (the CEL rules' messages) for a combination the API server would refuse."""
    return RollbackPolicy.model_validate({**FAST_POLICY, **(overrides or {})})


def earliest_rollback_seconds(p: RollbackPolicy) -> int:
    """Seconds from all of a revision's pods Ready to the earliest rollback: warmupSeconds + failureThreshold ×
    intervalSeconds (docs/rollback.md, "Verifying")."""
    return p.warmup_seconds + p.failure_threshold * p.interval_seconds


def sample(name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The sample ``samples/<name>`` as an object to apply, with the simulator's :data:`SIM_ENV` and
    ``spec.rollback`` = :data:`FAST_POLICY` updated by ``overrides``."""
    obj: dict[str, Any] = yaml.safe_load((ROOT / "samples" / name).read_text())
    obj["spec"].setdefault("env", []).extend(copy.deepcopy(SIM_ENV))
    obj["spec"]["rollback"] = {**copy.deepcopy(FAST_POLICY), **(overrides or {})}
    return obj
