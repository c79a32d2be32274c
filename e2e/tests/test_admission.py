"""Issue 16 item 2, "tenant boundary, declared and enforced", against the real API server (no operator needed: the
policy admits or refuses the SGLangServer itself).

The chart's ValidatingAdmissionPolicy and binding, rendered by a real helm, are applied with the binding narrowed to
the test's namespace (the other tests share the cluster); then:

- each forbidden SGLangServer (privileged, an added SYS_ADMIN, a hostPath ``/`` cache, an AppArmor ``unconfined``
  pod annotation, a writable hostPath cache under an allowed prefix, the operator's ServiceAccount) is refused with
  a message naming the field, the same text ``sglang-operator render`` prints;
- a model cache under an allowed hostPath prefix passes;
- at level restricted, a volume source outside the level and a server running as root are refused, a non-root one
  with an emptyDir passes;
- a user with ``create`` on sglangservers but no ``get`` on the Secret of ``apiKeySecretRef`` is refused; one who
  may get it passes (``kubectl --as``);
- issue 47 items 1-2, as a tenant: the cloud metadata service as ``spec.autoscaling.prometheus.address``, an address
  with a path (the CRD's rule) and ``metric: query`` without ``autoscaling.allowQueryMetric`` are refused with one
  message each; with the switch, a query naming another namespace is refused and one of the tenant's own passes.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from e2e.conftest import K8sCluster, wait_for
from e2e.tools import helm_template, require_helm
from sglang_operator.builders import autoscaling_tenancy as tenancy
from sglang_operator.entry.cli import app

pytestmark = [pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sglang-operator"
SAMPLE = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
OPERATOR_NS = "sglang-ops"
ALLOWED = "/models"


def server(name: str, **spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(SAMPLE)
    body["metadata"] = {"name": name}
    body["spec"].update(spec)
    return body


@contextlib.contextmanager
def policy_installed(k8s: K8sCluster, namespace: str, level: str = "baseline",
                     autoscaling: dict[str, Any] | None = None) -> Iterator[str]:
    """The chart's policy objects (``admissionPolicy.level`` ``level``; the chart's ``autoscaling`` values) for a
    release in :data:`OPERATOR_NS`, the binding limited to ``namespace``; yields the release fullname (the operator's
    ServiceAccount name); deletes both afterwards."""
    k8s.install_crd(CHART / "files" / "crds" / "sglangservers.yaml")
    release = f"adm-{namespace[-5:]}"
    objs = helm_template(require_helm(), CHART, release, OPERATOR_NS,
                         {"admissionPolicy": {"allowedHostPaths": [ALLOWED], "level": level},
                          "autoscaling": autoscaling or {}})
    vap = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy")
    binding = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding")
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": namespace}}}
    k8s.apply(vap)
    k8s.apply(binding)
    try:
        probe = server("probe", securityContext={"privileged": True})
        wait_for("the policy in force", lambda: "spec.securityContext.privileged" in k8s.run(
            "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(probe), check=False).stderr,
            timeout=30)
        yield f"{release}-sglang-operator"
    finally:
        k8s.run("delete", "validatingadmissionpolicybinding", binding["metadata"]["name"], "--ignore-not-found",
                check=False)
        k8s.run("delete", "validatingadmissionpolicy", vap["metadata"]["name"], "--ignore-not-found", check=False)


def apply(k8s: K8sCluster, namespace: str, body: dict[str, Any], *extra: str) -> Any:
    return k8s.run("apply", *extra, "-n", namespace, "-f", "-", input=json.dumps(body), check=False)


def rendered_refusals(tmp_path: Path, namespace: str, body: dict[str, Any], operator_sa: str,
                      level: str = "baseline") -> list[str]:
    path = tmp_path / f"{body['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(body))
    result = CliRunner().invoke(app, ["render", str(path), "--namespace", namespace, "--allowed-host-path", ALLOWED,
                                      "--operator-service-account", f"{OPERATOR_NS}/{operator_sa}",
                                      "--admission-level", level])
    assert result.exit_code == 1, result.output
    prefix = f"{body['metadata']['name']}: refused by the admission policy ({level}): "
    return [line.removeprefix(prefix) for line in result.stderr.splitlines()]


def test_the_api_server_refuses_what_render_refuses(k8s_cluster: K8sCluster, namespace: str, tmp_path: Path) -> None:
    with policy_installed(k8s_cluster, namespace) as operator_sa:
        forbidden = [
            (server("privileged", securityContext={"privileged": True}), "spec.securityContext.privileged is true: "),
            (server("sys-admin", securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
             "spec.securityContext.capabilities.add adds SYS_ADMIN: "),
            (server("root-cache", model={"path": "Qwen/Qwen3.6-27B", "cache": {"hostPath": "/"}}),
             "spec.model.cache.hostPath is /: "),
            (server("apparmor", podAnnotations={"container.apparmor.security.beta.kubernetes.io/sglang": "unconfined"}),
             "spec.podAnnotations[container.apparmor.security.beta.kubernetes.io/sglang] is unconfined: "),
            (server("rw-cache", model={"path": "Qwen/Qwen3.6-27B",
                                       "cache": {"hostPath": f"{ALLOWED}/hf", "hostPathReadOnly": False}}),
             f"spec.model.cache.hostPathReadOnly is false for {ALLOWED}/hf: "),
        ]
        for body, field in forbidden:
            proc = apply(k8s_cluster, namespace, body)
            assert proc.returncode != 0, f"{body['metadata']['name']} admitted"
            assert field in proc.stderr, proc.stderr
            (message,) = rendered_refusals(tmp_path, namespace, body, operator_sa)
            assert message.startswith(field)
            assert message in proc.stderr, (message, proc.stderr)  # the same words
        cached = server("cached", model={"path": "Qwen/Qwen3.6-27B", "cache": {"hostPath": f"{ALLOWED}/hf"}})
        proc = apply(k8s_cluster, namespace, cached)
        assert proc.returncode == 0, proc.stderr


def test_the_restricted_level(k8s_cluster: K8sCluster, namespace: str, tmp_path: Path) -> None:
    """The restricted validations compile too; a volume source outside the level is refused with render's words, a
    non-root server with an allowed volume passes."""
    non_root = {"runAsNonRoot": True, "runAsUser": 1000}
    with policy_installed(k8s_cluster, namespace, "restricted") as operator_sa:
        nfs = server("nfs", securityContext=non_root, volumes=[{"name": "data", "nfs": {"server": "nfs.example",
                                                                                        "path": "/export"}}])
        proc = apply(k8s_cluster, namespace, nfs, "--dry-run=server")
        assert proc.returncode != 0, "nfs admitted"
        messages = rendered_refusals(tmp_path, namespace, nfs, operator_sa, "restricted")
        assert messages == ["spec.volumes[data] is nfs: restricted allows only configMap, csi, downwardAPI, emptyDir, "
                            "ephemeral, persistentVolumeClaim, projected, secret volumes (Pod Security Standards "
                            "restricted, check restrictedVolumes); use one of them or ask an admin for "
                            "admissionPolicy.level baseline"], messages
        assert messages[0] in proc.stderr, (messages, proc.stderr)
        root = server("root")
        proc = apply(k8s_cluster, namespace, root, "--dry-run=server")
        assert proc.returncode != 0, "root admitted"
        assert rendered_refusals(tmp_path, namespace, root, operator_sa, "restricted")[0] in proc.stderr, proc.stderr
        scratch = server("scratch", securityContext=non_root, volumes=[{"name": "scratch", "emptyDir": {}}])
        proc = apply(k8s_cluster, namespace, scratch, "--dry-run=server")
        assert proc.returncode == 0, proc.stderr


def test_the_operators_service_account_is_refused(k8s_cluster: K8sCluster, tmp_path: Path) -> None:
    """In the operator's own namespace (a fresh one, named as the release namespace of the rendered chart)."""
    k8s_cluster.run("create", "namespace", OPERATOR_NS, check=False)
    try:
        with policy_installed(k8s_cluster, OPERATOR_NS) as operator_sa:
            body = server("as-operator", serviceAccountName=operator_sa)
            proc = apply(k8s_cluster, OPERATOR_NS, body, "--dry-run=server")
            assert proc.returncode != 0
            assert f"spec.serviceAccountName is {operator_sa} in {OPERATOR_NS}" in proc.stderr, proc.stderr
            # render lists every refusal in the policy's order; the API server reports only the first denied
            # validation (plugin/policy/validating/dispatcher.go: deniedDecisions[0])
            messages = rendered_refusals(tmp_path, OPERATOR_NS, body, operator_sa)
            assert messages[0] in proc.stderr, (messages, proc.stderr)
    finally:
        k8s_cluster.run("delete", "namespace", OPERATOR_NS, "--wait=false", "--ignore-not-found", check=False)


