"""kopf settings of ``sglang_operator.entry.runner.configure`` (issue 10: keeping up at 20 SGLangServers/s)."""

from __future__ import annotations

import warnings

import kopf

from sglang_operator.entry import runner


def test_configure_uses_no_deprecated_kopf_setting() -> None:
    """``settings.batching`` is a deprecated alias and ``batch_window`` does nothing in this kopf: each warns."""
    settings = kopf.OperatorSettings()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        runner.configure(settings)


def test_worker_slots_outnumber_the_servers_created_within_a_worker_lifetime() -> None:
    """A per-object worker holds its slot until ``idle_timeout`` after the object's last event; a server created
    gets events for about one observer interval (5 s) plus that idling. At 20 creations/s the slots must cover
    them all, or creations queue without bound (bench/operator_apply.py: 64 slots with 5 s idling gave p99 55 s)."""
    settings = kopf.OperatorSettings()
    runner.configure(settings)
    limit = settings.queueing.worker_limit
    busy_seconds = 5.0 + settings.queueing.idle_timeout
    assert limit is None or limit >= 20 * busy_seconds * 4, (limit, settings.queueing.idle_timeout)


def _body() -> dict[str, object]:
    return {
        "apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
        "metadata": {
            "name": "qwen", "namespace": "team", "uid": "u-1", "resourceVersion": "42", "generation": 3,
            "labels": {"team": "inference"},
            "annotations": {
                "sglang-operator.io/last-handled-configuration": '{"spec": {}}',
                "sglang-operator.io/reconcile": '{"started": "2026-12-01T00:00:00Z"}',
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "sglang-operator.io/promote": "abc123",
                "example.com/owner": "ml-platform",
            },
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
        },
        "spec": {"model": {"path": "Qwen/Qwen3.6-27B"}, "replicas": 1, "speculative": {"numSteps": 3}},
        "status": {"revision": "20f53399f4", "revisions": [{"revision": "20f53399f4", "commandLine": "x" * 2000}]},
    }


def test_the_lean_diff_base_builds_kopf_s_own_essence() -> None:
    """The same essence as kopf's own storage (which deep-copies status and managedFields first): the same spec,
    labels and annotations kept, kopf's own and kubectl's last-applied dropped, for no extra fields and for
    ``spec``, the field of the update handler."""
    kwargs = {"prefix": "sglang-operator.io", "key": "last-handled-configuration"}
    lean, full = runner.LeanDiffBaseStorage(**kwargs), kopf.AnnotationsDiffBaseStorage(**kwargs)
    body = kopf.Body(_body())
    for extra in (None, [("spec",)], ["spec.replicas"]):
        essence = lean.build(body=body, extra_fields=extra)
        assert essence == full.build(body=body, extra_fields=extra)
        assert "status" not in essence and "managedFields" not in essence.get("metadata", {})
        assert essence["spec"]["replicas"] == 1 and essence["metadata"]["labels"] == {"team": "inference"}


def test_the_lean_diff_base_keeps_extra_fields_outside_the_essence() -> None:
    """A handler watching a status or metadata field (none does today) gets kopf's full build, not a cut body."""
    kwargs = {"prefix": "sglang-operator.io", "key": "last-handled-configuration"}
    lean, full = runner.LeanDiffBaseStorage(**kwargs), kopf.AnnotationsDiffBaseStorage(**kwargs)
    body = kopf.Body(_body())
    for extra in (["status.revision"], [("metadata", "generation")]):
        essence = lean.build(body=body, extra_fields=extra)
        assert essence == full.build(body=body, extra_fields=extra)
    assert lean.build(body=body, extra_fields=["status.revision"])["status"] == {"revision": "20f53399f4"}
