"""``/readyz``: the tracker's answers (:mod:`sglang_operator.process.readiness`), served with ``/metrics`` from one real
HTTP server on a loopback port (:func:`sglang_operator.process.metrics_http.serve`), and the handlers that feed it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import httpx
import kopf
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sglang_operator.control import handlers
from sglang_operator.control.observer import Observer
from sglang_operator.process import metrics_http, telemetry
from sglang_operator.process.readiness import Readiness


class Leading:
    """A switchable ``is_leader``."""

    def __init__(self, value: bool = True) -> None:
        self.value = value

    def __call__(self) -> bool:
        return self.value


@pytest.fixture
def leading() -> Leading:
    return Leading()


@pytest.fixture
def tracker(leading: Leading) -> Readiness:
    return Readiness(leading)


@pytest.fixture
def url(tracker: Readiness) -> Iterator[str]:
    server = metrics_http.serve(0, "127.0.0.1", readiness=tracker)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()


def get(url: str, path: str = "/readyz") -> httpx.Response:
    return httpx.get(url + path, timeout=5)


def test_a_standby_is_ready_to_take_over(tracker: Readiness, leading: Leading, url: str) -> None:
    leading.value = False
    r = get(url)
    assert (r.status_code, r.text) == (200, "standby: waiting for the Lease\n")
    assert r.headers["content-type"].startswith("text/plain")
    leading.value = True  # the Lease taken: kopf has not listed the servers yet
    r = get(url)
    assert (r.status_code, r.text) == (503, "starting\n")


def test_resuming_until_every_expected_server_was_seen(tracker: Readiness, url: str) -> None:
    tracker.expect(["a", "b", "c"])
    assert (get(url).status_code, get(url).text) == (503, "resuming: 0 of 3 SGLangServers seen\n")
    tracker.seen("a")
    tracker.seen("new")  # created after the startup LIST: not expected, does not count
    assert get(url).text == "resuming: 1 of 3 SGLangServers seen\n"
    tracker.seen("b")
    tracker.seen("a")  # a second reconcile of one server counts once
    assert get(url).text == "resuming: 2 of 3 SGLangServers seen\n"
    tracker.seen("c")
    r = get(url)
    assert (r.status_code, r.text) == (200, "ok: 3 SGLangServers seen once\n")


def test_deleted_servers_do_not_hold_readiness_back(tracker: Readiness, url: str) -> None:
    tracker.expect(["a", "b", "c"])
    tracker.seen("a")
    tracker.forget("b")  # deleted while resuming
    assert get(url).text == "resuming: 1 of 2 SGLangServers seen\n"
    tracker.retain(["a", "new"])  # a later LIST: c was deleted before kopf listed it (no DELETED event)
    r = get(url)
    assert (r.status_code, r.text) == (200, "ok: 1 SGLangServers seen once\n")


def test_once_ok_it_stays_ok(tracker: Readiness, url: str) -> None:
    tracker.expect([])  # nothing to resume
    assert (get(url).status_code, get(url).text) == (200, "ok: 0 SGLangServers seen once\n")
    tracker.expect(["later"])  # nothing un-readies a process that was ready
    tracker.forget("later")
    assert get(url).status_code == 200 and tracker.ready


def test_metrics_share_the_port(tracker: Readiness, url: str) -> None:
    telemetry.count_reconcile("applied")
    r = get(url, "/metrics")
    assert r.status_code == 200
    families = {f.name for f in text_string_to_metric_families(r.text)}
    assert {"sglang_operator_reconcile", "process_resident_memory_bytes"} <= families


def test_a_taken_port_raises_oserror() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        with pytest.raises(OSError):
            metrics_http.serve(held.getsockname()[1], "127.0.0.1")


async def test_start_lists_once_then_rechecks_until_ready(tracker: Readiness) -> None:
    calls: list[list[str]] = []
    answers: list[set[str] | Exception] = [RuntimeError("storage is (re)initializing"), {"a", "b"},
                                           RuntimeError("API down"), {"a"}]

    async def list_uids(namespaces: Sequence[str]) -> set[str]:
        calls.append(list(namespaces))
        answer = answers.pop(0) if answers else {"a"}
        if isinstance(answer, Exception):
            raise answer
        return answer

    tracker.namespaces = ["team-a", "team-b"]
    tracker.start(list_uids, recheck_seconds=0.01, retry_seconds=0.01)  # returns at once, lists in a task
    assert tracker.report() == (False, "starting")
    async with asyncio.timeout(5):
        while tracker.report()[1] == "starting":  # the failed startup LIST is tried again
            await asyncio.sleep(0.001)
    assert tracker.report() == (False, "resuming: 0 of 2 SGLangServers seen")
    tracker.seen("a")
    async with asyncio.timeout(5):
        while not tracker.ready:  # a failed re-check is retried; the next one finds b gone
            await asyncio.sleep(0.01)
    assert tracker.report() == (True, "ok: 1 SGLangServers seen once")
    assert calls[:4] == [["team-a", "team-b"]] * 4
    await tracker.stop()


class _Fail(Exception):
    pass


async def test_reconcile_counts_a_server_seen_however_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    tracker = Readiness(lambda: True)
    monkeypatch.setattr(handlers, "READINESS", tracker)
    tracker.expect(["uid-1", "uid-2", "uid-3"])

    async def failing(*_: Any) -> None:
        raise _Fail

    monkeypatch.setattr(handlers, "_reconcile", failing)
    memo = SimpleNamespace(observer=Observer(5.0))
    body: Any = {"metadata": {"name": "s", "namespace": "ns", "uid": "uid-1"}}
    with pytest.raises(_Fail):  # kopf retries it: the server was seen all the same
        await handlers.reconcile(body=body, meta=body["metadata"], status={}, patch={}, reason="resume",
                                 logger=None, memo=memo)
    assert tracker.report() == (False, "resuming: 1 of 3 SGLangServers seen")
    with pytest.raises(kopf.TemporaryError):  # before kopf's startup built the observer: retried, still seen
        await handlers.reconcile(body=body, meta=body["metadata"], status={}, patch={}, reason="resume",
                                 logger=None, memo=SimpleNamespace())
    monkeypatch.setattr(memo.observer, "track", lambda *_: None)
    await handlers.track(event={"type": "DELETED"}, body={"metadata": {"uid": "uid-2"}}, memo=memo)
    await handlers.track(event={"type": "MODIFIED"}, memo=memo,
                         body={"metadata": {"uid": "uid-3", "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    assert tracker.report() == (True, "ok: 1 SGLangServers seen once")
