"""The one writer of an SGLangTuning's ``status`` and of the Events about it (docs/architecture.md, "Who writes
what"): one merge patch per step of the tuning (:mod:`sglang_operator.control.tuning`) with the object's
resourceVersion as precondition; refused as stale, the step is decided again from the newer object. The tuning
writes nothing else: no server status, no server child; its Shadow trial workloads go through the apply path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglang_operator.api.base import truncate
from sglang_operator.api.tuning_status import SGLangTuningStatus
from sglang_operator.decisions.tuning import lifecycle
from sglang_operator.io import kube_write


async def write(obj: Mapping[str, Any], status: SGLangTuningStatus,
                conditions: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """Patch SGLangTuning ``obj``'s status to ``status`` with ``conditions`` merged in
    (:func:`~sglang_operator.decisions.tuning.lifecycle.status_body`), ``obj``'s resourceVersion as precondition.
    Returns the object as patched, None when refused as stale or gone."""
    meta = obj.get("metadata") or {}
    body = lifecycle.status_body(status, int(meta.get("generation") or 0), conditions)
    return await kube_write.patch_tuning_status(str(meta.get("namespace") or "default"), str(meta.get("name")),
                                                meta.get("resourceVersion"), body)


async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    """Post an Event about SGLangTuning ``obj``. Never raises."""
    await kube_write.post_event(dict(obj), type_, reason, truncate(message))
