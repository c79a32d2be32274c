"""A trial's spec, pure: the server's spec as one trial runs it (:func:`trial_spec`, the one rule both the tuning
and the server's loop render a trial with) and whether it may run (:func:`trial_refusal`).

A trial is ONE workload on a fixed number of pods that nothing canaries nor scales: a Shadow trial's own Deployment
on one pod, or an InPlace trial on the server's own workload at its ``spec.replicas``. What of the server's spec
cannot apply to such pods is dropped (:data:`NOT_IN_A_TRIAL`), so a trial of any server the API accepts is
accepted too, whatever its replicas.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from sglang_operator.api.server import SpecError, parse_spec
from sglang_operator.api.spec import SGLangServerSpec, StrategyType
from sglang_operator.api.tuning_status import TrialSettings
from sglang_operator.builders.tuning import shadow_refusal
from sglang_operator.builders.validate import check

NOT_IN_A_TRIAL: tuple[str, ...] = ("autoscaling", "strategy.canary")
"""The keys (camelCase paths) of a server's spec that a trial's spec drops, for a Shadow and an InPlace trial alike:

- ``autoscaling``: nothing scales a trial. A Shadow trial's Deployment is its own, on one pod, never the
  autoscaler's target; an InPlace trial runs on the server's ``spec.replicas``, which the server's loop holds still
  meanwhile (``paused-replicas`` on the ScaledObject it renders from the server's OWN spec, never a trial's). Kept,
  its rules would refuse a valid trial (``autoscaling-canary-min-replicas``). It renders nothing into a pod.
- ``strategy.canary``: a trial is never canaried (a canary's ``steps``, ``maxSurge`` and ``onInconclusive`` apply to
  no trial pod), and ``strategy.type: Canary`` becomes ``Recreate`` (:data:`TRIAL_STRATEGY`): what a Canary
  server's Deployment renders anyway for a revision it does not canary. Kept, the API refuses a Shadow trial of a
  Canary server on its one pod (``canary-replicas``: "spec.strategy.type is Canary but spec.replicas is 1").
  ``drainSeconds`` stays: as Recreate's, the server's loop drains the server's pods before an InPlace trial
  replaces them (a Canary's per-pod drain hook would be rendered into the trial's pods only). ``RollingUpdate``
  (with its ``maxUnavailable``) and ``Recreate`` stay as they are: an InPlace trial replaces the server's pods as
  an update of the server does, a rolling one keeping the other replicas serving; a Shadow trial's Deployment is
  only ever created and deleted, so they change nothing there.

Nothing else of the spec is left out: ``rollback`` renders nothing into a pod and no trial is judged; ``replicas``
is the trial's own (:func:`trial_spec`)."""
TRIAL_STRATEGY: dict[str, str] = {StrategyType.CANARY.value: StrategyType.RECREATE.value}
"""``spec.strategy.type`` of a server → the trial's (:data:`NOT_IN_A_TRIAL`); a type not listed is kept."""


def trial_base(server_spec: Mapping[str, Any], replicas: int) -> dict[str, Any]:
    """The server's spec (camelCase dict) as a trial's workload, before its settings: :data:`NOT_IN_A_TRIAL`
    applied, ``replicas`` pods (Shadow: 1; InPlace: the server's ``spec.replicas``). A copy."""
    spec = copy.deepcopy(dict(server_spec))
    spec["replicas"] = replicas
    spec.pop("autoscaling", None)
    strategy = spec.get("strategy")
    if isinstance(strategy, dict):
        strategy = {k: v for k, v in strategy.items() if k != "canary"}
        kind = str(strategy.get("type") or StrategyType.RECREATE.value)
        strategy["type"] = TRIAL_STRATEGY.get(kind, kind)
        spec["strategy"] = strategy
    return spec


