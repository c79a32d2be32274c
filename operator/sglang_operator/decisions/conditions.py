"""Kubernetes conditions in the ``metav1.Condition`` shape, merged the way controllers do.

A condition is a dict ``{type, status, reason, message, lastTransitionTime, observedGeneration}``
(``k8s.io/apimachinery/pkg/apis/meta/v1`` ``Condition``). ``lastTransitionTime`` changes only when
``status`` changes, so re-writing the same verdict never churns the object.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any, Literal

from sglang_operator.api.base import truncate
from sglang_operator.api.status import Condition as StoredCondition

Status = Literal["True", "False", "Unknown"]
Condition = dict[str, Any]


@lru_cache(maxsize=16)  # one observation formats the same instant for each of its conditions
def rfc3339(now: dt.datetime) -> str:
    """``now`` as the RFC 3339 UTC timestamp Kubernetes writes (seconds precision)."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> dt.datetime | None:
    """An RFC 3339 timestamp as Kubernetes writes it (``2026-01-01T00:00:00Z``), or None when absent or unreadable."""
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


def condition(
    type_: str, status: Status, reason: str, message: str, generation: int, now: dt.datetime
) -> Condition:
    """A new condition; ``reason`` is CamelCase as the API conventions ask; ``message`` cut to
    :data:`~sglang_operator.api.base.MESSAGE_LIMIT` characters (:func:`~sglang_operator.api.base.truncate`)."""
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": truncate(message),
        "observedGeneration": generation,
        "lastTransitionTime": rfc3339(now),
    }


def merge(old: Iterable[Condition], new: Iterable[Condition]) -> list[Condition]:
    """Conditions ``old`` updated by ``new``, sorted by type.

    A condition in ``new`` replaces the one of the same type, but keeps the old
    ``lastTransitionTime`` when its ``status`` did not change. Types only in ``old`` stay.
    """
    by_type = {c["type"]: dict(c) for c in old}
    for c in new:
        prev = by_type.get(c["type"])
        merged = dict(c)
        if prev is not None and prev.get("status") == c["status"] and prev.get("lastTransitionTime"):
            merged["lastTransitionTime"] = prev["lastTransitionTime"]
        by_type[c["type"]] = merged
    return [by_type[t] for t in sorted(by_type)]


def merge_stored(old: Sequence[StoredCondition], new: Iterable[Condition]) -> list[Condition]:
    """:func:`merge` of the conditions of a typed status (``SGLangServerStatus.conditions``) and ``new``: the old
    ones ``new`` does not replace kept as they were read (the keys they had), of those it replaces only their
    ``status`` and ``lastTransitionTime`` read (the only ones :func:`merge` reads of a replaced condition)."""
    new = list(new)
    replaced = {c["type"] for c in new}
    return merge([{"type": c.type, "status": c.status, "lastTransitionTime": c.last_transition_time}
                  if c.type in replaced else _as_read(c) for c in old], new)


def _as_read(c: StoredCondition) -> Condition:
    """A typed condition as the dict it was read from (the keys it had)."""
    return c.model_dump(by_alias=True, exclude_unset=True)


def find(conditions: Iterable[Condition], type_: str) -> Condition | None:
    """The condition of ``type_``, or None."""
    return next((c for c in conditions if c.get("type") == type_), None)


def same(a: Iterable[Condition], b: Iterable[Condition]) -> bool:
    """Whether two condition lists say the same thing (timestamps aside)."""
    def key(cs: Iterable[Condition]) -> list[tuple[Any, ...]]:
        return sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration"))
            for c in cs
        )
    return key(a) == key(b)


def same_stored(a: Sequence[StoredCondition], b: Iterable[Condition]) -> bool:
    """:func:`same` for the conditions of a typed status (``SGLangServerStatus.conditions``) and ``b``."""
    return same([_as_read(c) for c in a], b)
