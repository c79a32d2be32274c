"""RFC 7386 JSON merge patch as the API server applies it, for the in-memory API servers of the offline tests
(``tests/control/fakekube.py``) and the no-cluster benchmarks (``bench/common.py``)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` merge-patched by ``patch`` (a new object; a null removes its key; a non-object patch replaces)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
