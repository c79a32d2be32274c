"""The Grafana dashboard "SGLang speculative decoding", built with ``grafana-foundation-sdk`` (Grafana 11.6
schema, pinned in pyproject.toml) (pure).

Variables: ``datasource`` (Prometheus), ``namespace`` and ``server`` (from the ``namespace`` and
``sglang_server`` target labels the scrape config adds, :mod:`sglang_operator.builders.monitoring`), and
``sglang_tuning`` (from the operator's tuning series, in the namespace). Every per-server panel is split by
``revision``. SGLang's own series answer what SGLang reports (throughput, accept
length and rate, steps and draft tokens, requests, TTFT, ITL, KV-cache, prefix-cache hits, retractions); the
operator's series answer what only it knows (per-request decode speed from its probe, the rollback's phase,
baseline, stable revision and rollbacks, and the speculative steps and draft tokens SGLang resolved where its
release has no gauge for them). Those need the operator's own ``/metrics`` scraped (the chart's ServiceMonitor,
``serviceMonitor.enabled``, or the ``sglang-operator`` job of ``sglang-operator prometheus-config``); a text panel
at the top says so. The Tuning row (collapsed) shows one SGLangTuning's trials, their objectives, the
recommendation's speedup over no speculative decoding, and the tunings ended: the operator's series again, which
exist only once a tuning has finished a trial.

Regenerate the checked-in copies with ``python -m sglang_operator_tools.monitoring.generate``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from grafana_foundation_sdk.builders import bargauge, prometheus, stat, statetimeline, text, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    Threshold,
    ThresholdsMode,
    VariableRefresh,
)
from grafana_foundation_sdk.models.text import TextMode

from sglang_operator_tools.monitoring import series as s

UID = "sglang-operator"
TITLE = "SGLang speculative decoding"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
SERVER_SEL = 'namespace="$namespace", sglang_server="$server"'
TUNING_SEL = 'namespace="$namespace", sglang_tuning="$sglang_tuning"'
TUNING_ROW = "Tuning"
"""The title of the (collapsed) row of SGLangTuning panels."""
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Target:
    """One PromQL query of a panel and its legend (Grafana legend template, ``{{revision}}``)."""

    expr: str
    legend: str = "{{revision}}"


def _sel(name: str) -> str:
    return f"{name}{{{SERVER_SEL}}}"


def _tuning_sel(name: str, extra: str = "") -> str:
    return f"{name}{{{TUNING_SEL}{extra}}}"


def _rate(name: str) -> str:
    return f"rate({_sel(name)}[{RATE}])"


def _quantiles(histogram: str) -> list[Target]:
    return [Target(f"histogram_quantile({q}, sum by (revision, le) ({_rate(histogram + '_bucket')}))",
                   f"p{int(q * 100)} {{{{revision}}}}") for q in (0.5, 0.95)]


ACCEPT_LENGTH = (
    f"(sum by (revision) ({_rate(s.GENERATION_TOKENS)}) / sum by (revision) ({_rate(s.SPEC_VERIFY_CALLS)}))\n"
    f"  or avg by (revision) ({_sel(s.SPEC_ACCEPT_LENGTH)})"
)
"""Tokens per verify step from counter increases where the release has ``sglang:spec_verify_calls_total``
(0.5.2x), else SGLang's windowed gauge (mean over pods)."""


def _or_operator(sglang: str, operator: str) -> str:
    """``sglang`` (an aggregation by revision of SGLang's own gauge), else the operator's series of the same setting
    (``or``: per revision, SGLang's value wins where it reports one)."""
    return f"{sglang}\n  or max by (revision) ({_sel(operator)})"


OPERATOR_SERIES = "the operator's series: see the note at the top"
SOURCES_NOTE = (
    "SGLang's own series come from its pods (the PodMonitors the operator creates, or the `sglang` job of "
    "`sglang-operator prometheus-config`). The decode speed, baselines, steps and draft tokens on 0.5.10, the "
    "rollback, tuning and operator rows come from **the operator's own /metrics**: with the Prometheus Operator, "
    "install the chart with `serviceMonitor.enabled=true` (its ServiceMonitor keeps the operator's `namespace` "
    "label: `honorLabels: true`); with a plain Prometheus, keep the `sglang-operator` job of "
    "`sglang-operator prometheus-config`. Without them those panels show no data."
)
"""The dashboard's note on which scrape each panel needs (a text panel at the top)."""

