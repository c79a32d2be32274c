"""Pure builders: SGLangServer → SGLang command line, Deployment, Service (dicts), in the dask-kubernetes style.

Entry point for the handlers: :func:`render` (one call gives everything to apply and to write in status).
No IO here; owner references are added by the caller (:func:`adopt` / :func:`owner_reference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang_operator.api.server import SGLangServer
from sglang_operator.builders.command import RenderedCommand, derive_num_draft_tokens, render_command
from sglang_operator.builders.labels import (
    FIELD_MANAGER,
    REVISION_LABEL,
    common_labels,
    revision_hash,
    selector_labels,
    selector_string,
)
from sglang_operator.builders.owner import adopt, owner_reference
from sglang_operator.builders.validate import SpecCheck, check, validate
from sglang_operator.builders.workload import deployment, service

__all__ = [
    "FIELD_MANAGER",
    "REVISION_LABEL",
    "InvalidSpec",
    "Rendered",
    "RenderedCommand",
    "SpecCheck",
    "adopt",
    "check",
    "common_labels",
    "deployment",
    "derive_num_draft_tokens",
    "owner_reference",
    "render",
    "render_command",
    "revision_hash",
    "selector_labels",
    "selector_string",
    "service",
    "summary",
    "validate",
]


@dataclass(frozen=True)
class Rendered:
    """Everything one reconcile applies and reports for a valid SGLangServer.

    ``deployment``/``service``: manifests without ownerReferences. ``revision``: pod-template hash (also label
    ``sglang-operator.io/revision``). ``selector``: ``status.selector`` string. ``warnings``: for the SpecValid
    message. ``status``: the status fields rendering determines (camelCase, ready to merge into a patch).
    """

    command: RenderedCommand
    deployment: dict[str, Any]
    service: dict[str, Any]
    revision: str
    selector: str
    warnings: list[str]

    @property
    def status(self) -> dict[str, Any]:
        """``{revision, selector, sglangVersion, command, numDraftTokens}`` (numDraftTokens only when set)."""
        out: dict[str, Any] = {
            "revision": self.revision,
            "selector": self.selector,
            "sglangVersion": str(self.command.version),
            "command": self.command.command_line,
        }
        if self.command.num_draft_tokens is not None:
            out["numDraftTokens"] = self.command.num_draft_tokens
        return out


class InvalidSpec(ValueError):
    """The spec is invalid for its SGLang release; ``errors`` are the SpecValid=False messages."""

    def __init__(self, errors: list[str], warnings: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors
        self.warnings = warnings


def render(server: SGLangServer) -> Rendered:
    """Validate and render ``server``. Raises :class:`InvalidSpec` (nothing may be applied then)."""
    result = check(server.spec)
    if result.errors or result.command is None:
        raise InvalidSpec(result.errors, result.warnings)
    cmd = result.command
    dep = deployment(server.name, server.namespace, server.spec, cmd)
    svc = service(server.name, server.namespace, server.spec, str(cmd.version))
    revision = dep["spec"]["template"]["metadata"]["labels"][REVISION_LABEL]
    return Rendered(cmd, dep, svc, revision, selector_string(selector_labels(server.name)), result.warnings)


def summary(server: SGLangServer, rendered: Rendered) -> dict[str, str]:
    """Key settings of a revision as strings, for ``status.revisions[].summary``."""
    spec = server.spec
    out = {
        "image": spec.sglang.image,
        "sglangVersion": str(rendered.command.version),
        "tp": str(spec.parallelism.tensor),
        "dp": str(spec.parallelism.data),
    }
    if spec.speculative:
        out |= {
            "algorithm": spec.speculative.algorithm.value,
            "numSteps": str(spec.speculative.num_steps),
            "eagleTopk": str(spec.speculative.eagle_topk),
            "numDraftTokens": str(rendered.command.num_draft_tokens),
            "specV2": str(spec.speculative.spec_v2).lower(),
        }
    mem = spec.memory.dump()
    out |= {k: str(v) for k, v in mem.items()}
    return out
