"""The admission rules on the Secrets an SGLangServer names (:mod:`sglang_operator.builders.admission`): where
they are named (:func:`secret_refs`, and the policy's variables that compute the same in CEL: :data:`VARIABLES`),
the authorizer check per Secret (:class:`SecretSlot`) and what it would ask offline (:func:`secret_needs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglang_operator.builders.admission_kinds import BOTH, OBJECT, Level, Params, lit, lookup, spec_of, validation

SECRET_SLOTS = 16
"""Distinct Secrets one SGLangServer may name. The API server charges 350 000 cost units per authorizer check
(``k8s.io/apiserver/pkg/cel/library/cost.go``) against 1 000 000 per expression (``PerCallLimit``) and
10 000 000 per admission (``RuntimeCELCostBudget``): one check per validation, 16 of them, stays within both."""


@dataclass(frozen=True)
class SecretRef:
    """One Secret an SGLangServer names: the field (``spec.env[HF_TOKEN].valueFrom.secretKeyRef.name``) and the
    Secret's name."""

    field: str
    name: str


_SECRET_FIELDS: tuple[tuple[str, str], ...] = (
    ("apiKeySecretRef", "spec.apiKeySecretRef.name"),
    ("adminApiKeySecretRef", "spec.adminApiKeySecretRef.name"),
    ("sslKeyfilePasswordSecretRef", "spec.sslKeyfilePasswordSecretRef.name"),
)


def secret_refs(obj: Mapping[str, Any]) -> list[SecretRef]:
    """Every Secret ``obj`` names, in the order of the policy's ``secretRefs`` variable: the three ``*SecretRef``
    fields, ``env[].valueFrom.secretKeyRef``, ``volumes[].secret``, ``volumes[].projected.sources[].secret``,
    ``volumes[].csi.nodePublishSecretRef``, ``imagePullSecrets[]`` (a pull credential is a Secret too)."""
    spec = spec_of(obj)
    out = [SecretRef(f, spec[k]["name"]) for k, f in _SECRET_FIELDS if lookup(spec, (k, "name"))[0]]
    for e in spec.get("env") or []:
        found, name = lookup(e, ("valueFrom", "secretKeyRef", "name"))
        if found:
            out.append(SecretRef(f"spec.env[{e.get('name')}].valueFrom.secretKeyRef.name", name))
    volumes = spec.get("volumes") or []
    for v in volumes:
        found, name = lookup(v, ("secret", "secretName"))
        if found:
            out.append(SecretRef(f"spec.volumes[{v.get('name')}].secret.secretName", name))
    for v in volumes:
        for s in lookup(v, ("projected", "sources"))[1] or []:
            found, name = lookup(s, ("secret", "name"))
            if found:
                out.append(SecretRef(f"spec.volumes[{v.get('name')}].projected.sources[].secret.name", name))
    for v in volumes:
        found, name = lookup(v, ("csi", "nodePublishSecretRef", "name"))
        if found:
            out.append(SecretRef(f"spec.volumes[{v.get('name')}].csi.nodePublishSecretRef.name", name))
    for p in spec.get("imagePullSecrets") or []:
        if p.get("name"):
            out.append(SecretRef(f"spec.imagePullSecrets[{p['name']}]", p["name"]))
    return out


_S = OBJECT
_SECRET_REFS_CEL = " + ".join([
    *(f"(has({_S}.{k}) ? [{{'field': {lit(f)}, 'name': string({_S}.{k}.name)}}] : [])" for k, f in _SECRET_FIELDS),
    f"(has({_S}.env) ? {_S}.env.filter(e, has(e.valueFrom) && has(e.valueFrom.secretKeyRef))"
    ".map(e, {'field': 'spec.env[' + e.name + '].valueFrom.secretKeyRef.name', "
    "'name': string(e.valueFrom.secretKeyRef.name)}) : [])",
    f"(has({_S}.volumes) ? {_S}.volumes.filter(v, has(v.secret) && has(v.secret.secretName))"
    ".map(v, {'field': 'spec.volumes[' + v.name + '].secret.secretName', 'name': string(v.secret.secretName)}) : [])",
    f"(has({_S}.volumes) ? {_S}.volumes.filter(v, has(v.projected) && has(v.projected.sources))"
    ".map(v, v.projected.sources.filter(s, has(s.secret) && has(s.secret.name))"
    ".map(s, {'field': 'spec.volumes[' + v.name + '].projected.sources[].secret.name', 'name': string(s.secret.name)}))"
    ".flatten() : [])",
    f"(has({_S}.volumes) ? {_S}.volumes.filter(v, has(v.csi) && has(v.csi.nodePublishSecretRef))"
    ".map(v, {'field': 'spec.volumes[' + v.name + '].csi.nodePublishSecretRef.name', "
    "'name': string(v.csi.nodePublishSecretRef.name)}) : [])",
    f"(has({_S}.imagePullSecrets) ? {_S}.imagePullSecrets"
    ".map(p, {'field': 'spec.imagePullSecrets[' + p.name + ']', 'name': string(p.name)}) : [])",
])

