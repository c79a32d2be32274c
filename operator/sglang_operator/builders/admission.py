"""The tenant boundary: which pod an SGLangServer may ask for, as data, checked by the API server and offline.

Whoever may create an SGLangServer decides what pod the operator runs for it: any image, in that namespace, with
the pod fields the spec allows (``spec.securityContext``, ``spec.volumes``, ``spec.model.cache.hostPath``,
``spec.serviceAccountName``, the Secrets it names). The chart's ``ValidatingAdmissionPolicy``
(``charts/sglang-operator/templates/admission-policy.yaml``) holds every SGLangServer to the rules of
:data:`RULES` at the level an admin picks; ``sglang-operator render --admission-level`` runs the same rules in
Python (:func:`check`) with the same messages.

One table, two outputs, so they cannot drift: every rule is a value of one of a few kinds (:class:`ValueRule`,
:class:`SubsetRule`, :class:`ContainsRule`, :class:`HostPathRule`, :class:`AppArmorAnnotationRule`,
:class:`VolumeTypesRule`,
:class:`ServiceAccountRule`, :class:`SecretSlot`) whose parameters give both its CEL (:meth:`cel`) and its Python
predicate (:meth:`refusal`). :func:`policy_rules` renders the CEL side as JSON, committed as
``charts/sglang-operator/files/admission-policy.json`` (regenerate with ``python -m
sglang_operator.builders.admission > charts/sglang-operator/files/admission-policy.json``;
``tests/builders/test_admission.py`` fails when the copy is stale).

What the admin chooses reaches the CEL only as the policy's ``variables`` (``allowedHostPaths``,
``allowedServiceAccounts``, ``operatorServiceAccount``, ``operatorNamespace``, ``hostPathWrites``), which the chart
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from sglang_operator.api.base import GROUP, PLURAL, VERSION
from sglang_operator.builders.workload import DEFAULT_SECURITY_CONTEXT


class Level(StrEnum):
    """The rule set of the policy (chart value ``admissionPolicy.level``)."""

    BASELINE = "baseline"
    """Pod Security Standards baseline (default): what lmsysorg/sglang images, which run as root, can meet."""
    RESTRICTED = "restricted"
    """Baseline plus the restricted level's rules: needs an image that runs as a non-root user."""


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
"""Volume sources ``restricted`` allows (``policy/check_restrictedVolumes.go``); hostPath is judged by the
allowed prefixes instead (:class:`HostPathRule`), at both levels."""
SECRET_SLOTS = 16
"""Distinct Secrets one SGLangServer may name. The API server charges 350 000 cost units per authorizer check
(``k8s.io/apiserver/pkg/cel/library/cost.go``) against 1 000 000 per expression (``PerCallLimit``) and
10 000 000 per admission (``RuntimeCELCostBudget``): one check per validation, 16 of them, stays within both."""

OBJECT = "object.spec"
"""Where the SGLangServer's spec is in the policy's CEL (``object`` is the admitted object)."""


class HostPathWrites(StrEnum):
    """Whether a hostPath under ``allowedHostPaths`` may be written (chart value ``admissionPolicy.hostPathWrites``)."""

    FORBIDDEN = "Forbidden"
    """Default: read-only only (``spec.model.cache.hostPathReadOnly`` true; a ``spec.volumes[].hostPath`` of ``type:
    Directory`` or ``File``, each mount of it ``readOnly: true``): one tenant cannot change the files another
    loads."""
    ALLOWED = "Allowed"
    """Writable anywhere under the allowed prefixes."""
    OWN_NAMESPACE = "OwnNamespace"
    """Writable only under ``<allowed prefix>/<the SGLangServer's namespace>``; read-only elsewhere."""


@dataclass(frozen=True)
class Params:
    """What the admin picked (the chart's ``admissionPolicy`` values; ``render``'s options).

    ``allowed_host_paths``: absolute path prefixes, matched by whole path segments (``/models`` allows
    ``/models`` and ``/models/hf``, not ``/models2``). ``allowed_service_accounts``: ``name`` (any namespace) or
    ``namespace/name``. ``operator_service_account`` and ``operator_namespace``: the operator's own identity, never
    allowed as ``spec.serviceAccountName``. ``host_path_writes``: :class:`HostPathWrites`."""

    level: Level = Level.BASELINE
    allowed_host_paths: tuple[str, ...] = ()
    allowed_service_accounts: tuple[str, ...] = ()
    operator_service_account: str = "sglang-operator"
    operator_namespace: str = "sglang-operator"
    host_path_writes: HostPathWrites = HostPathWrites.FORBIDDEN


