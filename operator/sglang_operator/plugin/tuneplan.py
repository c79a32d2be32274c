"""What ``tune start``, ``tune status`` and ``tune apply`` compute (pure; :mod:`sglang_operator.plugin.tune` does the
I/O): an SGLangTuning from the command's options, validated by the API's Python mirror of the CRD's rules before
anything is sent; the rows of the trial table; the server spec with a tuning's winner written in, and the YAML
snippet of it for a Git repository.

Value syntax of the integer options (``--steps``, ``--topk``, ``--draft-tokens``, ``--max-running-requests``,
``--cuda-graph-max-bs``): ``1-8`` (a range, both ends included), ``1-8/2`` (a range with a step) or ``1,2,4`` (a
list). ``--concurrency``: levels separated by commas, each ``LEVEL`` or ``LEVEL:WEIGHT`` (``1,16:2``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from sglang_operator.api.names import did_you_mean
from sglang_operator.api.server import SpecError
from sglang_operator.api.tuning import API_VERSION, KIND, NAME_LIMIT, SGLangTuning, parse_tuning
from sglang_operator.api.tuning_spec import AlgorithmName, ObjectiveMetric, TuningMode
from sglang_operator.api.tuning_status import (
    LevelFigures,
    SGLangTuningStatus,
    TrialSettings,
    TrialVerdict,
    objective_text,
)
from sglang_operator.decisions.tuning.trials import write_memory, write_speculative

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*(?:/\s*(\d+)\s*)?$")
_LIST = re.compile(r"^\s*\d+\s*(,\s*\d+\s*)*$")
CUDA_GRAPH_FLAGS = ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode")
"""Spellings of the CUDA-graph batch size that ``spec.memory.cudaGraphMaxBs`` renders (the release's own name):
:func:`winner_spec` drops them from an older spec's ``spec.extraArgs``, where the field now owns them."""


class UsageError(ValueError):
    """A command option that does not make a valid SGLangTuning; the message says which and why."""


def int_parameter(option: str, text: str) -> dict[str, Any]:
    """The ``IntParameter`` (camelCase dict) ``text`` spells (``1-8``, ``1-8/2``, ``1,2,4``); raises
    :class:`UsageError` naming ``option``."""
    if m := _RANGE.match(text):
        out: dict[str, Any] = {"min": int(m[1]), "max": int(m[2])}
        if m[3]:
            out["step"] = int(m[3])
        return out
    if _LIST.match(text):
        return {"list": [int(v) for v in text.split(",")]}
    raise UsageError(f"{option} {text!r}: write a range (1-8, 1-8/2) or a list (1,2,4)")


def concurrency_levels(text: str) -> list[dict[str, Any]]:
    """``[{level, weight}]`` from ``1,16:2``; raises :class:`UsageError`."""
    out: list[dict[str, Any]] = []
    for part in text.split(","):
        level, _, weight = part.strip().partition(":")
        try:
            item: dict[str, Any] = {"level": int(level)}
            if weight:
                item["weight"] = float(weight)
        except ValueError:
            raise UsageError(f"--concurrency {text!r}: write levels separated by commas, each LEVEL or "
                             "LEVEL:WEIGHT (1,16:2)") from None
        out.append(item)
    return out


def _choice(option: str, value: str, choices: Sequence[str]) -> str:
    """``value`` matched to one of ``choices`` (case ignored); raises :class:`UsageError` with the closest one."""
    for c in choices:
        if c.lower() == value.lower():
            return c
    raise UsageError(f"{option} {value!r} is not one of {', '.join(choices)}{did_you_mean(value, choices)}")


@dataclass(frozen=True)
class StartOptions:
    """The options of ``tune start`` (None: the API's default)."""

    server: str
    namespace: str = "default"
    name: str | None = None
    steps: str | None = None
    topk: str | None = None
    draft_tokens: str | None = None
    adaptive: bool = False
    max_running_requests: str | None = None
    cuda_graph_max_bs: str | None = None
    objective: str | None = None
    objective_concurrency: int | None = None
    max_itl_p95: float | None = None
    max_ttft_p95: float | None = None
    goal: float | None = None
    concurrency: str | None = None
    prompts: tuple[str, ...] = ()
    max_output_tokens: int | None = None
    seconds_per_level: int | None = None
    warmup_seconds: int | None = None
    repetitions: int | None = None
    max_trials: int | None = None
    max_failed_trials: int | None = None
    max_duration_seconds: int | None = None
    trial_deadline_seconds: int | None = None
    algorithm: str | None = None
    seed: int | None = None
    start_steps: int | None = None
    mode: str | None = None
    allow_disruption: bool = False


def tuning_body(o: StartOptions) -> dict[str, Any]:
    """The SGLangTuning object ``o`` asks for (``metadata.name`` or, without ``--name``, a ``generateName`` of
    ``<server>-tune-`` that fits :data:`~sglang_operator.api.tuning.NAME_LIMIT` with the API server's five
    characters), validated by the API's Python mirror. Raises :class:`UsageError` with every problem."""
    params: dict[str, Any] = {}
    for key, option, text in (("numSteps", "--steps", o.steps), ("eagleTopk", "--topk", o.topk),
                              ("numDraftTokens", "--draft-tokens", o.draft_tokens),
                              ("maxRunningRequests", "--max-running-requests", o.max_running_requests),
                              ("cudaGraphMaxBs", "--cuda-graph-max-bs", o.cuda_graph_max_bs)):
        if text is not None:
            params[key] = int_parameter(option, text)
    if o.adaptive:
        params["adaptive"] = True
    workload: dict[str, Any] = {}
    if o.concurrency is not None:
        workload["concurrency"] = concurrency_levels(o.concurrency)
    if o.prompts:
        workload["prompts"] = list(o.prompts)
    for key, count in (("maxOutputTokens", o.max_output_tokens), ("secondsPerLevel", o.seconds_per_level),
                       ("warmupSeconds", o.warmup_seconds), ("repetitions", o.repetitions)):
        if count is not None:
            workload[key] = count
    objective: dict[str, Any] = {}
    if o.objective is not None:
        objective["objectiveMetricName"] = _choice("--objective", o.objective, [m.value for m in ObjectiveMetric])
    metric = objective.get("objectiveMetricName")
    if o.objective_concurrency is not None:
        objective["concurrency"] = o.objective_concurrency
    elif metric == ObjectiveMetric.OUTPUT_TOKENS_PER_SECOND.value:  # the highest level by default
        levels = [c["level"] for c in workload.get("concurrency") or [{"level": 1}]]
        objective["concurrency"] = max(levels)
    for key, value in (("maxP95InterTokenLatencySeconds", o.max_itl_p95),
                       ("maxP95TimeToFirstTokenSeconds", o.max_ttft_p95), ("goal", o.goal)):
        if value is not None:
            objective[key] = value
    budget = {k: v for k, v in (("maxTrialCount", o.max_trials), ("maxFailedTrialCount", o.max_failed_trials),
                                ("maxDurationSeconds", o.max_duration_seconds),
                                ("trialDeadlineSeconds", o.trial_deadline_seconds)) if v is not None}
    algorithm: dict[str, Any] = {}
    if o.algorithm is not None:
        algorithm["algorithmName"] = _choice("--algorithm", o.algorithm, [a.value for a in AlgorithmName])
    if o.seed is not None:
        algorithm["seed"] = o.seed
    if o.start_steps is not None:
        algorithm["startNumSteps"] = o.start_steps
    spec: dict[str, Any] = {"serverRef": {"name": o.server}}
    for key, block in (("parameters", params), ("objective", objective), ("workload", workload),
                       ("budget", budget), ("algorithm", algorithm)):
        if block:
            spec[key] = block
    if o.mode is not None:
        spec["mode"] = _choice("--mode", o.mode, [m.value for m in TuningMode])
        if spec["mode"] == TuningMode.IN_PLACE.value and not o.allow_disruption:
            raise UsageError("--mode InPlace needs --allow-disruption: every trial replaces the server's pods and "
                             "reloads the model (or use --mode Shadow, trials on other GPUs)")
    if o.allow_disruption:
        spec["disruption"] = "Allowed"
    meta: dict[str, Any] = {"namespace": o.namespace}
    if o.name:
        meta["name"] = o.name
    else:
        meta["generateName"] = f"{o.server[:NAME_LIMIT - 11].rstrip('-')}-tune-"
    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}
    try:
        parse_tuning(body)
    except SpecError as err:
        raise UsageError("the SGLangTuning would be refused: " + "; ".join(err.messages)) from None
    return body


