"""The control loop without a cluster (issue 15): one worker per SGLangServer, no lost update, no server freezing
another, no ghost pods, every per-server memory dropped with its server. Each test fails on 7a75fdc."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import gc
import itertools
import weakref
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakekube import FakeKube
from prometheus_client import REGISTRY, generate_latest
from rollback_driver import BAD, OTHER, Run

from sglang_operator import builders
from sglang_operator.api.server import parse
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.api.view import ServerView
from sglang_operator.control import children, handlers, restore
from sglang_operator.control.memory import ServerMemory
from sglang_operator.control.observer import Observer
from sglang_operator.decisions.rollback import Apply
from sglang_operator.decisions.rollback_state import RollbackState
from sglang_operator.io.pods import PodCache

SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())


def server(name: str, ns: str = "ns") -> dict[str, Any]:
    obj = copy.deepcopy(SAMPLE)
    obj["metadata"] = {"name": name, "namespace": ns, "uid": f"uid-{name}"}
    return obj


def pod(name: str, server_name: str, rv: int, ip: str | None = None, ns: str = "ns") -> dict[str, Any]:
    ip = ip or f"127.1.{sum(map(ord, ns + name)) % 256}.{len(name)}"  # live pods never share an IP
    return {"kind": "Pod", "metadata": {
        "name": name, "namespace": ns, "resourceVersion": str(rv),
        "labels": {"app.kubernetes.io/instance": server_name, "app.kubernetes.io/managed-by": "sglang-operator",
                   "app.kubernetes.io/name": "sglang", builders.REVISION_LABEL: "r1"}},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}}


# --- lost update ----------------------------------------------------------------------------------------------

def test_a_spec_update_overwritten_by_the_stable_revision_is_applied_again() -> None:
    """Status at the stable revision, the spec at a new, never-rejected one (a rollback's apply overwrote the
    update, or the operator restarted before applying it): the analysis applies the spec's revision."""
    run = Run(auto_apply=False)
    run.promote_good()
    run.spec = OTHER  # the user's update; GOOD still runs
    applies = [a for _ in range(3) for a in run.tick(1.0) if isinstance(a, Apply)]
    assert applies and {a.revision for a in applies} == {OTHER}, run.actions[-5:]


def test_a_rejected_spec_revision_still_keeps_the_stable_one() -> None:
    run = Run()
    run.promote_good()
    run.apply_spec(BAD)
    run.warm_up()
    while run.revision == BAD:
        run.interval(tps=36.0, accept=1.75)
    applies = [a for _ in range(3) for a in run.tick(1.0) if isinstance(a, Apply)]
    assert run.spec == BAD and applies == []  # rejected: the stable revision runs and stays


def test_a_refused_spec_asks_the_analysis_for_nothing() -> None:
    """SpecValid=False at this generation: the observer gives no spec revision to converge to (kopf retries)."""
    obs = Observer(1.0)
    body = server("a")
    body["metadata"]["generation"] = 2
    body["status"] = {"revision": "r1", "conditions": [
        {"type": "SpecValid", "status": "False", "reason": "InvalidSpec", "observedGeneration": 2}]}
    assert obs._spec_revision(obs.memory(body), parse(body), ServerView.of(body)) is None


def test_an_unchanged_spec_asks_for_the_running_revision_whatever_the_render() -> None:
    """An operator upgrade whose defaults change the render restarts nothing: the spec the running revision was
    applied from asks for that revision."""
    obs = Observer(1.0)
    body = server("a")
    body["metadata"]["generation"] = 1
    body["status"] = {"revision": "old-defaults", "revisions": [
        {"revision": "old-defaults", "spec": {**body["spec"], "replicas": 7}}]}
    assert obs._spec_revision(obs.memory(body), parse(body), ServerView.of(body)) == "old-defaults"


# --- the worker: the handler and the observer for one server ----------------------------------------------------

