"""What should run, and running it (glue shared by the reconcile handler and the observer).

The spec's revision runs unless the rollback analysis rejected it
(:func:`sglang_operator.decisions.rollback.what_should_run`); then the stable revision runs, rendered from its
ledger entry (:func:`sglang_operator.control.ledger.render_revision`: its recorded spec, the image pinned to the digest
that was measured). The user's spec is never edited. :func:`apply_revision` carries out the analysis' ``Apply``
action; :func:`target` is what the reconcile handler applies on create, update and resume.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from dataclasses import dataclass, replace
from typing import Any

from sglang_operator import builders
from sglang_operator.api.base import truncate
from sglang_operator.api.server import SpecError
from sglang_operator.api.view import ServerView
from sglang_operator.builders.canary import serving_name
from sglang_operator.builders.labels import REVISION_LABEL
from sglang_operator.builders.revision import has_digest, pinned_image, recorded_digest
from sglang_operator.control import ledger
from sglang_operator.control.apply import ApplyOptions, apply_placement, placement
from sglang_operator.control.children import ChildApplyError
from sglang_operator.control.memory import ServerMemory
from sglang_operator.decisions.actions import PlaceCanary, PromoteCanary
from sglang_operator.decisions.placement import holds_back
from sglang_operator.decisions.rollback import RETRY_ANNOTATION, what_should_run
from sglang_operator.decisions.rollback_state import RollbackState, Target
from sglang_operator.decisions.tuning import hold as holds
from sglang_operator.decisions.tuning import trials as plan
from sglang_operator.decisions.tuning.inplace import ApplyTrial
from sglang_operator.io import kube

log = logging.getLogger("sglang_operator.control.restore")


def _analysis(history_limit: int, **options: Any) -> ApplyOptions:
    """The options of an apply the server's job makes for the analysis, a canary or a trial: it speaks of a revision,
    not of the spec (``SpecValid`` kept), with the object's ``historyLimit``; ``options``: the rest."""
    return ApplyOptions(keep_spec_valid=True, history_limit=history_limit, **options)


class NotInLedger(LookupError):
    """The revision to run has no ControllerRevision (pruned by hand, or never recorded)."""


def retry_token(view: ServerView) -> str | None:
    """The value of the annotation :data:`RETRY_ANNOTATION` (None when absent)."""
    return view.annotations.get(RETRY_ANNOTATION)


@dataclass(frozen=True)
class Choice:
    """What the reconcile handler applies: ``rendered`` from ``spec`` (a camelCase spec dict: the object's, or the
    stable revision's recorded one), and ``reason`` when it is not the spec's own revision ("" when it is)."""

    rendered: builders.Rendered
    spec: dict[str, Any]
    reason: str = ""
    canary: bool = False
    """The spec's revision is held back for a canary (``spec.strategy.type: Canary``): the observer starts it."""


async def as_ran(view: ServerView, rendered: builders.Rendered) -> builders.Rendered:
    """The spec's own ``rendered`` revision with the image reference that revision runs, or ran:

    - the revision status says runs (``status.revision``), its workload's pod template labelled with it: the image
      that workload runs when it is the rendered one pinned to a digest (a rollback restored it from the ledger, or
      it was returned to), so a scale, a policy change or an ``undo`` to it restarts no pod;
    - else, for a revision that ran before (a record in ``status.revisions``), the digest recorded on its
      ControllerRevision (:func:`sglang_operator.control.ledger.note_digest`): a return to it runs the bytes that
      were measured, as a rollback's restore does;
    - else ``rendered`` unchanged: a new revision runs its tag.

    One GET of the workload (the running revision only) or one LIST of the ledger (an earlier revision only); a read
    that fails leaves ``rendered`` unchanged (logged)."""
    status = view.status
    if status.record(rendered.revision) is None:
        return rendered
    ns, name = view.namespace, view.name
    own = ledger.workload_image(rendered.workload)
    try:
        if status.revision == rendered.revision:
            live = await kube.get_object(str(rendered.workload["kind"]), ns,
                                         serving_name(name, status.serving_workload))
            labels = ((builders.pod_templates(live)[0].get("metadata") or {}).get("labels") or {}) if live else {}
            image = ledger.workload_image(live)
            if labels.get(REVISION_LABEL) == rendered.revision and image and own:
                keep = image != own and has_digest(image) and pinned_image(own, image) == image
                return ledger.pinned(rendered, image) if keep else rendered
        digest = recorded_digest(await ledger.load(ns, name, rendered.revision, view.uid))
    except Exception as exc:  # unreadable: the tag, as before
        log.warning("%s/%s: the image revision %s ran not read, its tag is applied: %s", ns, name, rendered.revision,
                    exc)
        return rendered
    return ledger.pinned(rendered, digest) if digest else rendered


