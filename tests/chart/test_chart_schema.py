"""The chart's values schema and its high-availability objects, rendered by a real helm (``python -m e2e.tools helm``):

- ``values.schema.json`` names every value of ``values.yaml`` and no other, the defaults validate, and a value of
  the wrong type fails ``helm template`` with Helm's own schema message (``helm install`` runs the same check;
  the helm e2e does it against the API server);
- two replicas with leader election by default, ``RollingUpdate``, a PodDisruptionBudget, preferred pod
  anti-affinity; the leader-election flags parse with the real CLI into the Lease settings;
- the CRD is a release object with ``helm.sh/resource-policy: keep`` (so ``helm upgrade`` updates it) and the chart
  has no ``crds/`` directory (which Helm installs once and never upgrades).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from e2e.tools import helm_template, require_helm
from sglang_operator.api.crd import CRD_FILES

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sglang-operator"
SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())


def render(**values: Any) -> list[dict[str, Any]]:
    return helm_template(require_helm(), CHART, "rel", "ops", values)


def only(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def helm_fails(*args: str) -> str:
    """Run ``helm template`` with ``args``; assert it fails; return its stderr."""
    proc = subprocess.run([str(require_helm()), "template", "rel", str(CHART), "-n", "ops", *args],
                          capture_output=True, text=True)
    assert proc.returncode != 0, f"helm accepted {args}"
    return proc.stderr


def test_schema_names_every_value_and_no_other() -> None:
    def walk(values: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
        props = schema.get("properties", {})
        out = [f"{path}{k}: in values.yaml, not in the schema" for k in values if k not in props]
        out += [f"{path}{k}: in the schema, not in values.yaml" for k in props if k not in values and k != "global"]
        for key, value in values.items():
            sub = props.get(key, {})
            if isinstance(value, dict) and "properties" in sub:
                out += walk(value, sub, f"{path}{key}.")
        return out

    assert walk(VALUES, SCHEMA, "") == []
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    jsonschema.Draft7Validator(SCHEMA).validate(VALUES)


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "replicaCount=two"], "at '/replicaCount': got string, want integer"),
    (["--set", "leaderElection.leaseDuration=soon"], "at '/leaderElection/leaseDuration': got string, want number"),
    (["--set-string", "podMonitor.enabled=yes"], "at '/podMonitor/enabled': got string, want boolean"),
    (["--set", "podAntiAffinity=sometimes"], "at '/podAntiAffinity': value must be one of"),
    (["--set", "image.pullPolicy=Sometimes"], "at '/image/pullPolicy': value must be one of"),
    (["--set", "watchNamespaces=ml"], "at '/watchNamespaces': got string, want array"),
    (["--set", "watchNamespaces={ML_Team}"], "at '/watchNamespaces/0'"),
    (["--set", "metrics.port=70000"], "at '/metrics/port'"),
    (["--set", "prometheusRule.thresholds.forDuration=10 minutes"], "at '/prometheusRule/thresholds/forDuration'"),
    (["--set", "replicaCont=2"], "additional properties 'replicaCont' not allowed"),
    (["--set", "autoscaling.allowedPrometheusAddresses={http://prom:9090/api}"],
     "at '/autoscaling/allowedPrometheusAddresses/0'"),  # scheme://host[:port] only, as the CRD's rule
    (["--set-string", "autoscaling.allowQueryMetric=yes"], "at '/autoscaling/allowQueryMetric': got string"),
])
def test_a_wrong_value_fails_with_helms_message(args: list[str], message: str) -> None:
    err = helm_fails(*args)
    assert "values don't meet the specifications of the schema(s)" in err and message in err, err


def test_inconsistent_replicas_and_timings_fail() -> None:
    err = helm_fails("--set", "replicaCount=2", "--set", "leaderElection.enabled=false")
    assert "replicaCount > 1 needs leaderElection.enabled=true" in err, err
    err = helm_fails("--set", "leaderElection.renewDeadline=20")
    assert "leaseDuration > renewDeadline > 1.2 × retryPeriod" in err, err
    # one replica without a Lease is allowed, and then nothing may overlap: Recreate
    dep = only(render(replicaCount=1, leaderElection={"enabled": False}), "Deployment")
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert not [a for a in dep["spec"]["template"]["spec"]["containers"][0]["args"] if "leader-elect" in a]


def test_two_replicas_one_leader_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    objs = render()
    dep = only(objs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    selector = dep["spec"]["selector"]["matchLabels"]
    pdb = only(objs, "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": selector}}
    anti = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname",
                                       "labelSelector": {"matchLabels": selector}}

    # the Lease's RBAC: in the release namespace only, get/update of that one Lease, create
    name = dep["metadata"]["name"]
    role = next(o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == f"{name}-leader-election")
    assert role["metadata"]["namespace"] == "ops"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [name],
         "verbs": ["get", "update"]}]
    binding = next(o for o in objs if o["kind"] == "RoleBinding" and o["metadata"]["name"] == f"{name}-leader-election")
    assert binding["subjects"][0]["name"] == dep["spec"]["template"]["spec"]["serviceAccountName"]

    # the container's flags parse with the real CLI into the Lease settings
    container = dep["spec"]["template"]["spec"]["containers"][0]
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr("sglang_operator.entry.runner.run", lambda **kw: calls.append(kw))
    monkeypatch.setenv("POD_ID", "rel-sglang-operator-5d9c-abcde")
    from sglang_operator.entry.cli import app

    result = CliRunner().invoke(app, [*container["command"][1:], *container["args"]])
    assert result.exit_code == 0, result.output
    election = calls[0]["leader_election"]
    assert (election.name, election.namespace) == (name, "ops")
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (15, 10, 2)
    assert election.identity.startswith("rel-sglang-operator-5d9c-abcde_")


def test_spread_and_disruption_budget_follow_the_values() -> None:
    def pod_affinity(**values: Any) -> Any:
        return only(render(**values), "Deployment")["spec"]["template"]["spec"].get("affinity")

    required = pod_affinity(podAntiAffinity="required")["podAntiAffinity"]
    assert list(required) == ["requiredDuringSchedulingIgnoredDuringExecution"]
    assert pod_affinity(podAntiAffinity="none") is None
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}}
    assert pod_affinity(affinity=own) == own  # the user's affinity replaces the preset
    assert not [o for o in render(replicaCount=1) if o["kind"] == "PodDisruptionBudget"]  # would block drains
    assert not [o for o in render(podDisruptionBudget={"enabled": False}) if o["kind"] == "PodDisruptionBudget"]
    assert only(render(replicaCount=3, podDisruptionBudget={"minAvailable": 2}),
                "PodDisruptionBudget")["spec"]["minAvailable"] == 2


def test_crd_is_a_release_object_kept_on_uninstall() -> None:
    assert not (CHART / "crds").exists(), "crds/ is installed once and never upgraded by Helm: use files/crds/"
    rendered = {o["metadata"]["name"]: o for o in render() if o["kind"] == "CustomResourceDefinition"}
    generated = [yaml.safe_load(text()) for text in CRD_FILES.values()]  # SGLangServer and SGLangTuning
    assert sorted(rendered) == sorted(g["metadata"]["name"] for g in generated)
    for g in generated:
        crd = rendered[g["metadata"]["name"]]
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert crd["spec"] == g["spec"]
    assert not [o for o in render(crds={"install": False}) if o["kind"] == "CustomResourceDefinition"]