ACCEPT_RATE_DESCRIPTION = (
    f"{s.SPEC_ACCEPT_RATE} as SGLang computes it, and the formula depends on the release: 0.5.10 divides the "
    "accepted tokens (the bonus token included) by verify steps × draft tokens (= accept length ÷ draft tokens); "
    "0.5.11 and later divide the accepted drafts by verify steps × (draft tokens − 1) (= (accept length − 1) ÷ "
    "(draft tokens − 1)). Either way a revision with fewer draft tokens divides by less: the published regression "
    "(1 step, 2 draft tokens, accept length 1.75) reads 0.875 on 0.5.10 against the known-good revision's 0.688 "
    "(accept length 2.75, 4 draft tokens), though it accepts over a third fewer tokens per step. Compare revisions "
    "by accept length, not by this rate."
)
"""The accept-rate panel's caveat. Formulas: SGLang 0.5.10 ``observability/scheduler_metrics_mixin.py``, 0.5.23
``managers/scheduler_components/metrics_reporter.py`` (PR #13212); the simulator models both
(``sglang_sim.perf.accept_rate``)."""


def _query(t: Target, ref: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(t.expr).legend_format(t.legend).ref_id(ref).datasource(DS)


P = TypeVar("P", timeseries.Panel, stat.Panel, statetimeline.Panel, bargauge.Panel)


def _targets(panel: P, targets: list[Target]) -> P:
    for i, t in enumerate(targets):
        panel = panel.with_target(_query(t, chr(ord("A") + i)))
    return panel


def series_panel(title: str, description: str, unit: str, targets: list[Target], span: int = 8,
                 bars: bool = False) -> timeseries.Panel:
    """A time series panel of ``targets``; ``unit`` is a Grafana unit id (``short``, ``s``, ``percentunit``)."""
    p = (timeseries.Panel().title(title).description(description).unit(unit).datasource(DS).height(8).span(span)
         .legend(cb.VizLegendOptions().show_legend(True).display_mode(common.LegendDisplayMode.LIST)
                 .placement(common.LegendPlacement.BOTTOM)))
    if bars:
        p = p.draw_style(common.GraphDrawStyle.BARS)
    return _targets(p, targets)


def stat_panel(title: str, description: str, targets: list[Target], span: int = 6) -> stat.Panel:
    """A stat panel showing the series' name (its legend), e.g. the stable revision."""
    p = (stat.Panel().title(title).description(description).datasource(DS).height(4).span(span)
         .text_mode(common.BigValueTextMode.NAME).graph_mode(common.BigValueGraphMode.NONE)
         .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"])))
    return _targets(p, targets)


def phase_panel() -> statetimeline.Panel:
    p = (statetimeline.Panel().title("Analysis phase")
         .description("The rollback analysis phase of the server over time (1 = current phase).")
         .datasource(DS).height(4).span(18))
    return _targets(p, [Target(f"{_sel(s.OP_ANALYSIS_PHASE)} == 1", "{{phase}}")])


SPEEDUP_DESCRIPTION = (
    "What speculative decoding buys on this server: the recommended trial's output tok/s ÷ the control trial's (the "
    "same server without speculative decoding, `status.controlTrial`), a ratio (1.00× = no gain, below 1 it "
    "costs). `overall` is `status.best.speedup` (at the objective's concurrency level); `concurrency N` the best "
    "trial at that level (`status.bestPerLevel[].speedup`). Set when the tuning ends "
    f"({s.OP_TUNING_BEST_SPEEDUP}, {OPERATOR_SERIES})."
)
"""The speedup stat's description; the figure is ``decisions.tuning.objective.speedups``."""


def speedup_panel() -> stat.Panel:
    """The recommendation's speedup over no speculation, overall and per concurrency level: red below 1×."""
    p = (stat.Panel().title("Speedup over no speculation").description(SPEEDUP_DESCRIPTION).datasource(DS)
         .height(8).span(6).unit("suffix:×").decimals(2)
         .text_mode(common.BigValueTextMode.VALUE_AND_NAME).graph_mode(common.BigValueGraphMode.NONE)
         .color_mode(common.BigValueColorMode.VALUE)
         .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]))
         .thresholds(db.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE)
                     .steps([Threshold(None, "red"), Threshold(1.0, "green")])))
    return _targets(p, [Target(_tuning_sel(s.OP_TUNING_BEST_SPEEDUP, ', concurrency="all"'), "overall"),
                        Target(_tuning_sel(s.OP_TUNING_BEST_SPEEDUP, ', concurrency!="all"'),
                               "concurrency {{concurrency}}")])


