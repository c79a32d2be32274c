"""The tenant boundary's rules (builders/admission*.py) offline: the chart's generated copy is fresh, each forbidden
spec is refused naming its field, what is allowed passes, and the CEL the API server runs says the same words."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator.builders import admission as adm
from sglang_operator.builders.admission_kinds import HostPathWrites, Level, Params
from sglang_operator.builders.admission_secrets import SECRET_SLOTS

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "charts" / "sglang-operator" / "files" / "admission-policy.json"
KNOWN_GOOD = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
OPERATOR = Params(operator_service_account="sglang-operator", operator_namespace="ops")


def server(namespace: str = "team-a", **spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(KNOWN_GOOD)
    body["metadata"]["namespace"] = namespace
    body["spec"].update(spec)
    return body


def refusals(body: dict[str, Any], params: Params = OPERATOR) -> tuple[str, ...]:
    return adm.check(body, params).refusals


def test_the_charts_copy_is_what_the_generator_writes() -> None:
    assert COMMITTED.read_text() == adm.policy_rules_json(), (
        "stale: python -m sglang_operator.builders.admission > charts/sglang-operator/files/admission-policy.json")


def test_the_known_good_sample_passes_baseline_and_not_restricted() -> None:
    assert refusals(server()) == ()
    assert refusals(server(), Params(level=Level.RESTRICTED)) == (
        "spec.securityContext.runAsNonRoot is unset: level restricted needs a container that runs as a non-root user "
        "(lmsysorg/sglang images run as root) (Pod Security Standards restricted, check runAsNonRoot); set it to true "
        "with an image that runs as a non-root user, and runAsUser if the image names no numeric user",)


FORBIDDEN: list[tuple[str, dict[str, Any], str]] = [
    ("privileged", {"securityContext": {"privileged": True}}, "spec.securityContext.privileged is true: "),
    ("SYS_ADMIN", {"securityContext": {"capabilities": {"add": ["CHOWN", "SYS_ADMIN"]}}},
     "spec.securityContext.capabilities.add adds SYS_ADMIN: "),
    ("IPC_LOCK (RDMA)", {"securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}},
     "spec.securityContext.capabilities.add adds IPC_LOCK: "),
    ("seccomp Unconfined", {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
     "spec.securityContext.seccompProfile.type is Unconfined: "),
    ("AppArmor Unconfined", {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}},
     "spec.securityContext.appArmorProfile.type is Unconfined: "),
    ("AppArmor unknown type", {"securityContext": {"appArmorProfile": {"type": "Other"}}},
     "spec.securityContext.appArmorProfile.type is Other: "),
    ("AppArmor unconfined annotation",
     {"podAnnotations": {"container.apparmor.security.beta.kubernetes.io/sglang": "unconfined"}},
     "spec.podAnnotations[container.apparmor.security.beta.kubernetes.io/sglang] is unconfined: a container "
     "without an AppArmor profile"),
    ("procMount Unmasked", {"securityContext": {"procMount": "Unmasked"}},
     "spec.securityContext.procMount is Unmasked: "),
    ("SELinux spc_t", {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}},
     "spec.securityContext.seLinuxOptions.type is spc_t: "),
    ("hostPath / as model cache", {"model": {"path": "Qwen/Qwen3.6-27B", "cache": {"hostPath": "/"}}},
     "spec.model.cache.hostPath is /: "),
    ("hostPath volume", {"volumes": [{"name": "root", "hostPath": {"path": "/etc"}}]},
     "spec.volumes[root].hostPath.path is /etc: "),
    ("writable hostPath model cache", {"model": {"path": "Qwen/Qwen3.6-27B",
                                                 "cache": {"hostPath": "/", "hostPathReadOnly": False}}},
     "spec.model.cache.hostPathReadOnly is false for /: a writable hostPath"),
    ("hostPath volume DirectoryOrCreate", {"volumes": [{"name": "w", "hostPath": {"path": "/etc",
                                                                                  "type": "DirectoryOrCreate"}}]},
     "spec.volumes[w].hostPath /etc is writable (type DirectoryOrCreate, or a mount without readOnly: true): "),
    ("the operator's ServiceAccount", {"serviceAccountName": "sglang-operator"},
     "spec.serviceAccountName is sglang-operator in ops (ops/sglang-operator): it is the operator's own"),
    ("a ServiceAccount not allowed", {"serviceAccountName": "cluster-admin-sa"},
     "spec.serviceAccountName is cluster-admin-sa: it is not one the admission policy allows "
     "(admissionPolicy.allowedServiceAccounts: none)"),
    ("the metadata service as Prometheus", {"autoscaling": {"maxReplicas": 3, "target": 4, "prometheus": {
        "address": "http://169.254.169.254"}}},
     "spec.autoscaling.prometheus.address is http://169.254.169.254: KEDA's pod queries it with the cluster's network "
     "reach, so only the Prometheus addresses the admin allows may be named (the chart's "
     "autoscaling.allowedPrometheusAddresses and prometheusAddress: none); "),
    ("metric query without the admin's switch", {"autoscaling": {"maxReplicas": 3, "target": 4, "metric": "query",
                                                                 "query": 'sum(x{namespace="$namespace"})'}},
     "spec.autoscaling.metric is query: a PromQL query of your own runs on the shared Prometheus"),
]


@pytest.mark.parametrize(("what", "spec", "message"), FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_each_forbidden_spec_is_refused_naming_its_field(what: str, spec: dict[str, Any], message: str) -> None:
    namespace = "ops" if what == "the operator's ServiceAccount" else "team-a"
    got = refusals(server(namespace, **spec))
    assert any(m.startswith(message) for m in got), got
    assert all(m.startswith("spec.") for m in got)


def test_the_operators_service_account_is_refused_even_when_listed() -> None:
    params = Params(allowed_service_accounts=("sglang-operator", "ops/sglang-operator"),
                    operator_service_account="sglang-operator", operator_namespace="ops")
    got = refusals(server("ops", serviceAccountName="sglang-operator"), params)
    assert len(got) == 1 and "the operator's own ServiceAccount" in got[0]
    assert refusals(server("team-a", serviceAccountName="sglang-operator"), params) == ()  # another namespace's


def test_allowed_service_accounts_by_name_or_namespace_and_name() -> None:
    params = Params(allowed_service_accounts=("puller", "team-a/hf-reader"))
    assert refusals(server(serviceAccountName="puller"), params) == ()
    assert refusals(server(serviceAccountName="hf-reader"), params) == ()
    assert refusals(server("team-b", serviceAccountName="hf-reader"), params) != ()
    assert refusals(server(serviceAccountName="default"), Params()) == ()


def test_an_allowed_model_cache_prefix_passes_by_whole_segments() -> None:
    params = Params(allowed_host_paths=("/models",))

    def cache(path: str) -> dict[str, Any]:
        return server(model={"path": "Qwen/Qwen3.6-27B", "cache": {"hostPath": path}})

    assert refusals(cache("/models"), params) == ()
    assert refusals(cache("/models/hf"), params) == ()
    assert refusals(cache("/models2"), params)[0].startswith("spec.model.cache.hostPath is /models2: ")
    assert refusals(cache("/models/../etc"), params)[0].startswith("spec.model.cache.hostPath is /models/../etc: ")
    assert "(allowed: /models)" in refusals(cache("/var"), params)[0]


def test_unset_fields_count_as_the_operators_defaults() -> None:
    # drop: [] replaces the default drop: [ALL]; restricted wants ALL dropped, baseline does not care
    body = server(securityContext={"runAsNonRoot": True, "capabilities": {"drop": []}})
    assert refusals(body) == ()
    assert refusals(body, Params(level=Level.RESTRICTED)) == (
        "spec.securityContext.capabilities.drop is []: level restricted needs every capability dropped (Pod Security "
        "Standards restricted, check capabilities_restricted); add ALL or remove drop (default [ALL])",)
    assert refusals(server(securityContext={"runAsNonRoot": True}), Params(level=Level.RESTRICTED)) == ()


def test_restricted_adds_its_rules() -> None:
    params = Params(level=Level.RESTRICTED)
    body = server(securityContext={"runAsNonRoot": True, "runAsUser": 0, "allowPrivilegeEscalation": True,
                                   "capabilities": {"add": ["CHOWN"]}},
                  volumes=[{"name": "nfs", "nfs": {"server": "x", "path": "/"}}])
    got = refusals(body, params)
    assert [m.split(":")[0] for m in got] == [
        "spec.securityContext.runAsUser is 0", "spec.securityContext.allowPrivilegeEscalation is true",
        "spec.securityContext.capabilities.add adds CHOWN", "spec.volumes[nfs] is nfs"]
    assert refusals(body) == ()  # all of it is baseline


def test_secrets_are_listed_with_their_fields_and_counted() -> None:
    body = server(apiKeySecretRef={"name": "keys"}, adminApiKeySecretRef={"name": "keys"},
                  env=[{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
                  volumes=[{"name": "tls", "secret": {"secretName": "tls"}}], imagePullSecrets=[{"name": "pull"}])
    assert adm.check(body, Params()).secrets == (
        "spec.apiKeySecretRef.name, spec.adminApiKeySecretRef.name names Secret keys in team-a: the user creating or "
        "updating this SGLangServer must be allowed to get it (RBAC: get secrets)",
        "spec.env[HF_TOKEN].valueFrom.secretKeyRef.name names Secret hf in team-a: the user creating or updating this "
        "SGLangServer must be allowed to get it (RBAC: get secrets)",
        "spec.volumes[tls].secret.secretName names Secret tls in team-a: the user creating or updating this "
        "SGLangServer must be allowed to get it (RBAC: get secrets)",
        "spec.imagePullSecrets[pull] names Secret pull in team-a: the user creating or updating this SGLangServer "
        "must be allowed to get it (RBAC: get secrets)")
    many = server(env=[{"name": f"S{i}", "valueFrom": {"secretKeyRef": {"name": f"s{i}", "key": "k"}}}
                       for i in range(SECRET_SLOTS + 1)])
    assert refusals(many) == (f"spec names {SECRET_SLOTS + 1} distinct Secrets; at most {SECRET_SLOTS} are "
                              "checked (the API server's CEL cost limit on authorization checks): use fewer Secrets",)


def _literals(message_expression: str) -> list[str]:
    """The text parts of a messageExpression: its double-quoted literals (the generator writes every one with
    json.dumps) that start it or follow a ``+`` (not those inside a list or a call)."""
    out, i = [], 0
    while (start := message_expression.find('"', i)) >= 0:
        text, length = json.JSONDecoder().raw_decode(message_expression[start:])
        if message_expression[:start].rstrip().endswith("+") or start == 0:
            out.append(text)
        i = start + length
    return out


@pytest.mark.parametrize(("what", "spec", "message"), FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_the_cel_message_says_what_python_says(what: str, spec: dict[str, Any], message: str) -> None:
    """Each Python refusal is built from the texts its rule's messageExpression holds, in the same order."""
    namespace = "ops" if what == "the operator's ServiceAccount" else "team-a"
    body = server(namespace, **spec)
    for rule in adm.rules_for(Level.BASELINE):
        msg = rule.refusal(body, OPERATOR)
        if msg is None:
            continue
        (validation,) = rule.cel()
        at = 0
        for text in _literals(validation["messageExpression"]):
            if text in {", ", "none", "unset", ""}:
                continue
            found = msg.find(text, at)
            assert found >= 0, (text, msg)
            at = found + len(text)


