"""Issue 16 item 5: kopf lists and watches only the managed pods, Deployments and Services (a server-side
``labelSelector``), and every SGLangServer. The URLs are those kopf itself builds (its ``fetch_objs`` and
``watch_objs``, with the settings :func:`sglang_operator.entry.runner.configure` makes); kopf's HTTP calls are
replaced by recorders, so no API server is needed."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kopf
import pytest
from kopf._cogs.clients import api, fetching, watching
from kopf._cogs.structs import references

from sglang_operator.control import handlers
from sglang_operator.entry import runner

SELECTOR = "app.kubernetes.io/managed-by=sglang-operator"
RESOURCES = {
    "pods": references.Resource("", "v1", "pods", namespaced=True),
    "services": references.Resource("", "v1", "services", namespaced=True),
    "deployments": references.Resource("apps", "v1", "deployments", namespaced=True),
    "sglangservers": references.Resource("sglang-operator.io", "v1alpha1", "sglangservers", namespaced=True),
    "configmaps": references.Resource("", "v1", "configmaps", namespaced=True),
}


@pytest.fixture
def urls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []

    async def get(*, url: str, **_: Any) -> dict[str, Any]:
        seen.append(url)
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    async def stream(*, url: str, **_: Any) -> AsyncIterator[Any]:
        seen.append(url)
        for _none in ():
            yield _none

    monkeypatch.setattr(api, "get", get)
    monkeypatch.setattr(api, "stream", stream)
    return seen


async def _query(resource: references.Resource, urls: list[str], namespace: str | None) -> tuple[dict[str, list[str]],
                                                                                                  dict[str, list[str]]]:
    settings = kopf.OperatorSettings()
    runner.configure(settings)
    urls.clear()
    async for _chunk in fetching.fetch_objs(settings=settings, resource=resource, namespace=namespace,
                                            logger=logging.getLogger("test")):
        pass
    never: Any = None  # the pause waiter: never awaited, the recorded stream ends at once
    async for _event in watching.watch_objs(settings=settings, resource=resource, namespace=namespace,
                                            operator_pause_waiter=never):
        pass
    listing, watch = urls
    assert "watch=true" in watch and "watch" not in parse_qs(urlsplit(listing).query)
    return parse_qs(urlsplit(listing).query), parse_qs(urlsplit(watch).query)


@pytest.mark.parametrize("plural", ["pods", "services", "deployments"])
@pytest.mark.parametrize("namespace", [None, "team-a"])
async def test_managed_children_are_selected_by_the_api_server(plural: str, namespace: str | None,
                                                               urls: list[str]) -> None:
    listing, watch = await _query(RESOURCES[plural], urls, namespace)
    assert listing["labelSelector"] == [SELECTOR]
    assert watch["labelSelector"] == [SELECTOR]
    if namespace:
        assert f"/namespaces/{namespace}/{plural}" in urls[0]


@pytest.mark.parametrize("plural", ["sglangservers", "configmaps"])
async def test_servers_and_other_kinds_are_not_filtered(plural: str, urls: list[str]) -> None:
    listing, watch = await _query(RESOURCES[plural], urls, None)
    assert "labelSelector" not in listing and "labelSelector" not in watch


def test_every_labelled_kopf_watch_gets_the_server_side_selector() -> None:
    """Each kopf handler filtering on labels is on a resource given a server-side selector with the same labels:
    a new labelled watch cannot be added and forgotten here."""
    settings = kopf.OperatorSettings()
    runner.configure(settings)
    registry = kopf.get_default_registry()
    labelled = {(h.selector.group, h.selector.version, h.selector.any_name)
                for h in registry._watching.get_all_handlers() if h.labels}
    assert labelled == set(handlers.MANAGED_WATCHES)
    for handler in registry._watching.get_all_handlers():
        if handler.labels:
            assert dict(handler.labels) == handlers.MANAGED_LABELS
    assert handlers.MANAGED_SELECTOR == SELECTOR