PARAM_VARIABLES: tuple[str, ...] = ("allowedHostPaths", "allowedServiceAccounts", "operatorServiceAccount",
                                    "operatorNamespace", "hostPathWrites")
"""The policy variables the chart renders from its values, in this order, before :data:`VARIABLES`."""


def _lit(value: Any) -> str:
    """A CEL literal of a JSON value (strings, bools, ints, lists of them): JSON with ASCII escapes is CEL."""
    return json.dumps(value)


def _text(value: Any) -> str:
    """A value as CEL's ``string()`` writes it (``true``, ``0``, ``RuntimeDefault``); lists joined by ``, ``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ", ".join(_text(v) for v in value)
    return str(value)


def _lookup(tree: Any, path: Sequence[str]) -> tuple[bool, Any]:
    """``(True, value)`` when ``tree`` has a non-null value at ``path`` (the API server prunes nulls), else
    ``(False, None)``."""
    for key in path:
        if not isinstance(tree, Mapping) or tree.get(key) is None:
            return False, None
        tree = tree[key]
    return True, tree


def _has(base: str, path: Sequence[str]) -> str:
    """CEL: every step of ``path`` under ``base`` is set."""
    return " && ".join(f"has({base}.{'.'.join(path[:i + 1])})" for i in range(len(path)))


def _ref(base: str, path: Sequence[str]) -> str:
    return f"{base}.{'.'.join(path)}"


def _message_cel(prefix: str, value_cel: str, suffix: str) -> str:
    return f"{_lit(prefix)} + {value_cel} + {_lit(suffix)}"


class Rule(Protocol):
    """One rule: its CEL validations and its Python refusal, from the same parameters."""

    @property
    def name(self) -> str:
        """The rule's ID (tests, docs)."""
        ...

    @property
    def levels(self) -> tuple[Level, ...]:
        """The levels whose policy holds the rule."""
        ...

    def cel(self) -> list[dict[str, str]]:
        """The ``ValidatingAdmissionPolicy`` validations: ``{expression, message, messageExpression, reason}``."""
        ...

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        """The message the API server would give for ``obj`` (an SGLangServer body), or None when it passes."""
        ...


def _validation(expression: str, message: str, message_expression: str) -> dict[str, str]:
    return {"expression": expression, "message": message, "messageExpression": message_expression,
            "reason": "Forbidden"}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


BOTH = (Level.BASELINE, Level.RESTRICTED)
RESTRICTED_ONLY = (Level.RESTRICTED,)


@dataclass(frozen=True)
class ValueRule:
    """A scalar of ``spec`` (``path``) must be one of ``values`` (``allowed``) or none of them (not ``allowed``).
    Unset, it counts as the operator's default at that path (``default``); with no default an unset field passes
    unless ``required``. The message: ``<field> is <value>: <says> (<pss>); <fix>``."""

    name: str
    path: tuple[str, ...]
    values: tuple[Any, ...]
    allowed: bool
    says: str
    fix: str
    pss: str
    levels: tuple[Level, ...] = BOTH
    required: bool = False

    @property
    def field(self) -> str:
        return "spec." + ".".join(self.path)

    @property
    def default(self) -> Any:
        """The operator's default at ``path`` (``DEFAULT_SECURITY_CONTEXT``), or None."""
        if self.path[0] != "securityContext":
            return None
        return _lookup(DEFAULT_SECURITY_CONTEXT, self.path[1:])[1]

    def _ok(self, value: Any) -> bool:
        return (value in self.values) == self.allowed

    def _unset_ok(self) -> bool:
        default = self.default
        return self._ok(default) if default is not None else not self.required

    def cel(self) -> list[dict[str, str]]:
        ref = _ref(OBJECT, self.path)
        test = f"{ref} in {_lit(list(self.values))}" if self.allowed else f"!({ref} in {_lit(list(self.values))})"
        expression = (f"!({_has(OBJECT, self.path)}) || {test}" if self._unset_ok()
                      else f"({_has(OBJECT, self.path)}) && {test}")
        value = f"(({_has(OBJECT, self.path)}) ? string({ref}) : 'unset')"
        prefix, suffix = f"{self.field} is ", f": {self.says} ({self.pss}); {self.fix}"
        return [_validation(expression, f"{self.field}: {self.says} ({self.pss}); {self.fix}",
                            _message_cel(prefix, value, suffix))]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        found, value = _lookup(_spec(obj), self.path)
        if (found and self._ok(value)) or (not found and self._unset_ok()):
            return None
        return f"{self.field} is {_text(value) if found else 'unset'}: {self.says} ({self.pss}); {self.fix}"


