"""The neighbour matrix: every combination of the axes below, each taken through the whole path a server goes,
over the pure decisions and the fake API in seconds (no cluster, no real sleep).

Why: each feature was proven on the case its author built and broke on the one beside it (a tuning of a Canary
server that never ran, a 4-replica server whose ledger lost its accept length, the capacity of an InPlace tuning of
N replicas N× too high). Here every combination either WORKS or is REFUSED WITH A MESSAGE; none loops, none loses a
figure.

What one combination goes through (``matrix_checks``; the world's physics in ``matrix_world``, the loop in
``matrix_loop``):

1. admission: ``api.server.parse`` (the schema and the CRD's CEL rules, their Python side), the tenant boundary
   (``builders.admission.check``) and the SGLangTuning's own rules;
2. render: ``builders.render`` (Deployment or LeaderWorkerSet, replicas, rollout) and the KEDA ScaledObject;
3. the server's loop (``handlers.reconcile``, then the observer's ticks with the sampler reading fake SGLang pods
   that only the operator's probe loads) until its first verdict: the ledger entry ``status.revisions[]`` with
   ``tokensPerSecond``, ``acceptLength``, ``acceptRate``, ``status.baseline`` and the status' figures, each the pods'
   own; with KEDA the ScaledObject and ``status.autoscaling``; and after every tick from there on, the promoted
   revision's ledger entry and baseline keep every figure and the status never shows another value than the pods';
4. where a tuning runs: every trial's spec (``trials.trial_spec``, ``lifecycle.render_trial``), the tuning run to
   its end beside the server's loop (its trials Completed, InPlace on every pod, the stable revision back, no
   figure lost), the capacity its figures give (``decisions.capacity`` over ``known_best``; with KEDA
   ``status.autoscaling.capacity`` and the ScaledObject's threshold);
5. a wrong or missing figure is noted and the stages go on: the combination fails at its end with every finding,
   each with the tick it was seen at;
6. a combination of :data:`REFUSED` instead asserts its refusal: by the API (stage ``server``: nothing else runs)
   or by the tuning before any trial (stage ``tuning``: the server works as above, the tuning ends Failed with the
   message, nothing started, nothing held).

Adding an axis (a router, prefill/decode): append one :class:`Axis` to :data:`AXES` whose values carry the spec
they merge into the server (``spec``) and the facts the stages read (``facts``); give the combinations the API or
the tuning refuses an explicit line in :data:`REFUSED` (written from the rule's text, never by running the code);
teach the stages in ``matrix_checks`` what the new facts change. The ids grow by one part; nothing else moves.
Run it alone: ``python -m pytest -q -p no:randomly tests/matrix``.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matrix_checks as checks
import pytest
import yaml
from matrix_loop import NAME, PROM, World
from matrix_world import NS

SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "local" / "qwen3.6-27b-known-good.yaml").read_text())
"""The server every combination starts from: the published known-good configuration with the fast rollback policy of
the local cluster, the demo and the e2e tests (a 64-token probe every 5 s, promoted after 3 samples over 15 s)."""
KEDA = {"maxReplicas": 4, "target": 4, "metric": "measuredCapacity",
        "slo": {"minTokensPerSecondPerRequest": checks.SLO}, "prometheus": {"address": PROM}}
"""``spec.autoscaling`` of the KEDA value: a ScaledObject on Prometheus, the measured capacity as its target."""
KEDA2 = {**KEDA, "minReplicas": 2}
"""The KEDA value with ``minReplicas: 2``: what a Canary server needs (a stable replica beside the canary), so Canary
with KEDA is a working case, not only a refused one."""


@dataclass(frozen=True)
class Value:
    """One value of an axis: ``name`` (its part of the id), ``spec`` merged into the server's spec (one level deep:
    a key's dict is updated, anything else replaced) and ``facts`` the stages read."""

    name: str
    spec: Mapping[str, Any] = field(default_factory=dict)
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Axis:
    name: str
    values: tuple[Value, ...]


