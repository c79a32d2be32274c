"""PURE: the known best speculative settings across the servers of a namespace, from the figures the operator's own
SGLangTunings measured, and whether a server runs settings measured clearly worse.

**The table** (:func:`build`). Every finished SGLangTuning (phase Succeeded, Failed or Cancelled) that recorded its
setup (``status.setup``, :class:`~sglang_operator.api.tuning_setup.TuningSetup`) contributes its Completed trials.
Trials are grouped by setup — model (path and revision) × GPU product × parallelism × SGLang release
(:class:`SetupKey`) × workload (prompts by hash, ``maxOutputTokens``, pods per trial: :class:`WorkloadKey`) — into
one :class:`Table` each; within a table, by full settings (:class:`SettingsKey`: the speculative algorithm, draft
model, ``specV2``, steps/topk/draft tokens, adaptive mode, ``maxRunningRequests`` and ``cudaGraphMaxBs``, the
tuned server's own values where a trial left them), and per concurrency level the figures of every measurement of
the same settings, from every tuning of that setup, are averaged (:class:`MeanLevelFigures`). Only figures a trial
measured against the operator's synthetic load count, never live traffic.

**The figure compared at a level** (:attr:`MeanLevelFigures.value`): the median per-request decode tok/s at
concurrency 1, output tok/s at every other level (``bestPerLevel``'s figures of the default objective).

**The noise rule** (the tunings' own, :mod:`.decide` and :mod:`.prune`): the noise σ of a table's level is the
pooled relative standard deviation of its settings measured more than once (:func:`~.decide.noise_estimate`), at
least :data:`~.prune.NOISE_FLOOR` (2 %). A server's settings measured n times at value v are *clearly worse* than
the best, measured n_b times at value b, when ``b − v > b × 2 σ sqrt(1/n + 1/n_b)``: two standard deviations of the
difference of the means (:data:`~.prune.PRUNE_SIGMAS`, the margin pruning uses).

**The condition** (:func:`condition`): a server whose applied spec runs settings that a table of its setup
(any workload) measured clearly worse than that table's best at some level gets ``SpeculativeSettings=False``,
reason ``BelowKnownBest``; the message names the better settings, both figures, the level and the tuning. Settings
measured and not clearly worse: ``True``, reason ``AtKnownBest``. Settings no tuning of its setup measured, or no
such tuning: no condition (a ``False`` one stored earlier turns ``True``, reason ``NoKnownBest``). Nothing is
changed by itself: the user applies the better settings (``kubectl sglang tune apply <tuning>``).

The GPU product is the spec's node selector ``nvidia.com/gpu.product``; a spec without one has an unknown GPU,
which matches only another unknown. The image is the digest of ``spec.sglang.image`` when the reference names one
(``repo:tag@sha256:…`` and ``repo@sha256:…`` match), else the reference (:func:`image_key`); the digest the pods
actually ran (the ledger's, learned later) is not used, so both sides come from the spec. Forced acceptance is
``spec.env``'s ``SGLANG_SIMULATE_ACC_*`` with their values (:func:`forced_acceptance`): a benchmark server that
forces it matches only a tuning of the same forcing, never a production server. A tuning recorded before the image
was part of the key (``status.setup.image`` unset) matches no server (every server's image is known): its figures
stay readable but are no longer used. :meth:`KnownBest.figures` gives the measured figures per level of one setup
and settings (a revision's measured capacity, for autoscaling).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import ConfigDict

from sglang_operator.api import tuning as api
from sglang_operator.api.analysis import GPU_PRODUCT_LABEL as GPU_PRODUCT_LABEL
from sglang_operator.api.analysis import Setup, setup_fields, simulated_acceptance
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.status import Condition as StoredCondition
from sglang_operator.api.status import ConditionType
from sglang_operator.api.tuning_setup import TuningSetup
from sglang_operator.api.tuning_spec import Workload
from sglang_operator.api.tuning_status import TrialSettings, TrialVerdict, TuningPhase, settings_text
from sglang_operator.builders.command import derive_num_draft_tokens
from sglang_operator.builders.dialect import resolve_version
from sglang_operator.builders.revision import has_digest
from sglang_operator.decisions.conditions import Condition
from sglang_operator.decisions.conditions import condition as make_condition
from sglang_operator.decisions.tuning.decide import noise_estimate
from sglang_operator.decisions.tuning.prune import NOISE_FLOOR, PRUNE_SIGMAS
from sglang_operator.decisions.tuning.space import TuningModel

CONDITION = ConditionType.SPECULATIVE_SETTINGS.value
"""The server condition's type."""
BELOW = "BelowKnownBest"
AT = "AtKnownBest"
NONE = "NoKnownBest"
FINISHED = (TuningPhase.SUCCEEDED.value, TuningPhase.FAILED.value, TuningPhase.CANCELLED.value)


