"""Whose pod is it (:mod:`sglang_operator.decisions.owners`): only a pod whose controller chain reaches the
server's (or the tuning's) own workload by uid is a target; every legitimate chain the operator's workloads make
is accepted, every stranger refused with its reason."""

from __future__ import annotations

from typing import Any

from sglang_operator.decisions.owners import UNKNOWN, Need, Ref, Refused, verdict


def obj(kind: str, name: str, uid: str, owner: tuple[str, str, str] | None, **spec: Any) -> dict[str, Any]:
    refs = [{"kind": owner[0], "name": owner[1], "uid": owner[2], "controller": True}] if owner else []
    return {"kind": kind, "metadata": {"name": name, "uid": uid, "ownerReferences": refs}, "spec": spec}


SERVER = ("SGLangServer", "a", "uid-a")
DEP = obj("Deployment", "a", "uid-dep", SERVER)
RS = obj("ReplicaSet", "a-5d4f8", "uid-rs", ("Deployment", "a", "uid-dep"))
LWS = obj("LeaderWorkerSet", "a", "uid-lws", SERVER)
LEADER_STS = obj("StatefulSet", "a", "uid-sts", ("LeaderWorkerSet", "a", "uid-lws"))
LEADER = obj("Pod", "a-0", "uid-leader", ("StatefulSet", "a", "uid-sts"))
WORKER_STS = obj("StatefulSet", "a-0", "uid-wsts", ("Pod", "a-0", "uid-leader"))
WORLD = [DEP, RS, LWS, LEADER_STS, LEADER, WORKER_STS]


def lookup(objects: list[dict[str, Any]]) -> Any:
    by_uid = {o["metadata"]["uid"]: o for o in objects}

    def owner_of(ref: Ref) -> Ref | None:
        o = by_uid.get(ref.uid)
        if o is None or o["kind"] != ref.kind or o["metadata"]["name"] != ref.name:
            return UNKNOWN if ref.kind in ("ReplicaSet", "StatefulSet", "Deployment", "LeaderWorkerSet") else None
        refs = o["metadata"]["ownerReferences"]
        return Ref(refs[0]["kind"], refs[0]["name"], refs[0]["uid"]) if refs else None

    return owner_of


def test_every_chain_the_operators_workloads_make_is_a_target() -> None:
    owner_of = lookup(WORLD)
    assert verdict(obj("Pod", "a-5d4f8-x", "p1", ("ReplicaSet", "a-5d4f8", "uid-rs")), {"uid-a"}, owner_of) is None
    assert verdict(LEADER, {"uid-a"}, owner_of) is None  # Pod → StatefulSet → LeaderWorkerSet → server
    worker = obj("Pod", "a-0-1", "p2", ("StatefulSet", "a-0", "uid-wsts"))
    assert verdict(worker, {"uid-a"}, owner_of) is None  # … → StatefulSet → leader Pod → StatefulSet → LWS → server
    trial_dep = obj("Deployment", "t-trial-1", "uid-tdep", ("SGLangTuning", "t", "uid-t"))
    trial_rs = obj("ReplicaSet", "t-trial-1-9", "uid-trs", ("Deployment", "t-trial-1", "uid-tdep"))
    trial_pod = obj("Pod", "t-trial-1-9-x", "p3", ("ReplicaSet", "t-trial-1-9", "uid-trs"))
    assert verdict(trial_pod, {"uid-t"}, lookup([*WORLD, trial_dep, trial_rs])) is None  # the tuning's trial
    assert verdict(trial_pod, {"uid-a"}, lookup([*WORLD, trial_dep, trial_rs])) is Refused.FOREIGN_OWNER


def test_strangers_are_refused_with_their_reason() -> None:
    owner_of = lookup(WORLD)
    assert verdict(obj("Pod", "hand-made", "p", None), {"uid-a"}, owner_of) is Refused.NO_CONTROLLER
    owned = obj("Pod", "x", "p", ("ReplicaSet", "a-5d4f8", "uid-rs"), hostNetwork=True)
    assert verdict(owned, {"uid-a"}, owner_of) is Refused.HOST_NETWORK  # even the operator's own
    # straight under the server, skipping the workload (a pod naming the server as its controller)
    assert verdict(obj("Pod", "x", "p", SERVER), {"uid-a"}, owner_of) is Refused.FOREIGN_OWNER
    # a ReplicaSet of another server's Deployment; a Job's pod; a made-up ReplicaSet uid
    other = obj("Deployment", "b", "uid-bdep", ("SGLangServer", "b", "uid-b"))
    brs = obj("ReplicaSet", "b-1", "uid-brs", ("Deployment", "b", "uid-bdep"))
    assert verdict(obj("Pod", "x", "p", ("ReplicaSet", "b-1", "uid-brs")), {"uid-a"},
                   lookup([*WORLD, other, brs])) is Refused.FOREIGN_OWNER
    assert verdict(obj("Pod", "x", "p", ("Job", "j", "uid-j")), {"uid-a"}, owner_of) is Refused.FOREIGN_OWNER
    made_up = obj("Pod", "x", "p", ("ReplicaSet", "a-5d4f8", "uid-forged"))
    assert verdict(made_up, {"uid-a"}, owner_of) == Need(Ref("ReplicaSet", "a-5d4f8", "uid-forged"))
    assert verdict(made_up, {"uid-a"}, lambda ref: None) is Refused.FOREIGN_OWNER  # read: another uid
    loop = obj("Pod", "x", "p", ("StatefulSet", "s", "uid-s"))  # a cycle ends at the depth limit
    assert verdict(loop, {"uid-a"}, lambda ref: Ref("StatefulSet", "s", "uid-s")) is Refused.FOREIGN_OWNER
