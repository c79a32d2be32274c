"""``--pod-monitors auto|always|never``: discovery once, re-checks while absent, and what ``apply_children`` applies
(the Kubernetes client replaced by a recorder; the real API server path is in e2e/tests/test_prometheus.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from apiprobe import Probe
from typer.testing import CliRunner

from sglang_operator import builders
from sglang_operator.api.server import parse
from sglang_operator.api.view import ObjectRef
from sglang_operator.control import children
from sglang_operator.io.discovery import RECHECK_SECONDS, PodMonitorMode, PodMonitors, parse_labels

ROOT = Path(__file__).resolve().parents[2]
OWNER = {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
         "metadata": {"name": "qwen36-27b", "namespace": "team-a", "uid": "u-1"}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_auto_discovers_once_while_present() -> None:
    probe = Probe([True])
    pm = PodMonitors(PodMonitorMode.AUTO, probe=probe, clock=Clock())
    assert [await pm.wanted() for _ in range(5)] == [True] * 5
    assert probe.calls == 1


async def test_auto_rechecks_while_absent() -> None:
    probe, clock = Probe([False, False, True]), Clock()
    pm = PodMonitors(PodMonitorMode.AUTO, probe=probe, clock=clock)
    assert await pm.wanted() is False
    clock.now += RECHECK_SECONDS / 2
    assert await pm.wanted() is False and probe.calls == 1  # not yet re-checked
    clock.now += RECHECK_SECONDS
    assert await pm.wanted() is False and probe.calls == 2
    clock.now += RECHECK_SECONDS
    assert await pm.wanted() is True and probe.calls == 3  # CRDs installed later are picked up


async def test_a_failed_discovery_counts_as_absent(caplog: pytest.LogCaptureFixture) -> None:
    pm = PodMonitors(PodMonitorMode.AUTO, probe=Probe([RuntimeError("403 forbidden"), True]), clock=Clock())
    assert await pm.wanted() is False
    assert "403 forbidden" in caplog.text


async def test_always_and_never_do_not_ask() -> None:
    probe = Probe([RuntimeError("must not be called")])
    assert await PodMonitors(PodMonitorMode.ALWAYS, probe=probe).wanted() is True
    assert await PodMonitors(PodMonitorMode.NEVER, probe=probe).wanted() is False
    assert probe.calls == 0


def test_bad_flags_are_refused_with_their_name() -> None:
    with pytest.raises(ValueError, match="--pod-monitors must be one of auto, always, never"):
        PodMonitorMode("sometimes")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_labels(["release"])
    assert parse_labels(["release=prom", "team = a"]) == {"release": "prom", "team": "a"}
    from sglang_operator.entry.cli import app

    result = CliRunner().invoke(app, ["run", "--pod-monitors", "sometimes"])
    assert result.exit_code == 2 and "--pod-monitors must be one of" in result.output


class FakeApiError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"HTTP {code}")
        self.status = type("S", (), {"code": code, "message": f"HTTP {code}"})()


class Recorder:
    """Stands in for ``kube.apply``: records manifests; a PodMonitor answers ``fail`` (an HTTP code) when set."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail: int | None = None

    async def __call__(self, manifest: dict[str, Any], dry_run: bool = False) -> None:
        self.calls.append(manifest)
        if manifest["kind"] == "PodMonitor" and self.fail:
            raise FakeApiError(self.fail)


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    import lightkube

    recorder = Recorder()
    monkeypatch.setattr(lightkube, "ApiError", FakeApiError)
    monkeypatch.setattr(children.kube_write, "apply", recorder)

    async def absent(kind: str, namespace: str, name: str) -> None:  # no child exists yet: each is the owner's to make
        return None

    monkeypatch.setattr(children.kube, "get_object", absent)
    return recorder


def rendered() -> builders.Rendered:
    body = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    body["metadata"]["namespace"] = "team-a"
    return builders.render(parse(body))


@pytest.mark.parametrize(("mode", "present", "kinds"), [
    (PodMonitorMode.AUTO, True, ["Deployment", "Service", "PodMonitor"]),
    (PodMonitorMode.AUTO, False, ["Deployment", "Service"]),
    (PodMonitorMode.NEVER, True, ["Deployment", "Service"]),
    (PodMonitorMode.ALWAYS, False, ["Deployment", "Service", "PodMonitor"]),
])
async def test_apply_children_follows_the_mode(monkeypatch: pytest.MonkeyPatch, applied: Recorder,
                                               mode: PodMonitorMode, present: bool, kinds: list[str]) -> None:
    pm = PodMonitors(mode, {"release": "prom"}, probe=Probe([present]))
    monkeypatch.setattr(children, "POD_MONITORS", pm)
    await children.apply_children(rendered(), ObjectRef.of(OWNER))
    got = applied.calls
    assert [m["kind"] for m in got] == kinds
    if "PodMonitor" in kinds:
        monitor = got[-1]
        assert monitor["metadata"]["ownerReferences"][0]["uid"] == "u-1"
        assert monitor["metadata"]["labels"]["release"] == "prom"
        assert monitor["metadata"]["namespace"] == "team-a"


async def test_a_vanished_crd_is_forgotten_in_auto_and_raised_in_always(
        monkeypatch: pytest.MonkeyPatch, applied: Recorder) -> None:
    applied.fail = 404
    auto = PodMonitors(PodMonitorMode.AUTO, probe=Probe([True, False]))
    monkeypatch.setattr(children, "POD_MONITORS", auto)
    await children.apply_children(rendered(), ObjectRef.of(OWNER))  # no error: skipped
    assert await auto.wanted() is False  # discovered again: gone
    monkeypatch.setattr(children, "POD_MONITORS", PodMonitors(PodMonitorMode.ALWAYS))
    with pytest.raises(children.ChildApplyError, match="PodMonitor") as err:
        await children.apply_children(rendered(), ObjectRef.of(OWNER))
    assert isinstance(err.value.__cause__, FakeApiError) and err.value.__cause__.status.code == 404
    applied.fail = 403
    monkeypatch.setattr(children, "POD_MONITORS", PodMonitors(PodMonitorMode.AUTO, probe=Probe([True])))
    with pytest.raises(children.ChildApplyError, match="PodMonitor") as err:
        await children.apply_children(rendered(), ObjectRef.of(OWNER))
    assert err.value.__cause__.status.code == 403  # type: ignore[union-attr]