class SetupKey(Setup):
    """What a server and a tuning must share for figures to compare: the revisions' :class:`Setup` (model, GPU
    product (None: unknown), parallelism; ``simulated_acceptance`` left unset) at one SGLang release, of one image
    (:func:`image_key`; None: recorded before it was known) and forced acceptance (:func:`forced_acceptance`);
    immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sglang_version: str
    image: str | None = None
    forced_acceptance: str | None = None

    def text(self) -> str:
        par = f"TP{self.tensor}" + (f" PP{self.pipeline}" if self.pipeline > 1 else "") + (
            f" DP{self.data}" if self.data > 1 else "") + (f" ×{self.nodes} nodes" if self.nodes > 1 else "")
        forced = f", forced acceptance {self.forced_acceptance}" if self.forced_acceptance else ""
        return (f"{self.model_path} on {self.gpu_product or 'unknown GPU'} {par}, SGLang {self.sglang_version}"
                f"{forced}")


class WorkloadKey(TuningModel):
    """The load the figures were measured under: prompts (hash), ``maxOutputTokens``, pods per trial."""

    prompts_hash: str
    max_output_tokens: int
    replicas: int = 1


class SettingsKey(TuningModel):
    """Full speculative settings of a trial or a spec (``speculative`` False: without speculative decoding)."""

    speculative: bool = True
    algorithm: str | None = None
    draft_model_path: str | None = None
    spec_v2: bool = False
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    adaptive: bool = False
    max_running_requests: int | None = None
    cuda_graph_max_bs: int | None = None

    def summary(self) -> str:
        """``3/1/4`` (steps/topk/draft tokens), ``no speculation``, ``adaptive 3/1/4``, ``mrr N`` / ``bs N``."""
        return settings_text(self.num_steps, self.eagle_topk, self.num_draft_tokens,
                                 speculative=self.speculative, adaptive=self.adaptive,
                                 max_running_requests=self.max_running_requests,
                                 cuda_graph_max_bs=self.cuda_graph_max_bs)


class MeanLevelFigures(TuningModel):
    """The mean figures of one settings' measurements at one concurrency level: tok/s, seconds (None: not
    reported), how many measurements, and the tunings that made them (newest last)."""

    concurrency: int
    decode_tokens_per_second: float
    output_tokens_per_second: float
    inter_token_latency_p95_seconds: float | None = None
    time_to_first_token_p95_seconds: float | None = None
    measurements: int = 1
    tunings: tuple[str, ...] = ()

    @property
    def value(self) -> float:
        """The figure compared (module docstring): decode tok/s at concurrency 1, output tok/s elsewhere."""
        return self.decode_tokens_per_second if self.concurrency == 1 else self.output_tokens_per_second

    @property
    def figure(self) -> str:
        return "decode tok/s" if self.concurrency == 1 else "output tok/s"


class MeasuredPoint(TuningModel):
    """One settings' figures per level in one table."""

    settings: SettingsKey
    levels: tuple[MeanLevelFigures, ...]

    def level(self, concurrency: int) -> MeanLevelFigures | None:
        return next((f for f in self.levels if f.concurrency == concurrency), None)


