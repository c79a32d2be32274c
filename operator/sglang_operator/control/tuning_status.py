"""The one writer of an SGLangTuning's ``status`` and of the Events about it: the tuning's step
(:mod:`sglang_operator.control.tuning`) writes ONE status patch per step with the object's resourceVersion as
precondition (refused as stale: the step is decided again from the newer object). The tuning writes nothing else:
no server status, no server child; its Shadow trial workloads go through the apply path
(:func:`sglang_operator.control.apply.apply_trial_workload`). docs/architecture.md, "Who writes what".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sglang_operator.api import tuning as api
from sglang_operator.api.base import truncate
from sglang_operator.decisions.tuning import lifecycle
from sglang_operator.io import kube_write

log = logging.getLogger("sglang_operator.tuning")


async def write(obj: Mapping[str, Any], status: api.SGLangTuningStatus,
                conditions: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The step's ONE status patch of SGLangTuning ``obj``: ``status`` with its counts and ``progress`` derived and
    ``conditions`` merged in (:func:`sglang_operator.decisions.tuning.lifecycle.status_body`), with ``obj``'s
    resourceVersion as precondition. None when refused as stale or gone."""
    meta = obj.get("metadata") or {}
    body = lifecycle.status_body(status, int(meta.get("generation") or 0), conditions)
    patched = await kube_write.patch_tuning_status(str(meta.get("namespace") or "default"), str(meta.get("name")),
                                                   meta.get("resourceVersion"), body)
    if patched is None:
        log.info("SGLangTuning %s/%s changed while a step ran: decided again", meta.get("namespace"), meta.get("name"))
    return patched


async def event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    """Post an Event about SGLangTuning ``obj``. Never raises."""
    await kube_write.post_event(dict(obj), type_, reason, truncate(message))
