"""The one writer of an SGLangTuning's ``status`` and of the Events about it (docs/architecture.md, "Who writes
what"): one merge patch per step of the tuning (:mod:`sglang_operator.control.tuning`) with the object's
resourceVersion as precondition; refused as stale, the step is decided again from the newer object. The tuning
writes nothing else: no server status, no server child; its Shadow trial workloads go through the apply path.
"""

from __future__ import annotations

from typing import Any

from sglang_operator.api.base import truncate
from sglang_operator.api.tuning_status import SGLangTuningStatus
from sglang_operator.api.view import ObjectRef, TuningView
from sglang_operator.decisions.tuning import lifecycle
from sglang_operator.io import kube_write


async def write(tuning: TuningView, status: SGLangTuningStatus,
                conditions: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """Patch the status of the SGLangTuning of ``tuning`` to ``status`` with ``conditions`` merged in
    (:func:`~sglang_operator.decisions.tuning.lifecycle.status_body`), the view's resourceVersion as precondition.
    Returns the object as patched, None when refused as stale or gone."""
    patch = lifecycle.status_body(status, tuning.generation, conditions)
    return await kube_write.patch_tuning_status(tuning.namespace, tuning.name, tuning.resource_version or None, patch)


async def event(about: ObjectRef, type_: str, reason: str, message: str) -> None:
    """Post an Event about the SGLangTuning ``about``. Never raises."""
    await kube_write.post_event(about.stub(), type_, reason, truncate(message))