def objective_panel() -> bargauge.Panel:
    """One horizontal bar per completed trial: its objective (tok/s), named by trial and settings."""
    p = (bargauge.Panel().title("Trial objective").description(
        "The objective each completed trial of the SGLangTuning scored, tok/s as spec.objective.objectiveMetricName "
        "defines it (per-request decode tok/s at concurrency 1 by default; outputTokensPerSecond: output tok/s at "
        "its level; goodput: the highest output tok/s within the latency limits), `status.trials[].objective`. One "
        "bar per trial, named by the trial and its settings (steps/topk/draft tokens; the control trial reads `no "
        "speculation`). The recommendation also weighs noise and cost: see the speedup and `status.best` "
        f"({s.OP_TUNING_TRIAL_OBJECTIVE}, {OPERATOR_SERIES}).")
        .datasource(DS).height(8).span(18).unit("short").min(0)
        .orientation(common.VizOrientation.HORIZONTAL).display_mode(common.BarGaugeDisplayMode.BASIC)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"])))
    return _targets(p, [Target(_tuning_sel(s.OP_TUNING_TRIAL_OBJECTIVE), "{{trial}} {{settings}}")])


def tuning_row(ids: Iterator[int]) -> db.Row:
    """The collapsed Tuning row: one SGLangTuning (variable ``sglang_tuning``) of the namespace; its panels are
    empty until the tuning has finished a trial (the series do not exist before)."""
    row = db.Row(TUNING_ROW).id(next(ids)).collapsed(True)
    for panel in (
        speedup_panel(),
        objective_panel(),
        series_panel(
            "Trials by verdict", "Finished trials of the SGLangTuning by verdict (Completed, Failed), a count of "
            f"trials ({s.OP_TUNING_TRIALS}, {OPERATOR_SERIES}). The operator counts from its start: after a restart "
            "the count begins at 0 again; status.trialsCompleted and status.trialsFailed hold the whole tuning's.",
            "short", [Target(f"sum by (verdict) ({_tuning_sel(s.OP_TUNING_TRIALS)})", "{{verdict}}")], span=12),
        series_panel(
            "Tunings ended by phase", "SGLangTunings the operator ended since its start, by phase (Succeeded, "
            f"Failed, Cancelled), a count of tunings over every namespace ({s.OP_TUNINGS}: it has no namespace or "
            "tuning label of its own).", "short", [Target(f"sum by (phase) ({s.OP_TUNINGS})", "{{phase}}")],
            span=12),
    ):
        row = row.with_panel(panel.id(next(ids)))
    return row


def _add(d: db.Dashboard, ids: Iterator[int], panel: Any) -> db.Dashboard:
    return d.with_panel(panel.id(next(ids)))


def build() -> db.Dashboard:
    """The dashboard builder (call ``.build()`` for the model); panels and rows numbered from 1 in order."""
    ids = itertools.count(1)
    d = (db.Dashboard(TITLE).uid(UID).tags(["sglang", "sglang-operator", "speculative-decoding"])
         .description("Per revision of one SGLangServer: is MTP / NEXTN speculative decoding paying off? The "
                      "operator's panels need its /metrics scraped (chart: serviceMonitor.enabled=true).")
         .refresh("30s").time("now-3h", "now").timezone("browser").tooltip(DashboardCursorSync.CROSSHAIR)
         .editable())
    d = d.with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    d = d.with_variable(
        db.QueryVariable("namespace").label("Namespace").datasource(DS)
        .query(f'label_values({s.NUM_RUNNING_REQS}{{sglang_server!=""}}, namespace)')
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED))
    d = d.with_variable(
        db.QueryVariable("server").label("SGLangServer").datasource(DS)
        .query(f'label_values({s.NUM_RUNNING_REQS}{{namespace="$namespace"}}, sglang_server)')
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED))
    d = d.with_variable(
        db.QueryVariable("sglang_tuning").label("SGLangTuning").datasource(DS)
        .query(f'label_values({s.OP_TUNING_TRIALS}{{namespace="$namespace"}}, sglang_tuning)')
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED))
    d = d.annotation(
        db.AnnotationQuery().name("Rollbacks").datasource(DS).enable(True).icon_color("red")
        .expr(f"increase({_sel(s.OP_ROLLBACKS)}[1m]) > 0"))
    d = d.annotation(
        db.AnnotationQuery().name("New revision").datasource(DS).enable(True).icon_color("blue")
        .expr(f"count by (revision) ({_sel(s.NUM_RUNNING_REQS)}) unless count by (revision) "
              f"({_sel(s.NUM_RUNNING_REQS)} offset 1m)"))

    d = _add(d, ids, text.Panel().title("Where the series come from").height(3).span(24).mode(TextMode.MARKDOWN)
             .transparent(True).content(SOURCES_NOTE))
    d = d.with_row(db.Row("Speculative decoding, per revision").id(next(ids)))
    d = _add(d, ids, series_panel(
        "Accept length", "Tokens per verify step (accepted drafts + 1), the figure to compare revisions by. From "
        f"counters ({s.GENERATION_TOKENS} ÷ {s.SPEC_VERIFY_CALLS}) where SGLang has them (0.5.2x), else the "
        f"{s.SPEC_ACCEPT_LENGTH} gauge; \"baseline\" is the stable revision's, the one a new revision is judged "
        f"against ({s.OP_BASELINE_ACCEPT_LENGTH}, {OPERATOR_SERIES}).", "short",
        [Target(ACCEPT_LENGTH), Target(_sel(s.OP_BASELINE_ACCEPT_LENGTH), "baseline")]))
    d = _add(d, ids, series_panel("Accept rate", ACCEPT_RATE_DESCRIPTION, "percentunit",
                                  [Target(f"avg by (revision) ({_sel(s.SPEC_ACCEPT_RATE)})")]))
    d = _add(d, ids, series_panel(
        "Decode speed per request", "Single-stream decode tok/s the operator measures (its probe, or 1 / mean "
        "inter-token latency), the figure the rollback compares, and the stable revision's baseline "
        f"({OPERATOR_SERIES}).", "short", [Target(_sel(s.OP_DECODE_TPS)), Target(_sel(s.OP_BASELINE_TPS), "baseline")]))
    d = _add(d, ids, series_panel(
        "Generation throughput", "Output tokens per second over all pods of the revision "
        f"(rate of {s.GENERATION_TOKENS}; counts when a request finishes).", "short",
        [Target(f"sum by (revision) ({_rate(s.GENERATION_TOKENS)})")]))
    d = _add(d, ids, series_panel(
        "Speculative steps and draft tokens", f"{s.SPEC_NUM_STEPS} and {s.SPEC_NUM_DRAFT_TOKENS} as SGLang runs "
        "them where it reports them (0.5.2x); else what SGLang resolved at start for the serving revision, read "
        f"by the operator from /server_info ({s.OP_SPEC_NUM_STEPS}, {s.OP_SPEC_NUM_DRAFT_TOKENS}, "
        f"{OPERATOR_SERIES}).", "short",
        [Target(_or_operator(f"max by (revision) ({_sel(s.SPEC_NUM_STEPS)})", s.OP_SPEC_NUM_STEPS),
                "steps {{revision}}"),
         Target(_or_operator(f"max by (revision) ({_sel(s.SPEC_NUM_DRAFT_TOKENS)})", s.OP_SPEC_NUM_DRAFT_TOKENS),
                "draft tokens {{revision}}")]))
    d = _add(d, ids, series_panel(
        "Running and queued requests", f"{s.NUM_RUNNING_REQS} and {s.NUM_QUEUE_REQS}, summed over pods.", "short",
        [Target(f"sum by (revision) ({_sel(s.NUM_RUNNING_REQS)})", "running {{revision}}"),
         Target(f"sum by (revision) ({_sel(s.NUM_QUEUE_REQS)})", "queued {{revision}}")]))

    d = d.with_row(db.Row("Latency and memory, per revision").id(next(ids)))
    d = _add(d, ids, series_panel("Time to first token", f"p50 and p95 of {s.TTFT}.", "s", _quantiles(s.TTFT)))
    d = _add(d, ids, series_panel("Inter-token latency", f"p50 and p95 of {s.ITL}.", "s", _quantiles(s.ITL)))
    d = _add(d, ids, series_panel(
        "KV-cache usage", f"Used share of the KV-cache token pool ({s.TOKEN_USAGE}, max over pods).",
        "percentunit", [Target(f"max by (revision) ({_sel(s.TOKEN_USAGE)})")]))
    d = _add(d, ids, series_panel(
        "Prefix cache hit rate", f"{s.CACHE_HIT_RATE}, mean over pods.", "percentunit",
        [Target(f"avg by (revision) ({_sel(s.CACHE_HIT_RATE)})")]))
    d = _add(d, ids, series_panel(
        "Retractions", f"Requests retracted per second for lack of KV-cache ({s.RETRACTED_REQUESTS}).", "reqps",
        [Target(f"sum by (revision) ({_rate(s.RETRACTED_REQUESTS)})")], bars=True))

    d = d.with_row(db.Row("Rollback").id(next(ids)))
    d = _add(d, ids, phase_panel())
    d = _add(d, ids, stat_panel(
        "Stable revision", "The last known-good revision the operator rolls back to.",
        [Target(f"{_sel(s.OP_STABLE_REVISION)} == 1", "{{stable_revision}}")]))
    d = _add(d, ids, series_panel(
        "Baseline", "What a new revision is judged against: the stable revision's decode tok/s and accept "
        "length.", "short", [Target(_sel(s.OP_BASELINE_TPS), "decode tok/s"),
                             Target(_sel(s.OP_BASELINE_ACCEPT_LENGTH), "accept length")], span=12))
    d = _add(d, ids, series_panel(
        "Rollbacks", "Automatic rollbacks of the server (increase of sglang_operator_rollbacks_total).", "short",
        [Target(f"increase({_sel(s.OP_ROLLBACKS)}[{RATE}])", "rollbacks")], span=12, bars=True))

    d = d.with_row(db.Row("Operator").id(next(ids)))
    d = _add(d, ids, series_panel(
        "Operator scrape errors", "The operator's failed scrapes of SGLang per second, by reason (0: none).",
        "short", [Target(f"sum by (reason) (rate({s.OP_SCRAPE_ERRORS}[{RATE}])) or on () vector(0)",
                         "{{reason}}")]))
    d = _add(d, ids, series_panel(
        "Operator scrape duration", f"p95 of {s.OP_SCRAPE_DURATION}.", "s",
        [Target(f"histogram_quantile(0.95, sum by (le) (rate({s.OP_SCRAPE_DURATION}_bucket[{RATE}])))", "p95")]))
    d = _add(d, ids, series_panel(
        "Operator event loop lag", f"p50 and p99 of {s.OP_EVENT_LOOP_LAG}: how late the operator's one event loop "
        "(every server's observation, the watches, the Lease renewal) ran a 0.25 s timer. Above ~0.1 s something "
        "holds the loop (docs/bounds-and-sizing.md, \"Parsing off the event loop\").", "s",
        [Target(f"histogram_quantile({q}, sum by (le) (rate({s.OP_EVENT_LOOP_LAG}_bucket[{RATE}])))", legend)
         for q, legend in (("0.5", "p50"), ("0.99", "p99"))]))
    d = _add(d, ids, series_panel(
        "SGLangServers by phase", f"{s.OP_SERVERS} (status.phase of every SGLangServer the operator watches).",
        "short", [Target(f"sum by (phase) ({s.OP_SERVERS})", "{{phase}}")]))
    return d.with_row(tuning_row(ids))


def dashboard_json() -> str:
    """The dashboard as Grafana JSON (2-space indent, trailing newline): the checked-in file's content."""
    model = build().build()
    return json.dumps(json.loads(json.dumps(model, cls=JSONEncoder)), indent=2, sort_keys=True) + "\n"


def row_panels(doc: dict[str, Any], title: str) -> list[dict[str, Any]]:
    """The panels of the row titled ``title`` in a dashboard JSON document: a collapsed row's nested ones, else
    those between it and the next row. Raises ``KeyError`` when no row has that title."""
    rows = [i for i, p in enumerate(doc.get("panels", [])) if p.get("type") == "row"]
    for i in rows:
        row = doc["panels"][i]
        if row.get("title") == title:
            if row.get("collapsed"):
                return list(row.get("panels", []))
            end = next((j for j in rows if j > i), len(doc["panels"]))
            return list(doc["panels"][i + 1:end])
    raise KeyError(title)


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel of a dashboard JSON document (rows' nested panels included), rows themselves excluded."""
    out: list[dict[str, Any]] = []
    for p in doc.get("panels", []):
        if p.get("type") == "row":
            out += p.get("panels", [])
        else:
            out.append(p)
    return out
