"""The admission rules on what a pod reaches beyond its container (:mod:`sglang_operator.builders.admission`): the
node's files (:class:`HostPathRule`, :class:`HostPathWriteRule`), the volume sources of level restricted
(:class:`VolumeTypesRule`), the AppArmor pod annotations (:class:`AppArmorAnnotationRule`) and the ServiceAccount the
pods run as (:class:`ServiceAccountRule`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglang_operator.builders.admission_kinds import (
    BOTH,
    OBJECT,
    RESTRICTED_ONLY,
    HostPathWrites,
    Level,
    Params,
    lit,
    lookup,
    none_bad,
    spec_of,
    validation,
)


def _path_allowed(path: str, prefixes: Sequence[str]) -> bool:
    """``path`` is under one of ``prefixes`` by whole segments and has no ``..`` segment."""
    if ".." in path.split("/"):
        return False
    return any(path == p or path.startswith(p if p.endswith("/") else p + "/") for p in prefixes)


def _path_allowed_cel(path: str) -> str:
    """CEL of :func:`_path_allowed` against the variable ``allowedHostPaths``."""
    return (f"!('..' in {path}.split('/')) && variables.allowedHostPaths.exists(p, {path} == p || "
            f"{path}.startsWith(p.endsWith('/') ? p : p + '/'))")


_HOST_PATH_SAYS = ("a hostPath volume reads and writes the node's files (Pod Security Standards baseline, check "
                   "hostPathVolumes); this cluster allows only paths under the admission policy's "
                   "allowedHostPaths")
_HOST_PATH_LIST = "' + (variables.allowedHostPaths.size() == 0 ? 'none' : variables.allowedHostPaths.join(', ')) + '"


@dataclass(frozen=True)
class HostPathRule:
    """No hostPath outside ``allowedHostPaths``: ``spec.model.cache.hostPath`` (``cache``) or every
    ``spec.volumes[].hostPath.path`` (not ``cache``). The message names the path and the allowed prefixes."""

    name: str
    cache: bool
    levels: tuple[Level, ...] = BOTH

    def _fix(self, allowed: Sequence[str]) -> str:
        return (f"(allowed: {', '.join(allowed) if allowed else 'none'}); use a persistentVolumeClaim or emptyDir, "
                "or ask an admin to add the prefix to admissionPolicy.allowedHostPaths")

    def cel(self) -> list[dict[str, str]]:
        fix_cel = ("' (allowed: " + _HOST_PATH_LIST + "); use a persistentVolumeClaim or emptyDir, or ask an admin "
                   "to add the prefix to admissionPolicy.allowedHostPaths'")
        if self.cache:
            path = f"{OBJECT}.model.cache.hostPath"
            has = f"has({OBJECT}.model.cache) && has({path})"
            return [validation(
                f"!({has}) || ({_path_allowed_cel(path)})",
                f"spec.model.cache.hostPath: {_HOST_PATH_SAYS}",
                f"'spec.model.cache.hostPath is ' + {path} + ': ' + {lit(_HOST_PATH_SAYS)} + {fix_cel}")]
        bad = f"{OBJECT}.volumes.filter(v, has(v.hostPath) && !({_path_allowed_cel('v.hostPath.path')}))"
        return [none_bad(
            f"{OBJECT}.volumes", bad,
            f"spec.volumes[].hostPath.path: {_HOST_PATH_SAYS}",
            f"'spec.volumes[' + {bad}[0].name + '].hostPath.path is ' + {bad}[0].hostPath.path + ': ' + "
            f"{lit(_HOST_PATH_SAYS)} + {fix_cel}")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        allowed = params.allowed_host_paths
        spec = spec_of(obj)
        if self.cache:
            found, path = lookup(spec, ("model", "cache", "hostPath"))
            if not found or _path_allowed(str(path), allowed):
                return None
            return f"spec.model.cache.hostPath is {path}: {_HOST_PATH_SAYS} {self._fix(allowed)}"
        for v in spec.get("volumes") or []:
            found, path = lookup(v, ("hostPath", "path"))
            if found and not _path_allowed(str(path), allowed):
                return f"spec.volumes[{v.get('name')}].hostPath.path is {path}: {_HOST_PATH_SAYS} {self._fix(allowed)}"
        return None


APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
"""Prefix of the AppArmor pod annotations (deprecated, still read by Kubernetes 1.36 and turned into the container's
``appArmorProfile``): ``<prefix><container>: runtime/default | localhost/<profile> | unconfined``."""
_APPARMOR_SAYS = ("a container without an AppArmor profile escapes the node's confinement (Pod Security Standards "
                  "baseline, check appArmorProfile)")
_APPARMOR_FIX = "use runtime/default or localhost/<profile>, or remove the annotation (default RuntimeDefault)"


def _apparmor_ok(value: Any) -> bool:
    return value == "runtime/default" or str(value).startswith("localhost/")


@dataclass(frozen=True)
class AppArmorAnnotationRule:
    """Every ``spec.podAnnotations`` key of :data:`APPARMOR_ANNOTATION` names ``runtime/default`` or a
    ``localhost/`` profile (the kubelet turns ``unconfined`` into an Unconfined profile)."""

    name: str
    levels: tuple[Level, ...] = BOTH

    def cel(self) -> list[dict[str, str]]:
        annotations = f"{OBJECT}.podAnnotations"
        bad = (f"{annotations}.filter(k, k.startsWith({lit(APPARMOR_ANNOTATION)}) && !({annotations}[k] == "
               f"'runtime/default' || {annotations}[k].startsWith('localhost/')))")
        return [none_bad(
            annotations, bad,
            f"spec.podAnnotations[{APPARMOR_ANNOTATION}*]: {_APPARMOR_SAYS}; {_APPARMOR_FIX}",
            f"'spec.podAnnotations[' + {bad}[0] + '] is ' + {annotations}[{bad}[0]] + ': ' + "
            f"{lit(_APPARMOR_SAYS + '; ' + _APPARMOR_FIX)}")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        annotations = spec_of(obj).get("podAnnotations") or {}
        for key, value in annotations.items():
            if str(key).startswith(APPARMOR_ANNOTATION) and not _apparmor_ok(value):
                return f"spec.podAnnotations[{key}] is {value}: {_APPARMOR_SAYS}; {_APPARMOR_FIX}"
        return None


def _writable_here(path: str, namespace: str, params: Params) -> bool:
    """Whether ``params`` let a hostPath at ``path`` be written by a server of ``namespace``."""
    if params.host_path_writes is HostPathWrites.ALLOWED:
        return True
    if params.host_path_writes is HostPathWrites.OWN_NAMESPACE:
        own = [(p if p.endswith("/") else p + "/") + namespace for p in params.allowed_host_paths]
        return _path_allowed(path, own)
    return False


def _writable_here_cel(path: str) -> str:
    """CEL of :func:`_writable_here` against the variables ``hostPathWrites`` and ``allowedHostPaths``."""
    own = "(p.endsWith('/') ? p : p + '/') + object.metadata.namespace"
    return (f"variables.hostPathWrites == 'Allowed' || (variables.hostPathWrites == 'OwnNamespace' && "
            f"variables.allowedHostPaths.exists(p, {path} == {own} || {path}.startsWith({own} + '/')))")


_WRITES_SAYS = ("a writable hostPath lets this server change files other servers on the node load (the model "
                "weights); this cluster mounts hostPaths read-only")
_WRITES_FIX = ("ask an admin for admissionPolicy.hostPathWrites Allowed, or OwnNamespace with the path under "
               "<allowed prefix>/<namespace>")


@dataclass(frozen=True)
class HostPathWriteRule:
    """hostPaths are mounted read-only unless ``hostPathWrites`` allows writing there: ``spec.model.cache`` with
    ``hostPathReadOnly`` false (``cache``), or a ``spec.volumes[].hostPath`` whose ``type`` is not ``Directory`` or
    ``File`` (``DirectoryOrCreate`` and an unset type may create or write) or that a ``spec.volumeMounts[]`` mounts
    without ``readOnly: true`` (not ``cache``)."""

    name: str
    cache: bool
    levels: tuple[Level, ...] = BOTH

    def cel(self) -> list[dict[str, str]]:
        if self.cache:
            cache = f"{OBJECT}.model.cache"
            writable = f"has({cache}) && has({cache}.hostPath) && has({cache}.hostPathReadOnly) && " \
                       f"!{cache}.hostPathReadOnly"
            return [validation(
                f"!({writable}) || {_writable_here_cel(f'{cache}.hostPath')}",
                f"spec.model.cache.hostPathReadOnly: {_WRITES_SAYS}; set it to true (the default) or {_WRITES_FIX}",
                f"'spec.model.cache.hostPathReadOnly is false for ' + {cache}.hostPath + ': ' + "
                f"{lit(_WRITES_SAYS)} + ' (admissionPolicy.hostPathWrites: ' + variables.hostPathWrites + '); set "
                f"it to true (the default) or ' + {lit(_WRITES_FIX)}")]
        mounts = f"{OBJECT}.volumeMounts"
        open_ = (f"(!has(v.hostPath.type) || !(v.hostPath.type in ['Directory', 'File']) || (has({mounts}) && "
                 f"{mounts}.exists(m, m.name == v.name && (!has(m.readOnly) || !m.readOnly))))")
        bad = f"{OBJECT}.volumes.filter(v, has(v.hostPath) && {open_} && !({_writable_here_cel('v.hostPath.path')}))"
        return [none_bad(
            f"{OBJECT}.volumes", bad,
            f"spec.volumes[].hostPath: {_WRITES_SAYS}; use type Directory or File and readOnly: true on each "
            f"spec.volumeMounts[] of it, or {_WRITES_FIX}",
            f"'spec.volumes[' + {bad}[0].name + '].hostPath ' + {bad}[0].hostPath.path + ' is writable (type ' + "
            f"(has({bad}[0].hostPath.type) ? {bad}[0].hostPath.type : 'unset') + ', or a mount without readOnly: "
            f"true): ' + {lit(_WRITES_SAYS)} + ' (admissionPolicy.hostPathWrites: ' + variables.hostPathWrites + "
            f"'); use type Directory or File and readOnly: true on each spec.volumeMounts[] of it, or ' + "
            f"{lit(_WRITES_FIX)}")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        spec = spec_of(obj)
        namespace = str((obj.get("metadata") or {}).get("namespace", ""))
        writes = params.host_path_writes.value
        if self.cache:
            cache = lookup(spec, ("model", "cache"))[1] or {}
            path = cache.get("hostPath")
            if path is None or cache.get("hostPathReadOnly", True) or _writable_here(str(path), namespace, params):
                return None
            return (f"spec.model.cache.hostPathReadOnly is false for {path}: {_WRITES_SAYS} "
                    f"(admissionPolicy.hostPathWrites: {writes}); set it to true (the default) or {_WRITES_FIX}")
        mounts = spec.get("volumeMounts") or []
        for v in spec.get("volumes") or []:
            host = v.get("hostPath")
            if not isinstance(host, Mapping):
                continue
            kind = host.get("type")
            open_ = kind not in ("Directory", "File") or any(
                m.get("name") == v.get("name") and not m.get("readOnly") for m in mounts)
            if open_ and not _writable_here(str(host.get("path")), namespace, params):
                return (f"spec.volumes[{v.get('name')}].hostPath {host.get('path')} is writable (type "
                        f"{kind or 'unset'}, or a mount without readOnly: true): {_WRITES_SAYS} "
                        f"(admissionPolicy.hostPathWrites: {writes}); use type Directory or File and readOnly: true "
                        f"on each spec.volumeMounts[] of it, or {_WRITES_FIX}")
        return None


@dataclass(frozen=True)
class VolumeTypesRule:
    """Every ``spec.volumes[]`` uses one of ``allowed`` sources (or hostPath, checked by :class:`HostPathRule`)."""

    name: str
    allowed: tuple[str, ...]
    pss: str
    levels: tuple[Level, ...] = RESTRICTED_ONLY

    @property
    def _keys(self) -> list[str]:
        return ["name", "hostPath", *self.allowed]

    def _tail(self) -> str:
        return (f": restricted allows only {', '.join(self.allowed)} volumes ({self.pss}); use one of them or ask "
                "an admin for admissionPolicy.level baseline")

    def cel(self) -> list[dict[str, str]]:
        # dyn(): the CRD types a volume as an object, which the type checker will not iterate (a warning in the
        # policy's status.typeChecking); at admission it is a map of its set fields, iterated by key
        bad = f"{OBJECT}.volumes.filter(v, dyn(v).exists(k, !(k in {lit(self._keys)})))"
        kind = f"dyn({bad}[0]).filter(k, !(k in {lit(self._keys)})).join(', ')"
        return [none_bad(f"{OBJECT}.volumes", bad,
                          f"spec.volumes[] uses a volume source outside the level{self._tail()}",
                          f"'spec.volumes[' + {bad}[0].name + '] is ' + {kind} + {lit(self._tail())}")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        for v in spec_of(obj).get("volumes") or []:
            extra = [k for k in v if k not in self._keys]
            if extra:
                return f"spec.volumes[{v.get('name')}] is {', '.join(extra)}{self._tail()}"
        return None


@dataclass(frozen=True)
class ServiceAccountRule:
    """``spec.serviceAccountName``: never the operator's own ServiceAccount (``operator``), else (not
    ``operator``) unset, ``default`` or in ``allowedServiceAccounts`` (``name`` or ``namespace/name``)."""

    name: str
    operator: bool
    levels: tuple[Level, ...] = BOTH

    _SA = f"{OBJECT}.serviceAccountName"
    _OPERATOR_SAYS = ("is the operator's own ServiceAccount, which may write every SGLangServer's Deployments and "
                      "read its Secrets; a pod running as it could act as the operator")
    _ALLOWED_SAYS = ("is not one the admission policy allows (admissionPolicy.allowedServiceAccounts: ")
    _ALLOWED_FIX = "); remove spec.serviceAccountName (the namespace's default) or ask an admin to allow it"

    def cel(self) -> list[dict[str, str]]:
        sa, ns = self._SA, "request.namespace"
        if self.operator:
            return [validation(
                f"!has({sa}) || !({ns} == variables.operatorNamespace && {sa} == variables.operatorServiceAccount)",
                f"spec.serviceAccountName {self._OPERATOR_SAYS}",
                f"'spec.serviceAccountName is ' + {sa} + ' in ' + {ns} + ' (' + variables.operatorNamespace + '/' + "
                f"variables.operatorServiceAccount + '): it ' + {lit(self._OPERATOR_SAYS)} + '; remove it or name "
                "another ServiceAccount'")]
        allowed_list = ("(variables.allowedServiceAccounts.size() == 0 ? 'none' : "
                        "variables.allowedServiceAccounts.join(', '))")
        return [validation(
            f"!has({sa}) || {sa} == '' || {sa} == 'default' || {sa} in variables.allowedServiceAccounts || "
            f"({ns} + '/' + {sa}) in variables.allowedServiceAccounts",
            f"spec.serviceAccountName {self._ALLOWED_SAYS}...{self._ALLOWED_FIX}",
            f"'spec.serviceAccountName is ' + {sa} + ': it ' + {lit(self._ALLOWED_SAYS)} + {allowed_list} + "
            f"{lit(self._ALLOWED_FIX)}")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        sa = spec_of(obj).get("serviceAccountName")
        ns = (obj.get("metadata") or {}).get("namespace", "")
        if not sa:
            return None
        if self.operator:
            if ns == params.operator_namespace and sa == params.operator_service_account:
                return (f"spec.serviceAccountName is {sa} in {ns} ({params.operator_namespace}/"
                        f"{params.operator_service_account}): it {self._OPERATOR_SAYS}; remove it or name another "
                        "ServiceAccount")
            return None
        allowed = params.allowed_service_accounts
        if sa == "default" or sa in allowed or f"{ns}/{sa}" in allowed:
            return None
        return f"spec.serviceAccountName is {sa}: it {self._ALLOWED_SAYS}{', '.join(allowed) or 'none'}" \
               f"{self._ALLOWED_FIX}"

