"""What a tuning will cost, for ``tune start --dry-run`` (pure: from the tuning's spec, its server's and the server's
pods; :mod:`sglang_operator.plugin.tune` reads them).

- **Trials**: at most ``status.trialsTotal`` would be (:func:`~sglang_operator.decisions.tuning.trials.
  planned_trials`: the control trial, each valid point, the adaptive-mode trial, the repeats the noise rule may ask
  for, never more than ``maxTrialCount``); the valid and refused points are the release's own rules over
  ``spec.parameters`` (:func:`~sglang_operator.decisions.tuning.trials.points`). The refused ones are counted per
  rule, each with one example of its message (:func:`refusals`); a value of an option no valid point has
  (``--topk 2`` on a ``specV2`` server) is named with why (:func:`unused_values`): ``tune start`` refuses it.
- **Per trial**: the model load, estimated by how long the server's own Ready pods took from their start to Ready
  (the median; unknown without a Ready pod), plus the measurement: ``warmupSeconds`` and every level's
  ``repetitions`` × ``secondsPerLevel``, each later level settling for at most ``warmupSeconds`` (an upper bound).
- **GPU-hours**: the trials' wall time × the GPUs one trial holds (Shadow: one pod of the server's; InPlace: every
  replica's).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.tuning_spec import SGLangTuningSpec, TuningMode, Workload
from sglang_operator.decisions.conditions import parse_time
from sglang_operator.decisions.pods import ready_condition
from sglang_operator.decisions.tuning import trials as plan
from sglang_operator.decisions.tuning.space import InvalidPoint, Point

EXAMPLE_LIMIT = 240
"""Characters at most of a rule's example message in the plan."""


@dataclass(frozen=True)
class Refusal:
    """One rule that refused points: how many (``count``), one of them (``example``, ``steps/topk/draft tokens``)
    and its message."""

    count: int
    example: str
    message: str


def _rule(reason: str) -> str:
    """The rule a refusal message states: its first error with every number replaced (``numDraftTokens 6 > numSteps
    × eagleTopk + 1 = 5`` and ``... 7 > ... = 5`` are one rule)."""
    first = reason.strip().splitlines()[0].split("; ")[0] if reason.strip() else "no reason given"
    return re.sub(r"\b\d+\b", "N", first)


def refusals(invalid: Sequence[InvalidPoint]) -> tuple[Refusal, ...]:
    """The refused points per rule (:func:`_rule`), the most frequent first, each with its first point and
    message."""
    groups: dict[str, list[InvalidPoint]] = {}
    for p in invalid:
        groups.setdefault(_rule(p.reason), []).append(p)
    ordered = sorted(groups.values(), key=lambda g: -len(g))
    return tuple(Refusal(count=len(g), example=g[0].point.label, message=g[0].reason) for g in ordered)


_OPTIONS = (("--steps", "num_steps"), ("--topk", "eagle_topk"), ("--draft-tokens", "num_draft_tokens"),
            ("--max-running-requests", "max_running_requests"), ("--cuda-graph-max-bs", "cuda_graph_max_bs"))
"""The ``tune start`` options of ``spec.parameters`` and the point's field each sets."""


def unused_values(spec: SGLangTuningSpec, valid: Sequence[Point], invalid: Sequence[InvalidPoint]) -> list[str]:
    """Per option of ``spec.parameters``, the values no valid point has (every point with them refused, by the
    release's or the API's rules), with the message of one such point: ``--topk 2,4: every point with these values
    is refused (e.g. 1/2/2: spec.speculative.specV2 needs eagleTopk 1 ...)``. Empty when every value can run."""
    out = []
    for option, field in _OPTIONS:
        param = getattr(spec.parameters, field)
        if param is None:
            continue
        used = {getattr(p, field) for p in valid}
        dead = [v for v in param.values() if v not in used]
        if not dead:
            continue
        example = next((p for p in invalid if getattr(p.point, field) in dead), None)
        why = f" (e.g. {example.point.label}: {_cut(example.reason)})" if example is not None else ""
        values = ",".join(str(v) for v in dead)
        out.append(f"{option} {values}: every point with {'this value' if len(dead) == 1 else 'these values'} is "
                   f"refused by the API's or the release's rules, so {'it' if len(dead) == 1 else 'they'} would "
                   f"search nothing{why}; drop {'it' if len(dead) == 1 else 'them'} or change the server")
    return out


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXAMPLE_LIMIT else text[:EXAMPLE_LIMIT - 1] + "…"


