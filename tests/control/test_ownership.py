"""Nothing is written without owning it: every apply and delete of a child reads the object first and goes on only
when the server (or tuning) is its controller owner by uid; a delete carries that uid as its precondition; a name
another owner holds is ``Degraded=True`` reason ``ChildConflict`` naming the holder, never a takeover. The ledger
counts only the ControllerRevisions the server owns and the operator wrote, and never applies one whose data renders
to another revision."""

from __future__ import annotations

import copy
import datetime as dt
import logging
from typing import Any

import kopf
import pytest
from fakekube import ConflictError, FakeKube
from test_worker import server

from sglang_operator import builders
from sglang_operator.api.server import parse
from sglang_operator.api.view import ObjectRef, ServerView
from sglang_operator.builders.revision import controller_revision
from sglang_operator.control import children, handlers, ledger, restore
from sglang_operator.control.children import CHILD_CONFLICT, ChildConflict
from sglang_operator.control.observer import Observer
from sglang_operator.decisions.actions import PlaceCanary

NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)


def _memo(obs: Observer) -> Any:
    return type("Memo", (), {"observer": obs})()


async def _create(kube: FakeKube, obs: Observer, obj: dict[str, Any]) -> dict[str, Any]:
    body = kube.put(obj)
    await handlers.reconcile(body=body, meta=body["metadata"], status={}, patch={}, reason="create",
                             logger=logging.getLogger("test"), memo=_memo(obs))
    created = kube.server(str(obj["metadata"]["name"]))
    obs.track("MODIFIED", created)
    return created


