"""Issue 47 items 1-2 in Python: what a tenant's ``spec.autoscaling`` may make KEDA query
(``builders/autoscaling_tenancy.py``), and the server's loop writing no ScaledObject for a spec it refuses
(``decisions/autoscaling.want``). The admission policy's half is ``tests/builders/test_admission.py``, the CRD's
address form ``tests/api`` (the invalid-spec table), the real API server ``e2e/tests/test_admission.py``."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator.api.resource import SpecError
from sglang_operator.api.server import SGLangServer, parse
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.builders import autoscaling_tenancy as tenancy
from sglang_operator.builders.autoscaling_tenancy import PrometheusTenancy
from sglang_operator.decisions import autoscaling as scaling

SAMPLE = yaml.safe_load((Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
PROM = "http://prometheus-operated.monitoring.svc:9090"
OWN = 'namespace="$namespace"'


def server(**auto: Any) -> SGLangServer:
    body = copy.deepcopy(SAMPLE)
    body["metadata"]["namespace"] = "team-a"
    body["spec"]["autoscaling"] = {"maxReplicas": 3, "target": 4, **auto}
    return parse(body)


READ = [
    f'sum(rate(sglang:generation_tokens_total{{{OWN}, sglang_server="$server"}}[1m]))',
    f"sum by (pod) (x{{{OWN}}})",
    f"sum(x{{{OWN}}}) by (pod) / count without () (y{{{OWN}}})",
    f"x{{{OWN}}} * on(pod) group_left(node) y{{{OWN}}}",
    f"max_over_time(sum(x{{{OWN}}})[5m:1m]) offset -5m",
    f"x{{{OWN}}} @ start() > bool 3 or vector(0) + time()",
    f'count_values("v", x{{{OWN}}}) # a comment',
    f'label_replace(x{{{OWN}, a="b",}}, "dst", "$1", "src", "(.*)")',
    f'{{__name__=~"sglang:.+", {OWN}}}',
]
"""Queries whose every selector carries the matcher: passed."""

UNSCOPED = [
    (f"sum(kube_pod_info) + sum(x{{{OWN}}})", "kube_pod_info"),  # passes the text rule, reads every namespace
    ('sum(x{namespace="team-b"})', 'x{namespace="team-b"}'),
    ('{__name__=~".+"}', '{__name__=~".+"}'),
    (f"x{{{OWN}}} and sum", "sum"),  # a keyword in an operand's place is a metric name
    ("sum(offset)", "offset"),
    ("x{namespace='$namespace'}", "x{namespace='$namespace'}"),  # written otherwise than the one form
    ('x{"namespace"="$namespace"}', 'x{"namespace"="$namespace"}'),
]
"""Queries with a selector lacking ``namespace="$namespace"``: refused, naming it."""

UNREADABLE = ["", "sum(", f"x{{{OWN}}} $server", f"x{{{OWN}}}[5m{{a}}]", f"x{{{OWN}}} smoothed",
              f"x{{{OWN}}} offset (5m)"]
"""Queries the reader cannot follow (a syntax error, ``$`` outside a string, a construct it does not know): refused,
never guessed at."""


@pytest.mark.parametrize("query", READ)
def test_a_query_whose_every_selector_carries_its_namespace_passes(query: str) -> None:
    assert tenancy.query_selector_refusal(query) is None
    assert all(s.own_namespace for s in tenancy.selectors(query))


@pytest.mark.parametrize(("query", "selector"), UNSCOPED, ids=[q for q, _ in UNSCOPED])
def test_a_selector_without_its_namespace_is_refused_by_name(query: str, selector: str) -> None:
    assert tenancy.query_selector_refusal(query) == (
        f"spec.autoscaling.query selects {selector} without {OWN}: every selector must carry {OWN} (the "
        "SGLangServer's namespace) and the query may name namespace nowhere else, so that it reads this namespace's "
        f"series only; e.g. {tenancy.EXAMPLE}")


@pytest.mark.parametrize("query", UNREADABLE)
def test_a_query_the_reader_cannot_follow_is_refused(query: str) -> None:
    refusal = tenancy.query_selector_refusal(query)
    assert refusal is not None and refusal.startswith("spec.autoscaling.query cannot be read (")


def test_the_text_rule_is_the_admission_policys() -> None:
    assert tenancy.query_text_refusal(READ[0]) is None
    for query in ('sum(x{namespace="team-b"})', "sum(up)", f"x{{{OWN}}} + y{{namespace=~\".*\"}}",
                  f'label_replace(x{{{OWN}}}, "namespace", "b", "", "")'):
        assert tenancy.query_text_refusal(query) == tenancy.QUERY_TEXT, query


def test_the_allow_list_is_the_listed_addresses_then_the_operators_own() -> None:
    assert PrometheusTenancy.of(PROM, ["http://a:1", PROM]).allowed_addresses == ("http://a:1", PROM)
    assert PrometheusTenancy.of(None).allowed_addresses == ()
    assert PrometheusTenancy.of("", ["*"]).allowed_addresses == ("*",)
    assert tenancy.address_refusal("http://x:1", ("*",)) is None
    assert tenancy.address_refusal("http://x:1", ()) == (
        "spec.autoscaling.prometheus.address is http://x:1: KEDA's pod queries it with the cluster's network reach, "
        "so only the Prometheus addresses the admin allows may be named (the chart's "
        "autoscaling.allowedPrometheusAddresses and prometheusAddress: none); remove spec.autoscaling.prometheus to "
        "use the operator's own Prometheus, or ask an admin to allow it")


def test_refusals_come_in_order_address_switch_text_selectors() -> None:
    strict, open_ = PrometheusTenancy.of(PROM), PrometheusTenancy.of(PROM, allow_query=True)
    meta = server(prometheus={"address": "http://169.254.169.254"}, metric="query", query="sum(up)")
    assert str(strict.refusal(meta.spec.autoscaling)).startswith("spec.autoscaling.prometheus.address is ")
    query = server(metric="query", query="sum(up)").spec.autoscaling
    assert strict.refusal(query) == tenancy.QUERY_SWITCH
    assert open_.refusal(query) == tenancy.QUERY_TEXT
    unscoped = server(metric="query", query=f"sum(kube_pod_info) + sum(x{{{OWN}}})").spec.autoscaling
    assert str(open_.refusal(unscoped)).startswith("spec.autoscaling.query selects kube_pod_info without ")
    assert open_.refusal(server(metric="query", query=READ[0]).spec.autoscaling) is None
    assert strict.refusal(server(prometheus={"address": PROM}).spec.autoscaling) is None
    assert strict.refusal(server().spec.autoscaling) is None


def test_a_refused_spec_gets_no_scaled_object_and_the_operators_one_is_deleted() -> None:
    meta = server(prometheus={"address": "http://169.254.169.254"})
    for had in (True, False):
        w = scaling.want(meta, SGLangServerStatus(), keda=True, prometheus_address=PROM, had=had)
        assert w.scaled_object is None and w.delete is had
        assert w.blocked is not None and w.blocked[0] == scaling.NOT_ALLOWED
        assert w.blocked[1].endswith("; no ScaledObject: the server keeps spec.replicas (1) and serves")
    allowed = scaling.want(meta, SGLangServerStatus(), keda=True, prometheus_address=PROM, had=True,
                           tenancy=PrometheusTenancy.of(PROM, ["http://169.254.169.254"]))
    assert allowed.scaled_object is not None and not allowed.delete


@pytest.mark.parametrize("address", ["http://p:9090/", "http://169.254.169.254/latest/meta-data/#", "http://p:9090?x=1",
                                     "http://u:pw@p:9090", "https://p#"])
def test_the_crd_refuses_anything_but_scheme_host_and_port(address: str) -> None:
    with pytest.raises(SpecError) as err:
        server(prometheus={"address": address})
    assert f"spec.autoscaling.prometheus.address is {address}: name Prometheus by scheme, host and port only" in \
        str(err.value)
    for fine in ("http://p:9090", "https://[fd00::1]:9091", "http://prometheus-operated.monitoring.svc"):
        assert server(prometheus={"address": fine}).spec.autoscaling is not None
