"""SGLang's adaptive speculative decoding, as the simulator runs it (``--speculative-adaptive``, 0.5.11 on).

A port of ``python/sglang/srt/speculative/adaptive_spec_params.py`` (read in the 0.5.11, 0.5.12, 0.5.13 and 0.5.17
wheels): per batch-size slot, an EMA of the accepted drafts per request (α ``ema_alpha`` 0.2) after
``warmup_batches`` (10) verify steps, re-evaluated every ``update_interval`` (5): the steps drop to a lower candidate
while the EMA is at most ``candidate - 0.5 + down_hysteresis`` and rise while it exceeds
``current - 0.5 + up_hysteresis``; draft tokens are always steps + 1 (topk 1). 0.5.11–0.5.12 have one slot (candidate
steps ``[1, 3, 7]`` by default, the start-up steps snapped to the closest candidate in 0.5.11, added to them in
0.5.12); 0.5.13 on route the batch size to the slot of the largest batch-size key at most it
(``DEFAULT_ADAPTIVE_CONFIG``: 0.5.13 ``1: [1, 3, 7], 8: [1, 3], 32: [1]``; 0.5.17 adds step 0, no speculation, at 8
and more). The simulator captures no CUDA graphs, so no padding to a captured batch size.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.sglang.rule_eras import AdaptiveRule, rules_for
from sglang_operator.sglang.versions import parse_version

DEFAULTS_0_5_13: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25},
    "8": {"candidate_steps": [1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "32": {"candidate_steps": [1], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
}
DEFAULTS_0_5_17: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
}


@dataclass
class Slot:
    """``AdaptiveStepSlot`` (0.5.13 on; ``AdaptiveSpeculativeParams`` itself before): one batch-size slot."""

    candidates: list[int]
    current: int
    ema_alpha: float = 0.2
    update_interval: int = 5
    warmup_batches: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0
    ema: float = 0.0
    batches: int = 0

    def __post_init__(self) -> None:
        self.ema = float(self.current - 1)

    def update(self, accepted_drafts: list[int]) -> bool:
        """Feed one verify step's accepted drafts per request; True when the steps changed."""
        if not accepted_drafts:
            return False
        self.ema = (1 - self.ema_alpha) * self.ema + self.ema_alpha * sum(accepted_drafts) / len(accepted_drafts)
        self.batches += 1
        if self.batches <= self.warmup_batches or (self.batches - self.warmup_batches) % self.update_interval:
            return False
        idx = self.candidates.index(self.current)
        while idx > 0 and self.ema <= self.candidates[idx - 1] - 0.5 + self.down_hysteresis:
            idx -= 1
        while idx < len(self.candidates) - 1 and self.ema > self.candidates[idx] - 0.5 + self.up_hysteresis:
            idx += 1
        old, self.current = self.current, self.candidates[idx]
        return self.current != old


@dataclass
class AdaptiveTiers:
    """The adaptive controller of one simulated server: slots by batch-size key (one slot, key 1, before 0.5.13)."""

    slots: dict[int, Slot] = field(default_factory=dict)

    def slot(self, batch_size: int) -> Slot:
        keys = sorted(self.slots)
        return self.slots[max([k for k in keys if k <= batch_size] or keys[:1])]

    def steps_for(self, batch_size: int) -> int:
        """The steps the next verify step of ``batch_size`` requests runs (``activate_step_by_batch``)."""
        return self.slot(batch_size).current

    def on_verify(self, accepted_drafts: list[int], batch_size: int) -> int | None:
        """Feed a verify step's results (``on_verify_complete``): the new steps when its slot switched, else None."""
        s = self.slot(batch_size)
        return s.current if s.update(accepted_drafts) else None


def _slot(initial: int, cfg: Mapping[str, Any], mode: AdaptiveRule) -> Slot:
    candidates = sorted(set(int(x) for x in cfg.get("candidate_steps", [1, 3, 7])))
    if mode is AdaptiveRule.V1_ONLY:
        current = min(candidates, key=lambda s: (abs(s - initial), -s))
    elif mode is AdaptiveRule.ANY_WORKER:
        candidates = sorted({*candidates, initial})
        current = initial
    else:
        current = initial if initial in candidates else candidates[len(candidates) // 2]
    knobs = {k: cfg[k] for k in ("ema_alpha", "update_interval", "warmup_batches", "down_hysteresis", "up_hysteresis")
             if k in cfg}
    return Slot(candidates, current, **knobs)


def adaptive_tiers(args: Mapping[str, Any], version: str) -> AdaptiveTiers | None:
    """The controller for resolved server ``args`` of SGLang ``version``; None unless ``speculative_adaptive`` is on
    (SGLang's resolution already turned it off where unsupported). A ``speculative_adaptive_config`` file is read
    like SGLang reads it (``json.load``); an unreadable one raises ``OSError`` / ``ValueError`` as SGLang's start-up
    does."""
    if not args.get("speculative_adaptive"):
        return None
    mode = rules_for(parse_version(version)).adaptive
    if mode is AdaptiveRule.NONE:
        return None
    initial = int(args.get("speculative_num_steps") or 3)
    path = args.get("speculative_adaptive_config")
    cfg: dict[str, Any]
    if path:
        with open(str(path)) as f:
            cfg = json.load(f)
    elif mode is AdaptiveRule.PER_BATCH:
        cfg = DEFAULTS_0_5_17 if parse_version(version) >= parse_version("0.5.17") else DEFAULTS_0_5_13
    else:
        cfg = {}
    if mode is not AdaptiveRule.PER_BATCH:
        return AdaptiveTiers({1: _slot(initial, cfg, mode)})
    shared = {k: v for k, v in cfg.items() if not k.isdigit()}
    return AdaptiveTiers({int(k): _slot(initial, {**shared, **v}, mode) for k, v in cfg.items() if k.isdigit()})