AXES: tuple[Axis, ...] = (
    Axis("strategy", tuple(Value(t, {"strategy": {"type": t}}, {"strategy": t})
                           for t in ("Recreate", "RollingUpdate", "Canary"))),
    Axis("replicas", tuple(Value(f"{n}rep", {"replicas": n}, {"replicas": n}) for n in (1, 4))),
    Axis("tuning", (Value("noTuning", facts={"tuning": None}), Value("Shadow", facts={"tuning": "Shadow"}),
                    Value("InPlace", facts={"tuning": "InPlace"}))),
    Axis("autoscaling", (Value("noScaling", facts={"keda": False}),
                         Value("KEDA", {"autoscaling": KEDA}, {"keda": True}),
                         Value("KEDA2", {"autoscaling": KEDA2}, {"keda": True}))),
    Axis("nodes", (Value("1node", {"parallelism": {"nodes": 1}}, {"nodes": 1}),
                   Value("2nodes", {"parallelism": {"nodes": 2}}, {"nodes": 2}))),
)
"""Every axis and its values; the matrix is their product."""

CANARY_REPLICAS = "spec.strategy.type is Canary but spec.replicas is 1: a canary runs beside stable replicas"
CANARY_KEDA = "spec.autoscaling.minReplicas is 1 but spec.strategy.type is Canary"
SHADOW_MULTINODE = "a Shadow trial of a multi-node server (spec.parallelism.nodes > 1) is not supported"


@dataclass(frozen=True)
class Refusal:
    """Where a combination is refused (``server``: the API; ``tuning``: the tuning, before any trial) and the
    fragments its message holds."""

    stage: str
    fragments: tuple[str, ...]


def _server(*fragments: str) -> Refusal:
    return Refusal("server", fragments)


REFUSED: dict[str, Refusal] = {
    # Canary needs a stable replica beside the canary: replicas ≥ 2 (CEL canary-replicas) ...
    "Canary-1rep-noTuning-noScaling-1node": _server(CANARY_REPLICAS),
    "Canary-1rep-noTuning-noScaling-2nodes": _server(CANARY_REPLICAS),
    "Canary-1rep-Shadow-noScaling-1node": _server(CANARY_REPLICAS),
    "Canary-1rep-Shadow-noScaling-2nodes": _server(CANARY_REPLICAS),
    "Canary-1rep-InPlace-noScaling-1node": _server(CANARY_REPLICAS),
    "Canary-1rep-InPlace-noScaling-2nodes": _server(CANARY_REPLICAS),
    # ... and with KEDA minReplicas ≥ 2 (CEL autoscaling-canary-min-replicas; KEDA's value leaves it at 1)
    "Canary-1rep-noTuning-KEDA-1node": _server(CANARY_REPLICAS, CANARY_KEDA),
    "Canary-1rep-noTuning-KEDA-2nodes": _server(CANARY_REPLICAS, CANARY_KEDA),
    "Canary-1rep-Shadow-KEDA-1node": _server(CANARY_REPLICAS, CANARY_KEDA),
    "Canary-1rep-Shadow-KEDA-2nodes": _server(CANARY_REPLICAS, CANARY_KEDA),
    "Canary-1rep-InPlace-KEDA-1node": _server(CANARY_REPLICAS, CANARY_KEDA),
    "Canary-1rep-InPlace-KEDA-2nodes": _server(CANARY_REPLICAS, CANARY_KEDA),
    "Canary-4rep-noTuning-KEDA-1node": _server(CANARY_KEDA),
    "Canary-4rep-noTuning-KEDA-2nodes": _server(CANARY_KEDA),
    "Canary-4rep-Shadow-KEDA-1node": _server(CANARY_KEDA),
    "Canary-4rep-Shadow-KEDA-2nodes": _server(CANARY_KEDA),
    "Canary-4rep-InPlace-KEDA-1node": _server(CANARY_KEDA),
    "Canary-4rep-InPlace-KEDA-2nodes": _server(CANARY_KEDA),
    # a Shadow trial runs in a Deployment of its own: a LeaderWorkerSet server has none (builders/tuning.py)
    "Recreate-1rep-Shadow-noScaling-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "Recreate-1rep-Shadow-KEDA-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "Recreate-4rep-Shadow-noScaling-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "Recreate-4rep-Shadow-KEDA-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "RollingUpdate-1rep-Shadow-noScaling-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "RollingUpdate-1rep-Shadow-KEDA-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "RollingUpdate-4rep-Shadow-noScaling-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "RollingUpdate-4rep-Shadow-KEDA-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "Canary-4rep-Shadow-noScaling-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    # KEDA with minReplicas 2: Canary needs replicas ≥ 2 all the same ...
    "Canary-1rep-noTuning-KEDA2-1node": _server(CANARY_REPLICAS),
    "Canary-1rep-noTuning-KEDA2-2nodes": _server(CANARY_REPLICAS),
    "Canary-1rep-Shadow-KEDA2-1node": _server(CANARY_REPLICAS),
    "Canary-1rep-Shadow-KEDA2-2nodes": _server(CANARY_REPLICAS),
    "Canary-1rep-InPlace-KEDA2-1node": _server(CANARY_REPLICAS),
    "Canary-1rep-InPlace-KEDA2-2nodes": _server(CANARY_REPLICAS),
    # ... and a Shadow trial of a multi-node server is refused whatever the scaling
    "Recreate-1rep-Shadow-KEDA2-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "Recreate-4rep-Shadow-KEDA2-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "RollingUpdate-1rep-Shadow-KEDA2-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "RollingUpdate-4rep-Shadow-KEDA2-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
    "Canary-4rep-Shadow-KEDA2-2nodes": Refusal("tuning", (SHADOW_MULTINODE,)),
}
"""Every refused combination, with where and why (the rule's own words); every other one must work."""


