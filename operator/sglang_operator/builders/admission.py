"""The tenant boundary: which pod an SGLangServer may ask for, as data, checked by the API server and offline.

Whoever may create an SGLangServer decides what pod the operator runs for it: any image, in that namespace, with
the pod fields the spec allows (``spec.securityContext``, ``spec.volumes``, ``spec.model.cache.hostPath``,
``spec.serviceAccountName``, the Secrets it names), and where KEDA's pod, with the cluster's network reach, sends
its queries (``spec.autoscaling.prometheus.address``, ``metric: query``). The chart's ``ValidatingAdmissionPolicy``
(``charts/sglang-operator/templates/admission-policy.yaml``) holds every SGLangServer to the rules of
:data:`RULES` at the level an admin picks; ``sglang-operator render --admission-level`` runs the same rules in
Python (:func:`check`) with the same messages.

One table, two outputs, so they cannot drift: every rule is a value of one of a few kinds (:class:`ValueRule`,
:class:`SubsetRule`, :class:`ContainsRule` in :mod:`.admission_kinds`; :class:`HostPathRule`,
:class:`HostPathWriteRule`, :class:`AppArmorAnnotationRule`, :class:`VolumeTypesRule`, :class:`ServiceAccountRule`
in :mod:`.admission_host`; :class:`PrometheusAddressRule`, :class:`QueryMetricRule` in
:mod:`.admission_autoscaling`; :class:`SecretSlot` in :mod:`.admission_secrets`) whose parameters give both its CEL
(:meth:`cel`) and its Python predicate (:meth:`refusal`). This module holds the table and assembles the policy:
:func:`policy_rules` renders the CEL side as JSON, committed as ``charts/sglang-operator/files/admission-policy.json``
(regenerate with ``python -m sglang_operator.builders.admission > charts/sglang-operator/files/admission-policy.json``;
``tests/builders/test_admission.py`` fails when the copy is stale).

What the admin chooses reaches the CEL only as the policy's ``variables`` (``allowedHostPaths``,
``allowedServiceAccounts``, ``operatorServiceAccount``, ``operatorNamespace``, ``hostPathWrites``,
``allowedPrometheusAddresses``, ``allowQueryMetric``), which the chart
renders with Helm's ``toJson`` (a JSON string or string array is a CEL literal): no value of the chart is pasted into
an expression.

Source of the security rules: the Pod Security Standards (https://kubernetes.io/docs/concepts/security/
pod-security-standards/) as ``k8s.io/pod-security-admission/policy`` v0.36 implements them; each rule names its
check ID (``privileged``, ``capabilities_baseline``, ...). An unset field counts as the operator's default
(:data:`sglang_operator.builders.workload.DEFAULT_SECURITY_CONTEXT`, merged per field): the defaults pass both
levels except ``runAsNonRoot``, which the image decides (lmsysorg/sglang runs as root).

Checks of the Pod Security Standards the spec cannot break, so not rules here: ``hostNamespaces`` (no
hostNetwork / hostPID / hostIPC field: the CRD refuses unknown fields), ``hostPorts`` and
``hostProbesAndHostLifecycle`` (ports and probes are the operator's), ``sysctls`` (no pod securityContext).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.api.base import GROUP, PLURAL, VERSION
from sglang_operator.builders.admission_autoscaling import PrometheusAddressRule, QueryMetricRule
from sglang_operator.builders.admission_host import (
    AppArmorAnnotationRule,
    HostPathRule,
    HostPathWriteRule,
    ServiceAccountRule,
    VolumeTypesRule,
)
from sglang_operator.builders.admission_kinds import (
    RESTRICTED_ONLY,
    ContainsRule,
    Level,
    Params,
    Rule,
    SubsetRule,
    ValueRule,
)
from sglang_operator.builders.admission_secrets import SECRET_SLOTS, VARIABLES, SecretSlot, secret_needs

BASELINE_CAPABILITIES: tuple[str, ...] = (
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
)
"""Capabilities ``baseline`` lets a container add (``policy/check_capabilities_baseline.go``, the Pod Security
Standards table "Capabilities")."""
RESTRICTED_CAPABILITIES: tuple[str, ...] = ("NET_BIND_SERVICE",)
"""The only capability ``restricted`` lets a container add (``policy/check_capabilities_restricted.go``)."""
RESTRICTED_VOLUME_TYPES: tuple[str, ...] = (
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
)
"""Volume sources ``restricted`` allows (``policy/check_restrictedVolumes.go``); hostPath is checked by the
allowed prefixes instead (:class:`~.admission_host.HostPathRule`), at both levels."""

PARAM_VARIABLES: tuple[str, ...] = ("allowedHostPaths", "allowedServiceAccounts", "operatorServiceAccount",
                                    "operatorNamespace", "hostPathWrites", "allowedPrometheusAddresses",
                                    "allowQueryMetric")
"""The policy variables the chart renders from its values, in this order, before
:data:`~.admission_secrets.VARIABLES`."""


_PSS_B = "Pod Security Standards baseline, check "
_PSS_R = "Pod Security Standards restricted, check "
_SC = "securityContext"

RULES: tuple[Rule, ...] = (
    ValueRule("privileged", (_SC, "privileged"),
              "a privileged container has every device and capability of the node", "remove it",
              _PSS_B + "privileged", values=(True,), allowed=False),
    SubsetRule("capabilities-baseline", (_SC, "capabilities", "add"),
               "the admission policy's level baseline forbids adding them", "remove them from the list",
               _PSS_B + "capabilities_baseline", allowed=BASELINE_CAPABILITIES),
    ValueRule("seccomp-baseline", (_SC, "seccompProfile", "type"),
              "a container without a seccomp filter may call every system call", "remove it (default RuntimeDefault)",
              _PSS_B + "seccompProfile_baseline", values=("Unconfined",), allowed=False),
    ValueRule("apparmor-baseline", (_SC, "appArmorProfile", "type"),
              "only the runtime's default or a profile loaded on the node confines the container",
              "remove it (default RuntimeDefault) or use Localhost", _PSS_B + "appArmorProfile",
              values=("RuntimeDefault", "Localhost"), allowed=True),
    AppArmorAnnotationRule("apparmor-annotations"),
    ValueRule("proc-mount", (_SC, "procMount"),
              "an unmasked /proc shows the node's kernel settings", "remove it (default Default)",
              _PSS_B + "procMount", values=("Default",), allowed=True),
    ValueRule("selinux-type", (_SC, "seLinuxOptions", "type"),
              "only the container SELinux types are allowed", "remove it or use container_t",
              _PSS_B + "seLinuxOptions",
              values=("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"), allowed=True),
    ValueRule("selinux-user", (_SC, "seLinuxOptions", "user"),
              "a custom SELinux user is not allowed", "remove it", _PSS_B + "seLinuxOptions", values=("",),
              allowed=True),
    ValueRule("selinux-role", (_SC, "seLinuxOptions", "role"),
              "a custom SELinux role is not allowed", "remove it", _PSS_B + "seLinuxOptions", values=("",),
              allowed=True),
    ValueRule("windows-host-process", (_SC, "windowsOptions", "hostProcess"),
              "a Windows host process runs on the node itself", "remove it", _PSS_B + "windowsHostProcess",
              values=(True,), allowed=False),
    HostPathRule("host-path-model-cache", cache=True),
    HostPathRule("host-path-volumes", cache=False),
    HostPathWriteRule("host-path-model-cache-read-only", cache=True),
    HostPathWriteRule("host-path-volumes-read-only", cache=False),
    ServiceAccountRule("service-account-not-the-operators", operator=True),
    ServiceAccountRule("service-account-allowed", operator=False),
    PrometheusAddressRule("prometheus-address-allowed"),
    QueryMetricRule("query-metric-allowed", text=False),
    QueryMetricRule("query-own-namespace", text=True),
    SecretSlot("secrets-at-most", -1),
    *(SecretSlot(f"secret-{i}", i) for i in range(SECRET_SLOTS)),
    ValueRule("run-as-non-root", (_SC, "runAsNonRoot"),
              "level restricted needs a container that runs as a non-root user (lmsysorg/sglang images run as "
              "root)", "set it to true with an image that runs as a non-root user, and runAsUser if the image names "
              "no numeric user", _PSS_R + "runAsNonRoot", RESTRICTED_ONLY, values=(True,), allowed=True,
              required=True),
    ValueRule("run-as-user", (_SC, "runAsUser"),
              "level restricted forbids running as root (UID 0)", "set a non-zero UID or remove it",
              _PSS_R + "runAsUser", RESTRICTED_ONLY, values=(0,), allowed=False),
    ValueRule("allow-privilege-escalation", (_SC, "allowPrivilegeEscalation"),
              "level restricted forbids setuid escalation", "remove it (default false)",
              _PSS_R + "allowPrivilegeEscalation", RESTRICTED_ONLY, values=(True,), allowed=False),
    SubsetRule("capabilities-restricted", (_SC, "capabilities", "add"),
               "the admission policy's level restricted forbids adding them", "remove them from the list",
               _PSS_R + "capabilities_restricted", RESTRICTED_ONLY, allowed=RESTRICTED_CAPABILITIES),
    ContainsRule("capabilities-drop-all", (_SC, "capabilities", "drop"),
                 "level restricted needs every capability dropped", "add ALL or remove drop (default [ALL])",
                 _PSS_R + "capabilities_restricted", RESTRICTED_ONLY, item="ALL"),
    ValueRule("seccomp-restricted", (_SC, "seccompProfile", "type"),
              "level restricted needs the RuntimeDefault or a Localhost seccomp profile",
              "remove it (default RuntimeDefault)", _PSS_R + "seccompProfile_restricted", RESTRICTED_ONLY,
              values=("RuntimeDefault", "Localhost"), allowed=True),
    VolumeTypesRule("restricted-volumes", RESTRICTED_VOLUME_TYPES, _PSS_R + "restrictedVolumes"),
)
"""Every rule, baseline's first; a rule applies at each level of its ``levels``."""


