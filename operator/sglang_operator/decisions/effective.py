"""Compare what SGLang really runs (its ``/server_info``) with what the spec asked for.

Facts (``../shared/sglang`` §1a, §4): ``/server_info`` (``/get_server_info`` before it) returns the
resolved ``ServerArgs`` (``python/sglang/srt/server_args.py``) plus ``internal_states``, one dict per DP
rank with ``avg_spec_accept_length`` and, on recent releases, ``effective_max_running_requests_per_dp``.
SGLang rewrites ``NEXTN`` to ``EAGLE`` (``_handle_speculative_decoding``), so those two are the same
algorithm here, and with ``eagle_topk == 1`` it silently forces ``num_draft_tokens = num_steps + 1``. Adaptive mode
(``speculative_adaptive``, 0.5.11 on) is turned off silently where unsupported
(``speculative_hook.py:_maybe_disable_adaptive``); its active tier is not in ``/server_info`` (which reports the
start-up ``speculative_num_steps``, ``scheduler.py:get_internal_state`` 0.5.13 and 0.5.17) but in the
``sglang:spec_num_steps`` gauge: :func:`active_tier`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sglang_operator.api.base import VALUE_LIMIT, truncate
from sglang_operator.api.status import EffectiveSettings

#: status key (camelCase) -> SGLang ``ServerArgs`` field.
FIELDS: dict[str, str] = {
    "algorithm": "speculative_algorithm",
    "numSteps": "speculative_num_steps",
    "eagleTopk": "speculative_eagle_topk",
    "numDraftTokens": "speculative_num_draft_tokens",
    "maxRunningRequests": "max_running_requests",
    "memFractionStatic": "mem_fraction_static",
    "contextLength": "context_length",
    "adaptive": "speculative_adaptive",
}
_SAME_ALGORITHM = {"NEXTN": "EAGLE"}


_INTS = {"numSteps", "eagleTopk", "numDraftTokens", "maxRunningRequests", "contextLength"}


def _clean(key: str, value: Any) -> Any:
    """``value`` if it has the type status needs for ``key`` (finite numbers, strings cut to :data:`VALUE_LIMIT`
    characters), else None."""
    if key == "algorithm":
        return truncate(value, VALUE_LIMIT) if isinstance(value, str) else None
    if key == "adaptive":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if key in _INTS and float(value).is_integer() else (value if key not in _INTS else None)


def effective_settings(server_info: Mapping[str, Any]) -> dict[str, Any]:
    """The settings SGLang resolved, keyed as in :data:`FIELDS`, from a ``/server_info`` body.

    ``max_running_requests`` prefers ``internal_states[0].effective_max_running_requests_per_dp``
    (what the scheduler really uses) over the server arg. Missing keys, and values of the wrong type
    (a broken or foreign endpoint), are left out; a string is cut to :data:`VALUE_LIMIT` characters with the
    :data:`~sglang_operator.api.base.TRUNCATED` marker (the pod runs any image: its answer is untrusted).
    """
    raw: dict[str, Any] = {key: server_info.get(arg) for key, arg in FIELDS.items()}
    states = server_info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        if states[0].get("effective_max_running_requests_per_dp") is not None:
            raw["maxRunningRequests"] = states[0]["effective_max_running_requests_per_dp"]
        raw["avgSpecAcceptLength"] = states[0].get("avg_spec_accept_length")
    return {k: c for k, v in raw.items() if (c := _clean(k, v)) is not None}


SGLANG_KEYS = ("model_path", "tp_size", "served_model_name", *FIELDS.values())
"""``ServerArgs`` fields every SGLang release's ``/server_info`` carries (some may be null): a JSON object with none of
them is not SGLang's answer."""
NOT_SGLANG = "NotSGLang"
"""Reason (analysis Paused, SettingsDiffer Unknown) when the pods answer HTTP but not as SGLang."""


def serves_sglang(server_info: Mapping[str, Any]) -> bool:
    """Whether a ``/server_info`` JSON object is SGLang's: it has at least one of :data:`SGLANG_KEYS`."""
    return any(key in server_info for key in SGLANG_KEYS)


def not_sglang(pod: str, path: str, image: str, answer: str) -> str:
    """The one sentence naming a pod that answers HTTP but not as SGLang, and the field to fix. ``path``: the endpoint
    read (``/server_info``); ``answer``: what it answered, in words (``a JSON object without SGLang's server
    arguments``, ``a body that is not JSON``), never the body itself (the pod runs any image: its answer is
    untrusted and may be anything)."""
    return (f"pod {pod} answers {path} with {answer}: the image {truncate(image, 120)} does not serve SGLang; set "
            f"spec.sglang.image to an SGLang image (the new revision is verified from the start)")


def read_back(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """The :data:`FIELDS` keys of ``settings`` (``status.effective`` or a new read): empty when SGLang's settings were
    never read back (then no condition may claim SGLang runs as asked)."""
    return {k: v for k, v in (settings or {}).items() if k in FIELDS}


def _norm(key: str, value: Any) -> Any:
    if key == "algorithm" and isinstance(value, str):
        return _SAME_ALGORITHM.get(value.upper(), value.upper())
    if isinstance(value, float):
        return round(value, 6)
    return value


def differences(requested: Mapping[str, Any], effective: Mapping[str, Any]) -> list[str]:
    """Human-readable differences, e.g. ``numDraftTokens: spec 4, SGLang 2``.

    Only keys present in ``requested`` (what the spec set or the operator derived) are compared;
    a key SGLang did not report is not a difference.
    """
    diffs: list[str] = []
    for key, want in requested.items():
        if key not in FIELDS or want is None or key not in effective:
            continue
        if _norm(key, want) != _norm(key, effective[key]):
            diffs.append(f"{key}: spec {want}, SGLang {effective[key]}")
    return diffs


def active_tier(effective: EffectiveSettings | None, num_steps: float | None,
                num_draft_tokens: float | None) -> dict[str, int]:
    """``{activeNumSteps, activeNumDraftTokens}`` to write into ``status.effective`` for a server in adaptive mode
    (``effective``: ``status.effective``, ``adaptive`` true), from the ``sglang:spec_num_steps`` /
    ``sglang:spec_num_draft_tokens`` gauges of the latest sample (the max over pods; None where the release has no
    such gauge, before 0.5.13); ``{}`` when not adaptive, unknown, or unchanged."""
    if effective is None or effective.adaptive is not True:
        return {}
    out: dict[str, int] = {}
    for key, value in (("activeNumSteps", num_steps), ("activeNumDraftTokens", num_draft_tokens)):
        if value is not None and math.isfinite(value) and float(value).is_integer() and value >= 0:
            out[key] = int(value)
    stored = {"activeNumSteps": effective.active_num_steps, "activeNumDraftTokens": effective.active_num_draft_tokens}
    return out if any(stored[k] != v for k, v in out.items()) else {}
