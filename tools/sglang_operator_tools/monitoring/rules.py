"""The alert rules, defined once (pure): rendered as a plain Prometheus rules file
(``deploy/prometheus/sglang-operator-rules.yaml``) and as the spec of the chart's PrometheusRule
(``charts/sglang-operator/files/prometheus-rules.yaml``, thresholds from the chart's values).

Alerts (group ``sglang-operator``):

- ``SGLangAcceptLengthCollapsed``: a revision's accept length (recorded as :data:`ACCEPT_LENGTH_RECORD` from
  SGLang's own series, so it needs neither the operator's sampler nor its warm-up) is below
  ``accept_length_fraction`` of the server's median over ``accept_length_window``.
- ``SGLangDecodeThroughputLow``: per-request decode speed (tok/s, the figure the rollback compares) below the
  absolute floor ``min_decode_tokens_per_second``.
- ``SGLangMetricsScrapeFailing``: Prometheus cannot scrape an SGLang pod's ``/metrics`` (``up == 0``).
- ``SGLangOperatorScrapeErrors``: the operator's own scrapes of SGLang fail (by ``reason``).
- ``SGLangServerNotReady``: SGLangServers in a phase other than Ready or Stopped for ``not_ready_for``.
- ``SGLangSpeculativeDecodingInactive``: a server generates tokens while SGLang reports accept length 0
  (``sglang:spec_accept_length`` is 0 when speculative decoding is off).
- ``SGLangRollbackHappened``: the operator rolled a server back (``sglang_operator_rollbacks_total`` increased).
- ``SGLangServerRollbackPaused``: a server's rollback analysis is Paused (``sglang_operator_server_analysis_phase``):
  nothing is judged or rolled back until someone acts (the REASON column of ``kubectl get sgls`` says why).

Regenerate the checked-in copies with ``python -m sglang_operator_tools.monitoring.generate``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from sglang_operator_tools.monitoring import series as s

GROUP_NAME = "sglang-operator"
SERVER = "namespace, sglang_server"
REVISION = "namespace, sglang_server, revision"
HELM_VALUES = ".Values.prometheusRule.thresholds"


@dataclass(frozen=True)
class RuleParams:
    """Thresholds and windows of the rules. Durations are Prometheus durations (``5m``); numbers may also be
    Helm placeholders (strings) in the chart's rendering."""

    accept_length_fraction: float | str = 0.75
    """A revision's accept length below this fraction of the server's recent median fires."""
    accept_length_window: str = "6h"
    """The window of that median."""
    min_decode_tokens_per_second: float | str = 20
    """Absolute floor of per-request decode speed, tok/s."""
    rate_window: str = "5m"
    """Window of ``rate()``/``increase()``."""
    for_duration: str = "10m"
    """How long a condition must hold before an alert fires."""
    not_ready_for: str = "35m"
    """How long a server may stay not Ready (start-up budget: 30 min, builders/workload.py) before it fires."""
    rollback_window: str = "1h"
    """How long the rollback alert stays firing after a rollback."""

    @classmethod
    def helm(cls) -> RuleParams:
        """Every field as a Helm placeholder ``{{ .Values.prometheusRule.thresholds.<camelCase> }}``."""
        return cls(**{f.name: f"{{{{ {HELM_VALUES}.{camel(f.name)} }}}}" for f in fields(cls)})

    def values(self) -> dict[str, Any]:
        """The fields as the chart's ``prometheusRule.thresholds`` values (camelCase keys)."""
        return {camel(f.name): getattr(self, f.name) for f in fields(self)}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