@dataclass(frozen=True)
class Cost:
    """``valid`` / ``invalid`` points, ``trials`` at most, ``load_seconds`` per trial (None: unknown),
    ``measured_seconds`` per trial at most, ``gpus`` one trial holds; ``refused``: the invalid points per rule;
    ``unused``: option values that would search nothing."""

    valid: int
    invalid: int
    trials: int
    load_seconds: float | None
    measured_seconds: float
    gpus: int
    refused: tuple[Refusal, ...] = ()
    """The invalid points per rule (:func:`refusals`)."""
    unused: tuple[str, ...] = ()
    """Option values no valid point has, with why (:func:`unused_values`)."""

    @property
    def trial_seconds(self) -> float:
        return (self.load_seconds or 0.0) + self.measured_seconds

    @property
    def wall_seconds(self) -> float:
        """Wall time of every trial at most, seconds (the model load unknown: the measurement alone)."""
        return self.trials * self.trial_seconds

    @property
    def gpu_hours(self) -> float:
        return self.wall_seconds * self.gpus / 3600.0


def measured_seconds(workload: Workload) -> float:
    """Seconds one trial is measured for at most (module docstring)."""
    levels = len(workload.concurrency)
    return float(levels * workload.warmup_seconds + levels * workload.repetitions * workload.seconds_per_level)


def load_seconds(pods: Iterable[Mapping[str, Any]]) -> float | None:
    """The median time from a pod's start (``status.startTime``) to its Ready condition, seconds, over the Ready
    ``pods``; None without one."""
    got = []
    for p in pods:
        start = parse_time((p.get("status") or {}).get("startTime"))
        at = parse_time((ready_condition(p) or {}).get("lastTransitionTime"))
        if start is not None and at is not None and at >= start:
            got.append((at - start).total_seconds())
    return statistics.median(got) if got else None


def cost(spec: SGLangTuningSpec, server: SGLangServerSpec, pods: Iterable[Mapping[str, Any]] = ()) -> Cost:
    """The :class:`Cost` of a tuning ``spec`` of a server whose spec is ``server`` and whose pods are ``pods``.
    Raises ``ValueError`` when the server's spec does not render (its release unknown)."""
    in_place = spec.mode is TuningMode.IN_PLACE
    valid, invalid = plan.points(spec.parameters, server, in_place)
    replicas = plan.trial_replicas(server, in_place)
    return Cost(valid=sum(not p.adaptive for p in valid), invalid=len(invalid),
                trials=plan.planned_trials(spec, valid), load_seconds=load_seconds(pods),
                measured_seconds=measured_seconds(spec.workload),
                gpus=server.gpus * server.parallelism.nodes * replicas, refused=refusals(invalid),
                unused=tuple(unused_values(spec, valid, invalid)))


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min" if seconds >= 90 \
        else f"{seconds:.0f} s"


def lines(c: Cost) -> list[str]:
    """The plan as comment lines (``# ...``) under the dry run's YAML."""
    load = (f"{c.load_seconds:.0f} s model load (as the server's pods took) + " if c.load_seconds is not None
            else "the model load (unknown: no Ready pod of the server) + ")
    why = [f"#   {r.count} refused, e.g. {r.example}: {_cut(r.message)}" for r in c.refused]
    return [
        f"# plan: {c.valid} valid points, {c.invalid} refused by the API's or the release's rules (never run)"
        + (", per rule:" if why else ""),
        *why,
        f"# at most {c.trials} trials (the control trial and the noise rule's repeats included; the default search "
        "often stops earlier)",
        f"# each: {load}{c.measured_seconds:.0f} s measured at most, on {c.gpus} GPU{'s' if c.gpus != 1 else ''}",
        f"# at most {_duration(c.wall_seconds)} wall time, {c.gpu_hours:.2f} GPU-hours"
        + ("" if c.load_seconds is not None else " plus the model loads"),
    ]