async def target(view: ServerView, rendered: builders.Rendered) -> Choice:
    """What to apply when the object's spec renders ``rendered``: that, or the stable revision rendered from the
    ledger with the reason the spec's revision is not run. Raises :class:`NotInLedger` when the stable revision
    has no ledger entry (then the caller applies nothing new)."""
    status = view.status
    state = RollbackState.from_status(status)
    choice = what_should_run(rendered.revision, state, retry_token(view))
    held = canary_holds(view, rendered.revision, choice.revision)
    if held:
        choice = Target(str(status.revision), f"revision {rendered.revision} runs as a canary beside the stable "
                                              f"revision {status.revision} (spec.strategy.type Canary)")
    if choice.revision == rendered.revision:
        return Choice(await as_ran(view, rendered), dict(view.spec_data))
    ns, name = view.namespace, view.name
    cr = await ledger.load(ns, name, choice.revision, view.uid)
    if cr is None:
        raise NotInLedger(f"revision {choice.revision} has no ControllerRevision {name}-{choice.revision}")
    rendered = ledger.render_revision(view, cr)
    return Choice(await live_image(view, rendered) if held else rendered, dict(cr["data"]["spec"]), choice.reason,
                  held)


def canary_holds(view: ServerView, wanted: str, target: str) -> bool:
    """:func:`sglang_operator.decisions.placement.holds_back` for the SGLangServer of ``view`` (its spec unparsable:
    no)."""
    try:
        server = view.server
    except SpecError:
        return False
    return holds_back(view.status, server.spec.strategy.canary_policy, server.spec.replicas, wanted, target)


async def render_for(view: ServerView, revision: str) -> tuple[builders.Rendered, dict[str, Any]]:
    """``revision`` rendered for the SGLangServer of ``view`` with the spec it comes from: the object's own when it is
    the spec's revision (its image as it ran, :func:`as_ran`), else its ledger entry pinned to its digest. Raises
    :class:`NotInLedger`, ``SpecError`` / ``builders.InvalidSpec``."""
    ns, name = view.namespace, view.name
    try:
        own: builders.Rendered | None = builders.render(view.server)
    except builders.InvalidSpec:
        own = None
    if own is not None and own.revision == revision:
        return await as_ran(view, own), dict(view.spec_data)
    cr = await ledger.load(ns, name, revision, view.uid)
    if cr is None:
        raise NotInLedger(f"revision {revision} has no ControllerRevision {name}-{revision}")
    return await live_image(view, ledger.render_revision(view, cr)), dict(cr["data"]["spec"])


async def live_image(view: ServerView, rendered: builders.Rendered) -> builders.Rendered:
    """``rendered`` (a ledger entry's, pinned to its recorded digest) with the image reference the serving workload
    runs it with, when that workload runs this very revision (its pod template's revision label): re-applying the
    revision that serves (a canary's stable share, a scale during a canary) must not roll its pods from the tag to
    the digest. One GET; unreadable: ``rendered`` unchanged (logged)."""
    status = view.status
    if status.revision != rendered.revision:
        return rendered
    ns, name = view.namespace, view.name
    try:
        live = await kube.get_object(str(rendered.workload["kind"]), ns, serving_name(name, status.serving_workload))
    except Exception as exc:
        log.warning("%s/%s: the serving workload not read, revision %s applied as recorded: %s", ns, name,
                    rendered.revision, exc)
        return rendered
    labels = ((builders.pod_templates(live)[0].get("metadata") or {}).get("labels") or {}) if live else {}
    image = ledger.workload_image(live)
    if labels.get(REVISION_LABEL) != rendered.revision or not image or image == ledger.workload_image(
            rendered.workload):
        return rendered
    workload = copy.deepcopy(rendered.workload)
    for template in builders.pod_templates(workload):
        template["spec"]["containers"][0]["image"] = image
    return replace(rendered, workload=workload)


async def apply_revision(view: ServerView, revision: str, reason: str, now: dt.datetime,
                         memory: ServerMemory | None = None) -> dict[str, Any]:
    """Apply ``revision`` for the SGLangServer of ``view`` (the analysis' ``Apply``) through the one apply path
    (:func:`sglang_operator.control.apply.apply_placement`): the spec's own rendering when it is the spec's revision
    (a retry, a lost update converged), else its ledger entry pinned to its digest. Returns the status keys to
    write (``revision``, ``command`` …, the ledger, phase Progressing; SpecValid untouched: it speaks of the spec).

    Raises :class:`NotInLedger`, ``SpecError``/``builders.InvalidSpec`` (a ledger entry this release cannot
    render) or :class:`sglang_operator.control.children.ChildApplyError`."""
    ns, name = view.namespace, view.name
    server = view.server
    rendered, spec = await render_for(view, revision)
    new = await apply_placement(view, [placement(view, rendered, spec)], now, memory,
                                _analysis(server.spec.rollback.history_limit))
    log.info("%s/%s: applied revision %s (%s)", ns, name, revision, reason)
    return new


