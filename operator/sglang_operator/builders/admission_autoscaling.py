"""The admission rules on where a tenant's autoscaler looks (:mod:`sglang_operator.builders.admission`;
``docs/security.md``, "Autoscaling"): ``spec.autoscaling.prometheus.address`` only one the admin allows
(:class:`PrometheusAddressRule`), ``metric: query`` only where the admin allows it and then held to the server's
namespace by the text rule (:class:`QueryMetricRule`). The words are
:mod:`sglang_operator.builders.autoscaling_tenancy`'s, which the operator also applies (with the selector rule CEL
cannot run) before it writes a ScaledObject.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglang_operator.builders import autoscaling_tenancy as tenancy
from sglang_operator.builders.admission_kinds import BOTH, OBJECT, Level, Params, lit, lookup, spec_of, validation

_AUTO = f"{OBJECT}.autoscaling"


@dataclass(frozen=True)
class PrometheusAddressRule:
    """``spec.autoscaling.prometheus.address`` is in the variable ``allowedPrometheusAddresses`` (the chart's
    ``autoscaling.allowedPrometheusAddresses`` and ``prometheusAddress``), or that holds ``*``."""

    name: str
    levels: tuple[Level, ...] = BOTH

    def cel(self) -> list[dict[str, str]]:
        address, allowed = f"{_AUTO}.prometheus.address", "variables.allowedPrometheusAddresses"
        return [validation(
            f"!has({_AUTO}) || !has({_AUTO}.prometheus) || {lit(tenancy.ANY_ADDRESS)} in {allowed} || "
            f"{address} in {allowed}",
            f"spec.autoscaling.prometheus.address: {tenancy.ADDRESS_SAYS}...{tenancy.ADDRESS_FIX}",
            f"'spec.autoscaling.prometheus.address is ' + {address} + ': ' + {lit(tenancy.ADDRESS_SAYS)} + "
            f"({allowed}.size() == 0 ? 'none' : {allowed}.join(', ')) + {lit(tenancy.ADDRESS_FIX)}")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        found, address = lookup(spec_of(obj), ("autoscaling", "prometheus", "address"))
        return tenancy.address_refusal(str(address), params.allowed_prometheus_addresses) if found else None


@dataclass(frozen=True)
class QueryMetricRule:
    """``metric: query`` only with the variable ``allowQueryMetric`` (the chart's ``autoscaling.allowQueryMetric``)
    (not ``text``); with it, ``spec.autoscaling.query`` passes the text rule (``text``)."""

    name: str
    text: bool
    levels: tuple[Level, ...] = BOTH

    def cel(self) -> list[dict[str, str]]:
        if not self.text:
            return [validation(
                f"!has({_AUTO}) || !has({_AUTO}.metric) || {_AUTO}.metric != 'query' || variables.allowQueryMetric",
                tenancy.QUERY_SWITCH, lit(tenancy.QUERY_SWITCH))]
        query, own = f"{_AUTO}.query", lit(tenancy.OWN_NAMESPACE)
        return [validation(
            f"!has({_AUTO}) || !has({query}) || !variables.allowQueryMetric || ({query}.contains({own}) && "
            f"!{query}.replace({own}, '').contains('namespace'))",
            tenancy.QUERY_TEXT, lit(tenancy.QUERY_TEXT))]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        auto = spec_of(obj).get("autoscaling")
        if not isinstance(auto, Mapping):
            return None
        if not self.text:
            return tenancy.QUERY_SWITCH if auto.get("metric") == "query" and not params.allow_query_metric else None
        query = auto.get("query")
        if query is None or not params.allow_query_metric:
            return None
        return tenancy.query_text_refusal(str(query))
