"""The ``SGLangServer`` custom resource as a whole (apiVersion, kind, metadata, spec, status)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from sglang_operator.api.resource import CustomResource, SpecError, error_messages, name_rule, parse_as, parse_status_as
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.status import SGLangServerStatus

__all__ = ["SGLangServer", "SpecError", "error_messages", "parse", "parse_spec", "parse_status"]

_LABEL = "a DNS-1035 label (lowercase letters, digits and '-', starting with a letter, at most 63 characters)"


class SGLangServer(CustomResource):
    """An SGLangServer object; ``metadata`` is kept as the raw Kubernetes ObjectMeta dict."""

    kind: Literal["SGLangServer"] = "SGLangServer"
    spec: SGLangServerSpec
    status: SGLangServerStatus | None = None

    cel_rules = (name_rule(63, _LABEL, _LABEL, "it names the Service", "name-dns-1035"),)


def parse(body: Mapping[str, Any]) -> SGLangServer:
    """Parse a whole SGLangServer (as from ``kubectl get -o json`` or a kopf body).

    Raises :class:`SpecError` with every problem found by the schema and the cross-field rules.
    """
    return parse_as(SGLangServer, body)


def parse_status(body: Mapping[str, Any]) -> SGLangServerStatus:
    """``body['status']`` (a kopf body or a watch/GET object) as :class:`SGLangServerStatus`; none yet: an empty one.

    The status is the operator's own (written only by it), so unknown keys are ignored and a status that does not
    parse (edited by hand) reads as empty, logged: nothing was applied as far as the operator can tell.
    """
    return parse_status_as(SGLangServerStatus, body)


def parse_spec(spec: Mapping[str, Any]) -> SGLangServerSpec:
    """Parse ``spec`` alone; raises :class:`SpecError` with ``spec.``-prefixed messages."""
    return parse_as(SGLangServerSpec, spec, "spec")