@dataclass(frozen=True)
class SubsetRule:
    """Every item of a list of ``spec`` (``path``) must be in ``allowed``; unset counts as empty (the operator
    adds none). The message lists the items outside."""

    name: str
    path: tuple[str, ...]
    allowed: tuple[str, ...]
    says: str
    fix: str
    pss: str
    levels: tuple[Level, ...] = BOTH

    @property
    def field(self) -> str:
        return "spec." + ".".join(self.path)

    def cel(self) -> list[dict[str, str]]:
        ref = _ref(OBJECT, self.path)
        outside = f"{ref}.filter(c, !(c in {_lit(list(self.allowed))}))"
        tail = f": {self.says} ({self.pss}, allowed: {', '.join(self.allowed)}); {self.fix}"
        return [_validation(f"!({_has(OBJECT, self.path)}) || {outside}.size() == 0",
                            f"{self.field} adds a capability outside the level{tail}",
                            _message_cel(f"{self.field} adds ", f"{outside}.join(', ')", tail))]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        found, value = _lookup(_spec(obj), self.path)
        outside = [c for c in (value if found and isinstance(value, list) else []) if c not in self.allowed]
        if not outside:
            return None
        return f"{self.field} adds {', '.join(map(str, outside))}: {self.says} ({self.pss}, allowed: " \
               f"{', '.join(self.allowed)}); {self.fix}"