def _stranger(kind: str, name: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    refs = [owner] if owner is not None else []
    return {"kind": kind, "metadata": {"name": name, "namespace": "ns", "ownerReferences": refs,
                                       "labels": {"keep": "me"}}, "spec": {"replicas": 7}}


@pytest.mark.parametrize("kind", ["Deployment", "Service"])
@pytest.mark.parametrize("holder", [{"kind": "SGLangServer", "name": "other", "uid": "uid-other", "controller": True},
                                    None])
async def test_a_child_name_another_owner_holds_is_a_condition_never_a_takeover(
        monkeypatch: pytest.MonkeyPatch, kind: str, holder: dict[str, Any] | None) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    kube.put(_stranger(kind, "a", holder))
    before = kube.get(kind, "ns", "a")
    body = kube.put(server("a"))
    with pytest.raises(kopf.TemporaryError):
        await handlers.reconcile(body=body, meta=body["metadata"], status={}, patch={}, reason="create",
                                 logger=logging.getLogger("test"), memo=_memo(obs))
    assert kube.get(kind, "ns", "a") == before  # not one field written
    assert ("apply", kind, "a", None) not in kube.writes
    degraded = next(c for c in kube.server("a")["status"]["conditions"] if c["type"] == "Degraded")
    named = "is owned by SGLangServer other" if holder else "exists without a controller owner"
    assert degraded["status"] == "True" and degraded["reason"] == CHILD_CONFLICT
    assert f"{kind} ns/a {named}: not taken over" in degraded["message"]
    assert [e[2] for e in kube.events] == [CHILD_CONFLICT]
    assert obs.memory(body).apply_failure_reason == CHILD_CONFLICT

    kube.delete(kind, "ns", "a")  # the holder goes: the next retry applies, and the condition leaves
    await handlers.reconcile(body=kube.server("a"), meta=kube.server("a")["metadata"], status={}, patch={},
                             reason="create", logger=logging.getLogger("test"), memo=_memo(obs))
    owner = children.controller_of(kube.get(kind, "ns", "a"))
    assert owner is not None and owner["uid"] == "uid-a"
    assert obs.memory(body).apply_failure is None


async def _canary_of_x(kube: FakeKube, obs: Observer) -> tuple[dict[str, Any], str]:
    """Server ``x`` (Canary strategy) with a canary of a new spec decided, beside a server named ``x-canary``."""
    obj = server("x")
    obj["spec"].update(replicas=4, strategy={"type": "Canary"})
    body = await _create(kube, obs, obj)
    spec = copy.deepcopy(body["spec"])
    spec["memory"]["maxRunningRequests"] = 8
    updated = kube.update_spec("x", spec)
    return updated, builders.render(parse(updated)).revision


async def test_a_canary_beside_a_server_named_x_canary_touches_none_of_its_objects(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    await _create(kube, obs, server("x-canary"))
    victim = kube.get("Deployment", "ns", "x-canary")
    assert victim is not None
    body, new = await _canary_of_x(kube, obs)

    for replicas in (1, 0):  # placed, then removed (an abort): neither applies nor deletes the victim
        with pytest.raises(ChildConflict) as refused:
            await restore.place_canary(ServerView.of(body), PlaceCanary(
                revision=new, workload="x-canary", canary_replicas=replicas, stable_replicas=4, reason="step"), NOW)
        assert refused.value.holder == "SGLangServer x-canary"
        assert kube.get("Deployment", "ns", "x-canary") == victim
    assert not [w for w in kube.writes if w[2] == "x-canary" and w[0] in ("apply", "delete")][2:]  # its own create

    mem = obs.memory(body)  # the analysis' job: the refusal becomes the condition of the next observation
    await obs._apply(mem, ServerView.of(body), PlaceCanary(revision=new, workload="x-canary", canary_replicas=1,
                                                           stable_replicas=4, reason="step"), NOW)
    assert mem.apply_failure_reason == CHILD_CONFLICT and "SGLangServer x-canary" in (mem.apply_failure or "")
    await obs.observe(ServerView.of(kube.server("x")), NOW)
    degraded = next(c for c in kube.server("x")["status"]["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == CHILD_CONFLICT and "is owned by SGLangServer x-canary" in degraded["message"]
    assert kube.get("Deployment", "ns", "x-canary") == victim
    assert not any(c["reason"] == CHILD_CONFLICT for c in kube.server("x-canary")["status"]["conditions"])


async def test_a_delete_carries_the_uid_it_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The canary's workload read as x's, then deleted and made again by someone else before the delete: the API
    server refuses the delete (its uid precondition), and the new object stays."""
    kube = FakeKube().install()
    owner = kube.put(server("x"))
    mine = kube.put({"kind": "Deployment", "metadata": {"name": "x-canary", "namespace": "ns", "uid": "uid-old",
                                                        "ownerReferences": [{"kind": "SGLangServer", "name": "x",
                                                                             "uid": "uid-x", "controller": True}]}})
    real_get = kube.get_object

    async def read_then_replaced(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        kube.put({**copy.deepcopy(mine), "metadata": {**mine["metadata"], "uid": "uid-new", "ownerReferences": []}})
        return mine

    monkeypatch.setattr(children.kube, "get_object", read_then_replaced)
    with pytest.raises(ConflictError):
        await children.delete_owned("Deployment", "ns", "x-canary", ObjectRef.of(owner))
    monkeypatch.setattr(children.kube, "get_object", real_get)
    assert ("delete", "Deployment", "x-canary", "uid-old") in kube.writes
    left = kube.get("Deployment", "ns", "x-canary")
    assert left is not None and left["metadata"]["uid"] == "uid-new"


async def test_the_ledger_counts_only_what_the_server_owns_and_the_operator_wrote(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    body = await _create(kube, obs, server("a"))
    spec = copy.deepcopy(body["spec"])
    spec["memory"]["maxRunningRequests"] = 3
    planted_rev = builders.render(parse({**body, "spec": spec})).revision

    def planted(owner_uid: str, manager: str) -> dict[str, Any]:
        cr = builders.adopt(controller_revision("a", "ns", planted_rev, 9, spec, "x", "0.5.10", "img"), body)
        cr["metadata"]["ownerReferences"][0]["uid"] = owner_uid
        cr["metadata"]["managedFields"] = [{"manager": manager, "operation": "Update"}]
        return cr

    for owner_uid, manager in (("uid-a", "kubectl-create"), ("uid-other", "sglang-operator")):
        kube.objects.pop(("ControllerRevision", "ns", f"a-{planted_rev}"), None)
        kube.put(planted(owner_uid, manager))
        assert await ledger.load("ns", "a", planted_rev, "uid-a") is None
        with pytest.raises(restore.NotInLedger):
            await restore.render_for(ServerView.of(kube.server("a")), planted_rev)
    kube.objects.pop(("ControllerRevision", "ns", f"a-{planted_rev}"), None)
    kube.put(planted("uid-a", "sglang-operator"))
    assert await ledger.load("ns", "a", planted_rev, "uid-a") is not None  # the operator's own: counted


async def test_a_ledger_entry_rendering_to_another_revision_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ControllerRevision labelled revision R whose ``data`` renders to another one (planted, or its data
    rewritten) is never applied; one that ``status.revisions`` holds with that very spec (an operator upgrade changed
    the render) is applied under its recorded hash."""
    kube = FakeKube().install()
    obs = Observer(1.0)
    body = await _create(kube, obs, server("a"))
    revision = body["status"]["revision"]
    cr = await ledger.load("ns", "a", revision, "uid-a")
    assert cr is not None
    ledger.render_revision(ServerView.of(body), cr)  # its own data: rendered
    forged = copy.deepcopy(cr)
    forged["data"]["spec"]["sglang"]["image"] = "attacker.example/sglang:v0.5.10"
    with pytest.raises(ledger.ForeignRevision, match=f"not {revision}"):
        ledger.render_revision(ServerView.of(body), forged)
    record = body["status"]["revisions"][0]
    assert record["revision"] == revision
    upgraded = {**body, "status": {**body["status"], "revisions": [{**record, "spec": forged["data"]["spec"]}]}}
    # the operator's record vouches for it
    assert ledger.render_revision(ServerView.of(upgraded), forged).revision == revision


# --- only the operator's own pods are targets ------------------------------------------------------------------

async def test_a_labelled_stranger_is_never_scraped_probed_nor_sent_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Server ``a`` (an API key) with its own Ready pod and three that carry its labels: a hand-made one (no
    controller), one naming ``a``'s ReplicaSet with a made-up uid, and one of ``a``'s own ReplicaSet on the host's
    network. Only the own pod is read for ``/server_info``, handed to the sampler (its scrape and probe, with the
    key), counted in status; each stranger is counted once."""
    from prometheus_client import REGISTRY
    from test_secrets_never_shown import SecretKube, _server
    from test_worker import pod

    from sglang_operator.io.sampler import Sampler
    from sglang_operator.io.sglang_http import SGLangHTTP

    kube = SecretKube().install()
    kube.read = []
    seen: list[tuple[str, str | None]] = []

    async def server_info(self: SGLangHTTP, url: str, path: str, api_key: str | None = None) -> dict[str, Any]:
        seen.append((url, api_key))
        return {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3}

    async def sample(self: Sampler, server: Any, pods: Any, params: Any, api_key: str | None = None) -> list[Any]:
        seen.extend((f"sample {t.name} {t.ip}", api_key) for t in pods())  # the targets scraped and probed
        return []

    monkeypatch.setattr(SGLangHTTP, "server_info", server_info)
    monkeypatch.setattr(Sampler, "sample", sample)
    obs = Observer(1.0)
    created = await _create(kube, obs, _server())
    revision = created["status"]["revision"]

    def ready(name: str, ip: str) -> dict[str, Any]:
        p = pod(name, "a", 500 + len(kube.objects), ip)
        p["metadata"]["labels"][builders.REVISION_LABEL] = revision
        p["metadata"]["uid"] = f"uid-pod-{name}"
        return p

    own = kube.owned(ready("a-own", "127.4.0.1"))
    hand_made = ready("stranger", "127.4.0.2")
    forged = kube.owned(ready("forged", "127.4.0.3"))
    forged["metadata"]["ownerReferences"][0]["uid"] = "uid-made-up"
    host = kube.owned(ready("host", "127.4.0.4"))
    host["spec"] = {"hostNetwork": True}
    for p in (own, hand_made, forged, host):
        kube.put(p)

    def ignored(reason: str) -> float:
        return REGISTRY.get_sample_value("sglang_operator_ignored_pods_total", {"reason": reason}) or 0.0

    before = {r: ignored(r) for r in ("noController", "foreignOwner", "hostNetwork")}
    try:
        for _ in range(2):
            mem = obs.memory(kube.server("a"))
            obs.track("MODIFIED", kube.server("a"))
            mem.reads.sampling.last = None  # sampled at every observation
            async with mem.lock:
                await obs.observe(mem.view() or ServerView.of(created), NOW)
    finally:
        await obs.http.aclose()

    assert seen and all("127.4.0.1" in what or "a-own" in what for what, _ in seen), seen
    assert ("http://127.4.0.1:30000", "SECRET-api-key-6f0c1d") in seen
    assert ("sample a-own 127.4.0.1", "SECRET-api-key-6f0c1d") in seen
    status = kube.server("a")["status"]
    assert status["readyReplicas"] == 1, status  # the strangers are not counted as its replicas either
    assert {r: ignored(r) - before[r] for r in before} == {"noController": 1, "foreignOwner": 1, "hostNetwork": 1}


async def test_the_ledger_prunes_only_its_own_entries_each_by_its_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    body = await _create(kube, obs, server("a"))
    first = body["status"]["revision"]
    planted = kube.put({"kind": "ControllerRevision", "metadata": {
        "name": "a-planted", "namespace": "ns", "labels": {builders.REVISION_LABEL: "planted"},
        "ownerReferences": [{"kind": "SGLangServer", "name": "a", "uid": "uid-a", "controller": True}],
        "managedFields": [{"manager": "kubectl-create", "operation": "Update"}]}, "revision": 0})
    spec = copy.deepcopy(body["spec"])
    spec["memory"]["maxRunningRequests"] = 3
    rendered = builders.render(parse({**body, "spec": spec}))
    await ledger.record(ObjectRef.of(body), rendered, spec, history_limit=1, keep=set())
    own = kube.get("ControllerRevision", "ns", f"a-{first}")
    assert own is None  # pruned beyond historyLimit 1 …
    deletes = [w for w in kube.writes if w[0] == "delete" and w[1] == "ControllerRevision"]
    assert deletes == [("delete", "ControllerRevision", f"a-{first}", f"uid-a-{first}")]  # … by its uid
    assert kube.get("ControllerRevision", "ns", "a-planted") == planted  # not the ledger's: neither counted nor pruned
