"""The one apply path: every writer of an SGLangServer's children goes through :func:`apply_placement` — the
reconcile handler (create, update, resume), the analysis' ``Apply`` (a rollback, a retry, a lost update
converged), the late LeaderWorkerSet apply and child repair. It runs in the server's worker (the caller holds
:class:`~sglang_operator.control.memory.ServerMemory`'s lock).

A *placement* says which revision runs on how many replicas in which role: the ``serving`` one, and during a canary
(``spec.strategy.type: Canary``, :mod:`sglang_operator.decisions.canary`) the ``canary`` one in the other workload;
tuning trials add roles (and workloads), not paths. One apply: the drain before a
Recreate (optional), the children (Deployment or LeaderWorkerSet, Service, PodMonitor), the ControllerRevision
ledger; returns the status keys the caller writes in its one status patch (:func:`sglang_operator.decisions.status.
applied`). Raises what :func:`~sglang_operator.control.children.apply_children` raises (nothing recorded then).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from sglang_operator import builders
from sglang_operator.api.server import SGLangServer, SpecError
from sglang_operator.api.spec import CanaryStrategy
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.api.view import ObjectRef, ServerView
from sglang_operator.builders import autoscaling as scaled_objects
from sglang_operator.builders import canary
from sglang_operator.control import ledger
from sglang_operator.control.children import (
    ChildApplyError,
    ChildConflict,
    apply_children,
    apply_failure,
    apply_owned,
    contains,
    delete_owned,
    not_owned,
    up_to_date,
)
from sglang_operator.control.drain import drain_old_pods
from sglang_operator.control.memory import ServerMemory
from sglang_operator.decisions import placement as placements
from sglang_operator.decisions import status as status_decisions
from sglang_operator.decisions.conditions import merge
from sglang_operator.io import kube, kube_write

log = logging.getLogger("sglang_operator.control.apply")

Role = Literal["serving", "canary", "trial"]
"""What a placement is for: ``serving`` (the revision that serves the server's replicas, in the serving workload),
``canary`` (a canary's revision in the other workload, :mod:`sglang_operator.builders.canary`) or ``trial`` (an
InPlace tuning's trial on every replica of the serving workload, applied by the server's job)."""


@dataclass(frozen=True)
class Placement:
    """``rendered`` (from the camelCase ``spec`` it was rendered from: the object's own or a ledger entry's) runs in
    ``role``; ``server``: that spec parsed (summary, drain strategy, history limit). ``workload``: the Deployment's
    name (None: the serving one, ``status.servingWorkload``); ``replicas``: its pods (None: the spec's, or the
    stable's share while a canary runs)."""

    rendered: builders.Rendered
    spec: Mapping[str, Any]
    server: SGLangServer
    role: Role = "serving"
    workload: str | None = None
    replicas: int | None = None

    @property
    def revision(self) -> str:
        return self.rendered.revision


def placement(view: ServerView, rendered: builders.Rendered, spec: Mapping[str, Any] | None = None,
              role: Role = "serving", workload: str | None = None, replicas: int | None = None) -> Placement:
    """A placement of ``rendered`` for the SGLangServer of ``view``, from ``spec`` (default: the object's). Raises
    ``SpecError`` when ``spec`` does not parse."""
    if spec is None:
        return Placement(rendered, dict(view.spec_data), view.server, role, workload, replicas)
    return Placement(rendered, dict(spec), view.parse_with(spec), role, workload, replicas)


@dataclass(frozen=True)
class Decided:
    """What the object says about every placement of one apply, read once: its status (typed), its own spec's canary
    policy and replicas (a ledger entry's spec may differ)."""

    status: SGLangServerStatus
    policy: CanaryStrategy | None
    replicas: int

    @classmethod
    def of(cls, view: ServerView, fallback: Placement) -> Decided:
        """Read from ``view``; an object spec that does not parse: no canary policy, ``fallback``'s replicas."""
        try:
            server = view.server
        except SpecError:
            return cls(view.status, None, fallback.server.spec.replicas)
        return cls(view.status, server.spec.strategy.canary_policy, server.spec.replicas)


def workload_of(view: ServerView, p: Placement, decided: Decided) -> dict[str, Any]:
    """The workload manifest of placement ``p`` (no owner reference yet): the rendered Deployment or LeaderWorkerSet
    placed in its workload (:func:`sglang_operator.builders.canary.placed`) with its replicas (groups of a
    LeaderWorkerSet): the serving workload's decided by :func:`sglang_operator.decisions.placement.serving_replicas`."""
    name = view.name
    workload = p.workload or canary.serving_name(name, decided.status.serving_workload)
    replicas = p.replicas if p.role == "canary" else placements.serving_replicas(
        decided.status, decided.policy, decided.replicas, p.revision, p.replicas)
    return canary.placed(p.rendered.workload, name, workload, replicas)


async def _apply_workload(manifest: dict[str, Any], owner: ObjectRef, only_changed: bool) -> None:
    """Server-side apply ``manifest`` owned by ``owner`` — never over an object another controller owner holds (one
    GET); with ``only_changed``, only when the live object lacks a field of it. Raises
    :class:`~sglang_operator.control.children.ChildApplyError` (:class:`~sglang_operator.control.children.
    ChildConflict` when another owner holds the name)."""
    want = builders.adopt(manifest, owner.stub())
    meta = want["metadata"]
    try:
        live = await kube.get_object(str(want["kind"]), str(meta["namespace"]), str(meta["name"]))
    except Exception as err:
        raise ChildApplyError(apply_failure(str(want.get("kind")), err)) from err
    if (refused := not_owned(str(want["kind"]), live, owner)) is not None:
        raise refused
    if only_changed and live is not None and contains(live, want):
        return
    try:
        await kube_write.apply(want)
    except Exception as err:
        raise ChildApplyError(apply_failure(str(want.get("kind")), err)) from err


async def _delete_owned(kind: str, namespace: str, name: str, owner: ObjectRef) -> None:
    """Delete child ``kind`` ``namespace/name`` of ``owner`` (a canary's workload, the serving one a promotion
    retired) only when ``owner`` is its controller owner, with its uid as precondition
    (:func:`~sglang_operator.control.children.delete_owned`). Raises
    :class:`~sglang_operator.control.children.ChildConflict` when another owner holds the name,
    :class:`~sglang_operator.control.children.ChildApplyError` for other failures."""
    try:
        await delete_owned(kind, namespace, name, owner)
    except ChildApplyError:
        raise
    except Exception as err:
        raise ChildApplyError(apply_failure(kind, err)) from err


async def _stable_share(p: Placement, decided: Decided, workload: dict[str, Any],
                        owner: ObjectRef) -> dict[str, Any] | None:
    """When ``p`` places a canary's stable revision (:func:`sglang_operator.decisions.placement.stable_share`): the
    live serving workload (Deployment or LeaderWorkerSet) when it runs that revision already
    (:func:`sglang_operator.builders.canary.replicas_only`: only its ``spec.replicas`` may be written), else None
    (apply as rendered). One GET. Raises :class:`~sglang_operator.control.children.ChildApplyError` when it cannot be
    read (nothing is written then: a full write could roll the stable pods), :class:`~sglang_operator.control.
    children.ChildConflict` when another owner than ``owner`` holds it."""
    if not placements.stable_share(decided.status, decided.policy, p.revision, p.role):
        return None
    meta, kind = workload["metadata"], str(workload["kind"])
    try:
        live = await kube.get_object(kind, str(meta["namespace"]), str(meta["name"]))
    except Exception as err:
        raise ChildApplyError(apply_failure(kind, err)) from err
    if (refused := not_owned(kind, live, owner)) is not None:
        raise refused
    return live if canary.replicas_only(live, workload) else None


async def _patch_replicas(workload: dict[str, Any]) -> None:
    """Set only ``spec.replicas`` of workload ``workload`` (a Deployment or LeaderWorkerSet as placed). Raises
    :class:`~sglang_operator.control.children.ChildApplyError`."""
    meta, kind = workload["metadata"], str(workload["kind"])
    try:
        await kube_write.patch_replicas(kind, str(meta["namespace"]), str(meta["name"]),
                                        int(workload["spec"]["replicas"]))
    except Exception as err:
        raise ChildApplyError(apply_failure(kind, err)) from err


@dataclass(frozen=True)
class ApplyOptions:
    """How one apply goes (:func:`apply_placement`): ``drain`` the old pods first when the strategy is Recreate;
    ``write_children`` (False: a resume that found them up to date); ``only_changed``: only the children the live
    objects do not hold already (the canary's every-tick placement); ``retire``: a workload to delete (the old serving
    one after a promotion); ``warnings`` for ``SpecValid``, or ``keep_spec_valid``: the stored ``SpecValid`` kept (an
    analysis' apply speaks of a revision, not of the spec); ``history_limit``: the ledger's length (None: the
    placement's spec's)."""

    drain: bool = True
    write_children: bool = True
    warnings: Sequence[str] = ()
    keep_spec_valid: bool = False
    history_limit: int | None = None
    only_changed: bool = False
    retire: str | None = None


async def apply_placement(view: ServerView, placements: Sequence[Placement], now: dt.datetime,
                          memory: ServerMemory | None = None, options: ApplyOptions = ApplyOptions()) -> dict[str, Any]:
    """Apply ``placements`` (one ``serving``, at most one ``canary``) for the SGLangServer of ``view`` (as stored: its
    status says what runs), as ``options`` say (:class:`ApplyOptions`): drain the old pods first, server-side apply
    the children, apply the canary's workload (0 replicas: delete it), delete the retired workload, record the ledger
    entries (the canary's revision once, verdict Verifying; ``status.revision`` stays the serving one).

    Returns the status keys to write (``revision``, ``command``, the ledger, ``SpecValid``, phase Progressing,
    ``servingWorkload``). Raises :class:`~sglang_operator.control.children.ChildApplyError`,
    :class:`~sglang_operator.control.children.LeaderWorkerSetMissing`, ``ValueError`` for another set of roles."""
    serving = [p for p in placements if p.role in ("serving", "trial")]
    canaries = [p for p in placements if p.role == "canary"]
    if len(serving) != 1 or len(canaries) > 1 or len(placements) != len(serving) + len(canaries):
        roles = [p.role for p in placements]
        raise ValueError(f"one serving placement and at most one canary are applied, not {roles}")
    p = serving[0]
    decided = Decided.of(view, p)
    typed = decided.status
    generation, name, namespace, owner = view.generation, view.name, view.namespace, view.ref
    if options.drain:
        await drain_old_pods(view, p.server.spec, p.revision, memory)
    workload = workload_of(view, p, decided)
    if options.write_children:
        rendered = replace(p.rendered, workload=workload)
        live = await _stable_share(p, decided, workload, owner)
        if live is not None:  # a canary's stable share running its revision already: scaled, never re-templated
            if (live.get("spec") or {}).get("replicas") != workload["spec"]["replicas"]:
                await _patch_replicas(workload)
            if options.only_changed:
                await _apply_workload(rendered.service, owner, options.only_changed)
            else:
                await apply_children(rendered, owner, workload=False)
        elif not (options.only_changed and await up_to_date(rendered, owner)):
            await apply_children(rendered, owner)
    for c in canaries:
        if not c.replicas:
            await _delete_owned(str(c.rendered.workload["kind"]), namespace, str(c.workload), owner)
        else:
            await _apply_workload(workload_of(view, c, decided), owner, options.only_changed)
    if options.retire is not None and options.retire != workload["metadata"]["name"]:
        await _delete_owned(str(workload["kind"]), namespace, options.retire, owner)
    history = options.history_limit if options.history_limit is not None else p.server.spec.rollback.history_limit
    try:
        summary = builders.summary(p.server, p.rendered)
    except SpecError:
        summary = {}
    entry = status_decisions.ledger_entry(p.revision, generation, p.rendered.command.command_line, summary, p.spec, now)
    new = status_decisions.applied(view.status, p.rendered.status, list(options.warnings), entry, generation,
                                   history, now)
    served = workload["metadata"]["name"]
    new["servingWorkload"] = None if served == name else served
    if options.keep_spec_valid:
        keep = [c for c in new["conditions"] if c["type"] != status_decisions.SPEC_VALID]
        valid = typed.condition(status_decisions.SPEC_VALID)
        new["conditions"] = merge([valid.dump()] if valid is not None else [], keep)
    await ledger.record_applied(view, p.rendered, p.spec, history)
    for c in canaries:
        if c.replicas and typed.record(c.revision) is None:
            try:
                c_summary = builders.summary(c.server, c.rendered)
            except SpecError:
                c_summary = {}
            c_entry = status_decisions.ledger_entry(c.revision, generation, c.rendered.command.command_line, c_summary,
                                                    c.spec, now)
            new["revisions"] = status_decisions.bounded([*new["revisions"], c_entry], history, typed.stable_revision)
            await ledger.record_applied(view, c.rendered, c.spec, history)
    return new


async def apply_trial_workload(tuning: ObjectRef, manifest: dict[str, Any]) -> None:
    """Server-side apply a Shadow trial's workload ``manifest`` (owned by SGLangTuning ``tuning``,
    :func:`sglang_operator.builders.tuning.trial_workload`): never when an object of that name exists under another
    controller owner (a server or another tuning: nothing written without owning it). Outside any server's lock: a
    trial workload is the tuning's own child. Raises :class:`~sglang_operator.control.children.ChildApplyError`
    (:class:`~sglang_operator.control.children.ChildConflict` when another owner holds the name)."""
    try:
        await apply_owned(manifest, tuning)
    except ChildApplyError:
        raise
    except Exception as err:
        raise ChildApplyError(apply_failure(str(manifest["kind"]), err)) from err


async def delete_trial_workload(tuning: ObjectRef, name: str, kind: str = "Deployment") -> bool:
    """Delete a Shadow trial's workload ``name`` only when SGLangTuning ``tuning`` is its controller owner (one GET
    first, then a delete with its uid as precondition). False when it does not exist or another owner holds the
    name (left alone). Raises ``lightkube.ApiError`` for other answers."""
    try:
        return await delete_owned(kind, tuning.namespace, name, tuning)
    except ChildConflict:
        return False


async def delete_trial_workloads(tuning: ObjectRef, names: Sequence[str]) -> None:
    """:func:`delete_trial_workload` of each of ``names`` (a finished tuning's cleanup); failures are logged."""
    for name in names:
        try:
            await delete_trial_workload(tuning, name)
        except Exception as exc:
            log.warning("deleting trial workload %s failed: %s", name, exc)


def _pauses(scaled_object: Mapping[str, Any]) -> dict[str, str]:
    annotations = (scaled_object.get("metadata") or {}).get("annotations") or {}
    pauses = (scaled_objects.PAUSED, scaled_objects.PAUSED_REPLICAS, scaled_objects.PAUSED_SCALE_IN)
    return {k: str(v) for k, v in annotations.items() if k in pauses}


async def apply_scaled_object(manifest: dict[str, Any], owner: ObjectRef) -> bool:
    """Server-side apply the KEDA ScaledObject ``manifest`` (:func:`sglang_operator.builders.autoscaling.
    scaled_object`) owned by SGLangServer ``owner``, in the server's worker: one GET first; never over an object of that
    name another controller owner holds; not written when the live one holds every rendered field and exactly the
    rendered pause annotations (an annotation left out of the rendering is removed by the apply: the operator's field
    manager owned it). Returns whether it was written. Raises
    :class:`~sglang_operator.control.children.ChildApplyError`."""
    want = builders.adopt(manifest, owner.stub())
    meta = want["metadata"]
    try:
        live = await kube.get_object(scaled_objects.KIND, str(meta["namespace"]), str(meta["name"]))
    except Exception as err:
        raise ChildApplyError(apply_failure(scaled_objects.KIND, err)) from err
    if (refused := not_owned(scaled_objects.KIND, live, owner)) is not None:
        raise refused
    if live is not None and contains(live, want) and _pauses(live) == _pauses(want):
        return False
    try:
        await kube_write.apply(want)
    except Exception as err:
        raise ChildApplyError(apply_failure(scaled_objects.KIND, err)) from err
    return True


async def delete_scaled_object(owner: ObjectRef) -> bool:
    """Delete SGLangServer ``owner``'s ScaledObject (named like it) when ``owner`` is its controller owner (one GET):
    ``spec.autoscaling`` removed or switched to External. False when there is none. Raises
    :class:`~sglang_operator.control.children.ChildApplyError` (another owner holds the name, or an API error)."""
    try:
        # with the object's uid as precondition
        return await delete_owned(scaled_objects.KIND, owner.namespace, owner.name, owner)
    except ChildApplyError:
        raise
    except Exception as err:
        raise ChildApplyError(apply_failure(scaled_objects.KIND, err)) from err
