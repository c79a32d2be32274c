"""The fast-policy samples in ``samples/local/`` are the published samples plus the fast rollback policy and the
simulator's env, nothing else, and both carry the same policy; each is a valid SGLangServer."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator.api.rollback import RollbackPolicy
from sglang_operator.api.server import SGLangServer

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["qwen3.6-27b-known-good.yaml", "qwen3.6-27b-regressed.yaml"]


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


@pytest.mark.parametrize("name", NAMES)
def test_the_local_sample_is_the_published_one_plus_policy_and_env(name: str) -> None:
    local, published = load(ROOT / "samples" / "local" / name), load(ROOT / "samples" / name)
    stripped = copy.deepcopy(local)
    rollback, env = stripped["spec"].pop("rollback"), stripped["spec"].pop("env")
    assert stripped == published
    assert env == [{"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"}]
    assert rollback == load(ROOT / "samples" / "local" / NAMES[0])["spec"]["rollback"]
    SGLangServer.model_validate(local)


def test_the_fast_policy_promotes_in_seconds_not_minutes() -> None:
    fast = RollbackPolicy.model_validate(load(ROOT / "samples" / "local" / NAMES[0])["spec"]["rollback"])
    default = RollbackPolicy()
    assert fast.warmup_seconds + fast.verify_seconds <= 30 < default.warmup_seconds + default.verify_seconds
    assert fast.interval_seconds * fast.min_samples <= 15


def test_the_autoscaling_sample_is_the_local_known_good_one_plus_autoscaling() -> None:
    """The README's autoscaling example: nothing but ``spec.autoscaling`` added, no ``spec.replicas`` (re-applying it
    keeps the autoscaler's count), Prometheus where ``python -m e2e.cluster up --keda`` starts it."""
    local = ROOT / "samples" / "local"
    auto = load(local / "qwen3.6-27b-autoscaling.yaml")
    stripped = copy.deepcopy(auto)
    autoscaling = stripped["spec"].pop("autoscaling")
    assert stripped == load(local / NAMES[0])
    assert "replicas" not in auto["spec"]
    assert autoscaling["prometheus"] == {"address": "http://127.0.0.1:9090"}  # e2e/cluster/autoscale.py's port
    server = SGLangServer.model_validate(auto)
    assert server.spec.autoscaling is not None and server.spec.autoscaling.max_replicas == 3