async def _created(kube: FakeKube, obs: Observer, name: str) -> dict[str, Any]:
    """Create ``name`` through the reconcile handler, as kopf would call it (the handler writes its status)."""
    body = kube.put(server(name))
    await handlers.reconcile(body=body, meta=body["metadata"], status=body.get("status") or {}, patch={},
                             reason="create", logger=handlers.logging.getLogger("test"),
                             memo=type("Memo", (), {"observer": obs})())
    patched = kube.server(name)
    assert patched["status"]["revision"] and obs.memory(patched).body == patched  # the answer is the newest view
    obs.track("MODIFIED", patched)
    return patched


async def test_the_handler_applies_children_status_and_the_ledger_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    body = await _created(kube, obs, "a")
    revision = body["status"]["revision"]
    assert kube.get("Deployment", "ns", "a") is not None and kube.get("Service", "ns", "a") is not None
    assert kube.get("ControllerRevision", "ns", f"a-{revision}") is not None
    assert [e[2] for e in kube.events] == ["Created"]
    assert obs.memories.get(("ns", "a")) is not None and not obs.memories.get(("ns", "a")).busy  # type: ignore[union-attr]


async def test_a_spec_update_during_a_rollbacks_drain_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lost update: the observer's rollback drains (held open), the user updates the spec meanwhile. The
    handler cancels the rollback's job and applies the spec's revision; the stable one never overwrites it."""
    kube = FakeKube().install()
    obs = Observer(1.0)
    body = await _created(kube, obs, "a")
    draining = asyncio.Event()

    async def slow_apply(view: dict[str, Any], revision: str, reason: str, now: dt.datetime,
                         memory: ServerMemory | None = None) -> dict[str, Any]:
        draining.set()
        await asyncio.sleep(60)  # drainSeconds: 60, a request held open
        raise AssertionError("the rollback's apply ran to its end")

    monkeypatch.setattr(restore, "apply_revision", slow_apply)
    mem = obs.memory(body)
    obs._start_job(mem, body, Apply("stable-rev", "rolling back"), dt.datetime.now(dt.UTC))
    await asyncio.wait_for(draining.wait(), 5)
    assert mem.busy
    spec = copy.deepcopy(body["spec"])
    spec["memory"]["maxRunningRequests"] = 8
    updated = kube.update_spec("a", spec)
    started = asyncio.get_running_loop().time()
    await handlers.reconcile(body=updated, meta=updated["metadata"], status=updated["status"], patch={},
                             reason="update", logger=handlers.logging.getLogger("test"),
                             memo=type("Memo", (), {"observer": obs})())
    assert asyncio.get_running_loop().time() - started < 5  # did not wait out the drain
    assert mem.job is not None and mem.job.cancelled()
    want = builders.render(parse(updated)).revision
    assert kube.server("a")["status"]["revision"] == want != body["status"]["revision"]
    dep = kube.get("Deployment", "ns", "a")
    assert dep is not None and dep["metadata"]["labels"][builders.REVISION_LABEL] == want


async def test_a_409_during_persist_writes_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """A status patch refused as stale: no event, no apply; the server is decided again on a newer view only."""
    kube = FakeKube().install()
    obs = Observer(1.0)
    body = await _created(kube, obs, "a")
    events, writes = len(kube.events), len(kube.writes)
    kube.refuse_next_status = 1
    mem = obs.memory(body)
    async with mem.lock:
        await obs.observe(mem.view() or ServerView.of(body), dt.datetime.now(dt.UTC))
    assert len(kube.events) == events and [w[0] for w in kube.writes[writes:]] == ["patch_status"]
    assert mem.stale_rv == (mem.body or body)["metadata"]["resourceVersion"] and mem.job is None
    await obs.tick()  # the same stale view: not observed again
    assert [w[0] for w in kube.writes[writes:]] == ["patch_status"]


async def test_the_handlers_status_patch_refused_as_stale_is_decided_again_on_the_newer_object(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The reconcile handler writes its status itself, with the body's resourceVersion: when the object changed
    since kopf read it (here the observer's status patch landed in between), nothing stale is written, kopf is told
    to call the handler again, and that call, on the newer object, writes the spec's revision."""
    import kopf

    kube = FakeKube().install()
    obs = Observer(1.0)
    body = await _created(kube, obs, "a")
    spec = copy.deepcopy(body["spec"])
    spec["memory"]["maxRunningRequests"] = 8
    updated = kube.update_spec("a", spec)  # what kopf hands the handler
    newer = await kube.patch_status("ns", "a", None, {"phase": "Ready"})  # then another write lands
    assert newer is not None
    memo = type("Memo", (), {"observer": obs})()
    with pytest.raises(kopf.TemporaryError):
        await handlers.reconcile(body=updated, meta=updated["metadata"], status=updated["status"], patch={},
                                 reason="update", logger=handlers.logging.getLogger("test"), memo=memo)
    assert kube.server("a")["status"]["revision"] == body["status"]["revision"]  # the stale decision: unwritten
    assert not [e for e in kube.events if e[2] == "Updated"]
    fresh = kube.server("a")
    await handlers.reconcile(body=fresh, meta=fresh["metadata"], status=fresh["status"], patch={},
                             reason="update", logger=handlers.logging.getLogger("test"), memo=memo)
    want = builders.render(parse(fresh)).revision
    got = kube.server("a")["status"]
    assert got["revision"] == want != body["status"]["revision"] and got["phase"] == "Progressing"
    assert [e[2] for e in kube.events].count("Updated") == 1


