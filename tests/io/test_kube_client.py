"""``io.kube_write.apply``: Service applies are bounded apart (issue 10: slow ClusterIP allocations must not hold
the client's connections), every other kind is not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sglang_operator.io import _client, kube_write


class _SlowAPI:
    """Stands in for lightkube's client: every patch waits until released; counts patches in flight per kind."""

    def __init__(self) -> None:
        self.in_flight: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.release = asyncio.Event()

    async def patch(self, resource: Any, name: str, obj: dict[str, Any], **_: Any) -> None:
        kind = obj["kind"]
        self.in_flight[kind] = self.in_flight.get(kind, 0) + 1
        self.most[kind] = max(self.most.get(kind, 0), self.in_flight[kind])
        await self.release.wait()
        self.in_flight[kind] -= 1


def _manifest(kind: str, i: int) -> dict[str, Any]:
    return {"apiVersion": "v1" if kind == "Service" else "apps/v1", "kind": kind,
            "metadata": {"name": f"s-{i}", "namespace": "ns"}}


async def test_service_applies_are_bounded_and_other_kinds_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    api = _SlowAPI()
    monkeypatch.setattr(_client, "client", lambda: api)
    count = kube_write.SERVICE_APPLIES * 3
    tasks = [asyncio.create_task(kube_write.apply(_manifest(kind, i)))
             for i in range(count) for kind in ("Service", "Deployment")]
    for _ in range(50):
        await asyncio.sleep(0)
    assert api.most == {"Service": kube_write.SERVICE_APPLIES, "Deployment": count}
    api.release.set()
    await asyncio.gather(*tasks)  # every one applied in the end
    assert api.in_flight == {"Service": 0, "Deployment": 0}
