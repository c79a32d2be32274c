"""A revision keeps the image reference it runs or ran (issue 19 item 4): an automatic rollback pins the stable
revision's image to the digest its pods ran; an ``undo`` to that revision (the spec written back to it), a scale or a
policy change, a resume and a child repair keep the pin, so no pod restarts; a return to a revision that ran runs
its recorded digest; a new revision runs its tag."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakekube import FakeKube

from sglang_operator.api.view import ServerView
from sglang_operator.builders.revision import DIGEST_ANNOTATION
from sglang_operator.control import handlers, observer, restore
from sglang_operator.control.observer import Observer

ROOT = Path(__file__).resolve().parents[2]
GOOD: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
BAD: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-regressed.yaml").read_text())
TAG = GOOD["spec"]["sglang"]["image"]
DIGEST = "docker.io/lmsysorg/sglang@sha256:" + "ab" * 32
PINNED = f"{TAG}@sha256:{'ab' * 32}"
LOG = handlers.logging.getLogger("test")


def _memo(obs: Observer) -> Any:
    return type("Memo", (), {"observer": obs})()


async def _reconcile(kube: FakeKube, obs: Observer, reason: str, body: dict[str, Any] | None = None) -> None:
    body = body or kube.server("a")
    await handlers.reconcile(body=body, meta=body["metadata"], status=body.get("status") or {}, patch={},
                             reason=reason, logger=LOG, memo=_memo(obs))


async def _created(kube: FakeKube, obs: Observer) -> str:
    """The SGLangServer ``ns/a`` of GOOD's spec created and reconciled; its revision."""
    kube.put({**copy.deepcopy(GOOD), "metadata": {"name": "a", "namespace": "ns"}})
    await _reconcile(kube, obs, "create")
    return str(kube.server("a")["status"]["revision"])


async def _update(kube: FakeKube, obs: Observer, spec: dict[str, Any]) -> None:
    """``ns/a``'s spec written (the user's edit) and the update reconciled by ``obs``'s operator."""
    kube.update_spec("a", spec)
    await _reconcile(kube, obs, "update")


def _image(kube: FakeKube) -> str:
    dep = kube.get("Deployment", "ns", "a")
    assert dep is not None
    return str(dep["spec"]["template"]["spec"]["containers"][0]["image"])


def _label(kube: FakeKube) -> str:
    dep = kube.get("Deployment", "ns", "a")
    assert dep is not None
    return str(dep["spec"]["template"]["metadata"]["labels"]["sglang-operator.io/revision"])


async def _rolled_back(kube: FakeKube, obs: Observer) -> tuple[str, str]:
    """GOOD created and its digest recorded, BAD applied over it, rejected, and GOOD restored from the ledger (as
    the analysis' Apply does). Returns (good, bad) revisions."""
    good = await _created(kube, obs)
    await kube.set_digest("ns", f"a-{good}", DIGEST)
    await kube.patch_status("ns", "a", None, {"stableRevision": good})
    await _update(kube, obs, copy.deepcopy(BAD["spec"]))
    bad = kube.server("a")["status"]["revision"]
    assert bad != good and _image(kube) == TAG
    body = kube.server("a")
    new = await restore.apply_revision(ServerView.of(body), good, "rolling back", dt.datetime.now(dt.UTC))
    new["rejectedRevisions"] = [{"revision": bad, "reason": "slower", "at": "2026-05-01T00:00:00Z"}]
    await kube.patch_status("ns", "a", None, new)
    assert kube.server("a")["status"]["revision"] == good and _label(kube) == good and _image(kube) == PINNED
    return good, bad