# --- one server never freezes another ----------------------------------------------------------------------------

async def test_a_long_drain_of_one_server_does_not_delay_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """drainSeconds 600 on one server rolling back: every other server is still observed every interval."""
    obs = Observer(0.5)
    seen: dict[str, list[float]] = {"busy": [], "other": []}
    loop = asyncio.get_running_loop()

    async def observe(view: ServerView, now: dt.datetime) -> None:
        name = view.name
        seen[name].append(loop.time())
        if name == "busy" and len(seen[name]) == 1:
            async def drain_600() -> None:
                async with obs.memories.of(view.key).lock:
                    await asyncio.sleep(600)
            obs.memories.of(view.key).job = loop.create_task(drain_600())

    monkeypatch.setattr(obs, "observe", observe)
    for name in seen:
        obs.track("ADDED", {**server(name), "status": {"revision": "r1"}})
    started = loop.time()
    for _ in range(6):
        await obs.tick()
        await asyncio.sleep(max(0.0, obs.interval - (loop.time() - started) % obs.interval))
    gaps = [b - a for a, b in itertools.pairwise(seen["other"])]
    assert len(seen["other"]) == 6 and max(gaps) < 2 * obs.interval, gaps
    assert len(seen["busy"]) == 1  # busy: skipped, not waited for
    await obs.stop()


# --- ghost pods and servers ----------------------------------------------------------------------------------

async def test_a_pod_deleted_during_a_watch_gap_leaves_at_the_resync() -> None:
    listed = [pod("a-1", "a", 10), pod("a-2", "a", 11)]

    async def lister(_: str) -> list[dict[str, Any]]:
        return list(listed)

    cache = PodCache(lister)
    assert len(await cache.pods("ns", "a")) == 2
    listed.clear()  # both deleted while the watch was away: no DELETED event comes
    await cache.resync("ns")
    assert cache.pods_now("ns", "a") == []


async def test_a_server_deleted_during_a_watch_gap_leaves_memory_series_and_targets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ns = "watch-gap"  # a namespace of its own: the registry is the process's, and other tests' servers are "ns/a"
    kube = FakeKube().install()
    obs = Observer(1.0)
    for name in ("a", "b"):
        body = kube.put({**server(name, ns), "status": {"revision": "r1"}})
        obs.track("ADDED", body)
        kube.put(pod(f"{name}-1", name, 50, ns=ns))
        await obs.pods.pods(ns, name)
    obs.series.export_analysis(ns, "a", RollbackState.from_status(SGLangServerStatus.model_validate({
        "stableRevision": "r1", "baseline": {"revision": "r1", "tokensPerSecond": 50.0, "acceptLength": 2.7,
                                             "samples": 3, "signal": "probe", "at": "2026-01-01T00:00:00Z"}})))

    def exported() -> str:
        return "".join(line for line in generate_latest(REGISTRY).decode().splitlines()
                       if 'sglang_server="a"' in line and f'namespace="{ns}"' in line)

    assert exported() != ""
    kube.delete("SGLangServer", ns, "a")
    kube.delete("Pod", ns, "a-1")
    kube.delete("Pod", ns, "b-1")
    await obs.resync()
    assert (ns, "a") not in obs.memories and (ns, "b") in obs.memories
    assert obs.pods.pods_now(ns, "a") == [] and obs.pods.pods_now(ns, "b") == []
    assert exported() == ""