def test_a_secret_the_user_may_not_read_is_refused(k8s_cluster: K8sCluster, namespace: str) -> None:
    k8s_cluster.run("create", "secret", "generic", "api", "-n", namespace, "--from-literal=api-key=s3cret")
    rules = [{"apiGroups": ["sglang-operator.io"], "resources": ["sglangservers"],
              "verbs": ["create", "get", "patch", "update"]}]
    for user, extra in (("alice", []), ("bob", [{"apiGroups": [""], "resources": ["secrets"],
                                                  "resourceNames": ["api"], "verbs": ["get"]}])):
        k8s_cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                           "metadata": {"name": user}, "rules": rules + extra}, namespace)
        k8s_cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                           "metadata": {"name": user},
                           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
                           "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
                          namespace)
    with policy_installed(k8s_cluster, namespace):
        body = server("keyed", apiKeySecretRef={"name": "api"})
        alice = apply(k8s_cluster, namespace, body, "--as=alice")
        assert alice.returncode != 0
        assert "spec.apiKeySecretRef.name names Secret api in " + namespace in alice.stderr, alice.stderr
        assert "alice may not" in alice.stderr
        bob = apply(k8s_cluster, namespace, body, "--as=bob")
        assert bob.returncode == 0, bob.stderr
        # an update that leaves the spec as it was is not judged again (alice may label it)
        labelled = k8s_cluster.run("label", "sglangserver", "keyed", "-n", namespace, "team=a", "--as=alice",
                                   check=False)
        assert labelled.returncode == 0, labelled.stderr


