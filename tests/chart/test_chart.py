"""The Helm chart ``charts/sglang-operator`` rendered by a real helm (``python -m e2e.tools helm``), no cluster:
lint, the objects of both modes, the operator command line, and RBAC that covers every API call the operator
makes (and no write beyond them). The chart's CRD copy is checked by ``tests/api/test_crd.py``; the RBAC is
exercised against a real API server by ``e2e/tests/test_chart_rbac.py``, the admission policy by
``e2e/tests/test_admission.py``.
"""

from __future__ import annotations

import getpass
import json
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from e2e.tools import helm_template, require_helm

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sglang-operator"
RELEASE, RELEASE_NS = "rel", "ops"
WATCHED = ["team-a", "team-b"]
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}

ApiCall = tuple[str, str, str, tuple[str, ...], str]
"""(scope, apiGroup, resource, verbs, caller): "namespaced" needs must hold in every watched namespace, "cluster"
needs cluster-wide, "release" in the release namespace."""


def _api_calls(key: str) -> list[ApiCall]:
    table = yaml.safe_load((Path(__file__).parent / "operator_api_calls.yaml").read_text())
    return [(scope, group, resource, tuple(verbs), caller) for scope, group, resource, verbs, caller in table[key]]


NEEDED = _api_calls("needed")
"""Every API call the operator makes (``operator_api_calls.yaml``)."""