@dataclass(frozen=True)
class ContainsRule:
    """A list of ``spec`` (``path``) must contain ``item``; unset counts as the operator's default list."""

    name: str
    path: tuple[str, ...]
    item: str
    says: str
    fix: str
    pss: str
    levels: tuple[Level, ...] = BOTH

    @property
    def field(self) -> str:
        return "spec." + ".".join(self.path)

    def _unset_ok(self) -> bool:
        found, default = _lookup(DEFAULT_SECURITY_CONTEXT, self.path[1:])
        return found and self.item in default

    def cel(self) -> list[dict[str, str]]:
        ref = _ref(OBJECT, self.path)
        has = _has(OBJECT, self.path)
        expression = (f"!({has}) || {_lit(self.item)} in {ref}" if self._unset_ok()
                      else f"({has}) && {_lit(self.item)} in {ref}")
        tail = f": {self.says} ({self.pss}); {self.fix}"
        return [_validation(expression, f"{self.field} lacks {self.item}{tail}",
                            _message_cel(f"{self.field} is [", f"(({has}) ? {ref}.join(', ') : '')", f"]{tail}"))]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        found, value = _lookup(_spec(obj), self.path)
        if (found and isinstance(value, list) and self.item in value) or (not found and self._unset_ok()):
            return None
        return f"{self.field} is [{_text(value) if found else ''}]: {self.says} ({self.pss}); {self.fix}"


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
            return [_validation(
                f"!({has}) || ({_path_allowed_cel(path)})",
                f"spec.model.cache.hostPath: {_HOST_PATH_SAYS}",
                f"'spec.model.cache.hostPath is ' + {path} + ': ' + {_lit(_HOST_PATH_SAYS)} + {fix_cel}")]
        bad = f"{OBJECT}.volumes.filter(v, has(v.hostPath) && !({_path_allowed_cel('v.hostPath.path')}))"
        return [_validation(
            f"!has({OBJECT}.volumes) || {bad}.size() == 0",
            f"spec.volumes[].hostPath.path: {_HOST_PATH_SAYS}",
            f"'spec.volumes[' + {bad}[0].name + '].hostPath.path is ' + {bad}[0].hostPath.path + ': ' + "
            f"{_lit(_HOST_PATH_SAYS)} + {fix_cel}")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        allowed = params.allowed_host_paths
        spec = _spec(obj)
        if self.cache:
            found, path = _lookup(spec, ("model", "cache", "hostPath"))
            if not found or _path_allowed(str(path), allowed):
                return None
            return f"spec.model.cache.hostPath is {path}: {_HOST_PATH_SAYS} {self._fix(allowed)}"
        for v in spec.get("volumes") or []:
            found, path = _lookup(v, ("hostPath", "path"))
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
        bad = (f"{annotations}.filter(k, k.startsWith({_lit(APPARMOR_ANNOTATION)}) && !({annotations}[k] == "
               f"'runtime/default' || {annotations}[k].startsWith('localhost/')))")
        return [_validation(
            f"!has({annotations}) || {bad}.size() == 0",
            f"spec.podAnnotations[{APPARMOR_ANNOTATION}*]: {_APPARMOR_SAYS}; {_APPARMOR_FIX}",
            f"'spec.podAnnotations[' + {bad}[0] + '] is ' + {annotations}[{bad}[0]] + ': ' + "
            f"{_lit(_APPARMOR_SAYS + '; ' + _APPARMOR_FIX)}")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        annotations = _spec(obj).get("podAnnotations") or {}
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
            return [_validation(
                f"!({writable}) || {_writable_here_cel(f'{cache}.hostPath')}",
                f"spec.model.cache.hostPathReadOnly: {_WRITES_SAYS}; set it to true (the default) or {_WRITES_FIX}",
                f"'spec.model.cache.hostPathReadOnly is false for ' + {cache}.hostPath + ': ' + "
                f"{_lit(_WRITES_SAYS)} + ' (admissionPolicy.hostPathWrites: ' + variables.hostPathWrites + '); set "
                f"it to true (the default) or ' + {_lit(_WRITES_FIX)}")]
        mounts = f"{OBJECT}.volumeMounts"
        open_ = (f"(!has(v.hostPath.type) || !(v.hostPath.type in ['Directory', 'File']) || (has({mounts}) && "
                 f"{mounts}.exists(m, m.name == v.name && (!has(m.readOnly) || !m.readOnly))))")
        bad = f"{OBJECT}.volumes.filter(v, has(v.hostPath) && {open_} && !({_writable_here_cel('v.hostPath.path')}))"
        return [_validation(
            f"!has({OBJECT}.volumes) || {bad}.size() == 0",
            f"spec.volumes[].hostPath: {_WRITES_SAYS}; use type Directory or File and readOnly: true on each "
            f"spec.volumeMounts[] of it, or {_WRITES_FIX}",
            f"'spec.volumes[' + {bad}[0].name + '].hostPath ' + {bad}[0].hostPath.path + ' is writable (type ' + "
            f"(has({bad}[0].hostPath.type) ? {bad}[0].hostPath.type : 'unset') + ', or a mount without readOnly: "
            f"true): ' + {_lit(_WRITES_SAYS)} + ' (admissionPolicy.hostPathWrites: ' + variables.hostPathWrites + "
            f"'); use type Directory or File and readOnly: true on each spec.volumeMounts[] of it, or ' + "
            f"{_lit(_WRITES_FIX)}")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        spec = _spec(obj)
        namespace = str((obj.get("metadata") or {}).get("namespace", ""))
        writes = params.host_path_writes.value
        if self.cache:
            cache = _lookup(spec, ("model", "cache"))[1] or {}
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
    """Every ``spec.volumes[]`` uses one of ``allowed`` sources (or hostPath, judged by :class:`HostPathRule`)."""

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
        bad = f"{OBJECT}.volumes.filter(v, dyn(v).exists(k, !(k in {_lit(self._keys)})))"
        kind = f"dyn({bad}[0]).filter(k, !(k in {_lit(self._keys)})).join(', ')"
        return [_validation(f"!has({OBJECT}.volumes) || {bad}.size() == 0",
                            f"spec.volumes[] uses a volume source outside the level{self._tail()}",
                            f"'spec.volumes[' + {bad}[0].name + '] is ' + {kind} + {_lit(self._tail())}")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        for v in _spec(obj).get("volumes") or []:
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
            return [_validation(
                f"!has({sa}) || !({ns} == variables.operatorNamespace && {sa} == variables.operatorServiceAccount)",
                f"spec.serviceAccountName {self._OPERATOR_SAYS}",
                f"'spec.serviceAccountName is ' + {sa} + ' in ' + {ns} + ' (' + variables.operatorNamespace + '/' + "
                f"variables.operatorServiceAccount + '): it ' + {_lit(self._OPERATOR_SAYS)} + '; remove it or name "
                "another ServiceAccount'")]
        allowed_list = ("(variables.allowedServiceAccounts.size() == 0 ? 'none' : "
                        "variables.allowedServiceAccounts.join(', '))")
        return [_validation(
            f"!has({sa}) || {sa} == '' || {sa} == 'default' || {sa} in variables.allowedServiceAccounts || "
            f"({ns} + '/' + {sa}) in variables.allowedServiceAccounts",
            f"spec.serviceAccountName {self._ALLOWED_SAYS}...{self._ALLOWED_FIX}",
            f"'spec.serviceAccountName is ' + {sa} + ': it ' + {_lit(self._ALLOWED_SAYS)} + {allowed_list} + "
            f"{_lit(self._ALLOWED_FIX)}")]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        sa = _spec(obj).get("serviceAccountName")
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
    spec = _spec(obj)
    out = [SecretRef(f, spec[k]["name"]) for k, f in _SECRET_FIELDS if _lookup(spec, (k, "name"))[0]]
    for e in spec.get("env") or []:
        found, name = _lookup(e, ("valueFrom", "secretKeyRef", "name"))
        if found:
            out.append(SecretRef(f"spec.env[{e.get('name')}].valueFrom.secretKeyRef.name", name))
    volumes = spec.get("volumes") or []
    for v in volumes:
        found, name = _lookup(v, ("secret", "secretName"))
        if found:
            out.append(SecretRef(f"spec.volumes[{v.get('name')}].secret.secretName", name))
    for v in volumes:
        for s in _lookup(v, ("projected", "sources"))[1] or []:
            found, name = _lookup(s, ("secret", "name"))
            if found:
                out.append(SecretRef(f"spec.volumes[{v.get('name')}].projected.sources[].secret.name", name))
    for v in volumes:
        found, name = _lookup(v, ("csi", "nodePublishSecretRef", "name"))
        if found:
            out.append(SecretRef(f"spec.volumes[{v.get('name')}].csi.nodePublishSecretRef.name", name))
    for p in spec.get("imagePullSecrets") or []:
        if p.get("name"):
            out.append(SecretRef(f"spec.imagePullSecrets[{p['name']}]", p["name"]))
    return out


_S = OBJECT
_SECRET_REFS_CEL = " + ".join([
    *(f"(has({_S}.{k}) ? [{{'field': {_lit(f)}, 'name': string({_S}.{k}.name)}}] : [])" for k, f in _SECRET_FIELDS),
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
            return [_validation(f"{names}.size() <= {SECRET_SLOTS}", f"spec names more than {SECRET_SLOTS}{tail}",
                                f"'spec names ' + string({names}.size()) + {_lit(tail)}")]
        i = self.index
        secret = f"{names}[{i}]"
        fields = f"variables.secretRefs.filter(r, r.name == {secret}).map(r, r.field).join(', ')"
        return [_validation(
            f"{names}.size() <= {i} || authorizer.group('').resource('secrets')"
            f".namespace(request.namespace).name({secret}).check('get').allowed()",
            f"spec names a Secret the requesting user may not get: {_SECRET_SAYS}",
            f"{fields} + ' names Secret ' + {secret} + ' in ' + request.namespace + ': ' + "
            f"{_lit(_SECRET_SAYS)} + '; ' + request.userInfo.username + ' may not'")]

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


_PSS_B = "Pod Security Standards baseline, check "
_PSS_R = "Pod Security Standards restricted, check "
_SC = "securityContext"

RULES: tuple[Rule, ...] = (
    ValueRule("privileged", (_SC, "privileged"), (True,), False,
              "a privileged container has every device and capability of the node", "remove it",
              _PSS_B + "privileged"),
    SubsetRule("capabilities-baseline", (_SC, "capabilities", "add"), BASELINE_CAPABILITIES,
               "the admission policy's level baseline forbids adding them", "remove them from the list",
               _PSS_B + "capabilities_baseline"),
    ValueRule("seccomp-baseline", (_SC, "seccompProfile", "type"), ("Unconfined",), False,
              "a container without a seccomp filter may call every system call", "remove it (default RuntimeDefault)",
              _PSS_B + "seccompProfile_baseline"),
    ValueRule("apparmor-baseline", (_SC, "appArmorProfile", "type"), ("RuntimeDefault", "Localhost"), True,
              "only the runtime's default or a profile loaded on the node confines the container",
              "remove it (default RuntimeDefault) or use Localhost", _PSS_B + "appArmorProfile"),
    AppArmorAnnotationRule("apparmor-annotations"),
    ValueRule("proc-mount", (_SC, "procMount"), ("Default",), True,
              "an unmasked /proc shows the node's kernel settings", "remove it (default Default)",
              _PSS_B + "procMount"),
    ValueRule("selinux-type", (_SC, "seLinuxOptions", "type"),
              ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"), True,
              "only the container SELinux types are allowed", "remove it or use container_t",
              _PSS_B + "seLinuxOptions"),
    ValueRule("selinux-user", (_SC, "seLinuxOptions", "user"), ("",), True,
              "a custom SELinux user is not allowed", "remove it", _PSS_B + "seLinuxOptions"),
    ValueRule("selinux-role", (_SC, "seLinuxOptions", "role"), ("",), True,
              "a custom SELinux role is not allowed", "remove it", _PSS_B + "seLinuxOptions"),
    ValueRule("windows-host-process", (_SC, "windowsOptions", "hostProcess"), (True,), False,
              "a Windows host process runs on the node itself", "remove it", _PSS_B + "windowsHostProcess"),
    HostPathRule("host-path-model-cache", cache=True),
    HostPathRule("host-path-volumes", cache=False),
    HostPathWriteRule("host-path-model-cache-read-only", cache=True),
    HostPathWriteRule("host-path-volumes-read-only", cache=False),
    ServiceAccountRule("service-account-not-the-operators", operator=True),
    ServiceAccountRule("service-account-allowed", operator=False),
    SecretSlot("secrets-at-most", -1),
    *(SecretSlot(f"secret-{i}", i) for i in range(SECRET_SLOTS)),
    ValueRule("run-as-non-root", (_SC, "runAsNonRoot"), (True,), True,
              "level restricted needs a container that runs as a non-root user (lmsysorg/sglang images run as "
              "root)", "set it to true with an image that runs as a non-root user, and runAsUser if the image names "
              "no numeric user", _PSS_R + "runAsNonRoot", RESTRICTED_ONLY, required=True),
    ValueRule("run-as-user", (_SC, "runAsUser"), (0,), False,
              "level restricted forbids running as root (UID 0)", "set a non-zero UID or remove it",
              _PSS_R + "runAsUser", RESTRICTED_ONLY),
    ValueRule("allow-privilege-escalation", (_SC, "allowPrivilegeEscalation"), (True,), False,
              "level restricted forbids setuid escalation", "remove it (default false)",
              _PSS_R + "allowPrivilegeEscalation", RESTRICTED_ONLY),
    SubsetRule("capabilities-restricted", (_SC, "capabilities", "add"), RESTRICTED_CAPABILITIES,
               "the admission policy's level restricted forbids adding them", "remove them from the list",
               _PSS_R + "capabilities_restricted", RESTRICTED_ONLY),
    ContainsRule("capabilities-drop-all", (_SC, "capabilities", "drop"), "ALL",
                 "level restricted needs every capability dropped", "add ALL or remove drop (default [ALL])",
                 _PSS_R + "capabilities_restricted", RESTRICTED_ONLY),
    ValueRule("seccomp-restricted", (_SC, "seccompProfile", "type"), ("RuntimeDefault", "Localhost"), True,
              "level restricted needs the RuntimeDefault or a Localhost seccomp profile",
              "remove it (default RuntimeDefault)", _PSS_R + "seccompProfile_restricted", RESTRICTED_ONLY),
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
pod and is not judged again: a server admitted before the policy, or before an admin narrowed it, keeps working."""


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
