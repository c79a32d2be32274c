"""The pod defaults of issue 16 item 4 restart no running server: a server applied by an operator without them
(its pod template rendered as before) is resumed by one with them, and nothing is written; the new template
applies at the next spec change."""

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


async def test_an_upgrade_to_the_new_pod_defaults_restarts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube().install(monkeypatch)
    real = workload.pod_template

    def before_the_defaults(name: str, spec: Any, cmd: Any) -> dict[str, Any]:
        """The pod template of the previous operator release: no token setting, securityContext or requests."""
        t = real(name, spec, cmd)
        t["spec"].pop("automountServiceAccountToken")
        c = t["spec"]["containers"][0]
        c.pop("securityContext")
        c["resources"] = {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}
        return t

    with monkeypatch.context() as old:
        old.setattr(workload, "pod_template", before_the_defaults)
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
    assert dep is not None and "securityContext" not in dep["spec"]["template"]["spec"]["containers"][0]

    spec = copy.deepcopy(body["spec"])  # the next spec change applies the new template, defaults and all
    spec["memory"]["maxRunningRequests"] = 8
    updated = kube.update_spec("a", spec)
    await _reconcile(updated, "update", Observer(1.0))
    dep = kube.get("Deployment", "ns", "a")
    assert dep is not None
    pod = dep["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert kube.server("a")["status"]["revision"] == builders.render(parse(updated)).revision
