"""An in-memory Kubernetes API for the control layer's offline tests: an implementation of
:class:`sglang_operator.io.api.KubeAPI` (the calls of :mod:`sglang_operator.io.kube`,
:mod:`sglang_operator.io.kube_write` and :mod:`sglang_operator.io.revisions`), handed in with
:meth:`FakeKube.install`, over objects with
resourceVersions, a 409 for a stale precondition, JSON merge patches of status, and recorded events and writes."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from e2e.merge_patch import merge_patch as merge_patch
from sglang_operator.io import api, owners
from sglang_operator.io.kube import FIELD_MANAGER

Obj = dict[str, Any]
SSA_ONE_MANAGER = ("ScaledObject",)
"""Kinds whose every field the operator's field manager alone owns: a server-side apply replaces them (a field left
out of the manifest, e.g. a lifted pause annotation, is removed), as the API server does for one manager."""


class ConflictError(Exception):
    """The fake API server's 409 Conflict (a delete whose uid precondition is another object's)."""


@dataclass
class FakeKube:
    """Objects by (kind, namespace, name); ``writes`` lists every write as (verb, kind, name, resourceVersion sent)."""

    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    events: list[tuple[str, str, str, str]] = field(default_factory=list)
    writes: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    rv: int = 100
    refuse_next_status: int = 0
    crds_absent: set[str] = field(default_factory=set)
    """CRD names :meth:`crd_served` answers False for (an API not installed)."""
    """Answer this many more status patches with 409 whatever their precondition (another writer got there)."""

    def _bump(self, obj: Obj) -> Obj:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return obj

    def put(self, obj: Obj) -> Obj:
        """Store ``obj`` as the API server would (a new resourceVersion; generation 1 for a new SGLangServer)."""
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "ns")
        meta.setdefault("uid", f"uid-{meta['name']}")
        if obj.get("kind") == "SGLangServer":
            meta.setdefault("generation", 1)
        key = (str(obj.get("kind")), str(meta["namespace"]), str(meta["name"]))
        self.objects[key] = self._bump(copy.deepcopy(obj))
        return copy.deepcopy(self.objects[key])

    def get(self, kind: str, ns: str, name: str) -> Obj | None:
        obj = self.objects.get((kind, ns, name))
        return copy.deepcopy(obj) if obj is not None else None

    def server(self, name: str, ns: str = "ns") -> Obj:
        got = self.get("SGLangServer", ns, name)
        assert got is not None, name
        return got

    def update_spec(self, name: str, spec: Obj, ns: str = "ns") -> Obj:
        """The user's update: a new spec, generation + 1."""
        obj = self.objects[("SGLangServer", ns, name)]
        obj["spec"] = copy.deepcopy(spec)
        obj["metadata"]["generation"] = int(obj["metadata"].get("generation") or 1) + 1
        self._bump(obj)
        return copy.deepcopy(obj)

    def owned(self, pod: Obj, workload: str | None = None) -> Obj:
        """``pod`` (a dict, changed and returned) made a pod of the stored Deployment ``workload`` (default: the pod's
        ``app.kubernetes.io/instance``) as its controller makes them: a ReplicaSet owned by that Deployment (stored
        here), the pod owned by the ReplicaSet."""
        meta = pod["metadata"]
        ns = str(meta.get("namespace") or "ns")
        name = workload or str(meta["labels"]["app.kubernetes.io/instance"])
        dep = self.objects[("Deployment", ns, name)]
        rs = {"kind": "ReplicaSet", "metadata": {"name": f"{name}-5d4f8", "namespace": ns, "uid": f"uid-rs-{name}",
                                                 "ownerReferences": [{"kind": "Deployment", "name": name,
                                                                      "uid": dep["metadata"]["uid"],
                                                                      "controller": True}]}}
        if self.get("ReplicaSet", ns, rs["metadata"]["name"]) is None:
            self.put(rs)
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": rs["metadata"]["name"],
                                    "uid": rs["metadata"]["uid"], "controller": True}]
        return pod

    def delete(self, kind: str, ns: str, name: str) -> None:
        self.objects.pop((kind, ns, name), None)

    # --- sglang_operator.io.kube ---------------------------------------------------------------------------

    async def apply(self, manifest: Mapping[str, Any], dry_run: bool = False) -> None:
        meta = manifest["metadata"]
        key = (str(manifest["kind"]), str(meta.get("namespace") or "ns"), str(meta["name"]))
        self.writes.append(("apply", key[0], key[2], None))
        live = self.objects.get(key) or {}
        if key[0] in SSA_ONE_MANAGER:  # the operator's fields only: what it left out of the manifest is removed
            merged = copy.deepcopy(dict(manifest))
            merged["metadata"]["uid"] = (live.get("metadata") or {}).get("uid") or f"uid-{key[0].lower()}-{key[2]}"
        else:
            merged = merge_patch(live, manifest)
            merged["metadata"].setdefault("uid", f"uid-{key[0].lower()}-{key[2]}")  # the API server's, at creation
        self.objects[key] = self._bump(merged)

    async def patch_replicas(self, kind: str, namespace: str, name: str, replicas: int) -> None:
        key = (kind, namespace, name)
        self.writes.append(("patch_replicas", kind, name, None))
        obj = self.objects[key]  # a KeyError for an absent object, as the API server's 404
        obj.setdefault("spec", {})["replicas"] = replicas
        self._bump(obj)

    async def delete_object(self, kind: str, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete; with ``uid``, only that object (``preconditions.uid``): another one answers 409, as the API
        server does (raised as ``ConflictError``)."""
        self.writes.append(("delete", kind, name, uid))
        live = self.objects.get((kind, namespace, name))
        if live is not None and uid is not None and live["metadata"].get("uid") != uid:
            raise ConflictError(f"Precondition failed: UID in precondition: {uid}, "
                                f"UID in object meta: {live['metadata'].get('uid')}")
        return self.objects.pop((kind, namespace, name), None) is not None

    async def get_object(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self.get(kind, namespace, name)

    async def get_sglangserver(self, namespace: str, name: str) -> Obj | None:
        return self.get("SGLangServer", namespace, name)

    async def patch_status(self, namespace: str, name: str, resource_version: str | None,
                           status: Mapping[str, Any]) -> Obj | None:
        if self.refuse_next_status > 0 and ("SGLangServer", namespace, name) in self.objects:
            self.writes.append(("patch_status", "SGLangServer", name, resource_version))
            self.refuse_next_status -= 1
            return None
        return self._patch_status("patch_status", "SGLangServer", namespace, name, resource_version, status)

    def _patch_status(self, verb: str, kind: str, namespace: str, name: str, resource_version: str | None,
                      status: Mapping[str, Any]) -> Obj | None:
        """Merge-patch the status of ``kind`` ``namespace/name`` (None: gone, or ``resource_version`` stale)."""
        self.writes.append((verb, kind, name, resource_version))
        obj = self.objects.get((kind, namespace, name))
        if obj is None or (resource_version is not None and resource_version != obj["metadata"]["resourceVersion"]):
            return None
        obj["status"] = merge_patch(obj.get("status") or {}, dict(status))
        self._bump(obj)
        return copy.deepcopy(obj)

    async def get_sglangtuning(self, namespace: str, name: str) -> Obj | None:
        return self.get("SGLangTuning", namespace, name)

    async def patch_tuning_status(self, namespace: str, name: str, resource_version: str | None,
                                  status: Mapping[str, Any]) -> Obj | None:
        return self._patch_status("patch_tuning_status", "SGLangTuning", namespace, name, resource_version, status)

    async def post_event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((str(obj["metadata"]["name"]), type_, reason, message))

    async def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        return [copy.deepcopy(o) for (k, ns, _), o in self.objects.items() if k == "Pod" and ns == namespace
                and all((o["metadata"].get("labels") or {}).get(a) == b for a, b in labels.items())]

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        return None

    async def crd_served(self, name: str, version: str) -> bool:
        return name not in self.crds_absent

    async def sglangserver_keys(self, namespaces: Any) -> dict[tuple[str, str], str]:
        return {(ns, n): str(o["metadata"]["uid"]) for (k, ns, n), o in self.objects.items() if k == "SGLangServer"}

    async def sglangtunings(self, namespaces: Any) -> list[Obj]:
        return [copy.deepcopy(o) for (k, _, _), o in self.objects.items() if k == "SGLangTuning"]

    # --- sglang_operator.io.revisions ----------------------------------------------------------------------

    async def list_revisions(self, namespace: str, server: str) -> list[Obj]:
        return [copy.deepcopy(o) for (k, ns, n), o in self.objects.items()
                if k == "ControllerRevision" and ns == namespace and n.startswith(f"{server}-")]

    async def create_revision(self, manifest: Mapping[str, Any]) -> bool:
        meta = manifest["metadata"]
        key = ("ControllerRevision", str(meta["namespace"]), str(meta["name"]))
        self.writes.append(("create", key[0], key[2], None))
        if key in self.objects:
            return False
        created = copy.deepcopy(dict(manifest))
        created["metadata"].setdefault("uid", f"uid-{key[2]}")
        created["metadata"]["managedFields"] = [{"manager": FIELD_MANAGER, "operation": "Update"}]
        self.objects[key] = self._bump(created)
        return True

    async def set_digest(self, namespace: str, name: str, digest_ref: str) -> None:
        obj = self.objects[("ControllerRevision", namespace, name)]
        obj["metadata"].setdefault("annotations", {})["sglang-operator.io/image-digest"] = digest_ref

    async def set_number(self, namespace: str, name: str, number: int) -> None:
        self.objects[("ControllerRevision", namespace, name)]["revision"] = number

    async def delete_revision(self, namespace: str, name: str, uid: str | None = None) -> None:
        live = self.objects.get(("ControllerRevision", namespace, name))
        self.writes.append(("delete", "ControllerRevision", name, uid))
        if live is not None and uid is not None and live["metadata"].get("uid") != uid:
            raise ConflictError(f"Precondition failed: UID in precondition: {uid}")
        self.objects.pop(("ControllerRevision", namespace, name), None)

    async def pod_monitors_wanted(self) -> bool:
        """No PodMonitor API in the fake cluster."""
        return False

    def install(self) -> FakeKube:
        """Hand this fake API to the operator's io layer for the current asyncio context
        (:func:`sglang_operator.io.api.using`; no module attribute is replaced): the test's task and every task it
        starts call it. The binding ends with the test (``tests/control/conftest.py`` resets it)."""
        api.bind(self)
        owners.OWNERS.forget()  # what an earlier test's objects were: read again from this one's
        return self