def test_a_tenants_autoscaler_queries_only_what_the_admin_allows(k8s_cluster: K8sCluster, namespace: str) -> None:
    """Issue 47 items 1-2 as a tenant (``--as=tenant``, who may write sglangservers in ``namespace`` and nothing
    else): each refusal is one message, the words of ``builders/autoscaling_tenancy.py``."""
    k8s_cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "tenant"},
                       "rules": [{"apiGroups": ["sglang-operator.io"], "resources": ["sglangservers"],
                                  "verbs": ["create", "get", "patch", "update"]}]}, namespace)
    k8s_cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                       "metadata": {"name": "tenant"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
                       "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tenant"}]},
                      namespace)
    own = "http://prometheus-operated.monitoring.svc:9090"
    own_query = 'sum(rate(sglang:generation_tokens_total{namespace="$namespace", sglang_server="$server"}[1m]))'

    def autoscaled(name: str, **auto: Any) -> dict[str, Any]:
        return server(name, autoscaling={"maxReplicas": 3, "target": 4, **auto})

    def refused(body: dict[str, Any], message: str) -> None:
        proc = apply(k8s_cluster, namespace, body, "--as=tenant", "--dry-run=server")
        assert proc.returncode != 0, f"{body['metadata']['name']} admitted"
        # one cause: kubectl lists several as "* …" lines, and the policy reports its first denial only
        assert proc.stderr.count(message) == 1 and len(proc.stderr.strip().splitlines()) == 1, (message, proc.stderr)

    def admitted(body: dict[str, Any]) -> bool:
        return apply(k8s_cluster, namespace, body, "--as=tenant", "--dry-run=server").returncode == 0

    with policy_installed(k8s_cluster, namespace, autoscaling={"prometheusAddress": own}):
        assert admitted(autoscaled("own", prometheus={"address": own}))
        metadata = "http://169.254.169.254"
        refused(autoscaled("imds", prometheus={"address": metadata}),
                str(tenancy.address_refusal(metadata, (own,))))
        path = "http://169.254.169.254/latest/meta-data/#"
        refused(autoscaled("imds-path", prometheus={"address": path}),  # the CRD's rule: the policy never runs
                f"spec.autoscaling.prometheus.address is {path}: name Prometheus by scheme, host and port only")
        refused(autoscaled("query", metric="query", query=own_query), tenancy.QUERY_SWITCH)
    with policy_installed(k8s_cluster, namespace, autoscaling={"allowQueryMetric": True}):
        wait_for("the switch in force", lambda: admitted(autoscaled("query", metric="query", query=own_query)),
                 timeout=30)
        other = 'sum(rate(sglang:generation_tokens_total{namespace="kube-system"}[1m]))'
        refused(autoscaled("other-ns", metric="query", query=other), tenancy.QUERY_TEXT)
