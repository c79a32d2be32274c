"""The root of a custom resource of the project (SGLangServer, SGLangTuning): apiVersion, kind, metadata, spec,
status; its name rule; its parse errors; and the parse helpers both kinds share.

Each kind subclasses :class:`CustomResource` with its ``kind``, ``spec`` and ``status`` fields and one
:func:`name_rule` (a DNS-1035 label of at most so many characters, as the objects it names demand).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from sglang_operator.api.base import ApiModel, CelRule, FreeForm, StatusModel
from sglang_operator.api.names import did_you_mean, fields_at

log = logging.getLogger("sglang_operator.api")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def name_rule(limit: int, label: str, short_label: str, purpose: str, name: str) -> CelRule:
    """The rule on ``metadata.name``: a DNS-1035 label of at most ``limit`` characters. ``label`` is how the
    refusal calls it (e.g. ``a DNS-1035 label (lowercase letters, ...)``), ``short_label`` how the static fallback
    message does; ``purpose`` says why (``it names the Service``); ``name`` identifies the rule in tests. An object
    without a name passes (the API server gives it one or refuses it first)."""
    quoted = label.replace("'", "\\'")
    return CelRule(
        f"self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= {limit}",
        f"metadata.name must be {short_label}: {purpose}",
        lambda m: "name" not in m.metadata or (len(str(m.metadata["name"])) <= limit
                                               and bool(_DNS_1035.fullmatch(str(m.metadata["name"])))),
        message_expression=f"'metadata.name \"%s\" must be {quoted}: {purpose}; rename the "
        "object'.format([self.metadata.name])",
        explain=lambda m: f'metadata.name "{m.metadata["name"]}" must be {label}: {purpose}; rename the object',
        name=name,
    )


class CustomResource(ApiModel):
    """A whole object of one of the project's kinds; ``metadata`` is kept as the raw Kubernetes ObjectMeta dict.
    Subclasses add ``kind``, ``spec`` and ``status``."""

    api_version: Literal["sglang-operator.io/v1alpha1"] = "sglang-operator.io/v1alpha1"
    kind: str
    metadata: FreeForm = Field(default_factory=dict)

    @property
    def name(self) -> str:
        """metadata.name (raises KeyError when absent)."""
        return str(self.metadata["name"])

    @property
    def namespace(self) -> str:
        """metadata.namespace, ``default`` when absent."""
        return str(self.metadata.get("namespace") or "default")


class SpecError(ValueError):
    """A custom-resource body that does not parse; ``messages`` are ``path: message`` strings."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


def error_messages(err: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> list[str]:
    """pydantic errors as ``spec.a.b: message`` strings (camelCase paths as in YAML). An unknown field (pydantic's
    ``extra_forbidden``) reads ``unknown field`` as the API server says it, with the closest field of ``model`` (the
    model validated) at that place: ``spec.speculative.numStep: unknown field; did you mean numSteps?``."""
    out = []
    for e in err.errors():
        loc = ".".join(str(p) for p in (prefix, *e["loc"]) if p != "")
        msg = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "extra_forbidden" and e["loc"]:
            known = fields_at(model, e["loc"][:-1]) if model is not None else []
            msg = "unknown field" + did_you_mean(str(e["loc"][-1]), known)
        given = e.get("input")
        free_text = any(p in ("extraArgs", "extra_args", "env") for p in e["loc"])  # may hold a secret: not echoed
        if (e["type"] not in ("value_error", "missing", "extra_forbidden") and isinstance(given, str | int | float)
                and not free_text):
            msg += f" (got {given!r})"  # the offending value, as the API server shows it
        for line in msg.split("\n"):  # a model's broken cross-field rules, one line each (ApiModel)
            # cross-field rules already name their field (``spec.model.servedModelName ...``)
            out.append(f"{loc}: {line}" if loc and not line.startswith(("spec.", "metadata.")) else line)
    return out


_Model = TypeVar("_Model", bound=ApiModel)
_Status = TypeVar("_Status", bound=StatusModel)


def parse_as(model: type[_Model], body: Mapping[str, Any], prefix: str = "") -> _Model:
    """``body`` validated as ``model`` (a whole object, or with ``prefix`` one part of it, e.g. ``spec``).

    Raises :class:`SpecError` with every problem found by the schema and the cross-field rules, paths prefixed
    with ``prefix``.
    """
    try:
        return model.model_validate(dict(body))
    except ValidationError as err:
        raise SpecError(error_messages(err, prefix, model)) from None


def parse_status_as(model: type[_Status], body: Mapping[str, Any], label: str = "") -> _Status:
    """``body['status']`` (a kopf body or a watch/GET object) as ``model``; none yet: an empty one.

    The status is the operator's own (written only by it), so unknown keys are ignored and a status that does not
    parse (edited by hand) reads as empty, logged (``label``: words before the object's name in the log line):
    nothing was applied as far as the operator can tell.
    """
    raw = body.get("status") or {}
    try:
        return model.model_validate(dict(raw))
    except ValidationError as err:
        log.warning("status of %s%s does not parse; read as empty: %s",
                    label, (body.get("metadata") or {}).get("name"), error_messages(err, "status"))
        return model()
