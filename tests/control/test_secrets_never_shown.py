"""Secrets never displayed (issue 16 item 3): a server with every Secret reference set, created through the
reconcile handler and observed once, offline (tests/control/fakekube.py). The Secret's values (distinctive
strings the fake API hands out) appear in none of the status, the events, the children (the Deployment's
annotations included), the rendered command line, the operator's log records or its /metrics text; the pod's env
references each Secret by name only."""

from __future__ import annotations

import copy
import datetime as dt
import json
import logging
from typing import Any

import pytest
from fakekube import FakeKube
from prometheus_client import REGISTRY, generate_latest
from test_worker import SAMPLE, pod

from sglang_operator import builders
from sglang_operator.api.server import parse
from sglang_operator.api.view import ServerView
from sglang_operator.control import handlers
from sglang_operator.control.observer import Observer
from sglang_operator.io.sampler import Sampler
from sglang_operator.io.sglang_http import SGLangHTTP

SECRETS = {
    ("sglang-key", "api-key"): "SECRET-api-key-6f0c1d",
    ("sglang-admin", "admin-api-key"): "SECRET-admin-key-9b2e4a",
    ("tls-pass", "ssl-keyfile-password"): "SECRET-tls-pass-3d7a8c",
}
REFS = {"apiKeySecretRef": {"name": "sglang-key"}, "adminApiKeySecretRef": {"name": "sglang-admin"},
        "sslKeyfilePasswordSecretRef": {"name": "tls-pass"}}


class SecretKube(FakeKube):
    """A fake API that holds the Secrets and records which keys were read."""

    read: list[tuple[str, str]]

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        self.read.append((name, key))
        return SECRETS.get((name, key))


def _server() -> dict[str, Any]:
    obj = copy.deepcopy(SAMPLE)
    obj["metadata"] = {"name": "a", "namespace": "ns", "uid": "uid-a"}
    obj["spec"].update(copy.deepcopy(REFS))
    obj["spec"]["extraArgs"] = ["--ssl-keyfile", "/tls/key.pem", "--ssl-certfile", "/tls/cert.pem"]
    return obj


def _leaks(text: str) -> list[str]:
    return [v for v in SECRETS.values() if v in text]


async def test_no_secret_value_is_shown_anywhere(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    kube = SecretKube().install()
    kube.read = []
    used: list[str | None] = []

    async def server_info(self: SGLangHTTP, url: str, path: str, api_key: str | None = None) -> dict[str, Any]:
        used.append(f"server_info {api_key}")
        return {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3}

    async def sample(self: Sampler, server: Any, pods: Any, params: Any, api_key: str | None = None) -> list[Any]:
        used.append(f"sample {api_key}")
        return []

    monkeypatch.setattr(SGLangHTTP, "server_info", server_info)
    monkeypatch.setattr(Sampler, "sample", sample)
    obs = Observer(1.0)
    body = kube.put(_server())
    await handlers.reconcile(body=body, meta=body["metadata"], status=body.get("status") or {}, patch={},
                             reason="create", logger=logging.getLogger("test"),
                             memo=type("Memo", (), {"observer": obs})())
    created = kube.server("a")
    revision = created["status"]["revision"]
    ready = pod("a-0", "a", 500)
    ready["metadata"]["labels"][builders.REVISION_LABEL] = revision
    ready["status"]["containerStatuses"] = [{"name": "sglang", "ready": True, "restartCount": 0}]
    kube.put(kube.owned(ready))
    obs.track("MODIFIED", created)
    mem = obs.memory(created)
    try:
        async with mem.lock:
            await obs.observe(mem.view() or ServerView.of(created), dt.datetime.now(dt.UTC))
    finally:
        await obs.http.aclose()

    # the values were in play: read from the Secret for SGLang's API key (and only that one is read)
    assert set(kube.read) == {("sglang-key", "api-key")}
    assert used == ["server_info SECRET-api-key-6f0c1d", "sample SECRET-api-key-6f0c1d"]

    final = kube.server("a")
    dep = kube.get("Deployment", "ns", "a")
    assert dep is not None
    rendered = builders.render(parse(final))
    shown = {
        "status": json.dumps(final.get("status")),
        "events": json.dumps(kube.events),
        "deployment annotations": json.dumps(dep["metadata"].get("annotations")),
        "pod template annotations": json.dumps(dep["spec"]["template"]["metadata"].get("annotations")),
        "children": json.dumps([o for (k, _, _), o in kube.objects.items() if k != "Secret"]),
        "command line": rendered.command.command_line + json.dumps(rendered.command.args),
        "log records": "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records),
        "metrics": generate_latest(REGISTRY).decode(),
    }
    assert {where: _leaks(text) for where, text in shown.items() if _leaks(text)} == {}
    assert kube.events and caplog.records  # there was something to look at
    assert "--admin-api-key '$(SGLANG_ADMIN_API_KEY)'" in final["status"]["command"]

    # the pod's env references each Secret by name; the argv holds only the placeholders
    container = dep["spec"]["template"]["spec"]["containers"][0]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert refs == {"SGLANG_API_KEY": {"name": "sglang-key", "key": "api-key"},
                    "SGLANG_ADMIN_API_KEY": {"name": "sglang-admin", "key": "admin-api-key"},
                    "SGLANG_SSL_KEYFILE_PASSWORD": {"name": "tls-pass", "key": "ssl-keyfile-password"}}
    args = container["args"]
    for flag, var in (("--api-key", "SGLANG_API_KEY"), ("--admin-api-key", "SGLANG_ADMIN_API_KEY"),
                      ("--ssl-keyfile-password", "SGLANG_SSL_KEYFILE_PASSWORD")):
        assert args[args.index(flag) + 1] == f"$({var})"
    obs.series.forget("ns", "a")  # prometheus-client's registry is the process's: leave no series to the next test
