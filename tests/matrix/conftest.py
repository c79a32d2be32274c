"""Fixtures of the neighbour matrix: a fresh fake world per combination (:class:`matrix_loop.World`) with the
operator's outside world replaced by it — the SGLang pods' HTTP answers and probe stream, KEDA found with a
Prometheus address, a tuning trial's load — and the tuning runner's polls made immediate (it yields, never sleeps)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from matrix_loop import PROM, World

from sglang_operator.control import tuning as ctl
from sglang_operator.io import api, keda, loadgen
from sglang_operator.io.sglang_http import SGLangHTTP


@pytest.fixture(autouse=True)
def _kube_api_unbound() -> Iterator[None]:
    """Every test starts with no fake API bound, and what it bound ends with it."""
    token = api.bind(None)
    yield
    api.reset(token)


@pytest.fixture
async def world(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[World]:
    built = World()
    fake = built.sglang

    async def get(self: SGLangHTTP, url: str, consumer: object, **kw: object) -> object:
        return await fake.get(url, consumer, **kw)

    monkeypatch.setattr(SGLangHTTP, "get", get)
    monkeypatch.setattr(loadgen, "stream_once", fake.stream_once)
    monkeypatch.setattr(keda, "SCALED_OBJECTS", keda.ScaledObjects(PROM))
    monkeypatch.setattr(ctl, "measure_pods", fake.measure_pods)
    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.0)
    monkeypatch.setattr(ctl, "WAIT_SECONDS", 0.0)
    monkeypatch.setattr(ctl, "WAIT_MAX_SECONDS", 0.0)
    try:
        yield built
    finally:
        await built.close()
