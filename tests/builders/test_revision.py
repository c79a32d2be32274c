"""The ledger's ControllerRevision builder, digest discovery and image pinning."""

from __future__ import annotations

from sglang_operator.builders.revision import controller_revision, image_digest, ledger_labels, pinned_image


def _pod(image_id: str, name: str = "sglang") -> dict:
    return {"status": {"containerStatuses": [{"name": name, "imageID": image_id}]}}


def test_controller_revision_shape() -> None:
    cr = controller_revision("qwen", "ml", "9699b6738c", 2, {"replicas": 1}, "sglang serve --tp-size 2",
                             "0.5.10", "lmsysorg/sglang:v0.5.10-cu129")
    assert cr["metadata"]["name"] == "qwen-9699b6738c"
    assert cr["metadata"]["labels"]["sglang-operator.io/revision"] == "9699b6738c"
    assert ledger_labels("qwen").items() <= cr["metadata"]["labels"].items()
    assert cr["revision"] == 2
    assert cr["data"] == {"spec": {"replicas": 1}, "command": "sglang serve --tp-size 2",
                          "sglangVersion": "0.5.10", "image": "lmsysorg/sglang:v0.5.10-cu129"}


def test_image_digest_from_pods() -> None:
    ref = "docker.io/lmsysorg/sglang@sha256:" + "a" * 64
    assert image_digest([_pod(ref), _pod("docker-pullable://" + ref)]) == ref
    assert image_digest([_pod(ref), _pod(ref[:-64] + "b" * 64)]) is None  # pods disagree: no single digest
    assert image_digest([_pod("fake://x")]) is None
    assert image_digest([_pod(ref, name="sidecar")]) is None


def test_pinned_image_keeps_tag_and_adds_digest() -> None:
    ref = "docker.io/lmsysorg/sglang@sha256:" + "c" * 64
    assert pinned_image("lmsysorg/sglang:v0.5.10-cu129", ref) == "lmsysorg/sglang:v0.5.10-cu129@sha256:" + "c" * 64
    assert pinned_image("lmsysorg/sglang:v0.5.10-cu129@sha256:" + "d" * 64, ref).endswith("c" * 64)
    assert pinned_image("lmsysorg/sglang:v0.5.10-cu129", None) == "lmsysorg/sglang:v0.5.10-cu129"
