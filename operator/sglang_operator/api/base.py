"""Shared pieces of the SGLangServer API: the camelCase base model, CEL rules and Kubernetes value types.

Every cross-field rule is declared once as a :class:`CelRule`: the CRD generator (``api/crd.py``) emits it as an
``x-kubernetes-validations`` entry, and the pydantic model checks the same rule in Python with the same message,
so ``sglang-operator render`` and the API server refuse the same specs with the same words.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

from sglang_operator.api import kube_types
from sglang_operator.api.bounds import QUANTITY_LIMIT

GROUP = "sglang-operator.io"
"""API group of the SGLangServer resource (project-owned)."""
VERSION = "v1alpha1"
KIND = "SGLangServer"
PLURAL = "sglangservers"
SINGULAR = "sglangserver"
SHORT_NAMES = ("sgls",)
API_VERSION = f"{GROUP}/{VERSION}"
RETRY_ANNOTATION = f"{GROUP}/retry"
"""Annotation whose change allows one new attempt of a rejected revision (or resumes a Paused analysis):
``sglang-operator retry`` writes it."""
PROMOTE_ANNOTATION = f"{GROUP}/promote"
"""Annotation ``sglang-operator promote`` writes: the hash of the serving revision to accept as stable now (during a
canary: of the canary revision, whose remaining analysis is skipped)."""
ABORT_ANNOTATION = f"{GROUP}/abort"
"""Annotation ``sglang-operator abort`` writes (any new value): the canary in progress is removed and its revision
rejected (``sglang-operator retry`` allows it again)."""
MESSAGE_LIMIT = 1024
"""Characters at most of a condition's or an event's message the operator writes (the API server refuses an Event
whose message is longer than 1 KiB)."""
VALUE_LIMIT = 256
"""Characters at most of a string read from an SGLang pod (``/server_info``) that the operator stores in ``status``
(``status.effective.algorithm``; the longest real value, ``"STANDALONE"``, has 10)."""
TRUNCATED = "…[truncated]"
"""The marker :func:`truncate` ends a cut string with."""


def truncate(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` when it has at most ``limit`` characters, else its first characters followed by :data:`TRUNCATED`,
    ``limit`` characters in all. Every string the operator writes into ``status``, a condition or an event that may
    come from an SGLang pod (an untrusted image) goes through it. Raises ``ValueError`` when ``limit`` is shorter
    than the marker."""
    if limit < len(TRUNCATED):
        raise ValueError(f"truncate: limit {limit} is shorter than the marker {TRUNCATED!r}")
    return text if len(text) <= limit else text[:limit - len(TRUNCATED)] + TRUNCATED


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` with its noun in the right number: ``1 sample``, ``2 samples``, ``0 samples`` (``nouns``: an
    irregular plural; default ``noun + "s"``)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


@dataclass(frozen=True)
class CelRule:
    """One cross-field rule, as CEL for the API server and as a Python predicate for offline validation.

    ``rule`` is evaluated with ``self`` bound to the object the rule is attached to; ``check`` gets the parsed
    pydantic model and returns True when the object is valid. ``field_path`` is relative to that object
    (e.g. ``.numDraftTokens``) and is what the API server reports as the failing field.

    Every refusal names the field, the offending value and the fix: ``message_expression`` (CEL, evaluated by
    the API server) and ``explain`` (Python, given the model) build the same text with the values filled in;
    ``message`` is the static fallback the API server shows should the expression fail. ``name`` identifies the
    rule in tests (the table test walks every rule).
    """

    rule: str
    message: str
    check: Callable[[Any], bool]
    field_path: str | None = None
    message_expression: str | None = None
    explain: Callable[[Any], str] | None = None
    name: str = ""

    def to_schema(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry: ``{rule, message[, messageExpression][, fieldPath]}``."""
        out = {"rule": self.rule, "message": self.message}
        if self.message_expression:
            out["messageExpression"] = self.message_expression
        if self.field_path:
            out["fieldPath"] = self.field_path
        return out

    def refusal(self, model: Any) -> str:
        """The message for ``model``, which breaks the rule (the API server's text, values filled in)."""
        return self.explain(model) if self.explain is not None else self.message


def _add_cel(schema: dict[str, Any], cls: type[Any]) -> None:
    rules: tuple[CelRule, ...] = getattr(cls, "cel_rules", ())
    if rules:
        schema["x-kubernetes-validations"] = [r.to_schema() for r in rules]


_T = TypeVar("_T")


def clone(value: _T) -> _T:
    """A deep copy of a tree of pydantic models, lists, dicts and tuples, sharing every other value (str, numbers,
    datetimes, enums, None: immutable), without validation: what ``model_copy(deep=True)`` gives, at a fraction of
    its cost (pydantic goes through ``copy.deepcopy`` and its memo for every value; the rollback analysis copies its
    state every observation)."""
    if isinstance(value, BaseModel):
        out = copy.copy(value)  # pydantic's __copy__: a new instance, fields set, extra and private state kept
        object.__setattr__(out, "__dict__", {k: clone(v) for k, v in value.__dict__.items()})
        return out
    if isinstance(value, list):
        return [clone(v) for v in value]  # type: ignore[return-value]
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, tuple):
        return tuple(clone(v) for v in value)  # type: ignore[return-value]
    return value


class ApiModel(BaseModel):
    """Base of the spec models: camelCase aliases, unknown fields refused, attribute docstrings as descriptions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        json_schema_extra=_add_cel,
    )
    cel_rules: ClassVar[tuple[CelRule, ...]] = ()

    @model_validator(mode="after")
    def _check_cel_rules(self) -> ApiModel:
        """Every rule of the model that fails, as the API server lists them (one line each: ``error_messages``
        splits them), not only the first."""
        failures = [rule.refusal(self) for rule in type(self).cel_rules if not rule.check(self)]
        if failures:
            raise ValueError("\n".join(failures))
        return self

    def dump(self) -> dict[str, Any]:
        """The object as Kubernetes YAML would hold it: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class StatusModel(ApiModel):
    """Base of the status models: like :class:`ApiModel`, but unknown fields are ignored (forward compatible)."""

    model_config = ConfigDict(extra="ignore")


# --- Kubernetes value types -------------------------------------------------------------------------------

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def _quantity_to_str(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return str(value)
    return value


Quantity = Annotated[
    str,
    BeforeValidator(_quantity_to_str),
    StringConstraints(pattern=QUANTITY_PATTERN, max_length=QUANTITY_LIMIT),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "maxLength": QUANTITY_LIMIT,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A Kubernetes resource quantity (``8``, ``64Gi``, ``500m``); YAML integers are accepted and kept as strings."""

FreeForm = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""A Kubernetes object passed through unchanged (affinity, securityContext, a volume, ...)."""

FreeFormList = Annotated[
    list[dict[str, Any]],
    WithJsonSchema(
        {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    ),
]
"""A list of Kubernetes objects passed through unchanged (tolerations, volumes, env vars, ...)."""


def _kube(kind: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def check(value: dict[str, Any]) -> dict[str, Any]:
        problems = kube_types.errors(kind, value)
        if problems:
            raise ValueError("; ".join(problems))
        return value
    return check


SecurityContext = Annotated[dict[str, Any], WithJsonSchema(kube_types.structural("SecurityContext")),
                            AfterValidator(_kube("SecurityContext"))]
"""A Kubernetes ``SecurityContext`` (container), checked against Kubernetes' own schema (:mod:`.kube_types`)."""
Affinity = Annotated[dict[str, Any], WithJsonSchema(kube_types.structural("Affinity")),
                     AfterValidator(_kube("Affinity"))]
"""A Kubernetes ``Affinity``, checked against Kubernetes' own schema."""
Toleration = Annotated[dict[str, Any], WithJsonSchema(kube_types.structural("Toleration")),
                       AfterValidator(_kube("Toleration"))]
"""A Kubernetes ``Toleration``, checked against Kubernetes' own schema."""
EnvVar = Annotated[dict[str, Any], WithJsonSchema(kube_types.structural("EnvVar")), AfterValidator(_kube("EnvVar"))]
"""A Kubernetes ``EnvVar``, checked against Kubernetes' own schema."""
Volume = Annotated[dict[str, Any], WithJsonSchema(kube_types.structural("Volume")), AfterValidator(_kube("Volume"))]
"""A Kubernetes ``Volume``, checked against Kubernetes' own schema."""
VolumeMount = Annotated[dict[str, Any], WithJsonSchema(kube_types.structural("VolumeMount")),
                        AfterValidator(_kube("VolumeMount"))]
"""A Kubernetes ``VolumeMount``, checked against Kubernetes' own schema."""
