"""Fixtures of the control layer's offline tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sglang_operator.io import api


@pytest.fixture(autouse=True)
def _kube_api_unbound() -> Iterator[None]:
    """Every test starts with no fake API bound, and what it bound (:meth:`FakeKube.install`) ends with it."""
    token = api.bind(None)
    yield
    api.reset(token)
