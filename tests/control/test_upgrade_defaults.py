"""Pod template changes of an operator release restart no running server: a server applied by an operator without
them (its pod template rendered as before) is resumed by one with them, and nothing is written; the new template
applies at the next spec change. The pod defaults of issue 16 item 4, and the shorter probe periods of issue 18
item 6 (start-up every 10 s × 180 → 2 s × 900, readiness every 10 s → 5 s)."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from fakekube import FakeKube
from test_worker import server

from sglang_operator import builders
from sglang_operator.api.server import parse
from sglang_operator.builders import workload
from sglang_operator.control import handlers
from sglang_operator.control.observer import Observer


def _memo(obs: Observer) -> Any:
    return type("Memo", (), {"observer": obs})()


async def _reconcile(body: dict[str, Any], reason: str, obs: Observer) -> None:
    await handlers.reconcile(body=body, meta=body["metadata"], status=body.get("status") or {}, patch={},
                             reason=reason, logger=logging.getLogger("test"), memo=_memo(obs))


REAL_POD_TEMPLATE = workload.pod_template


def before_the_defaults(name: str, spec: Any, cmd: Any) -> dict[str, Any]:
    """The pod template before issue 16: no token setting, securityContext or requests."""
    t = REAL_POD_TEMPLATE(name, spec, cmd)
    t["spec"].pop("automountServiceAccountToken")
    c = t["spec"]["containers"][0]
    c.pop("securityContext")
    c["resources"] = {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}
    return t


def before_the_short_probes(name: str, spec: Any, cmd: Any) -> dict[str, Any]:
    """The pod template before issue 18 item 6: start-up probe every 10 s (180 failures), readiness every 10 s."""
    t = REAL_POD_TEMPLATE(name, spec, cmd)
    c = t["spec"]["containers"][0]
    c["startupProbe"].update(periodSeconds=10, failureThreshold=180)
    c["readinessProbe"].update(periodSeconds=10, failureThreshold=3)
    return t


def _old_defaults(c: dict[str, Any]) -> bool:
    return "securityContext" not in c


def _old_probes(c: dict[str, Any]) -> bool:
    return c["startupProbe"]["periodSeconds"] == 10 and c["readinessProbe"]["periodSeconds"] == 10


@pytest.mark.parametrize(("before", "rendered_before"), [(before_the_defaults, _old_defaults),
                                                         (before_the_short_probes, _old_probes)],
                         ids=["pod-defaults", "probe-periods"])
async def test_an_upgrade_to_the_new_pod_template_restarts_nothing(
        monkeypatch: pytest.MonkeyPatch, before: Any, rendered_before: Any) -> None:
    kube = FakeKube().install()
    with monkeypatch.context() as old:
        old.setattr(workload, "pod_template", before)
        body = kube.put(server("a"))
        await _reconcile(body, "create", Observer(1.0))
        old_revision = kube.server("a")["status"]["revision"]
    body = kube.server("a")
    new_revision = builders.render(parse(body)).revision
    assert new_revision != old_revision  # the defaults do change the render
    writes, events = len(kube.writes), len(kube.events)
    await _reconcile(body, "resume", Observer(1.0))  # the upgraded operator starts
    assert kube.writes[writes:] == [] and kube.events[events:] == []
    dep = kube.get("Deployment", "ns", "a")
    assert dep is not None and rendered_before(dep["spec"]["template"]["spec"]["containers"][0])

    spec = copy.deepcopy(body["spec"])  # the next spec change applies the new template, defaults and all
    spec["memory"]["maxRunningRequests"] = 8
    updated = kube.update_spec("a", spec)
    await _reconcile(updated, "update", Observer(1.0))
    dep = kube.get("Deployment", "ns", "a")
    assert dep is not None
    pod = dep["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["containers"][0]["startupProbe"]["periodSeconds"] == workload.STARTUP_PERIOD_SECONDS == 2
    assert not rendered_before(pod["containers"][0])
    assert kube.server("a")["status"]["revision"] == builders.render(parse(updated)).revision