class Table(TuningModel):
    """Every measured settings of one setup and workload; ``noise``: (level, σ) pairs, the pooled relative
    standard deviation of the repeated settings at that level (0 without repeats)."""

    setup: SetupKey
    workload: WorkloadKey
    points: tuple[MeasuredPoint, ...]
    noise: tuple[tuple[int, float], ...] = ()

    def levels(self) -> list[int]:
        return sorted({f.concurrency for p in self.points for f in p.levels})

    def point(self, settings: SettingsKey) -> MeasuredPoint | None:
        return next((p for p in self.points if p.settings == settings), None)

    def best(self, concurrency: int) -> MeasuredPoint | None:
        """The settings with the highest mean figure at ``concurrency`` (ties: the one measured more often)."""
        got = [p for p in self.points if p.level(concurrency) is not None]
        return max(got, key=lambda p: (p.level(concurrency).value, p.level(concurrency).measurements),  # type: ignore[union-attr]
                   default=None)

    def sigma(self, concurrency: int) -> float:
        """The noise at ``concurrency``, at least the floor."""
        return max(NOISE_FLOOR, dict(self.noise).get(concurrency, 0.0))


class KnownBest(TuningModel):
    """The tables of one namespace (:func:`build`)."""

    tables: tuple[Table, ...] = ()

    def for_setup(self, setup: SetupKey) -> tuple[Table, ...]:
        """The tables measured on ``setup`` (every workload)."""
        return tuple(t for t in self.tables if t.setup == setup)

    def figures(self, setup: SetupKey, settings: SettingsKey) -> tuple[tuple[WorkloadKey, tuple[MeanLevelFigures, ...]],
                                                                      ...]:
        """What the tunings measured for ``settings`` on ``setup``: per workload, the figures per level (a
        revision's measured capacity); empty when never measured."""
        return tuple((t.workload, p.levels) for t in self.for_setup(setup) if (p := t.point(settings)) is not None)


class TuningRecord(TuningModel):
    """What one finished tuning contributes: its name, setup and Completed trials as (settings, figures per level,
    one measurement each)."""

    name: str
    setup: SetupKey
    workload: WorkloadKey
    trials: tuple[tuple[SettingsKey, tuple[MeanLevelFigures, ...]], ...] = ()


# --- from the objects ------------------------------------------------------------------------------------------


def prompts_hash(prompts: Sequence[str]) -> str:
    """SHA-256 of the prompts as JSON, first 16 hex digits (the built-in set: ``[]``)."""
    return hashlib.sha256(json.dumps(list(prompts)).encode()).hexdigest()[:16]


def tuning_setup(server: SGLangServerSpec, workload: Workload, replicas: int = 1) -> TuningSetup:
    """The setup a tuning of ``server`` records when it begins (``status.setup``). Raises
    :class:`~sglang_operator.builders.dialect.VersionError` when the release cannot be resolved."""
    s, m = server.speculative, server.memory
    return TuningSetup(
        **_shared(server), sglang_version=str(resolve_version(server.sglang)), **_own(server),
        prompts_hash=prompts_hash(workload.prompts), max_output_tokens=workload.max_output_tokens, replicas=replicas,
        algorithm=s.algorithm.value if s is not None else None, draft_model_path=s.draft_model_path if s else None,
        spec_v2=True if s is not None and s.spec_v2 else None, max_running_requests=m.max_running_requests,
        cuda_graph_max_bs=m.cuda_graph_max_bs)


_KEY_FIELDS = set(SetupKey.model_fields) - {"simulated_acceptance"}
"""The fields of a :class:`SetupKey` a tuning's setup and a server's spec give."""
_SETUP_FIELDS = sorted(_KEY_FIELDS & set(Setup.model_fields))
"""Those a spec's :class:`Setup` holds (all but the release)."""


def image_key(image: str) -> str:
    """The image part of a setup: the digest (``sha256:…``) of a reference that names one, else the reference."""
    return image.partition("@")[2] if has_digest(image) else image


