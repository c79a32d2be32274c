"""The fast rollback policy and simulator settings shared by the rollback e2e tests, the demo and the rollback bench.

Production defaults stay in ``samples/`` (earliest rollback 120 + 3 × 30 = 210 s after all pods are Ready). The
fast variants in ``samples/local/`` add :data:`FAST_POLICY` (earliest rollback 5 + 3 × 5 = 20 s) and
:data:`SIM_ENV` (the simulator at real speed with a one-second model load); both are read from there, so the
tests, ``python -m e2e.demo --regress``, ``bench/rollback.py`` and a user following the README apply the same
objects.
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

LOCAL = ROOT / "samples" / "local"
"""The fast-policy variants of the samples, for the local cluster."""
_local_good: dict[str, Any] = yaml.safe_load((LOCAL / GOOD).read_text())
FAST_POLICY: dict[str, Any] = _local_good["spec"]["rollback"]
"""``spec.rollback`` for demos and tests (camelCase, as written in the object; from ``samples/local/``); unset
fields keep their defaults."""
INTERVAL: int = FAST_POLICY["intervalSeconds"]
"""``intervalSeconds`` of the fast policy, seconds."""
SIM_ENV: list[dict[str, str]] = _local_good["spec"]["env"]
"""``spec.env`` for the simulator (from ``samples/local/``): real speed (time scale 1), a one-second model load."""


def policy(overrides: dict[str, Any] | None = None) -> RollbackPolicy:
    """:data:`FAST_POLICY` with ``overrides`` as the typed model, defaults filled in. Raises
    ``pydantic.ValidationError`` (the CEL rules' messages) for a combination the API server would refuse."""
    return RollbackPolicy.model_validate({**FAST_POLICY, **(overrides or {})})


def earliest_rollback_seconds(p: RollbackPolicy) -> int:
    """Seconds from all of a revision's pods Ready to the earliest rollback: warmupSeconds + failureThreshold ×
    intervalSeconds (docs/rollback.md, "Verifying")."""
    return p.warmup_seconds + p.failure_threshold * p.interval_seconds


def sample(name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fast-policy sample ``samples/local/<name>`` as an object to apply (the simulator's :data:`SIM_ENV`,
    ``spec.rollback`` = :data:`FAST_POLICY`), its ``spec.rollback`` updated by ``overrides``."""
    obj: dict[str, Any] = yaml.safe_load((LOCAL / name).read_text())
    obj["spec"]["rollback"] = {**copy.deepcopy(FAST_POLICY), **(overrides or {})}
    return obj