def test_the_policy_has_every_rule_at_its_levels_and_only_variables_for_values() -> None:
    rules = adm.policy_rules()
    for level in Level:
        validations = rules["validations"][level.value]
        assert len(validations) == sum(len(r.cel()) for r in adm.rules_for(level))
        assert all(v["message"].startswith("spec") and v["reason"] == "Forbidden" for v in validations)
    checks = [v for v in rules["validations"]["baseline"] if "authorizer." in v["expression"]]
    assert len(checks) == SECRET_SLOTS  # one authorizer check per expression: 350k of the 1M per-call limit
    assert all(v["expression"].count(".check(") == 1 for v in checks)
    text = json.dumps(rules)
    for name in adm.PARAM_VARIABLES:
        assert f"variables.{name}" in text
    assert [v["name"] for v in rules["variables"]] == ["secretRefs", "secretNames"]


def test_apparmor_allows_the_runtime_default_and_localhost_profiles() -> None:
    key = "container.apparmor.security.beta.kubernetes.io/sglang"
    for value in ("runtime/default", "localhost/k8s-sglang"):
        assert refusals(server(podAnnotations={key: value, "other": "unconfined"})) == ()
    for kind in ("RuntimeDefault", "Localhost"):
        assert refusals(server(securityContext={"appArmorProfile": {"type": kind}})) == ()
    assert refusals(server(podAnnotations={key: "localhos/x"}))[0].startswith(f"spec.podAnnotations[{key}] is ")