def forced_acceptance(env: Sequence[dict[str, Any]]) -> str | None:
    """``spec.env``'s forced-acceptance variables (``SGLANG_SIMULATE_ACC_*``,
    :data:`~sglang_operator.api.analysis.SIMULATED_ACCEPTANCE_ENV`) as ``NAME=value`` joined by ``,`` in name order
    (a ``valueFrom`` reads ``NAME=<valueFrom>``); None without any."""
    named = simulated_acceptance(list(env))
    if not named:
        return None
    values = {str(e.get("name")): str(e["value"]) if e.get("value") is not None else "<valueFrom>" for e in env}
    return ",".join(f"{n}={values[n]}" for n in sorted(set(named)))


def _own(server: SGLangServerSpec) -> dict[str, Any]:
    """The :class:`SetupKey` fields of a spec beyond the :class:`Setup`'s: the image and forced acceptance."""
    return {"image": image_key(server.sglang.image), "forced_acceptance": forced_acceptance(server.env)}


def _shared(server: SGLangServerSpec) -> dict[str, Any]:
    """The :class:`Setup` fields of a server's spec that a :class:`SetupKey` holds (by field name)."""
    fields = setup_fields(server)
    return {name: fields[name] for name in _SETUP_FIELDS}


def setup_key(setup: TuningSetup) -> SetupKey:
    """The :class:`SetupKey` of a tuning's recorded setup."""
    return SetupKey(**setup.model_dump(include=_KEY_FIELDS))


def server_setup(server: SGLangServerSpec) -> SetupKey | None:
    """The :class:`SetupKey` of a server's spec; None when its release cannot be resolved."""
    try:
        version = str(resolve_version(server.sglang))
    except ValueError:
        return None
    return SetupKey(**_shared(server), sglang_version=version, **_own(server))


def server_settings(server: SGLangServerSpec) -> SettingsKey | None:
    """The settings a server's spec runs (numDraftTokens derived as the builders render it); None when they cannot
    be derived."""
    s, m = server.speculative, server.memory
    if s is None:
        return SettingsKey(speculative=False, max_running_requests=m.max_running_requests,
                           cuda_graph_max_bs=m.cuda_graph_max_bs)
    try:
        ndt = derive_num_draft_tokens(s.algorithm, s.num_steps, s.eagle_topk, s.num_draft_tokens)
    except ValueError:
        return None
    return SettingsKey(algorithm=s.algorithm.value, draft_model_path=s.draft_model_path, spec_v2=s.spec_v2,
                       num_steps=s.num_steps, eagle_topk=s.eagle_topk, num_draft_tokens=ndt,
                       adaptive=s.adaptive is not None and s.adaptive.enabled,
                       max_running_requests=m.max_running_requests, cuda_graph_max_bs=m.cuda_graph_max_bs)


def trial_settings(settings: TrialSettings, setup: TuningSetup) -> SettingsKey:
    """A trial's full settings: its own, the tuned server's (``setup``) where it left them."""
    mrr = settings.max_running_requests if settings.max_running_requests is not None else setup.max_running_requests
    bs = settings.cuda_graph_max_bs if settings.cuda_graph_max_bs is not None else setup.cuda_graph_max_bs
    if not settings.speculative:
        return SettingsKey(speculative=False, max_running_requests=mrr, cuda_graph_max_bs=bs)
    return SettingsKey(algorithm=setup.algorithm, draft_model_path=setup.draft_model_path,
                       spec_v2=bool(setup.spec_v2), num_steps=settings.num_steps, eagle_topk=settings.eagle_topk,
                       num_draft_tokens=settings.num_draft_tokens, adaptive=bool(settings.adaptive),
                       max_running_requests=mrr, cuda_graph_max_bs=bs)