async def test_a_watch_restart_resyncs_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf re-lists after a 410 Gone (events of type None, no DELETED for what went meanwhile): a listed pod the
    cache holds already marks the re-list, and the loop resyncs after its next tick, long before the periodic
    resync (here never)."""
    kube = FakeKube().install()
    obs = Observer(0.05, resync_seconds=3600)
    body = kube.put({**server("a"), "status": {"revision": "r1"}})
    obs.track(None, body)  # kopf's first listing: nothing known yet, no resync wanted
    kube.put(pod("a-1", "a", 50))
    kube.put(pod("a-2", "a", 51))
    await obs.pods.pods("ns", "a")
    obs.pod_event(None, kube.put(pod("a-3", "a", 52)))  # a pod seen first in a listing: not a re-list
    assert not obs.relisted
    kube.delete("Pod", "ns", "a-2")  # deleted during the watch gap: no DELETED event comes
    obs.pod_event(None, pod("a-1", "a", 50))  # the re-list after the 410 brings a-1 again
    assert obs.relisted
    obs.start()
    try:
        for _ in range(100):
            if not any(p["metadata"]["name"] == "a-2" for p in obs.pods.pods_now("ns", "a")):
                break
            await asyncio.sleep(0.02)
        assert sorted(p["metadata"]["name"] for p in obs.pods.pods_now("ns", "a")) == ["a-1", "a-3"]
        assert not obs.relisted
    finally:
        await obs.stop()


# --- leaks -------------------------------------------------------------------------------------------------------

def test_a_thousand_servers_created_and_deleted_leave_no_memory() -> None:
    obs = Observer(1.0)
    refs = []
    for i in range(1000):
        body = {**server(f"s{i}"), "status": {"revision": "r1"}}
        obs.track("ADDED", body)
        mem = obs.memory(body)
        obs._parsed(mem, ServerView.of(body))
        mem.apply_failure, mem.diffs, mem.reads.digests["r1"] = "failed", ["x"], "sha256:0"
        refs.append(weakref.ref(mem))
    assert len(obs.memories) == 1000
    for i in range(1000):
        obs.track("DELETED", server(f"s{i}"))
    del mem
    gc.collect()
    assert len(obs.memories) == 0 and [r for r in refs if r() is not None] == []


def test_no_module_keeps_per_server_state() -> None:
    """The handler -> observer channels and the import-time observer are gone."""
    from sglang_operator.control import children, drain

    for module, name in ((children, "APPLY_FAILURES"), (drain, "DRAINING"), (children, "DRAINING"),
                         (handlers, "OBSERVER")):
        assert not hasattr(module, name), f"{module.__name__}.{name}"


# --- the glue offline: resume, ApplyFailed, the late LeaderWorkerSet apply, the ledger ----------------------------

async def test_a_resume_writes_nothing_also_when_only_the_operators_defaults_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    body = await _created(kube, obs, "a")
    writes, events = len(kube.writes), len(kube.events)
    memo = type("Memo", (), {"observer": Observer(1.0)})()  # a new process
    await handlers.reconcile(body=body, meta=body["metadata"], status=body["status"], patch={}, reason="resume",
                             logger=handlers.logging.getLogger("test"), memo=memo)
    assert kube.writes[writes:] == [] and kube.events[events:] == []

    real = builders.render

    def upgraded(server: Any) -> builders.Rendered:  # the next operator release renders another default
        r = real(server)
        workload = copy.deepcopy(r.workload)
        workload["spec"]["template"]["metadata"]["labels"][builders.REVISION_LABEL] = "new-default"
        workload["spec"]["template"]["spec"]["containers"][0]["args"].append("--new-default")
        return builders.Rendered(r.command, workload, r.service, "new-default", r.selector, r.warnings, r.notes)

    monkeypatch.setattr(handlers.builders, "render", upgraded)
    await handlers.reconcile(body=body, meta=body["metadata"], status=body["status"], patch={}, reason="resume",
                             logger=handlers.logging.getLogger("test"), memo=memo)
    assert kube.writes[writes:] == []  # running pods are not restarted by an upgrade, no status written
    b = kube.server("a")
    obs = memo.observer
    assert obs._spec_revision(obs.memory(b), parse(b), ServerView.of(b)) == body["status"]["revision"]


async def test_a_failed_apply_is_degraded_once_and_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    import kopf
    from lightkube import ApiError
    from lightkube.models.meta_v1 import Status

    kube = FakeKube().install()
    obs = Observer(1.0)

    async def refuse(manifest: Any, dry_run: bool = False) -> None:
        raise ApiError(status=Status(code=500, message="etcdserver: request timed out", reason="x", status="Failure"))

    monkeypatch.setattr(children.kube_write, "apply", refuse)
    body = kube.put(server("a"))
    memo = type("Memo", (), {"observer": obs})()
    for _ in range(2):
        with pytest.raises(kopf.TemporaryError):
            await handlers.reconcile(body=body, meta=body["metadata"], status={}, patch={}, reason="create",
                                     logger=handlers.logging.getLogger("test"), memo=memo)
    assert [e[2] for e in kube.events] == ["ApplyFailed"]  # one event for one failure
    degraded = next(c for c in kube.server("a")["status"]["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ApplyFailed" and "etcdserver" in degraded["message"]
    assert "etcdserver" in (obs.memory(body).apply_failure or "")
    obs.track("DELETED", body)
    assert obs.memories.get(("ns", "a")) is None  # forgotten with the server


async def test_a_server_waiting_for_leaderworkerset_is_applied_once_the_api_is_served(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    obj = server("mn")
    obj["spec"]["parallelism"] = {**obj["spec"].get("parallelism", {}), "nodes": 2}
    body = kube.put({**obj, "status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "LeaderWorkerSetMissing", "message": "x"}]}})
    obs.track("ADDED", body)
    mem = obs.memory(body)
    async with mem.lock:
        await obs.observe(ServerView.of(body), dt.datetime.now(dt.UTC))
    got = kube.server("mn")
    revision = got["status"]["revision"]
    assert kube.get("LeaderWorkerSet", "ns", "mn") is not None
    assert next(c for c in got["status"]["conditions"] if c["type"] == "Ready")["reason"] == "RollingOut"
    assert kube.get("ControllerRevision", "ns", f"mn-{revision}") is not None  # the ledger, through the one path
    assert [e[2] for e in kube.events] == ["Created"]


async def test_the_ledger_records_each_revision_once_and_prunes_to_the_history_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    body = await _created(kube, obs, "a")
    memo = type("Memo", (), {"observer": obs})()
    seen = [body["status"]["revision"]]
    for steps in (2, 4, 5):
        spec = copy.deepcopy(kube.server("a")["spec"])
        spec["speculative"] = {**spec["speculative"], "numSteps": steps, "numDraftTokens": steps + 1}
        spec["rollback"] = {**spec.get("rollback", {}), "historyLimit": 2}
        updated = kube.update_spec("a", spec)
        await handlers.reconcile(body=updated, meta=updated["metadata"], status=updated["status"], patch={},
                                 reason="update", logger=handlers.logging.getLogger("test"), memo=memo)
        seen.append(kube.server("a")["status"]["revision"])
    names = sorted(n for (k, _, n) in kube.objects if k == "ControllerRevision")
    assert len(set(seen)) == 4 and len(names) <= 3, names  # historyLimit 2 (+ the serving one kept)
    assert f"a-{seen[-1]}" in names