def test_allowed_host_paths_are_read_only_unless_the_admin_allows_writes() -> None:
    forbidden = Params(allowed_host_paths=("/models",))
    allowed = Params(allowed_host_paths=("/models",), host_path_writes=HostPathWrites.ALLOWED)
    own = Params(allowed_host_paths=("/models/",), host_path_writes=HostPathWrites.OWN_NAMESPACE)

    def cache(path: str, read_only: bool) -> dict[str, Any]:
        return server(model={"path": "Qwen/Qwen3.6-27B", "cache": {"hostPath": path, "hostPathReadOnly": read_only}})

    assert refusals(cache("/models/hf", True), forbidden) == ()
    [refusal] = refusals(cache("/models/hf", False), forbidden)
    assert refusal.startswith("spec.model.cache.hostPathReadOnly is false for /models/hf: a writable hostPath lets "
                              "this server change files other servers on the node load")
    assert "(admissionPolicy.hostPathWrites: Forbidden)" in refusal
    assert refusals(cache("/models/hf", False), allowed) == ()
    assert refusals(cache("/models/team-a/hf", False), own) == ()  # the server's namespace is team-a
    assert refusals(cache("/models/team-a", False), own) == ()
    for other in ("/models/team-b/hf", "/models/team-ab", "/models/hf"):
        assert refusals(cache(other, False), own)[0].startswith(f"spec.model.cache.hostPathReadOnly is false for "
                                                                f"{other}: "), other
    assert refusals(cache("/models/team-b/hf", True), own) == ()  # reading elsewhere stays allowed

    def volume(kind: str | None, read_only: bool | None, path: str = "/models/cfg") -> dict[str, Any]:
        host = {"path": path, **({"type": kind} if kind else {})}
        mount = {"name": "cfg", "mountPath": "/cfg", **({"readOnly": read_only} if read_only is not None else {})}
        return server(volumes=[{"name": "cfg", "hostPath": host}], volumeMounts=[mount])

    assert refusals(volume("Directory", True), forbidden) == ()
    assert refusals(volume("File", True), forbidden) == ()
    for kind, read_only in (("DirectoryOrCreate", True), (None, True), ("Directory", False), ("Directory", None)):
        [refusal] = refusals(volume(kind, read_only), forbidden)
        assert refusal.startswith(f"spec.volumes[cfg].hostPath /models/cfg is writable (type {kind or 'unset'}, "), \
            (kind, read_only)
        assert refusals(volume(kind, read_only), allowed) == ()
    assert refusals(volume("DirectoryOrCreate", False, "/models/team-a/cfg"), own) == ()
    assert refusals(volume("DirectoryOrCreate", False, "/models/team-b/cfg"), own) != ()
    # an unmounted hostPath of type Directory writes nothing
    assert refusals(server(volumes=[{"name": "x", "hostPath": {"path": "/models/x", "type": "Directory"}}]),
                    forbidden) == ()