def record_of(body: Mapping[str, Any]) -> TuningRecord | None:
    """What the SGLangTuning ``body`` (API JSON) contributes to the table: None while it runs, without a recorded
    setup, or when its status does not parse."""
    meta = body.get("metadata") or {}
    status = api.parse_tuning_status(body)
    if status.phase not in FINISHED or status.setup is None or meta.get("deletionTimestamp"):
        return None
    trials = []
    for t in status.trials:
        if t.verdict != TrialVerdict.COMPLETED.value:
            continue
        levels = tuple(MeanLevelFigures(
            concurrency=f.concurrency, decode_tokens_per_second=f.decode_tokens_per_second,
            output_tokens_per_second=f.output_tokens_per_second,
            inter_token_latency_p95_seconds=f.inter_token_latency_p95_seconds,
            time_to_first_token_p95_seconds=f.time_to_first_token_p95_seconds, tunings=(str(meta.get("name")),))
            for f in t.levels if f.decode_tokens_per_second is not None and f.output_tokens_per_second is not None)
        if levels:
            trials.append((trial_settings(t.settings, status.setup), levels))
    if not trials:
        return None
    s = status.setup
    return TuningRecord(name=str(meta.get("name")), setup=setup_key(s), trials=tuple(trials),
                        workload=WorkloadKey(prompts_hash=s.prompts_hash, max_output_tokens=s.max_output_tokens,
                                             replicas=s.replicas))


# --- the table -------------------------------------------------------------------------------------------------


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def _noise(runs: Sequence[list[float]]) -> float:
    """:func:`~.decide.noise_estimate` of runs of values (any keys)."""
    return noise_estimate(dict(enumerate(runs)))  # type: ignore[arg-type]


def build(records: Iterable[TuningRecord]) -> KnownBest:
    """The tables of the finished tunings' ``records`` (module docstring), ordered by setup and workload."""
    runs: dict[tuple[SetupKey, WorkloadKey], dict[SettingsKey, dict[int, list[MeanLevelFigures]]]] = {}
    for r in sorted(records, key=lambda r: r.name):
        table = runs.setdefault((r.setup, r.workload), {})
        for settings, levels in r.trials:
            for f in levels:
                table.setdefault(settings, {}).setdefault(f.concurrency, []).append(f)
    tables = []
    for (setup, workload), by_settings in runs.items():
        points = []
        for settings, by_level in by_settings.items():
            means = []
            for c, fs in sorted(by_level.items()):
                names = tuple(dict.fromkeys(n for f in fs for n in f.tunings))
                means.append(MeanLevelFigures(
                    concurrency=c, decode_tokens_per_second=_mean([f.decode_tokens_per_second for f in fs]) or 0.0,
                    output_tokens_per_second=_mean([f.output_tokens_per_second for f in fs]) or 0.0,
                    inter_token_latency_p95_seconds=_mean([f.inter_token_latency_p95_seconds for f in fs]),
                    time_to_first_token_p95_seconds=_mean([f.time_to_first_token_p95_seconds for f in fs]),
                    measurements=len(fs), tunings=names))
            points.append(MeasuredPoint(settings=settings, levels=tuple(means)))
        noise = tuple((c, _noise([[f.value for f in by_level[c]] for by_level in by_settings.values()
                                  if c in by_level]))
                      for c in sorted({c for by_level in by_settings.values() for c in by_level}))
        tables.append(Table(setup=setup, workload=workload, points=tuple(points), noise=noise))
    tables.sort(key=lambda t: (t.setup.model_path, t.setup.sglang_version, t.setup.gpu_product or "",
                               t.workload.prompts_hash, t.workload.max_output_tokens))
    return KnownBest(tables=tuple(tables))


def capacity(known: KnownBest,
             server: SGLangServerSpec) -> tuple[tuple[WorkloadKey, tuple[MeanLevelFigures, ...]], ...]:
    """What the namespace's tunings measured for the settings ``server`` (a revision's spec) runs on its setup: per
    workload, the figures per concurrency level (:meth:`KnownBest.figures`); empty when never measured."""
    setup, settings = server_setup(server), server_settings(server)
    return known.figures(setup, settings) if setup is not None and settings is not None else ()


# --- the server's condition ------------------------------------------------------------------------------------