# --- status ---------------------------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def level_score(objective: ObjectiveMetric, f: LevelFigures) -> float | None:
    """The figure a plot or table shows for one level: the level's ``objective`` when the controller set it, else
    what it would be (:func:`~sglang_operator.decisions.tuning.trials.level_objective`): decode tok/s at
    concurrency 1 with ``decodeTokensPerSecond``, output tok/s otherwise."""
    if f.objective is not None:
        return f.objective
    if objective is ObjectiveMetric.DECODE_TOKENS_PER_SECOND and f.concurrency == 1:
        return f.decode_tokens_per_second
    return f.output_tokens_per_second


def status_levels(status: SGLangTuningStatus) -> list[int]:
    """Every concurrency level some trial measured, ascending."""
    return sorted({f.concurrency for t in status.trials for f in t.levels})


def objective_header(tuning: SGLangTuning) -> str:
    """The OBJECTIVE column's header with the unit of its values: ``OBJECTIVE (TOK/S)``, or ``OBJECTIVE (× CONTROL)``
    when a trial's objective is the weighted ratio to the control trial (two or more workload levels:
    :meth:`~sglang_operator.api.tuning_spec.SGLangTuningSpec.relative_objective`)."""
    return "OBJECTIVE (× CONTROL)" if tuning.spec.relative_objective() else "OBJECTIVE (TOK/S)"


