"""Applying an SGLangServer's children (glue shared by the reconcile handler and the observer).

The Deployment goes first and the Service only after it was accepted, so an object the API server refuses
(e.g. a label value or env entry it finds invalid) leaves both children as they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglang_operator import builders
from sglang_operator.clients import kube


async def apply_children(rendered: builders.Rendered, owner: Mapping[str, Any]) -> None:
    """Server-side apply the Deployment, then the Service, each owned by ``owner`` (an SGLangServer dict).

    Raises ``lightkube.ApiError`` as the API server answered; nothing after the failing child is applied.
    """
    await kube.apply(builders.adopt(rendered.deployment, owner))
    await kube.apply(builders.adopt(rendered.service, owner))


def refused_by_api_server(err: Exception) -> str | None:
    """The API server's message when ``err`` is a 400/422 refusal of a child (a spec problem, not a
    transient error), else None."""
    from lightkube import ApiError

    if isinstance(err, ApiError) and err.status.code in (400, 422):
        return f"the API server refused a child object: {err.status.message}"
    return None
