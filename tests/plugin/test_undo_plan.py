"""What ``undo`` writes and how (issue 19 item 4, pure): the revision keys of the spec set to the revision's, policy
and scaling kept unless asked, the client-side apply annotation rewritten in the same write, the server-side apply
manager made the one owner of what it wrote, default values left out as a file that never wrote them. The cluster
test (``e2e/tests/test_undo.py``) applies a file afterwards, both ways."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from sglang_operator.api.crd import model_schema
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.plugin import undo

ROOT = Path(__file__).resolve().parents[2]
GOOD: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
BAD: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-regressed.yaml").read_text())
SCHEMA = model_schema(SGLangServerSpec)
DEFAULTED = {"port": 30000, "replicas": 1, "serviceType": "ClusterIP", "resources": {"shmSize": "16Gi"},
             "parallelism": {"tensor": 2, "data": 1, "pipeline": 1, "nodes": 1}}
"""Some of what the API server's defaulting adds to a stored spec."""


def stored(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    out = {**copy.deepcopy(DEFAULTED), **copy.deepcopy(spec), **extra}
    out["parallelism"] = {**DEFAULTED["parallelism"], **spec.get("parallelism", {})}
    return out


def body(spec: dict[str, Any], *, last_applied: dict[str, Any] | None = None,
         managed: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "qwen36-27b", "namespace": "ns", "resourceVersion": "42",
                            "managedFields": managed or []}
    if last_applied is not None:
        meta["annotations"] = {undo.LAST_APPLIED: json.dumps(last_applied)}
    return {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "metadata": meta, "spec": spec}


def apply_json_patch(doc: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for op in patch:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        if op["op"] == "remove":
            del node[last]
        else:
            node[last] = op["value"]
    return out


def test_the_revision_keys_are_set_and_policy_and_scaling_kept() -> None:
    live = stored(BAD["spec"], replicas=3, rollback={"warmupSeconds": 5, "probe": {"maxTokens": 64}})
    revision = stored(GOOD["spec"], rollback={"warmupSeconds": 120})
    p = undo.plan(body(live), revision, SCHEMA)
    assert p.kept == ("replicas", "rollback") and not {"rollback", "replicas"} & set(p.revision_keys)
    after = apply_json_patch(body(live), p.patch)
    assert after["spec"] == {**revision, "replicas": 3, "rollback": live["rollback"]} == p.spec
    assert p.patch[0] == {"op": "replace", "path": "/metadata/resourceVersion", "value": "42"}  # 409 if it changed
    assert p.field_manager == undo.UNDO_MANAGER and p.last_applied is None and p.applier is None

    asked = undo.plan(body(live), revision, SCHEMA, with_policy=True)
    assert apply_json_patch(body(live), asked.patch)["spec"] == {**revision, "replicas": 3}
    assert undo.plan(body(p.spec), revision, SCHEMA).patch == []  # there already: nothing to write


def test_a_field_the_revision_lacks_is_removed() -> None:
    live = stored(GOOD["spec"])
    revision = stored(BAD["spec"])
    after = apply_json_patch(body(live), undo.plan(body(live), revision, SCHEMA).patch)
    assert "numDraftTokens" not in after["spec"]["speculative"] and "memFractionStatic" not in after["spec"]["memory"]
    assert after["spec"] == revision


def test_the_client_side_annotation_is_rewritten_as_a_file_would_hold_it() -> None:
    """The user applied BAD client-side (the annotation holds that file); undo to GOOD rewrites the annotation to the
    user's file with GOOD's revision keys, default values left out, so a later apply of a file without
    numDraftTokens deletes it (kubectl's three-way merge deletes what the annotation has and the file lacks)."""
    users = {**copy.deepcopy(BAD), "spec": {**copy.deepcopy(BAD["spec"]), "replicas": 2,
                                            "rollback": {"warmupSeconds": 5}}}
    live = stored(users["spec"])
    p = undo.plan(body(live, last_applied=users), stored(GOOD["spec"]), SCHEMA)
    assert p.field_manager == undo.CLIENT_SIDE_MANAGER  # what kubectl apply itself writes with
    annotation = apply_json_patch(body(live, last_applied=users), p.patch)["metadata"]["annotations"][undo.LAST_APPLIED]
    assert json.loads(annotation) == p.last_applied
    want = copy.deepcopy(GOOD["spec"])
    del want["speculative"]["numSteps"], want["speculative"]["eagleTopk"]  # 3 and 1: the defaults
    assert p.last_applied == {**users, "spec": {**want, "replicas": 2, "rollback": {"warmupSeconds": 5}}}


def test_defaults_are_left_out_of_what_a_file_would_hold() -> None:
    spec = {"sglang": {"image": "x:v0.5.10", "imagePullPolicy": "IfNotPresent"}, "port": 30000,
            "parallelism": {"tensor": 1, "data": 1}, "resources": {"shmSize": "16Gi"},
            "speculative": {"algorithm": "NEXTN", "numSteps": 3, "numDraftTokens": 4},
            "rollback": {"warmupSeconds": 120, "probe": {"prompt": "", "maxTokens": 64}}}
    assert undo.prune_defaults(spec, SCHEMA) == {
        "sglang": {"image": "x:v0.5.10"}, "speculative": {"algorithm": "NEXTN", "numDraftTokens": 4},
        "rollback": {"probe": {"maxTokens": 64}}}


def test_the_server_side_manager_is_made_the_one_owner_of_what_undo_wrote() -> None:
    kubectl = {"manager": "kubectl", "operation": "Apply", "apiVersion": "sglang-operator.io/v1alpha1",
               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {
                   "f:speculative": {"f:algorithm": {}, "f:numSteps": {}, "f:eagleTopk": {}, "f:specV2": {}},
                   "f:memory": {"f:mambaSchedulerStrategy": {}}, "f:rollback": {"f:warmupSeconds": {}},
                   "f:sglang": {"f:image": {}}}}}
    patched = {"manager": "kubectl-patch", "operation": "Update", "apiVersion": "sglang-operator.io/v1alpha1",
               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:memory": {"f:memFractionStatic": {}}}}}
    status = {"manager": "sglang-operator", "operation": "Update", "subresource": "status",
              "fieldsV1": {"f:status": {"f:revision": {}}}}
    live = body(stored(BAD["spec"], rollback={"warmupSeconds": 5}), managed=[kubectl, patched, status])
    p = undo.plan(live, stored(GOOD["spec"]), SCHEMA)
    assert p.applier == "kubectl" and p.field_manager == undo.UNDO_MANAGER
    applied = undo.applied_spec(p.spec, p.revision_keys, SCHEMA)
    fields = undo.owned(live, "kubectl", p.revision_keys, applied)
    assert fields is not None
    assert [e["manager"] for e in fields] == ["kubectl", "sglang-operator"]  # kubectl-patch owned only memory
    spec = fields[0]["fieldsV1"]["f:spec"]
    assert spec["f:speculative"] == {"f:algorithm": {}, "f:numDraftTokens": {}, "f:specV2": {}}  # no defaults
    assert spec["f:rollback"] == {"f:warmupSeconds": {}}  # policy: the user's, untouched
    assert spec["f:memory"] == {f"f:{k}": {} for k in GOOD["spec"]["memory"]}
    assert "f:port" not in spec and "f:replicas" not in spec  # defaults: nobody owns them, as after a plain apply
    assert fields[1] == status
    assert undo.owned({**live, "metadata": {**live["metadata"], "managedFields": fields}}, "kubectl",
                      p.revision_keys, applied) is None  # done: nothing more to write
    assert undo.owned(live, "argocd-controller", p.revision_keys, applied) is None


def test_fieldsets_are_the_api_servers_shape() -> None:
    """As the API server records an Apply for this CRD (seen on kube-apiserver 1.36): maps by their fields without
    ``.``, lists atomic, an empty map a leaf."""
    assert undo.fieldset({"env": [{"name": "A"}], "parallelism": {}, "model": {"path": "p"}}) == {
        "f:env": {}, "f:parallelism": {}, "f:model": {"f:path": {}}}