def objective_title(tuning: SGLangTuning) -> str:
    """What the objective is, for a title: ``decodeTokensPerSecond``, and with two or more workload levels how they
    are weighed (``decodeTokensPerSecond, weighted ratio to the control trial over c1 ×3, c16``)."""
    spec = tuning.spec
    metric = spec.objective.objective_metric_name.value
    if not spec.relative_objective():
        return metric
    levels = ", ".join(f"c{c.level}" + (f" ×{c.weight:g}" if c.weight != 1 else "") for c in spec.workload.concurrency)
    return f"{metric}, weighted ratio to the control trial over {levels}"


def status_rows(tuning: SGLangTuning) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of ``tune status``'s trial table: name, settings, verdict, objective (its unit in the header:
    :func:`objective_header`), per level output tok/s, decode tok/s and accept length (the best trial marked ★, the
    control trial ◇); reasons are :func:`reason_lines`."""
    status = tuning.status or SGLangTuningStatus()
    levels = status_levels(status)
    relative = tuning.spec.relative_objective()
    header = ["", "TRIAL", "SETTINGS", "VERDICT", objective_header(tuning)]
    for c in levels:
        header += [f"c{c} OUT TOK/S", f"c{c} DECODE TOK/S", f"c{c} ACCEPT"]
    best = status.best.trial if status.best else None
    rows = []
    for t in status.trials:
        if t.verdict == TrialVerdict.INVALID.value:  # one line under the table (:func:`invalid_line`)
            continue
        mark = "★" if t.name == best else "◇" if t.name == status.control_trial else ""
        row = [mark, t.name, t.settings.summary(), t.verdict or "Running", _num(t.objective, 2 if relative else 1)]
        by_level = {f.concurrency: f for f in t.levels}
        for c in levels:
            f = by_level.get(c)
            row += [_num(f.output_tokens_per_second if f else None), _num(f.decode_tokens_per_second if f else None),
                    _num(f.accept_length if f else None, 2)]
        rows.append(row)
    return header, rows


def reason_lines(tuning: SGLangTuning) -> list[str]:
    """``<trial>: <reason>`` of every started trial with a reason (SGLang's crash tail, the scheduler's message, the
    pruning rule), in order; then the Invalid points in one line (:func:`invalid_line`) and why the running trial
    or the tuning waits (:func:`pending_lines`)."""
    status = tuning.status or SGLangTuningStatus()
    lines = [f"{t.name}: {t.reason}" for t in status.trials if t.reason and t.verdict != TrialVerdict.INVALID.value]
    invalid = invalid_line(status)
    return [*lines, *([invalid] if invalid else []), *pending_lines(status)]


INVALID_EXAMPLES = 4
"""Settings named per reason in :func:`invalid_line`."""


def invalid_line(status: SGLangTuningStatus) -> str | None:
    """The Invalid points in one line: how many the release's rules refused (``trialsInvalid``, never run) and,
    per distinct reason (its first sentence), a few of the settings it refused; None without any."""
    total = status.trials_invalid or 0
    recorded = [t for t in status.trials if t.verdict == TrialVerdict.INVALID.value]
    if not total and not recorded:
        return None
    by_reason: dict[str, list[str]] = {}
    for t in recorded:
        reason = (t.reason or "no reason given").strip().splitlines()[0].split("; ")[0][:120]
        by_reason.setdefault(reason, []).append(t.settings.summary())
    parts = []
    for reason, settings in by_reason.items():
        shown = ", ".join(settings[:INVALID_EXAMPLES]) + (" …" if len(settings) > INVALID_EXAMPLES else "")
        parts.append(f"{shown}: {reason}")
    more = f" ({total - len(recorded)} more not recorded)" if total > len(recorded) else ""
    return (f"invalid: {max(total, len(recorded))} points refused by the release's rules, never run{more}"
            + (" — " + "; ".join(parts) if parts else ""))


def pending_lines(status: SGLangTuningStatus) -> list[str]:
    """Why nothing moves: the running trial's ``TrialPending`` message (the scheduler's or the pod's) or that it
    runs since its start, and a ``Running=False`` condition of an active tuning (waiting for its server, a canary or
    another tuning's hold)."""
    if status.phase in ("Succeeded", "Failed", "Cancelled"):
        return []
    conds = {c.type: c for c in status.conditions}
    out = []
    running = next((t for t in status.trials if t.verdict is None), None)
    if running is not None:
        pending = conds.get("TrialPending")
        if pending is not None and pending.status == "True" and running.name in pending.message:
            out.append(f"pending: {pending.message}")
        else:
            out.append(f"running: {running.name} ({running.settings.summary()}) since {running.started_at or '?'}: "
                       "starting or being measured")
    waiting = conds.get("Running")
    if waiting is not None and waiting.status == "False":
        out.append(f"waiting: {waiting.reason}: {waiting.message}")
    return out


def summary_lines(tuning: SGLangTuning) -> list[str]:
    """The lines under the table: phase and progress, the recommendation overall and per level with its speedup
    over no speculative decoding."""
    status = tuning.status or SGLangTuningStatus()
    lines = [f"phase: {status.phase or 'Pending'}, trials {status.progress or '0/?'} (completed "
             f"{status.trials_completed or 0}, failed {status.trials_failed or 0}, pruned {status.trials_pruned or 0}"
             f", invalid {status.trials_invalid or 0})"]
    if status.best is None:
        lines.append("no recommendation yet")
        return lines
    b = status.best
    objective = b.objective_summary or objective_text(b.objective, tuning.spec.relative_objective())
    level = tuning.spec.objective.concurrency or 1
    lines.append(f"best: {b.summary or b.settings.summary()} ({b.trial}), objective {objective}"
                 f"{speedup_text(b.speedup, level)}")
    for p in status.best_per_level:
        lines.append(f"  at concurrency {p.concurrency}: {p.summary or p.settings.summary()} ({p.trial}), "
                     f"{p.objective_summary or objective_text(p.objective, False)}"
                     f"{speedup_text(p.speedup, p.concurrency)}")
    return lines


def speedup_text(speedup: float | None, concurrency: int | None) -> str:
    """``, 2.43× no speculation (output tok/s at c1)``: a stored speedup
    (:func:`~sglang_operator.api.tuning_status.speedup_of`, two decimals) as ``tune status`` and ``tune plot`` show
    it; empty for None."""
    if speedup is None:
        return ""
    return f", {speedup:.2f}× no speculation (output tok/s" + (f" at c{concurrency})" if concurrency else ")")


def status_json(tuning: SGLangTuning) -> dict[str, Any]:
    """``tune status -o json``: name, server, objective and the whole status (camelCase)."""
    return {"name": tuning.metadata.get("name"), "namespace": tuning.namespace,
            "server": tuning.spec.server_ref.name,
            "objective": tuning.spec.objective.objective_metric_name.value,
            "status": (tuning.status or SGLangTuningStatus()).dump()}


# --- apply ----------------------------------------------------------------------------------------------------


def _drop_flag(args: Sequence[str], flags: Sequence[str]) -> list[str]:
    """``args`` without ``--flag value`` / ``--flag=value`` of any of ``flags``."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in flags:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def winner_spec(spec: Mapping[str, Any], settings: TrialSettings) -> dict[str, Any]:
    """The server ``spec`` (camelCase dict, as read) with ``settings`` written in: ``spec.speculative`` numSteps /
    eagleTopk / numDraftTokens (and ``adaptive``: ``enabled: true`` kept with its ConfigMap, or removed when the
    winner is static), ``spec.memory.maxRunningRequests`` and ``spec.memory.cudaGraphMaxBs`` (rendered under the
    release's flag name; a CUDA-graph batch size flag in ``spec.extraArgs`` is dropped, the field owns it); the
    control trial (no speculative decoding) removes ``spec.speculative``. Raises :class:`UsageError` when the server
    has no ``spec.speculative`` to write speculative settings into."""
    out = copy.deepcopy(dict(spec))
    if not settings.speculative:
        out.pop("speculative", None)
    elif any(v is not None for v in (settings.num_steps, settings.eagle_topk, settings.num_draft_tokens,
                                     settings.adaptive)):
        spec_block = out.get("speculative")
        if not isinstance(spec_block, dict):
            raise UsageError("the server has no spec.speculative (no algorithm to run the winner with): add "
                             "spec.speculative with its algorithm, then apply the winner")
        write_speculative(spec_block, settings)
    write_memory(out, settings)
    if settings.cuda_graph_max_bs is not None and "extraArgs" in out:
        out["extraArgs"] = _drop_flag(list(out.get("extraArgs") or []), CUDA_GRAPH_FLAGS)
    return out


def winner_keys(settings: TrialSettings) -> list[str]:
    """The top-level spec keys :func:`winner_spec` writes for ``settings``."""
    keys = ["speculative"]
    if settings.max_running_requests is not None or settings.cuda_graph_max_bs is not None:
        keys.append("memory")
    return keys


def changed_keys(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The top-level spec keys whose value differs."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def snippet(name: str, namespace: str, spec: Mapping[str, Any], keys: Sequence[str]) -> str:
    """The YAML a Git repository's copy of the SGLangServer needs: the changed ``keys`` of ``spec`` (a removed key
    as a comment saying so), under apiVersion/kind/metadata so it reads as the object it patches."""
    from sglang_operator.api import GROUP, VERSION
    from sglang_operator.api import KIND as SERVER_KIND

    part = {k: spec[k] for k in keys if k in spec}
    doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": SERVER_KIND, "metadata": {"name": name, "namespace": namespace},
           "spec": part}
    text = yaml.safe_dump(doc, sort_keys=False)
    removed = [k for k in keys if k not in spec]
    if removed:
        text += "".join(f"# remove spec.{k} from the file\n" for k in removed)
    return text