def test_the_host_path_writes_variable_reaches_the_cel() -> None:
    text = json.dumps(adm.policy_rules()["validations"]["baseline"])
    assert "variables.hostPathWrites == 'Allowed'" in text and "object.metadata.namespace" in text
    assert "hostPathWrites" in adm.PARAM_VARIABLES


def test_the_admins_prometheus_addresses_and_query_switch() -> None:
    """Issue 47 items 1-2: an address is allowed when listed (the chart lists prometheusAddress too) or when ``*``
    is; ``metric: query`` only with the switch, and then only a query passing the text rule."""
    def autoscaled(**auto: Any) -> dict[str, Any]:
        return server(autoscaling={"maxReplicas": 3, "target": 4, **auto})

    prom = "http://prometheus-operated.monitoring.svc:9090"
    listed = Params(allowed_prometheus_addresses=("http://thanos.monitoring.svc:9090", prom))
    assert refusals(autoscaled(prometheus={"address": prom}), listed) == ()
    assert refusals(autoscaled()) == ()  # no address named: the operator's own
    [refusal] = refusals(autoscaled(prometheus={"address": "http://prom.other.svc:9090"}), listed)
    assert refusal == ("spec.autoscaling.prometheus.address is http://prom.other.svc:9090: KEDA's pod queries it "
                       "with the cluster's network reach, so only the Prometheus addresses the admin allows may be "
                       "named (the chart's autoscaling.allowedPrometheusAddresses and prometheusAddress: "
                       f"http://thanos.monitoring.svc:9090, {prom}); remove spec.autoscaling.prometheus to use the "
                       "operator's own Prometheus, or ask an admin to allow it")
    assert refusals(autoscaled(prometheus={"address": "http://anything:1"}),
                    Params(allowed_prometheus_addresses=("*",))) == ()
    on = Params(allow_query_metric=True)
    own = 'sum(rate(sglang:generation_tokens_total{namespace="$namespace", sglang_server="$server"}[1m]))'
    assert refusals(autoscaled(metric="query", query=own), on) == ()
    for query in ('sum(x{namespace="team-b"})', 'sum(x{namespace="$namespace"}) + sum(y{namespace!="$namespace"})',
                  'sum(up)', "sum(x{namespace='$namespace'})",
                  'label_replace(x{namespace="$namespace"}, "namespace", "b", "", "")'):
        [refusal] = refusals(autoscaled(metric="query", query=query), on)
        assert refusal.startswith("spec.autoscaling.query reads beyond its own namespace: every selector must carry "
                                  'namespace="$namespace"'), query
    # the text rule only: a selector without the matcher is the operator's refusal (CEL cannot read PromQL)
    assert refusals(autoscaled(metric="query", query='sum(kube_pod_info) + sum(x{namespace="$namespace"})'), on) == ()
    rules = {v["expression"] for v in adm.policy_rules()["validations"]["baseline"]}
    assert any("variables.allowQueryMetric" in r and ".replace(" in r for r in rules)
    assert any('"*" in variables.allowedPrometheusAddresses' in r for r in rules)