def operators(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``objs`` without the users' ClusterRoles (aggregated into admin/edit/view, bound to nobody by the chart:
    :func:`test_edit_and_view_aggregate_sglangservers` pins their rules)."""
    return [o for o in objs if not any(k.startswith("rbac.authorization.k8s.io/aggregate-to-")
                                       for k in o["metadata"].get("labels", {}))]


def render(helm: Path, **values: Any) -> list[dict[str, Any]]:
    return helm_template(helm, CHART, RELEASE, RELEASE_NS, values)


def only(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def _matches(rule: dict[str, Any], group: str, resource: str, verb: str) -> bool:
    return ((group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
            and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
            and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", [])))


def effective_rules(objs: list[dict[str, Any]], sa: str, namespace: str | None) -> list[dict[str, Any]]:
    """The rules the ServiceAccount ``RELEASE_NS/sa`` has in ``namespace`` (None: cluster-wide), as the RBAC
    authorizer computes them from the rendered objects only."""
    def bound(binding: dict[str, Any]) -> bool:
        return any(s.get("kind") == "ServiceAccount" and s.get("name") == sa and s.get("namespace") == RELEASE_NS
                   for s in binding.get("subjects", []))

    def role(kind: str, name: str, ns: str | None) -> list[dict[str, Any]]:
        return [r for o in objs if o["kind"] == kind and o["metadata"]["name"] == name
                and (kind == "ClusterRole" or o["metadata"].get("namespace") == ns) for r in o.get("rules", [])]

    rules = [r for b in objs if b["kind"] == "ClusterRoleBinding" and bound(b)
             for r in role("ClusterRole", b["roleRef"]["name"], None)]
    if namespace is not None:
        rules += [r for b in objs if b["kind"] == "RoleBinding" and b["metadata"].get("namespace") == namespace
                  and bound(b) for r in role(b["roleRef"]["kind"], b["roleRef"]["name"], namespace)]
    return rules


def missing(objs: list[dict[str, Any]], namespaces: list[str | None]) -> list[str]:
    sa = only(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    out = []
    for scope, group, resource, verbs, why in NEEDED:
        for ns in namespaces if scope == "namespaced" else [RELEASE_NS] if scope == "release" else [None]:
            rules = effective_rules(objs, sa, ns)
            out += [f"{verb} {group or 'core'}/{resource} in {ns or 'cluster'} ({why})" for verb in verbs
                    if not any(_matches(r, group, resource, verb) for r in rules)]
    return out


def test_lint_is_clean() -> None:
    helm = require_helm()
    import subprocess

    for extra in ([], ["--set", "watchNamespaces={a,b}", "--set", "peering=ops"]):
        proc = subprocess.run([str(helm), "lint", "--strict", str(CHART), *extra], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout
        assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


def test_clusterwide_objects() -> None:
    helm = require_helm()
    objs = render(helm)
    assert Counter(o["kind"] for o in objs) == Counter(
        {"ServiceAccount": 1, "ClusterRole": 3, "ClusterRoleBinding": 1, "Deployment": 1, "Service": 1,
         "Role": 1, "RoleBinding": 1, "PodDisruptionBudget": 1, "CustomResourceDefinition": 2,
         "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1, "NetworkPolicy": 1})
    args = only(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith("--namespace")]
    assert missing(objs, [None]) == []


def test_namespaced_objects() -> None:
    helm = require_helm()
    objs = render(helm, watchNamespaces=WATCHED)
    assert Counter(o["kind"] for o in objs) == Counter(
        {"ServiceAccount": 1, "ClusterRole": 3, "ClusterRoleBinding": 1, "Role": 3, "RoleBinding": 3,
         "Deployment": 1, "Service": 1, "PodDisruptionBudget": 1, "CustomResourceDefinition": 2,
         "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1, "NetworkPolicy": 1})
    assert sorted(o["metadata"]["namespace"] for o in objs if o["kind"] in ("Role", "RoleBinding")) == \
        sorted([*WATCHED, RELEASE_NS] * 2)  # the release namespace: the Lease's Role
    for o in objs:
        if o["kind"] in ("ServiceAccount", "Deployment", "Service", "PodDisruptionBudget"):
            assert o["metadata"]["namespace"] == RELEASE_NS
    assert missing(objs, list(WATCHED)) == []
    # the managed objects are granted in the watched namespaces only, never cluster-wide
    sa = only(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    clusterwide = effective_rules(objs, sa, None)
    assert [(g, r, v) for scope, g, r, verbs, _ in NEEDED if scope == "namespaced" for v in verbs
            if any(_matches(rule, g, r, v) for rule in clusterwide)] == []


def test_no_write_beyond_needed() -> None:
    helm = require_helm()
    needed = {(g, r, v) for _, g, r, verbs, _ in NEEDED for v in verbs}
    for objs in (render(helm), render(helm, watchNamespaces=WATCHED)):
        for o in operators(objs):
            for rule in o.get("rules", []):
                assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
                extra = {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"]
                         for v in rule["verbs"] if v in WRITE_VERBS} - needed
                assert not extra, f"{o['kind']} {o['metadata']['name']} grants writes nothing calls: {extra}"


def test_peering_rules_follow_the_mode() -> None:
    helm = require_helm()
    def peering_resources(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(o["kind"], r) for o in objs for rule in o.get("rules", []) if "kopf.dev" in rule["apiGroups"]
                for r in rule["resources"]}

    assert peering_resources(render(helm)) == set()
    assert peering_resources(render(helm, peering="ops")) == {("ClusterRole", "clusterkopfpeerings")}
    assert peering_resources(render(helm, peering="ops", watchNamespaces=WATCHED)) == {("Role", "kopfpeerings")}
    args = only(render(helm, peering="ops"), "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--peering=ops" in args


def test_deployment_runs_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """The container's command line parses with the real CLI into the runner's arguments."""
    helm = require_helm()
    objs = render(helm, watchNamespaces=WATCHED)
    dep = only(objs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == only(objs, "ServiceAccount")["metadata"]["name"]
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["strategy"]["type"] == "RollingUpdate"  # leader election
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = pod["containers"]
    command, args = container["command"], container["args"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert command[0] in scripts and scripts[command[0]] == "sglang_operator.entry.cli:app"
    assert [a for a in args if a.startswith("--namespace")] == [f"--namespace={n}" for n in WATCHED]

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr("sglang_operator.entry.runner.run", lambda **kw: calls.append(kw))
    from sglang_operator.entry.cli import app

    result = CliRunner().invoke(app, [*command[1:], *args])
    assert result.exit_code == 0, result.output
    assert list(calls[0]["namespaces"]) == WATCHED
    port = container["ports"][0]["containerPort"]
    assert calls[0]["liveness"] == f"http://0.0.0.0:{port}/healthz"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": container["ports"][0]["name"]}
    metrics = {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"]
    assert calls[0]["metrics_port"] == metrics
    readyz = {p["name"]: p["containerPort"] for p in container["ports"]}["readyz"]
    assert calls[0]["readiness_port"] == readyz != metrics
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "readyz"}


def test_the_prometheus_address_reaches_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    """``autoscaling.prometheusAddress`` becomes ``--prometheus-address``, which the real CLI hands to the runner;
    empty (the default) passes nothing."""
    helm = require_helm()
    from sglang_operator.entry.cli import app

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr("sglang_operator.entry.runner.run", lambda **kw: calls.append(kw))
    for values in ({}, {"autoscaling": {"prometheusAddress": "http://prom.monitoring:9090",
                                        "allowedPrometheusAddresses": ["http://thanos:9090", "*"],
                                        "allowQueryMetric": True}}):
        container = only(render(helm, **values), "Deployment")["spec"]["template"]["spec"]["containers"][0]
        result = CliRunner().invoke(app, [*container["command"][1:], *container["args"]])
        assert result.exit_code == 0, result.output
    assert [c["prometheus_address"] for c in calls] == [None, "http://prom.monitoring:9090"]
    assert [c["allowed_prometheus_addresses"] for c in calls] == [(), ("http://thanos:9090", "*")]
    assert [c["allow_query_metric"] for c in calls] == [False, True]


def test_pod_id_spares_kopf_the_passwd_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """The image runs as uid 65532 with no /etc/passwd entry, where getpass.getuser() raises KeyError; kopf
    names the operator from POD_ID instead when the chart sets it (kopf/_core/engines/peering.py)."""
    helm = require_helm()
    from kopf._core.engines.peering import detect_own_id

    container = only(render(helm), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container.get("env", [])}
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}

    def no_passwd() -> str:
        raise KeyError("getpwuid(): uid not found: 65532")

    monkeypatch.setattr(getpass, "getuser", no_passwd)
    monkeypatch.setenv("POD_ID", "sglang-operator-6d4cf9-x2x7k")
    assert detect_own_id(manual=False) == "sglang-operator-6d4cf9-x2x7k"
    monkeypatch.delenv("POD_ID")
    with pytest.raises(KeyError):
        detect_own_id(manual=False)


def _readme_permissions() -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) → verbs of the README's permission table."""
    import re

    text = (CHART / "README.md").read_text()
    section = text.split("## Permissions", 1)[1].split("\n## ", 1)[0]
    out: dict[tuple[str, str], set[str]] = {}
    for line in section.splitlines():
        m = re.match(r"\| `([^`]+)`(?: \(([a-z0-9.-]+)\))? \| ([a-z, ]+) \|", line)
        if m:
            group = "" if m[2] in (None, "core") else m[2]
            out[(group, m[1])] = {v.strip() for v in m[3].split(",")}
    return out


