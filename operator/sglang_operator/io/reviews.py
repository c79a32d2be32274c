"""TokenReview and SubjectAccessReview creation for the authenticated ``/metrics`` (``run --metrics-secure``,
:mod:`sglang_operator.process.metrics_http`).

Both are create-only, cluster-scoped APIs (``authentication.k8s.io/v1`` ``tokenreviews``,
``authorization.k8s.io/v1`` ``subjectaccessreviews``): the answer is the posted object with its ``status`` filled
in by the API server, nothing is stored. The operator's ServiceAccount needs ``create`` on both (the chart's
ClusterRole).
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient


class KubeReviews:
    """Posts review objects with a lightkube ``AsyncClient`` of its own (``KUBECONFIG`` or the in-cluster service
    account), created on the first call, in the event loop of that call (the metrics server's thread, not kopf's:
    an ``httpx`` client is bound to the loop that first used it)."""

    def __init__(self) -> None:
        self._client: AsyncClient | None = None

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` (a ``TokenReview`` or ``SubjectAccessReview`` in the API's JSON shape, ``kind`` naming it)
        and return the API server's answer, as a dict. Raises ``lightkube.ApiError`` (e.g. 403 when the
        ServiceAccount may not create reviews), ``httpx`` transport errors, ``ValueError`` for another kind."""
        from lightkube.resources.authentication_v1 import TokenReview
        from lightkube.resources.authorization_v1 import SubjectAccessReview

        kinds: dict[str, Any] = {"TokenReview": TokenReview, "SubjectAccessReview": SubjectAccessReview}
        kind = kinds.get(str(body.get("kind")))
        if kind is None:
            raise ValueError(f"not a review: {body.get('kind')!r}")
        if self._client is None:
            self._client = AsyncClient(http2=False)
        answer = await self._client.create(kind.from_dict(body))
        out: dict[str, Any] = answer.to_dict()
        return out

    async def close(self) -> None:
        """Close the client (when one was made)."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()
