"""The simulator's run-time state shared by the HTTP handlers (stored as ``app[SIM_KEY]``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sglang_sim.engine import Engine
from sglang_sim.facts import Resolved, VersionFacts
from sglang_sim.faults import Faults
from sglang_sim.logfmt import SimLogger
from sglang_sim.memory import MemoryPlan
from sglang_sim.metrics import MetricsContext
from sglang_sim.profiles import ModelProfile


@dataclass
class SimState:
    """Everything a handler needs. ``status`` is ``"Starting"`` (warmup; health endpoints 503) or ``"Up"``."""

    facts: VersionFacts
    resolved: Resolved
    model: ModelProfile
    plan: MemoryPlan
    engine: Engine
    faults: Faults
    logger: SimLogger
    metrics_ctx: MetricsContext
    launch_command: str
    status: str = "Starting"
    started_wall: float = field(default_factory=time.time)
    startup_seconds: float = 0.0

    @property
    def args(self) -> dict[str, Any]:
        """The resolved server args (``/server_info`` top level)."""
        return self.resolved.server_args

    @property
    def served_model_name(self) -> str:
        return str(self.args.get("served_model_name") or self.args.get("model_path") or "default")

    @property
    def api_key(self) -> str | None:
        key = self.args.get("api_key")
        return str(key) if key else None


SIM_KEY: web.AppKey[SimState] = web.AppKey("sim", SimState)