VARIABLES: tuple[dict[str, str], ...] = (
    {"name": "secretRefs", "expression": _SECRET_REFS_CEL},
    {"name": "secretNames", "expression": "variables.secretRefs.map(r, r.name).distinct()"},
)
"""The policy's own variables (after :data:`PARAM_VARIABLES`): ``secretRefs``, a list of ``{field, name}`` as
:func:`secret_refs`; ``secretNames``, its distinct names (``distinct`` and ``flatten``: cel-go's lists extension,
in the API server's CEL since Kubernetes 1.34)."""


def secret_names(obj: Mapping[str, Any]) -> list[str]:
    """The distinct Secret names of :func:`secret_refs`, first occurrence first (CEL ``distinct()``)."""
    return list(dict.fromkeys(r.name for r in secret_refs(obj)))


_SECRET_SAYS = ("the SGLang pods would read it, so the user creating or updating this SGLangServer must be allowed "
                "to get it (RBAC: get secrets)")


@dataclass(frozen=True)
class SecretSlot:
    """Slot ``index`` of the Secrets an SGLangServer names (:func:`secret_names`): the requesting user may
    ``get`` it (an authorizer check, one per validation: :data:`SECRET_SLOTS`). Slot ``-1`` is the count rule:
    at most :data:`SECRET_SLOTS` distinct Secrets. Offline (:meth:`refusal`) only the count is checked: who
    asks is unknown, :func:`check` lists the Secrets instead."""

    name: str
    index: int
    levels: tuple[Level, ...] = BOTH

    def cel(self) -> list[dict[str, str]]:
        names = "variables.secretNames"
        if self.index < 0:
            tail = (f" distinct Secrets; at most {SECRET_SLOTS} are checked (the API server's CEL cost limit on "
                    "authorization checks): use fewer Secrets")
            return [validation(f"{names}.size() <= {SECRET_SLOTS}", f"spec names more than {SECRET_SLOTS}{tail}",
                                f"'spec names ' + string({names}.size()) + {lit(tail)}")]
        i = self.index
        secret = f"{names}[{i}]"
        fields = f"variables.secretRefs.filter(r, r.name == {secret}).map(r, r.field).join(', ')"
        return [validation(
            f"{names}.size() <= {i} || authorizer.group('').resource('secrets')"
            f".namespace(request.namespace).name({secret}).check('get').allowed()",
            f"spec names a Secret the requesting user may not get: {_SECRET_SAYS}",
            f"{fields} + ' names Secret ' + {secret} + ' in ' + request.namespace + ': ' + "
            f"{lit(_SECRET_SAYS)} + '; ' + request.userInfo.username + ' may not'")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        if self.index >= 0 or len(secret_names(obj)) <= SECRET_SLOTS:
            return None
        return (f"spec names {len(secret_names(obj))} distinct Secrets; at most {SECRET_SLOTS} are checked (the API "
                "server's CEL cost limit on authorization checks): use fewer Secrets")


def secret_needs(obj: Mapping[str, Any]) -> list[str]:
    """What the authorizer checks would ask, for offline use: ``"<fields> names Secret <name> in <namespace>: the
    user creating or updating this SGLangServer must be allowed to get it"`` per distinct Secret."""
    ns = (obj.get("metadata") or {}).get("namespace", "")
    refs = secret_refs(obj)
    return [f"{', '.join(r.field for r in refs if r.name == n)} names Secret {n} in {ns}: the user creating or "
            "updating this SGLangServer must be allowed to get it (RBAC: get secrets)" for n in secret_names(obj)]


