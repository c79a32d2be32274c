"""The fence is checked in the dispatch wrapper of every write (:func:`sglang_operator.io.api.dispatched`, issue 39
item 3): a write refused to a process that does not lead reaches neither the cluster nor a bound implementation, so the
offline tests' fake API passes the fence as the cluster's calls do."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from sglang_operator.api.view import ServerView
from sglang_operator.control import server_status
from sglang_operator.io import _client, api, kube_write, revisions
from sglang_operator.io.fence import FENCE, Fence, NotLeader
from tests.control.fakekube import FakeKube

WRITES = {"apply", "patch_replicas", "delete_object", "patch_status", "patch_tuning_status", "post_event",
          "create_revision", "set_digest", "set_number", "delete_revision"}
SERVER = {"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangServer", "metadata": {"name": "web", "namespace": "ns"},
          "spec": {}}
TUNING = {"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangTuning", "metadata": {"name": "t", "namespace": "ns"}}
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"},
              "spec": {"replicas": 1}}
REVISION = {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "web-1", "namespace": "ns"},
            "revision": 1}
ARGS: dict[str, tuple[Any, ...]] = {  # in the order they are made (the deletes last)
    "apply": (DEPLOYMENT,), "patch_replicas": ("Deployment", "ns", "web", 3),
    "patch_status": ("ns", "web", None, {"phase": "x"}), "patch_tuning_status": ("ns", "t", None, {"phase": "x"}),
    "post_event": (SERVER, "Normal", "Applied", "revision 1"), "create_revision": ({**REVISION, "revision": 2},),
    "set_digest": ("ns", "web-1", "img@sha256:0"), "set_number": ("ns", "web-1", 3),
    "delete_object": ("Deployment", "ns", "web"), "delete_revision": ("ns", "web-1"),
}
FUNCTIONS = {name: getattr(module, name) for module in (kube_write, revisions) for name in WRITES
             if hasattr(module, name)}


@pytest.fixture
def closed() -> Iterator[Fence]:
    """The process's fence shut (a leader without margin), its refusals counted from 0; opened again after."""
    saved = (FENCE._may_write, FENCE._expired, FENCE._on_expired, FENCE.refused)
    FENCE.install(lambda: False)
    FENCE.refused = 0
    try:
        yield FENCE
    finally:
        FENCE.install(*saved[:3])
        FENCE.refused = saved[3]


def _fake() -> FakeKube:
    fake = FakeKube()
    for obj in (SERVER, TUNING, DEPLOYMENT, REVISION):
        fake.put(copy.deepcopy(obj))
    return fake


async def _refused(name: str) -> None:
    if name == "post_event":  # informative only: dropped, never raised
        assert await FUNCTIONS[name](*ARGS[name]) is None
        return
    with pytest.raises(NotLeader, match="does not hold the Lease"):
        await FUNCTIONS[name](*ARGS[name])


def test_every_write_and_only_the_writes_are_fenced() -> None:
    assert set(FUNCTIONS) == WRITES == set(api.FENCED)
    assert set(ARGS) == WRITES
    reads = {n for n, v in vars(api.KubeAPI).items() if inspect.iscoroutinefunction(v)} - WRITES
    assert reads and not reads & set(api.FENCED)


async def test_a_write_refused_by_the_fence_never_reaches_the_fake_api(closed: Fence) -> None:
    fake = _fake()
    before = copy.deepcopy(fake.objects)
    with api.using(fake):
        for name in ARGS:
            await _refused(name)
    assert (fake.writes, fake.events, fake.objects) == ([], [], before)
    assert closed.refused == len(WRITES)


async def test_a_write_refused_by_the_fence_never_reaches_the_cluster(closed: Fence,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable() -> Any:
        raise AssertionError("the client was asked for behind a closed fence")

    monkeypatch.setattr(_client, "client", unreachable)
    assert api.bound() is None
    for name in ARGS:
        await _refused(name)
    assert closed.refused == len(WRITES)


async def test_the_status_writer_is_refused_through_the_fake_api(closed: Fence) -> None:
    fake = _fake()
    view = ServerView.of(fake.server("web"))
    with api.using(fake):
        with pytest.raises(NotLeader):
            await server_status.patch(view, {"observedGeneration": 1})
        await server_status.event(view.ref, "Normal", "Applied", "dropped")
    assert (fake.writes, fake.events) == ([], [])


async def test_an_open_fence_lets_every_write_reach_the_fake_api() -> None:
    fake = _fake()
    with api.using(fake):
        for name in ARGS:
            await FUNCTIONS[name](*ARGS[name])
    assert len(fake.writes) == len(WRITES) - 3  # set_digest, set_number and post_event are not in ``writes``
    assert fake.events == [("web", "Normal", "Applied", "revision 1")]
