"""Pure builders: SGLangServer → SGLang command line, Deployment (or, multi-node, LeaderWorkerSet), Service
(dicts), in the dask-kubernetes style, and the other objects the operator applies.

Entry point for the handlers: :func:`render` (one call gives everything to apply and to write in status).
No IO here; owner references are added by the caller (:func:`adopt` / :func:`owner_reference`).

- :mod:`.admission`: the tenant boundary: which pod an SGLangServer may ask for, as a ValidatingAdmissionPolicy
  and the same rules in Python.
- :mod:`.admission_autoscaling`: the admission rules on where KEDA's pod sends a tenant's queries (Prometheus address,
  ``metric: query``).
- :mod:`.admission_host`: the admission rules on what a pod reaches beyond its container (hostPath, volume sources).
- :mod:`.admission_kinds`: the admission rules' common parts (levels, :class:`~.admission_kinds.Params`, CEL helpers).
- :mod:`.admission_secrets`: the admission rules on the Secrets an SGLangServer names.
- :mod:`.autoscaling`: ``spec.autoscaling`` → a KEDA ``ScaledObject`` and its pause annotations.
- :mod:`.autoscaling_tenancy`: what a tenant's ``spec.autoscaling`` may make KEDA query (the admin's addresses, a
  ``metric: query`` held to its namespace).
- :mod:`.canary`: a canary's two workloads: which Deployment is which, and a revision rendered into either.
- :mod:`.command`: the spec → the SGLang command line (entry point, flags, env) in the release's dialect.
- :mod:`.dialect`: the SGLang facts the builders use, read from :mod:`sglang_operator.sglang`.
- :mod:`.drain`: the ``preStop`` drain of a pod a canary removes.
- :mod:`.labels`: labels, annotations and the revision hash of a server's children.
- :mod:`.leaderworkerset`: ``parallelism.nodes`` > 1 → a LeaderWorkerSet and its leader Service.
- :mod:`.monitoring`: how Prometheus scrapes SGLang pods (a PodMonitor, or a scrape config).
- :mod:`.owner`: owner references, so children are garbage-collected with their server.
- :mod:`.revision`: the revision ledger's objects: one ControllerRevision per revision that ran.
- :mod:`.tuning`: a Shadow trial's workload: the server's spec with the trial's settings.
- :mod:`.validate`: validation of a parsed spec against its SGLang release (what the CRD schema and CEL cannot know).
- :mod:`.workload`: the spec → Deployment and Service."""

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
from sglang_operator.builders.leaderworkerset import leader_selector, leader_service, leader_worker_set, pod_templates
from sglang_operator.builders.owner import adopt, owner_reference
from sglang_operator.builders.validate import SpecCheck, check, refusals, validate
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
    "leader_worker_set",
    "owner_reference",
    "pod_templates",
    "refusals",
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

    ``workload``/``service``: manifests without ownerReferences; the workload is a Deployment, or a
    LeaderWorkerSet when ``spec.parallelism.nodes`` > 1 (its Service then selects leaders only). ``revision``:
    pod-template hash (also label ``sglang-operator.io/revision``). ``selector``: ``status.selector`` string (the
    leaders' pods when multi-node: the scale subresource counts groups). ``warnings``: for the SpecValid
    message. ``status``: the status fields rendering determines (camelCase, ready to merge into a patch).
    """

    command: RenderedCommand
    workload: dict[str, Any]
    service: dict[str, Any]
    revision: str
    selector: str
    warnings: list[str]
    notes: tuple[str, ...] = ()
    """SGLang's informational start-up lines (not warnings; ``sglang-operator render`` shows them)."""

    @property
    def deployment(self) -> dict[str, Any]:
        """The workload (name kept from when it was always a Deployment)."""
        return self.workload

    @property
    def multinode(self) -> bool:
        """Whether the workload is a LeaderWorkerSet."""
        return self.workload.get("kind") == "LeaderWorkerSet"

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
    spec = server.spec
    if spec.parallelism.nodes > 1:
        workload = leader_worker_set(server.name, server.namespace, spec, cmd)
        svc = leader_service(server.name, server.namespace, spec, str(cmd.version))
        selector = leader_selector(server.name)
    else:
        workload = deployment(server.name, server.namespace, spec, cmd)
        svc = service(server.name, server.namespace, spec, str(cmd.version))
        selector = selector_labels(server.name)
    revision = pod_templates(workload)[0]["metadata"]["labels"][REVISION_LABEL]
    return Rendered(cmd, workload, svc, revision, selector_string(selector), result.warnings, tuple(result.notes))


def summary(server: SGLangServer, rendered: Rendered) -> dict[str, str]:
    """Key settings of a revision as strings, for ``status.revisions[].summary``."""
    spec = server.spec
    out = {
        "image": spec.sglang.image,
        "sglangVersion": str(rendered.command.version),
        "tp": str(spec.parallelism.tensor),
        "dp": str(spec.parallelism.data),
    }
    if spec.parallelism.pipeline > 1:
        out["pp"] = str(spec.parallelism.pipeline)
    if spec.parallelism.nodes > 1:
        out["nodes"] = str(spec.parallelism.nodes)
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