async def place_canary(view: ServerView, action: PlaceCanary | PromoteCanary, now: dt.datetime,
                       memory: ServerMemory | None = None) -> dict[str, Any]:
    """Carry out the canary's action through the one apply path: :class:`PlaceCanary` — the serving revision
    (``status.revision``) on ``stable_replicas`` pods of the serving workload and the canary revision on
    ``canary_replicas`` of its own (0: deleted), each written only where the live object differs;
    :class:`PromoteCanary` — the canary's workload becomes the serving one at ``spec.replicas`` and the old one is
    deleted (no pod restarts). Returns the status keys to write. Raises as :func:`apply_revision`."""
    status = view.status
    ns, name = view.namespace, view.name
    server = view.server
    history = server.spec.rollback.history_limit
    c_rendered, c_spec = await render_for(view, action.revision)
    if isinstance(action, PromoteCanary):
        old = serving_name(name, status.serving_workload)
        p = placement(view, c_rendered, c_spec, workload=action.workload, replicas=server.spec.replicas)
        new = await apply_placement(view, [p], now, memory, _analysis(history, drain=False, retire=old))
        log.info("%s/%s: canary %s promoted: %s serves it (%s deleted)", ns, name, action.revision, action.workload,
                 old)
        return new
    s_rendered, s_spec = await render_for(view, str(status.revision))
    placements = [placement(view, s_rendered, s_spec, replicas=action.stable_replicas),
                  placement(view, c_rendered, c_spec, role="canary", workload=action.workload,
                            replicas=action.canary_replicas)]
    return await apply_placement(view, placements, now, memory, _analysis(history, drain=False, only_changed=True))


async def apply_trial(view: ServerView, action: ApplyTrial, now: dt.datetime,
                      memory: ServerMemory | None = None) -> dict[str, Any]:
    """Carry out an InPlace tuning's :class:`~sglang_operator.decisions.tuning.inplace.ApplyTrial` as the server's
    job: the object's spec with the trial's settings on ``spec.replicas`` pods (``plan.trial_spec``: the one rule
    the tuning rendered the trial's revision with), rendered as the server itself (same name, labels, Service), the
    image pinned to the digest the stable revision runs, through the one apply path (placement role ``trial``).
    Returns the status keys to write, with ``tuningHold`` naming the trial — or only ``tuningHold`` with its
    ``trialFailure`` when it cannot be applied (the spec no longer renders it, another revision than the tuning
    asked for, a refused child): the tuning fails that trial. Never raises for those."""
    status = view.status
    hold = status.tuning_hold
    if hold is None or not holds.owns(hold, action.tuning, action.uid):
        raise ValueError(f"SGLangServer {view.name} is not held by SGLangTuning {action.tuning}")
    ns, name = view.namespace, view.name
    try:
        server = view.server
        spec = plan.trial_spec(view.spec_data, action.settings, replicas=plan.trial_replicas(server.spec, True))
        rendered = builders.render(view.parse_with(spec))
        if rendered.revision != action.revision:
            raise ValueError(f"the server's spec renders trial {action.trial} as revision {rendered.revision}, not "
                             f"{action.revision}: it changed since the trial started")
        cr = await ledger.load(ns, name, hold.stable_revision, view.uid)
        digest = memory.reads.digests.get(hold.stable_revision) if memory is not None else None
        rendered = ledger.pinned(rendered, digest or recorded_digest(cr))
        new = await apply_placement(view, [placement(view, rendered, spec, role="trial")], now, memory,
                                    _analysis(server.spec.rollback.history_limit))
    except (SpecError, builders.InvalidSpec, ChildApplyError, ValueError) as err:
        text = "; ".join(err.errors) if isinstance(err, builders.InvalidSpec) else str(err)
        log.warning("%s/%s: trial %s of SGLangTuning %s not applied: %s", ns, name, action.trial, action.tuning, text)
        failed = hold.model_copy(update={"trial": action.trial, "trial_revision": action.revision,
                                         "trial_failure": truncate(text, 1024)})
        return {"tuningHold": failed.model_dump(by_alias=True, exclude_none=True, mode="json")}
    held = hold.model_copy(update={"trial": action.trial, "trial_revision": rendered.revision, "trial_failure": None})
    new["tuningHold"] = held.model_dump(by_alias=True, exclude_none=True, mode="json")
    log.info("%s/%s: %s applied on every replica (revision %s)", ns, name, action.reason, rendered.revision)
    return new