def rules_for(level: Level) -> tuple[Rule, ...]:
    """The rules of ``level``, in :data:`RULES` order."""
    return tuple(r for r in RULES if level in r.levels)


MATCH_CONSTRAINTS: dict[str, Any] = {"resourceRules": [{
    "apiGroups": [GROUP], "apiVersions": [VERSION], "operations": ["CREATE", "UPDATE"], "resources": [PLURAL]}]}
"""What the policy admits: SGLangServers, on create and update (not ``/status``: the operator's writes)."""
MATCH_CONDITIONS: tuple[dict[str, str], ...] = ({
    "name": "spec-changed",
    "expression": "request.operation == 'CREATE' || !has(oldObject.spec) || oldObject.spec != object.spec",
},)
"""An update that leaves ``spec`` as it was (the operator's annotation patches, a label, a finalizer) changes no
pod and is not checked again: a server admitted before the policy, or before an admin narrowed it, keeps working."""


def policy_rules() -> dict[str, Any]:
    """The CEL side of :data:`RULES`, as ``charts/sglang-operator/files/admission-policy.json`` holds it:
    ``{matchConstraints, matchConditions, variables, validations: {baseline: [...], restricted: [...]},
    paramVariables}``."""
    return {
        "generatedBy": "python -m sglang_operator.builders.admission (operator/sglang_operator/builders/admission.py)",
        "paramVariables": list(PARAM_VARIABLES),
        "matchConstraints": MATCH_CONSTRAINTS,
        "matchConditions": list(MATCH_CONDITIONS),
        "variables": list(VARIABLES),
        "validations": {level.value: [v for r in rules_for(level) for v in r.cel()] for level in Level},
    }


def policy_rules_json() -> str:
    """:func:`policy_rules` as the committed file's text (2-space JSON, trailing newline)."""
    return json.dumps(policy_rules(), indent=2) + "\n"


@dataclass(frozen=True)
class Verdict:
    """What :func:`check` found: ``refusals`` (the API server's messages; empty: admitted, as far as offline
    checks go) and ``secrets`` (:func:`secret_needs`: the ``get`` the requesting user needs)."""

    refusals: tuple[str, ...] = ()
    secrets: tuple[str, ...] = field(default_factory=tuple)


def check(obj: Mapping[str, Any], params: Params) -> Verdict:
    """The policy's verdict on SGLangServer body ``obj`` (a dict as ``kubectl apply`` sends it, with
    ``metadata.namespace`` set) under ``params``: every refusal of the level's rules, in :data:`RULES` order."""
    refusals = [msg for r in rules_for(params.level) if (msg := r.refusal(obj, params)) is not None]
    return Verdict(tuple(refusals), tuple(secret_needs(obj)))


if __name__ == "__main__":  # pragma: no cover - the generator of the chart's file
    import sys

    sys.stdout.write(policy_rules_json())