def trial_spec(server_spec: Mapping[str, Any], settings: TrialSettings, replicas: int = 1) -> dict[str, Any]:
    """The server's spec (camelCase dict) as trial ``settings`` runs it on ``replicas`` pods (:func:`trial_base`):
    ``spec.speculative`` without it for the control trial, else its numSteps / eagleTopk / numDraftTokens replaced and
    ``adaptive`` as the settings say (``enabled: true``, the server's ConfigMap kept; removed for a static trial);
    ``spec.memory.maxRunningRequests`` and ``spec.memory.cudaGraphMaxBs`` when set (the builders render the latter
    under the release's flag name: ``--cuda-graph-max-bs`` up to 0.5.13, ``--cuda-graph-max-bs-decode`` from
    0.5.14). A copy."""
    spec = trial_base(server_spec, replicas)
    if not settings.speculative:
        spec.pop("speculative", None)
        return spec
    spec_dec = dict(spec.get("speculative") or {})
    write_speculative(spec_dec, settings, unset_adaptive_is_static=True)
    spec["speculative"] = spec_dec
    write_memory(spec, settings)
    return spec


def write_speculative(block: dict[str, Any], settings: TrialSettings, unset_adaptive_is_static: bool = False) -> None:
    """Write ``settings`` into ``block`` (a ``spec.speculative`` camelCase dict, in place): numSteps / eagleTopk /
    numDraftTokens where set; ``adaptive`` ``enabled: true`` (its other keys, the ConfigMap, kept) when the settings
    are adaptive, removed when they are static (``adaptive`` False, or unset with ``unset_adaptive_is_static``)."""
    for key, value in (("numSteps", settings.num_steps), ("eagleTopk", settings.eagle_topk),
                       ("numDraftTokens", settings.num_draft_tokens)):
        if value is not None:
            block[key] = value
    if settings.adaptive:
        adaptive = block.get("adaptive")
        block["adaptive"] = {**(adaptive if isinstance(adaptive, dict) else {}), "enabled": True}
    elif settings.adaptive is False or unset_adaptive_is_static:
        block.pop("adaptive", None)


def write_memory(spec: dict[str, Any], settings: TrialSettings) -> None:
    """Write ``settings``' maxRunningRequests and cudaGraphMaxBs, where set, into ``spec.memory`` (a camelCase spec
    dict, in place; its other memory keys kept)."""
    for key, value in (("maxRunningRequests", settings.max_running_requests),
                       ("cudaGraphMaxBs", settings.cuda_graph_max_bs)):
        if value is not None:
            memory = spec.get("memory")
            spec["memory"] = {**(memory if isinstance(memory, dict) else {}), key: value}


def trial_replicas(server: SGLangServerSpec, in_place: bool) -> int:
    """The pods a trial runs on: the server's ``spec.replicas`` InPlace (every replica runs it), else 1 (Shadow)."""
    return server.replicas if in_place else 1


def trial_server_spec(server: SGLangServerSpec, replicas: int) -> SGLangServerSpec:
    """``server`` as a trial's workload (:func:`trial_base`), parsed with the API's own rules. Raises
    :class:`~sglang_operator.api.server.SpecError` (``spec.``-prefixed messages) when the API would refuse it."""
    return parse_spec(trial_base(server.dump(), replicas))


def spec_refusal(spec: SGLangServerSpec, shadow: bool) -> str | None:
    """Why a trial of the parsed trial spec ``spec`` cannot run, or None: ``shadow``, what a Shadow trial does not
    support (:func:`~sglang_operator.builders.tuning.shadow_refusal`, whatever the settings), then its release's
    rules (:func:`~sglang_operator.builders.validate.check`, every error)."""
    if shadow and (refused := shadow_refusal(spec)) is not None:
        return refused
    result = check(spec)
    return "; ".join(result.errors) if result.errors else None


def trial_refusal(server_spec: Mapping[str, Any], settings: TrialSettings, replicas: int,
                  shadow: bool) -> str | None:
    """Why the trial of ``settings`` on ``replicas`` pods of the server whose spec (camelCase dict) is
    ``server_spec`` cannot run — the API's rules on :func:`trial_spec` (as the server would be parsed), its
    release's, and a Shadow trial's (``shadow``) — or None when it can."""
    try:
        spec = parse_spec(trial_spec(server_spec, settings, replicas))
    except SpecError as err:
        return "; ".join(err.messages)
    return spec_refusal(spec, shadow)
