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