@dataclass(frozen=True)
class Combination:
    values: tuple[Value, ...]

    @property
    def id(self) -> str:
        return "-".join(v.name for v in self.values)

    def fact(self, name: str) -> Any:
        return next(v.facts[name] for v in self.values if name in v.facts)

    def body(self) -> dict[str, Any]:
        """The sample server with every value's ``spec`` merged in."""
        body = copy.deepcopy(SAMPLE)
        body["metadata"] = {"name": NAME, "namespace": NS}
        spec = body["spec"]
        for v in self.values:
            for key, part in v.spec.items():
                spec[key] = {**spec[key], **copy.deepcopy(part)} if isinstance(part, dict) and isinstance(
                    spec.get(key), dict) else copy.deepcopy(part)
        return body


COMBINATIONS = [Combination(vs) for vs in itertools.product(*(a.values for a in AXES))]


def test_the_table_names_only_combinations_of_the_axes() -> None:
    ids = [c.id for c in COMBINATIONS]
    assert len(ids) == len(set(ids)) == 3 * 2 * 3 * 3 * 2
    assert set(REFUSED) <= set(ids), sorted(set(REFUSED) - set(ids))


@pytest.mark.parametrize("combo", COMBINATIONS, ids=[c.id for c in COMBINATIONS])
async def test_combination_works_or_is_refused_with_a_message(combo: Combination, world: World) -> None:
    refusal = REFUSED.get(combo.id)
    body = combo.body()
    if refusal is not None and refusal.stage == "server":
        checks.refused(body, refusal.fragments)
        return
    mode, keda = combo.fact("tuning"), combo.fact("keda")
    replicas, nodes = combo.fact("replicas"), combo.fact("nodes")
    checks.admitted(body, mode)
    checks.rendered(body, replicas, nodes, combo.fact("strategy"), keda, PROM)
    stable = await checks.served(world, body, replicas * nodes, keda)
    if mode is not None and refusal is not None:
        await checks.tuning_refused(world, mode, stable, refusal.fragments[0])
    elif mode is not None:
        checks.trial_specs(world, mode, replicas, nodes)
        await checks.tuned(world, mode, stable, replicas * nodes)
        await checks.known_capacity(world, keda)
        if keda:
            await checks.recorded_capacity(world)
    checks.no_findings(world, combo.id)