async def test_an_undo_to_the_revision_a_rollback_pinned_keeps_its_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    good, _ = await _rolled_back(kube, obs)
    before = copy.deepcopy(kube.get("Deployment", "ns", "a"))
    await _update(kube, obs, copy.deepcopy(GOOD["spec"]))  # what undo writes: the stable revision's spec
    after = kube.get("Deployment", "ns", "a")
    assert after is not None and before is not None
    assert after["spec"]["template"] == before["spec"]["template"]  # the same pod template: no pod restarts
    assert kube.server("a")["status"]["revision"] == good

    spec = copy.deepcopy(GOOD["spec"])  # a scale, then a policy change, of the restored revision
    spec["replicas"] = 2
    await _update(kube, obs, spec)
    spec["rollback"] = {"warmupSeconds": 30}
    await _update(kube, obs, spec)
    assert _image(kube) == PINNED and _label(kube) == good
    dep = kube.get("Deployment", "ns", "a")
    assert dep is not None and dep["spec"]["replicas"] == 2

    writes = len(kube.writes)  # a new operator process: the resume finds the children as they are
    await _reconcile(kube, Observer(1.0), "resume")
    assert [w for w in kube.writes[writes:] if w[0] == "apply"] == []

    kube.delete("Deployment", "ns", "a")  # deleted behind the operator's back: recreated pinned
    body = kube.server("a")
    await observer.restore_children("ns", "a", body["metadata"]["uid"], "Deployment")
    assert _image(kube) == PINNED and _label(kube) == good


async def test_a_return_to_a_revision_that_ran_runs_its_digest_and_a_new_one_its_tag(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    good = await _created(kube, obs)
    await kube.set_digest("ns", f"a-{good}", DIGEST)
    spec = copy.deepcopy(GOOD["spec"])
    spec["replicas"] = 3  # the running revision's digest is known now, but it runs by tag: a scale keeps the tag
    await _update(kube, obs, spec)
    assert _image(kube) == TAG and _label(kube) == good

    other = copy.deepcopy(spec)
    other["memory"]["maxRunningRequests"] = 8
    await _update(kube, obs, other)
    assert _label(kube) != good and _image(kube) == TAG  # a new revision: its tag

    await _update(kube, obs, spec)  # back to the revision that ran: the bytes that were measured
    assert _label(kube) == good and _image(kube) == PINNED


async def test_a_revision_without_a_recorded_digest_runs_its_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    good = await _created(kube, obs)
    cr = kube.get("ControllerRevision", "ns", f"a-{good}")
    assert cr is not None and DIGEST_ANNOTATION not in (cr["metadata"].get("annotations") or {})
    other = copy.deepcopy(GOOD["spec"])
    other["memory"]["maxRunningRequests"] = 8
    await _update(kube, obs, other)
    await _update(kube, obs, copy.deepcopy(GOOD["spec"]))
    assert _label(kube) == good and _image(kube) == TAG


async def test_a_scale_or_a_policy_change_posts_no_revision_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19 item 7: ``Updated revision …: <command>`` only when the revision changes."""
    kube = FakeKube().install()
    obs = Observer(1.0)
    await _created(kube, obs)
    spec = copy.deepcopy(GOOD["spec"])
    spec["replicas"] = 2
    await _update(kube, obs, spec)
    spec["rollback"] = {"warmupSeconds": 30, "probe": {"maxTokens": 64}}
    await _update(kube, obs, spec)
    dep = kube.get("Deployment", "ns", "a")
    assert dep is not None and dep["spec"]["replicas"] == 2  # applied all the same
    assert [e[2] for e in kube.events] == ["Created"]
    spec["memory"]["maxRunningRequests"] = 8
    await _update(kube, obs, spec)
    assert [e[2] for e in kube.events] == ["Created", "Updated"]
    assert kube.events[-1][3].startswith(f"revision {kube.server('a')['status']['revision']}: ")


async def test_a_policy_change_of_a_rejected_spec_does_not_repeat_its_rejection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install()
    obs = Observer(1.0)
    good, bad = await _rolled_back(kube, obs)
    events = len(kube.events)
    spec = copy.deepcopy(BAD["spec"])
    spec["rollback"] = {"historyLimit": 9}  # still the rejected revision: the stable one keeps running
    await _update(kube, obs, spec)
    spec["replicas"] = 2
    await _update(kube, obs, spec)
    assert kube.events[events:] == [] and _label(kube) == good
    dep = kube.get("Deployment", "ns", "a")
    assert dep is not None and dep["spec"]["replicas"] == 2
    spec["replicas"] = 3  # a new operator process has not said it yet: it says it once
    await _update(kube, Observer(1.0), spec)
    assert [e[2] for e in kube.events[events:]] == ["RevisionRejected"] and bad in kube.events[-1][3]
