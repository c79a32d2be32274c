"""The admission rules' common parts (:mod:`sglang_operator.builders.admission`): the levels, what the admin picks
(:class:`Params`), the helpers that write a rule's CEL and read the same fields in Python, the :class:`Rule` protocol,
and the rule kinds on one field of ``spec.securityContext``: :class:`ValueRule`, :class:`SubsetRule`,
:class:`ContainsRule`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from sglang_operator.builders.workload import DEFAULT_SECURITY_CONTEXT


class Level(StrEnum):
    """The rule set of the policy (chart value ``admissionPolicy.level``)."""

    BASELINE = "baseline"
    """Pod Security Standards baseline (default): what lmsysorg/sglang images, which run as root, can meet."""
    RESTRICTED = "restricted"
    """Baseline plus the restricted level's rules: needs an image that runs as a non-root user."""


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
    allowed as ``spec.serviceAccountName``. ``host_path_writes``: :class:`HostPathWrites`.
    ``allowed_prometheus_addresses``: what ``spec.autoscaling.prometheus.address`` may be (the chart's
    ``autoscaling.allowedPrometheusAddresses`` then ``prometheusAddress``; ``*``: any); ``allow_query_metric``:
    whether ``metric: query`` is allowed (``autoscaling.allowQueryMetric``)."""

    level: Level = Level.BASELINE
    allowed_host_paths: tuple[str, ...] = ()
    allowed_service_accounts: tuple[str, ...] = ()
    operator_service_account: str = "sglang-operator"
    operator_namespace: str = "sglang-operator"
    host_path_writes: HostPathWrites = HostPathWrites.FORBIDDEN
    allowed_prometheus_addresses: tuple[str, ...] = ()
    allow_query_metric: bool = False


def lit(value: Any) -> str:
    """A CEL literal of a JSON value (strings, bools, ints, lists of them): JSON with ASCII escapes is CEL."""
    return json.dumps(value)


def _text(value: Any) -> str:
    """A value as CEL's ``string()`` writes it (``true``, ``0``, ``RuntimeDefault``); lists joined by ``, ``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ", ".join(_text(v) for v in value)
    return str(value)


def lookup(tree: Any, path: Sequence[str]) -> tuple[bool, Any]:
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
    return f"{lit(prefix)} + {value_cel} + {lit(suffix)}"


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


def validation(expression: str, message: str, message_expression: str) -> dict[str, str]:
    """One ``ValidatingAdmissionPolicy`` validation (reason ``Forbidden``)."""
    return {"expression": expression, "message": message, "messageExpression": message_expression,
            "reason": "Forbidden"}


def none_bad(collection: str, bad: str, message: str, message_expression: str) -> dict[str, str]:
    """A validation that no item of ``collection`` (a CEL list or map that may be unset) is in ``bad`` (the CEL
    filter of its offending items; ``message_expression`` names ``bad[0]``)."""
    return validation(f"!has({collection}) || {bad}.size() == 0", message, message_expression)


def spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj['spec']`` of an SGLangServer body, ``{}`` when it is absent or not a mapping."""
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


BOTH = (Level.BASELINE, Level.RESTRICTED)
"""A rule of both levels."""
RESTRICTED_ONLY = (Level.RESTRICTED,)
"""A rule of level restricted only."""


@dataclass(frozen=True)
class FieldRule:
    """The common part of a rule on one field of ``spec`` (``path``, e.g. ``("securityContext", "privileged")``):
    its ID, what the refusal ``says``, the ``fix``, the Pod Security Standards check it stands for (``pss``) and its
    ``levels``."""

    name: str
    path: tuple[str, ...]
    says: str
    fix: str
    pss: str
    levels: tuple[Level, ...] = BOTH

    @property
    def field(self) -> str:
        """``spec.<path>``."""
        return "spec." + ".".join(self.path)


@dataclass(frozen=True, kw_only=True)
class ValueRule(FieldRule):
    """A scalar of ``spec`` (``path``) must be one of ``values`` (``allowed``) or none of them (not ``allowed``).
    Unset, it counts as the operator's default at that path (``default``); with no default an unset field passes
    unless ``required``. The message: ``<field> is <value>: <says> (<pss>); <fix>``."""

    values: tuple[Any, ...]
    allowed: bool
    required: bool = False

    @property
    def default(self) -> Any:
        """The operator's default at ``path`` (``DEFAULT_SECURITY_CONTEXT``), or None."""
        if self.path[0] != "securityContext":
            return None
        return lookup(DEFAULT_SECURITY_CONTEXT, self.path[1:])[1]

    def _ok(self, value: Any) -> bool:
        return (value in self.values) == self.allowed

    def _unset_ok(self) -> bool:
        default = self.default
        return self._ok(default) if default is not None else not self.required

    def cel(self) -> list[dict[str, str]]:
        ref = _ref(OBJECT, self.path)
        test = f"{ref} in {lit(list(self.values))}" if self.allowed else f"!({ref} in {lit(list(self.values))})"
        expression = (f"!({_has(OBJECT, self.path)}) || {test}" if self._unset_ok()
                      else f"({_has(OBJECT, self.path)}) && {test}")
        value = f"(({_has(OBJECT, self.path)}) ? string({ref}) : 'unset')"
        prefix, suffix = f"{self.field} is ", f": {self.says} ({self.pss}); {self.fix}"
        return [validation(expression, f"{self.field}: {self.says} ({self.pss}); {self.fix}",
                            _message_cel(prefix, value, suffix))]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        found, value = lookup(spec_of(obj), self.path)
        if (found and self._ok(value)) or (not found and self._unset_ok()):
            return None
        return f"{self.field} is {_text(value) if found else 'unset'}: {self.says} ({self.pss}); {self.fix}"


@dataclass(frozen=True, kw_only=True)
class SubsetRule(FieldRule):
    """Every item of a list of ``spec`` (``path``) must be in ``allowed``; unset counts as empty (the operator
    adds none). The message lists the items outside."""

    allowed: tuple[str, ...]

    def cel(self) -> list[dict[str, str]]:
        ref = _ref(OBJECT, self.path)
        outside = f"{ref}.filter(c, !(c in {lit(list(self.allowed))}))"
        tail = f": {self.says} ({self.pss}, allowed: {', '.join(self.allowed)}); {self.fix}"
        return [validation(f"!({_has(OBJECT, self.path)}) || {outside}.size() == 0",
                            f"{self.field} adds a capability outside the level{tail}",
                            _message_cel(f"{self.field} adds ", f"{outside}.join(', ')", tail))]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        found, value = lookup(spec_of(obj), self.path)
        outside = [c for c in (value if found and isinstance(value, list) else []) if c not in self.allowed]
        if not outside:
            return None
        return f"{self.field} adds {', '.join(map(str, outside))}: {self.says} ({self.pss}, allowed: " \
               f"{', '.join(self.allowed)}); {self.fix}"


@dataclass(frozen=True, kw_only=True)
class ContainsRule(FieldRule):
    """A list of ``spec`` (``path``) must contain ``item``; unset counts as the operator's default list."""

    item: str

    def _unset_ok(self) -> bool:
        found, default = lookup(DEFAULT_SECURITY_CONTEXT, self.path[1:])
        return found and self.item in default

    def cel(self) -> list[dict[str, str]]:
        ref = _ref(OBJECT, self.path)
        has = _has(OBJECT, self.path)
        expression = (f"!({has}) || {lit(self.item)} in {ref}" if self._unset_ok()
                      else f"({has}) && {lit(self.item)} in {ref}")
        tail = f": {self.says} ({self.pss}); {self.fix}"
        return [validation(expression, f"{self.field} lacks {self.item}{tail}",
                            _message_cel(f"{self.field} is [", f"(({has}) ? {ref}.join(', ') : '')", f"]{tail}"))]

    def refusal(self, obj: Mapping[str, Any], params: Params) -> str | None:
        found, value = lookup(spec_of(obj), self.path)
        if (found and isinstance(value, list) and self.item in value) or (not found and self._unset_ok()):
            return None
        return f"{self.field} is [{_text(value) if found else ''}]: {self.says} ({self.pss}); {self.fix}"