@dataclass(frozen=True)
class Alert:
    """One alerting rule; ``summary``/``description`` hold Prometheus alert-template actions written by
    :class:`Templates`."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str


class Templates:
    """Writes Prometheus alert-template actions (``{{ $labels.x }}``), escaped for Helm when ``helm``."""

    def __init__(self, helm: bool) -> None:
        self.helm = helm

    def __call__(self, action: str) -> str:
        if self.helm:
            return f'{{{{ "{{{{" }}}} {action} {{{{ "}}}}" }}}}'
        return f"{{{{ {action} }}}}"


def alerts(p: RuleParams, t: Templates) -> list[Alert]:
    """The alerts with thresholds ``p``; ``t`` writes the annotations' template actions."""
    server = f"{t('$labels.namespace')}/{t('$labels.sglang_server')}"
    value = t("$value | humanize")
    return [
        Alert(
            "SGLangAcceptLengthCollapsed",
            f"{ACCEPT_LENGTH_RECORD}\n  < on ({SERVER}) group_left ()\n"
            f"    ({p.accept_length_fraction} * quantile_over_time(0.5, "
            f"(max by ({SERVER}) ({ACCEPT_LENGTH_RECORD}))[{p.accept_length_window}:]))",
            p.for_duration, "warning",
            f"Accept length of {server} collapsed",
            f"Revision {t('$labels.revision')} of {server} accepts {value} tokens per verify step, below "
            f"{p.accept_length_fraction} of the server's median over {p.accept_length_window}: speculative "
            "decoding stopped paying off (check numSteps, numDraftTokens, the draft model).",
        ),
        Alert(
            "SGLangDecodeThroughputLow",
            f"{s.OP_DECODE_TPS} < {p.min_decode_tokens_per_second}",
            p.for_duration, "warning",
            f"Decode speed of {server} below {p.min_decode_tokens_per_second} tok/s",
            f"Revision {t('$labels.revision')} of {server} decodes {value} tok/s per request, below the floor "
            f"of {p.min_decode_tokens_per_second} tok/s.",
        ),
        Alert(
            "SGLangMetricsScrapeFailing",
            'up{sglang_server!=""} == 0',
            p.for_duration, "warning",
            f"Prometheus cannot scrape SGLang pod {t('$labels.namespace')}/{t('$labels.pod')}",
            f"The /metrics endpoint of pod {t('$labels.pod')} ({server}, revision {t('$labels.revision')}) "
            "has not answered Prometheus' scrapes.",
        ),
        Alert(
            "SGLangOperatorScrapeErrors",
            f"sum by (reason) (rate({s.OP_SCRAPE_ERRORS}[{p.rate_window}])) > 0",
            p.for_duration, "warning",
            f"The operator's scrapes of SGLang fail ({t('$labels.reason')})",
            f"sglang-operator counts {value} scrape errors per second with reason {t('$labels.reason')}: its "
            "figures (status, rollback decisions) are missing or stale.",
        ),
        Alert(
            "SGLangServerNotReady",
            f'sum by (phase) ({s.OP_SERVERS}{{phase!~"Ready|Stopped"}}) > 0',
            p.not_ready_for, "warning",
            f"{value} SGLangServers are {t('$labels.phase')}",
            f"{value} SGLangServers have been in phase {t('$labels.phase')} for more than {p.not_ready_for} "
            "(`kubectl get sgls -A` shows which; their Degraded condition says why).",
        ),
        Alert(
            "SGLangSpeculativeDecodingInactive",
            f"max by ({REVISION}) ({s.SPEC_ACCEPT_LENGTH}) == 0\n"
            f"  and on ({REVISION})\n"
            f"    sum by ({REVISION}) (rate({s.GENERATION_TOKENS}[{p.rate_window}])) > 0",
            p.for_duration, "warning",
            f"Speculative decoding inactive on {server}",
            f"Revision {t('$labels.revision')} of {server} generates tokens but SGLang reports accept length 0: "
            "speculative decoding is off (silence this for servers without spec.speculative).",
        ),
        Alert(
            "SGLangRollbackHappened",
            f"increase({s.OP_ROLLBACKS}[{p.rollback_window}]) > 0",
            "0m", "info",
            f"sglang-operator rolled {server} back",
            f"The operator rolled {server} back to its last known-good revision within the last "
            f"{p.rollback_window} (`kubectl describe sgls` shows the RolledBack condition and why).",
        ),
        Alert(
            "SGLangServerRollbackPaused",
            f'max by ({SERVER}) ({s.OP_ANALYSIS_PHASE}{{phase="Paused"}}) == 1',
            "1m", "warning",
            f"Rollback analysis of {server} is Paused",
            f"The operator judges and rolls back nothing on {server} until someone acts: a failing revision it may not "
            "roll back keeps running (action Alert or DryRun, no stable revision, maxRollbacks reached) or measurement "
            "errors came in a row. The REASON column of `kubectl get sgls` says which, `kubectl describe sgls` the "
            "figures; `kubectl sglang retry` verifies again, `kubectl sglang undo` returns to an earlier revision.",
        ),
    ]


ACCEPT_LENGTH_RECORD = "sglang_server_revision:accept_length:rate"
"""Recorded accept length per revision (tokens per verify step) from SGLang's own series."""


def accept_length_expr(p: RuleParams) -> str:
    """Accept length per revision from SGLang's series: generation-token ÷ verify-call increases over
    ``rate_window`` where the release has ``sglang:spec_verify_calls_total`` (0.5.2x), else the windowed
    ``sglang:spec_accept_length`` gauge (mean over pods); idle or spec-off values (NaN, 0) are left out."""
    by = f"sum by ({REVISION})"
    return (f"({by} (rate({s.GENERATION_TOKENS}[{p.rate_window}]))\n"
            f"  / {by} (rate({s.SPEC_VERIFY_CALLS}[{p.rate_window}])) > 0)\n"
            f"or avg by ({REVISION}) ({s.SPEC_ACCEPT_LENGTH} > 0)")


def _rule(a: Alert) -> dict[str, Any]:
    return {"alert": a.name, "expr": a.expr, "for": a.for_, "labels": {"severity": a.severity},
            "annotations": {"summary": a.summary, "description": a.description}}


def rule_groups(params: RuleParams | None = None, helm: bool = False) -> dict[str, Any]:
    """``{"groups": [...]}``: the rules file (and the PrometheusRule spec) with ``params`` (defaults when None).

    ``helm``: thresholds as Helm placeholders and template actions escaped, for the chart's ``tpl``.
    """
    p = RuleParams.helm() if helm else (params or RuleParams())
    record = {"record": ACCEPT_LENGTH_RECORD, "expr": accept_length_expr(p)}
    return {"groups": [{"name": GROUP_NAME, "rules": [record, *(_rule(a) for a in alerts(p, Templates(helm)))]}]}


def fast(params: RuleParams | None = None, **changes: Any) -> RuleParams:
    """``params`` (defaults when None) with ``changes`` (e.g. second-long windows for tests)."""
    return replace(params or RuleParams(), **changes)