def test_readme_permission_table_is_what_the_chart_grants_per_namespace() -> None:
    helm = require_helm()
    objs = render(helm, watchNamespaces=WATCHED)
    sa = only(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in effective_rules(objs, sa, WATCHED[0]):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    cluster = {(g, r) for rule in effective_rules(objs, sa, None) for g in rule["apiGroups"] for r in rule["resources"]}
    granted = {k: v for k, v in granted.items() if k not in cluster}  # the per-namespace part
    assert _readme_permissions() == granted
    assert granted[("", "secrets")] == {"get"}  # and why: spec.apiKeySecretRef (README)
    assert ("", "secrets") not in cluster  # namespaced mode: per namespace only
    clusterwide = render(helm)
    assert any(_matches(r, "", "secrets", "get") for r in effective_rules(clusterwide, sa, None))


NEEDED_SECURE = _api_calls("needed_secure")
"""The calls of ``--metrics-secure`` (``metrics.secure``)."""


def _args(objs: list[dict[str, Any]]) -> list[str]:
    args: list[str] = only(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _grants(objs: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    sa = only(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    return any(_matches(r, group, resource, verb) for r in effective_rules(objs, sa, None))


def test_secure_metrics_get_review_rights_in_both_modes_and_a_reader_role(monkeypatch: pytest.MonkeyPatch) -> None:
    helm = require_helm()
    plain = render(helm)
    assert "--metrics-secure" not in _args(plain)
    assert not any(_grants(plain, g, r, "create") for _, g, r, _v, _w in NEEDED_SECURE)  # not granted unless secure
    assert not [o for o in plain if o["metadata"]["name"].endswith("-metrics-reader")]
    readers = [{"name": "prometheus", "namespace": "monitoring"}]
    for extra in ({}, {"watchNamespaces": WATCHED}):
        objs = render(helm, metrics={"secure": True, "readerServiceAccounts": readers}, **extra)
        assert "--metrics-secure" in _args(objs)
        for _, group, resource, verbs, _why in NEEDED_SECURE:
            assert all(_grants(objs, group, resource, v) for v in verbs), (extra, resource)
        assert missing(objs, list(WATCHED) if extra else [None]) == []
        [reader] = [o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-metrics-reader")]
        assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
        [binding] = [o for o in objs if o["kind"] == "ClusterRoleBinding"
                     and o["roleRef"]["name"] == reader["metadata"]["name"]]
        assert binding["subjects"] == [{"kind": "ServiceAccount", **readers[0]}]
        needed = {(g, r, v) for _, g, r, verbs, _ in [*NEEDED, *NEEDED_SECURE] for v in verbs}
        for o in operators(objs):  # still no write beyond what is called
            for rule in o.get("rules", []):
                extra_writes = {(g, r, v) for g in rule.get("apiGroups", []) for r in rule.get("resources", [])
                                for v in rule["verbs"] if v in WRITE_VERBS} - needed
                assert not extra_writes, (o["metadata"]["name"], extra_writes)
    calls: list[dict[str, Any]] = []  # the flags parse with the real CLI into the runner's config
    monkeypatch.setattr("sglang_operator.entry.runner.run", lambda **kw: calls.append(kw))
    from sglang_operator.entry.cli import app
    from sglang_operator.process.metrics_http import MetricsServerConfig

    objs = render(helm, metrics={"secure": True, "readTimeout": 5, "writeTimeout": 20, "maxConnections": 64})
    result = CliRunner().invoke(app, ["run", *_args(objs)])
    assert result.exit_code == 0, result.output
    assert calls[-1]["metrics_server"] == MetricsServerConfig(5.0, 20.0, 64, True)
    result = CliRunner().invoke(app, ["run", *_args(plain)])
    assert calls[-1]["metrics_server"] == MetricsServerConfig()  # the chart's defaults are the CLI's


def _endpoint(objs: list[dict[str, Any]]) -> dict[str, Any]:
    [endpoint] = only(objs, "ServiceMonitor")["spec"]["endpoints"]
    return dict(endpoint)


def test_the_service_monitor_sends_a_token_when_metrics_are_secure() -> None:
    helm = require_helm()
    plain = _endpoint(render(helm, serviceMonitor={"enabled": True}))
    assert plain["scheme"] == "http" and "bearerTokenFile" not in plain and "authorization" not in plain
    own = _endpoint(render(helm, serviceMonitor={"enabled": True}, metrics={"secure": True}))
    assert own["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert "authorization" not in own
    secret = _endpoint(render(helm, metrics={"secure": True}, serviceMonitor={
        "enabled": True, "bearerTokenSecret": {"name": "prom-token", "key": "token"}}))
    assert secret["authorization"] == {"type": "Bearer", "credentials": {"name": "prom-token", "key": "token"}}
    assert "bearerTokenFile" not in secret


def _container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = only(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return container


def test_secure_metrics_are_https_and_the_probe_and_service_monitor_follow(monkeypatch: pytest.MonkeyPatch) -> None:
    """metrics.secure: the ServiceMonitor uses HTTPS (the readinessProbe its own plain port); without
    metrics.certSecret the operator's self-signed certificate (not verified), with it that Secret mounted as
    --metrics-cert-dir and verified by the ServiceMonitor against its ca.crt for the metrics Service's DNS name."""
    helm = require_helm()
    plain = render(helm, serviceMonitor={"enabled": True})
    assert "tlsConfig" not in _endpoint(plain)
    assert "scheme" not in _container(plain)["readinessProbe"]["httpGet"]  # HTTP, the kubelet's default
    assert not [a for a in _args(plain) if a.startswith("--metrics-cert-dir")]
    assert "POD_IP" not in {e["name"] for e in _container(plain)["env"]}

    own = render(helm, serviceMonitor={"enabled": True}, metrics={"secure": True})
    endpoint = _endpoint(own)
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert _container(own)["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "readyz"}
    assert not [a for a in _args(own) if a.startswith("--metrics-cert-dir")]
    assert [v["name"] for v in only(own, "Deployment")["spec"]["template"]["spec"]["volumes"]] == ["tmp"]
    env = {e["name"]: e for e in _container(own)["env"]}  # a name of the self-signed certificate
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}

    objs = render(helm, serviceMonitor={"enabled": True}, metrics={"secure": True, "certSecret": "metrics-cert"})
    endpoint = _endpoint(objs)
    service = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"].endswith("-metrics"))
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "metrics-cert", "key": "ca.crt"}},
        "serverName": f"{service['metadata']['name']}.{RELEASE_NS}.svc"}
    assert endpoint["bearerTokenFile"]  # the token still goes with it
    container = _container(objs)
    assert "scheme" not in container["readinessProbe"]["httpGet"]
    [cert_dir] = [a.split("=", 1)[1] for a in _args(objs) if a.startswith("--metrics-cert-dir=")]
    pod = only(objs, "Deployment")["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] != "tmp"]
    assert volume["secret"] == {"secretName": "metrics-cert"}
    assert {"name": volume["name"], "mountPath": cert_dir, "readOnly": True} in container["volumeMounts"]

    calls: list[dict[str, Any]] = []  # the flags parse with the real CLI
    monkeypatch.setattr("sglang_operator.entry.runner.run", lambda **kw: calls.append(kw))
    from sglang_operator.entry.cli import app
    from sglang_operator.process.metrics_http import MetricsServerConfig

    result = CliRunner().invoke(app, ["run", *_args(objs)])
    assert result.exit_code == 0, result.output
    assert calls[-1]["metrics_server"] == MetricsServerConfig(secure=True, cert_dir=cert_dir)
    with pytest.raises(AssertionError, match=r"metrics\.certSecret needs metrics\.secure=true"):
        render(helm, metrics={"certSecret": "metrics-cert"})


def test_the_network_policy_opens_only_the_metrics_port_to_the_given_peers() -> None:
    """On by default (any source may scrape the metrics port, nothing reaches the other ports but the node's
    kubelet); ``from`` narrows it; ``enabled: false`` renders none."""
    helm = require_helm()
    default = only(render(helm), "NetworkPolicy")
    assert default["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]
    assert not [o for o in render(helm, metrics={"networkPolicy": {"enabled": False}}) if o["kind"] == "NetworkPolicy"]
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    objs = render(helm, metrics={"networkPolicy": {"enabled": True, "from": peers}})
    policy = only(objs, "NetworkPolicy")
    assert policy["metadata"]["namespace"] == RELEASE_NS
    labels = only(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}], "from": peers}]
    ports = {p["name"] for p in only(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert "metrics" in ports
    anyone = only(render(helm, metrics={"networkPolicy": {"enabled": True}}), "NetworkPolicy")
    assert anyone["spec"]["ingress"] == [{"ports": [{"port": "metrics", "protocol": "TCP"}]}]


def _policy(objs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    return only(objs, "ValidatingAdmissionPolicy"), only(objs, "ValidatingAdmissionPolicyBinding")


def test_the_admission_policy_is_the_generated_rules_at_the_chosen_level() -> None:
    from sglang_operator.builders import admission

    helm = require_helm()
    rules = admission.policy_rules()
    for level in ("baseline", "restricted"):
        vap, binding = _policy(render(helm, admissionPolicy={"level": level}))
        assert vap["metadata"]["name"] == binding["metadata"]["name"] == f"{RELEASE}-sglang-operator-sglangservers"
        assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
        spec = vap["spec"]
        assert spec["failurePolicy"] == "Fail" and "paramKind" not in spec
        assert spec["validations"] == rules["validations"][level]
        assert spec["matchConstraints"] == rules["matchConstraints"]
        assert spec["matchConditions"] == rules["matchConditions"]
        assert spec["variables"][len(admission.PARAM_VARIABLES):] == rules["variables"]
    assert len(_policy(render(helm, admissionPolicy={"level": "restricted"}))[0]["spec"]["validations"]) > \
        len(_policy(render(helm))[0]["spec"]["validations"])


def test_the_admins_values_reach_the_cel_only_as_literal_variables() -> None:
    helm = require_helm()
    tricky = "/models/a'b\\" + '"c) || true || ("'
    vap, _ = _policy(render(helm, admissionPolicy={"allowedHostPaths": ["/models", tricky],
                                                   "allowedServiceAccounts": ["puller", "team-a/hf"]}))
    variables = {v["name"]: v["expression"] for v in vap["spec"]["variables"]}
    assert json.loads(variables["allowedHostPaths"]) == ["/models", tricky]  # one JSON string array, escaped
    assert json.loads(variables["allowedServiceAccounts"]) == ["puller", "team-a/hf"]
    assert json.loads(variables["operatorServiceAccount"]) == f"{RELEASE}-sglang-operator"
    assert json.loads(variables["operatorNamespace"]) == RELEASE_NS
    assert all("/models" not in v["expression"] for v in vap["spec"]["validations"])
    defaults, _ = _policy(render(helm))
    assert {v["name"]: v["expression"] for v in defaults["spec"]["variables"]}["allowedHostPaths"] == "[]"


def test_the_autoscaling_values_reach_the_policy() -> None:
    """Issue 47: the policy's allowedPrometheusAddresses are autoscaling.allowedPrometheusAddresses then
    prometheusAddress (once each; by default the operator's own only, none when it has none), allowQueryMetric a
    CEL bool, false by default."""
    helm = require_helm()

    def variables(**autoscaling: Any) -> dict[str, Any]:
        vap, _ = _policy(render(helm, autoscaling=autoscaling))
        return {v["name"]: json.loads(v["expression"]) for v in vap["spec"]["variables"]
                if v["name"] in ("allowedPrometheusAddresses", "allowQueryMetric")}

    own = "http://prometheus-operated.monitoring.svc:9090"
    assert variables() == {"allowedPrometheusAddresses": [], "allowQueryMetric": False}
    assert variables(prometheusAddress=own) == {"allowedPrometheusAddresses": [own], "allowQueryMetric": False}
    assert variables(prometheusAddress=own, allowedPrometheusAddresses=["http://thanos:9090", own],
                     allowQueryMetric=True) == {"allowedPrometheusAddresses": ["http://thanos:9090", own],
                                                "allowQueryMetric": True}


def test_the_admission_policy_can_be_turned_off_and_refuses_an_unknown_level() -> None:
    import subprocess

    helm = require_helm()
    objs = render(helm, admissionPolicy={"enabled": False})
    assert not [o for o in objs if o["kind"].startswith("ValidatingAdmissionPolicy")]
    proc = subprocess.run([str(helm), "template", RELEASE, str(CHART), "--set", "admissionPolicy.level=privileged"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "admissionPolicy/level" in proc.stderr


def test_edit_and_view_aggregate_sglangservers() -> None:
    helm = require_helm()
    objs = render(helm)
    roles = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterRole"}
    edit, view = roles[f"{RELEASE}-sglang-operator-edit"], roles[f"{RELEASE}-sglang-operator-view"]
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert "rbac.authorization.k8s.io/aggregate-to-edit" not in view["metadata"]["labels"]
    assert edit["rules"] == [{"apiGroups": ["sglang-operator.io"], "resources": ["sglangservers", "sglangtunings"],
                              "verbs": ["create", "update", "patch", "delete", "get", "list", "watch"]}]
    assert view["rules"] == [{"apiGroups": ["sglang-operator.io"],
                              "resources": ["sglangservers", "sglangservers/status", "sglangtunings",
                                            "sglangtunings/status"],
                              "verbs": ["get", "list", "watch"]}]
    assert not [o for o in render(helm, aggregateClusterRoles=False) if o["metadata"]["name"] in roles
                and o["metadata"]["name"].endswith(("-edit", "-view"))]
