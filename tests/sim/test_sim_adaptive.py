"""The simulator's adaptive speculative decoding (``--speculative-adaptive``, issue 17 item 7) switches the number of
steps by its own measured acceptance as SGLang's controller does (``adaptive_spec_params.py``): up to 7 steps where
nearly every draft is accepted (α 0.95), staying at 3 for the published model (α 0.75: 1.7 accepted drafts of 3, below
the 2.5 that would rise), down to 1 where drafts are rejected; draft tokens stay steps + 1;
``sglang:spec_num_steps`` shows the tier it runs while ``/server_info`` keeps the start-up value; the decode log
carries SGLang's line. Per release: one slot before 0.5.13, per batch size from 0.5.13; off where SGLang turns it
off (0.5.11 with the overlap scheduler)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sglang_sim.adaptive import AdaptiveTiers, Slot, adaptive_tiers
from sglang_sim.engine import SimRequest
from sglang_sim.facts import resolve, version_facts
from sglang_sim.faults import Faults
from sglang_sim.launch import Built, build
from sglang_sim.logfmt import SimLogger
from sglang_sim.memory import StartupError
from sglang_sim.metrics import render
from simproc import GPU, KNOWN_GOOD, to_0523

ADAPTIVE = [*to_0523(KNOWN_GOOD), "--speculative-adaptive"]


def _built(argv: list[str], version: str = "0.5.23", alpha: float | None = None) -> tuple[Built, io.StringIO]:
    facts = version_facts(version)
    out = io.StringIO()
    faults = Faults()
    faults.accept_alpha = alpha
    return build(facts, resolve(argv, facts, {}), {"gpu": GPU, "seed": 1, "jitter": 0.0}, {}, SimLogger(out),
                 faults), out


def _gauge(b: Built, name: str) -> float:
    fams = {f.name: f for f in text_string_to_metric_families(render(b.engine.stats, b.metrics_ctx))}
    return float(fams[name].samples[0].value)


def _decode(b: Built, steps: int) -> None:
    req = SimRequest("a", 64, 100_000, True)
    b.engine.submit(req)
    for _ in range(steps):
        b.engine.step()


def test_the_published_model_stays_at_three_steps() -> None:
    b, log = _built(ADAPTIVE)
    _decode(b, 200)
    assert b.engine.shape is not None and b.engine.shape.num_steps == 3
    assert "Adaptive spec params updated" not in log.getvalue()


def test_good_acceptance_climbs_to_the_top_tier() -> None:
    b, log = _built(ADAPTIVE, alpha=0.95)
    assert b.engine.shape is not None and b.engine.shape.num_steps == 3
    _decode(b, 200)
    assert b.engine.shape is not None and (b.engine.shape.num_steps, b.engine.shape.num_draft_tokens) == (7, 8)
    assert "Adaptive spec params updated: steps 3 -> 7" in log.getvalue()
    assert _gauge(b, "sglang:spec_num_steps") == 7 and _gauge(b, "sglang:spec_num_draft_tokens") == 8
    assert b.metrics_ctx.spec_num_steps == 3  # the start-up value (/server_info's speculative_num_steps)


def test_poor_acceptance_drops_to_one_step() -> None:
    b, log = _built(ADAPTIVE, alpha=0.2)
    _decode(b, 200)
    assert b.engine.shape is not None and (b.engine.shape.num_steps, b.engine.shape.num_draft_tokens) == (1, 2)
    assert "Adaptive spec params updated: steps 3 -> 1" in log.getvalue()
    assert _gauge(b, "sglang:spec_num_steps") == 1


def test_without_the_flag_the_shape_stays() -> None:
    b, _ = _built(to_0523(KNOWN_GOOD))
    assert b.engine.cfg.adaptive is None
    _decode(b, 200)
    assert b.engine.shape is not None and b.engine.shape.num_steps == 3


def test_0_5_11_runs_static_with_the_overlap_scheduler() -> None:
    """SGLang 0.5.11 turns adaptive mode off unless the spec v1 worker runs (SGLANG_ENABLE_SPEC_V2=0)."""
    facts = version_facts("0.5.11")
    argv = [*KNOWN_GOOD, "--speculative-adaptive"]
    assert resolve(argv, facts, {}).server_args["speculative_adaptive"] is False
    assert resolve(argv, facts, {"SGLANG_ENABLE_SPEC_V2": "0"}).server_args["speculative_adaptive"] is True


def test_the_slots_follow_the_release() -> None:
    old = adaptive_tiers({"speculative_adaptive": True, "speculative_num_steps": 2}, "0.5.12")
    assert old is not None and list(old.slots) == [1] and old.slots[1].candidates == [1, 2, 3, 7]  # start-up joins
    v11 = adaptive_tiers({"speculative_adaptive": True, "speculative_num_steps": 2}, "0.5.11")
    assert v11 is not None and v11.slots[1].current == 3  # snapped to the closest candidate, the larger on a tie
    new = adaptive_tiers({"speculative_adaptive": True, "speculative_num_steps": 3}, "0.5.13")
    assert new is not None and sorted(new.slots) == [1, 8, 32]
    assert (new.steps_for(1), new.steps_for(8), new.steps_for(40)) == (3, 3, 1)
    v17 = adaptive_tiers({"speculative_adaptive": True, "speculative_num_steps": 3}, "0.5.17")
    assert v17 is not None and v17.steps_for(64) == 0  # step 0: no speculation at large batches
    assert adaptive_tiers({"speculative_num_steps": 3}, "0.5.23") is None


def test_a_config_file_is_read_like_sglang_reads_it(tmp_path: Path) -> None:
    cfg = tmp_path / "adaptive.json"
    cfg.write_text(json.dumps({"warmup_batches": 2, "1": {"candidate_steps": [2, 4]}}))
    tiers = adaptive_tiers({"speculative_adaptive": True, "speculative_num_steps": 4,
                            "speculative_adaptive_config": str(cfg)}, "0.5.23")
    assert tiers is not None and tiers.slots[1].candidates == [2, 4] and tiers.slots[1].warmup_batches == 2
    with pytest.raises(StartupError, match="FileNotFoundError"):
        _built([*ADAPTIVE, "--speculative-adaptive-config", str(tmp_path / "missing.json")])


def test_the_slot_moves_as_sglang_s_ema_says() -> None:
    """``AdaptiveStepSlot``: no change during warm-up, then every update_interval batches."""
    slot = Slot([1, 3, 7], 3)
    tiers = AdaptiveTiers({1: slot})
    assert [tiers.on_verify([6], 1) for _ in range(10)] == [None] * 10  # warm-up batches
    changes = [tiers.on_verify([6], 1) for _ in range(5)]
    assert changes[:4] == [None] * 4 and changes[4] == 7
