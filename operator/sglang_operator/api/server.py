"""The ``SGLangServer`` custom resource as a whole (apiVersion, kind, metadata, spec, status)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from sglang_operator.api.base import ApiModel, CelRule, FreeForm
from sglang_operator.api.names import did_you_mean, fields_at
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.status import SGLangServerStatus

log = logging.getLogger("sglang_operator.api")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


class SGLangServer(ApiModel):
    """An SGLangServer object; ``metadata`` is kept as the raw Kubernetes ObjectMeta dict."""

    api_version: Literal["sglang-operator.io/v1alpha1"] = "sglang-operator.io/v1alpha1"
    kind: Literal["SGLangServer"] = "SGLangServer"
    metadata: FreeForm = Field(default_factory=dict)
    spec: SGLangServerSpec
    status: SGLangServerStatus | None = None

    cel_rules = (
        CelRule(
            "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",
            "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter, "
            "at most 63 characters): it names the Service",
            lambda m: "name" not in m.metadata or bool(_DNS_1035.fullmatch(str(m.metadata["name"]))),
            message_expression="'metadata.name \"%s\" must be a DNS-1035 label (lowercase letters, digits and "
            "\\'-\\', starting with a letter, at most 63 characters): it names the Service; rename the "
            "object'.format([self.metadata.name])",
            explain=lambda m: f'metadata.name "{m.metadata["name"]}" must be a DNS-1035 label (lowercase letters, '
            "digits and '-', starting with a letter, at most 63 characters): it names the Service; rename the object",
            name="name-dns-1035",
        ),
    )

    @property
    def name(self) -> str:
        """metadata.name (raises KeyError when absent)."""
        return str(self.metadata["name"])

    @property
    def namespace(self) -> str:
        """metadata.namespace, ``default`` when absent."""
        return str(self.metadata.get("namespace") or "default")


class SpecError(ValueError):
    """An SGLangServer body that does not parse; ``messages`` are ``path: message`` strings."""

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


def parse(body: Mapping[str, Any]) -> SGLangServer:
    """Parse a whole SGLangServer (as from ``kubectl get -o json`` or a kopf body).

    Raises :class:`SpecError` with every problem found by the schema and the cross-field rules.
    """
    try:
        return SGLangServer.model_validate(dict(body))
    except ValidationError as err:
        raise SpecError(error_messages(err, model=SGLangServer)) from None


def parse_status(body: Mapping[str, Any]) -> SGLangServerStatus:
    """``body['status']`` (a kopf body or a watch/GET object) as :class:`SGLangServerStatus`; none yet: an empty one.

    The status is the operator's own (written only by it), so unknown keys are ignored and a status that does not
    parse (edited by hand) reads as empty, logged: nothing was applied as far as the operator can tell.
    """
    raw = body.get("status") or {}
    try:
        return SGLangServerStatus.model_validate(dict(raw))
    except ValidationError as err:
        log.warning("status of %s does not parse; read as empty: %s",
                    (body.get("metadata") or {}).get("name"), error_messages(err, "status"))
        return SGLangServerStatus()


def parse_spec(spec: Mapping[str, Any]) -> SGLangServerSpec:
    """Parse ``spec`` alone; raises :class:`SpecError` with ``spec.``-prefixed messages."""
    try:
        return SGLangServerSpec.model_validate(dict(spec))
    except ValidationError as err:
        raise SpecError(error_messages(err, "spec", SGLangServerSpec)) from None