class Shortfall(TuningModel):
    """The server's settings measured clearly worse than a table's best at one level: ``mine`` and ``best`` figures,
    ``margin`` (the relative difference the noise rule allows), ``sigma`` (the noise)."""

    table: Table
    mine: MeanLevelFigures
    best: MeasuredPoint
    best_figures: MeanLevelFigures
    margin: float
    sigma: float

    @property
    def ratio(self) -> float:
        return self.best_figures.value / self.mine.value if self.mine.value > 0 else math.inf


def compare(known: KnownBest, server: SGLangServerSpec) -> tuple[list[Shortfall], list[MeanLevelFigures]]:
    """``(shortfalls, measured)``: the levels at which the server's settings were measured clearly worse than the
    best of a table of its setup, and every level at which they were measured at all."""
    setup, mine = server_setup(server), server_settings(server)
    if setup is None or mine is None:
        return [], []
    short, seen = [], []
    for table in known.for_setup(setup):
        point = table.point(mine)
        if point is None:
            continue
        for f in point.levels:
            seen.append(f)
            best = table.best(f.concurrency)
            b = best.level(f.concurrency) if best is not None else None
            if best is None or b is None or best.settings == mine:
                continue
            sigma = table.sigma(f.concurrency)
            margin = PRUNE_SIGMAS * sigma * math.sqrt(1.0 / f.measurements + 1.0 / b.measurements)
            if b.value - f.value > b.value * margin:
                short.append(Shortfall(table=table, mine=f, best=best, best_figures=b, margin=margin, sigma=sigma))
    return short, seen


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def message(s: Shortfall, mine: SettingsKey, others: int, name: str = "") -> str:
    """The ``BelowKnownBest`` message: the better settings, both figures, the level, the tuning, the noise, and the
    command that writes them into server ``name``."""
    b, f = s.best_figures, s.mine
    text = (f"the spec runs {mine.summary()}: {f.value:.1f} {f.figure} at concurrency {f.concurrency} (measured "
            f"{_times(f.measurements)} by SGLangTuning {', '.join(f.tunings)}); {s.best.settings.summary()} measured "
            f"{b.value:.1f} {b.figure} ({_times(b.measurements)}, SGLangTuning {b.tunings[-1]}), {s.ratio:.2f}×, "
            f"beyond the noise ({s.margin:.1%}; noise {s.sigma:.1%}) on {s.table.setup.text()}, "
            f"{s.table.workload.max_output_tokens}-token answers; `kubectl sglang tune apply {b.tunings[-1]}"
            + (f" --concurrency {b.concurrency}" if b.concurrency != 1 else "")
            + (f" --server {name}" if name else "") + "` writes it")
    if others:
        text += f" ({others} more level{'s' if others > 1 else ''} below the known best)"
    return text


def condition(known: KnownBest, server: SGLangServerSpec, generation: int, now: dt.datetime,
              stored: Iterable[StoredCondition] = (), name: str = "") -> Condition | None:
    """``SpeculativeSettings`` of server ``name`` whose applied spec is ``server`` (module docstring); ``stored``:
    the server's conditions (``SGLangServerStatus.conditions``), so that a ``False`` one never outlives the tunings
    that made it. None: nothing to say."""
    previous = next((c for c in stored if c.type == CONDITION), None)
    short, seen = compare(known, server)
    mine = server_settings(server)
    if short and mine is not None:
        worst = max(short, key=lambda s: (s.ratio, -s.mine.concurrency))
        return make_condition(CONDITION, "False", BELOW, message(worst, mine, len(short) - 1, name), generation, now)
    if seen and mine is not None:
        levels = ", ".join(str(c) for c in sorted({f.concurrency for f in seen}))
        return make_condition(CONDITION, "True", AT, f"{mine.summary()} is within the noise of the best the "
                              f"namespace's tunings measured on this setup (concurrency {levels})", generation, now)
    if previous is not None and previous.reason != NONE:
        return make_condition(CONDITION, "True", NONE, "no finished SGLangTuning of this setup measured the "
                              "spec's settings", generation, now)
    return None
