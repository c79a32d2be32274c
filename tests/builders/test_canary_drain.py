"""Issue 18: ``spec.strategy.drainSeconds`` applies whenever a canary or stable pod is removed (CEL and Python accept
it with Canary; RollingUpdate stays refused), through the pods' ``preStop`` drain hook (builders/drain.py): rendered
only for Canary with drainSeconds, so no other revision changes; the hook itself waits until ``/metrics`` shows no
running request, at most drainSeconds."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from e2e.tests.test_invalid_specs import python_errors
from sglang_operator.api import parse
from sglang_operator.api.spec import UpdateStrategy
from sglang_operator.builders import drain, render


def server(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "metadata": {"name": "s"},
            "spec": {"sglang": {"image": "lmsysorg/sglang:v0.5.10-cu129"}, "model": {"path": "Qwen/Qwen3.6-27B"},
                     "parallelism": {"tensor": 2}, **spec}}


def container(obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = render(parse(obj)).deployment["spec"]["template"]["spec"]["containers"][0]
    return out


def test_drain_seconds_is_accepted_with_canary_and_refused_with_rolling_update() -> None:
    assert python_errors(server(replicas=4, strategy={"type": "Canary", "drainSeconds": 30})) == []
    refused = python_errors(server(replicas=4, strategy={"type": "RollingUpdate", "drainSeconds": 30}))
    assert any("draining applies to Recreate and Canary" in e for e in refused), refused
    rule = next(r for r in UpdateStrategy.cel_rules if r.name == "drain-recreate-or-canary")
    assert "self.type == 'Canary'" in rule.rule


def test_the_hook_is_rendered_for_canary_with_drain_seconds_only() -> None:
    hooked = server(replicas=4, strategy={"type": "Canary", "drainSeconds": 120})
    c = container(hooked)
    command = c["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "python3" and command[3:] == ["120", "http://127.0.0.1:30000/metrics",
                                                      "sglang:num_running_reqs"]
    pod = render(parse(hooked)).deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 150  # the drain, then 30 s to stop on SIGTERM
    short = render(parse(server(replicas=4, strategy={"type": "Canary", "drainSeconds": 10}))).deployment
    assert short["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60  # never below the default
    plain = [server(replicas=4, strategy={"type": "Canary"}), server(strategy={"drainSeconds": 60}), server()]
    for obj in plain:  # Recreate drains from the operator; no drain: no hook
        assert "lifecycle" not in container(obj)
        assert render(parse(obj)).deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60
    # the revisions of every server without the hook are unchanged by it (the strategy stays out of the hash) ...
    assert len({render(parse(o)).revision for o in plain[1:]}) == 1
    # ... and with it the pods differ (a hook), so setting drainSeconds on a Canary server is a new revision
    assert render(parse(hooked)).revision != render(parse(plain[0])).revision


class _Metrics(BaseHTTPRequestHandler):
    running: ClassVar[list[float]] = [3.0]

    def do_GET(self) -> None:
        body = ("# HELP sglang:num_running_reqs x\n# TYPE sglang:num_running_reqs gauge\n"
                f'sglang:num_running_reqs{{model_name="m"}} {self.running[0]}\n'
                'sglang:num_running_reqs_total{model_name="m"} 99\n').encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def metrics() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    finally:
        srv.shutdown()


def _run_hook(seconds: int, url: str) -> float:
    spec = parse(server(replicas=4, strategy={"type": "Canary", "drainSeconds": seconds})).spec
    hook = drain.pre_stop(spec)
    assert hook is not None
    command = [sys.executable, *hook["preStop"]["exec"]["command"][1:3], str(seconds), url, drain.RUNNING_REQUESTS]
    started = time.monotonic()
    subprocess.run(command, check=True, timeout=seconds + 10)
    return time.monotonic() - started


def test_the_hook_waits_for_the_running_requests_then_ends(metrics: str) -> None:
    _Metrics.running[0] = 3.0
    threading.Timer(1.5, lambda: _Metrics.running.__setitem__(0, 0.0)).start()
    waited = _run_hook(30, metrics)
    assert 1.4 < waited < 5, waited  # until the requests ended, not the 30 s
    _Metrics.running[0] = 2.0
    waited = _run_hook(2, metrics)  # requests that never end: at most drainSeconds
    assert 1.9 < waited < 5, waited
    assert _run_hook(30, "http://127.0.0.1:1/metrics") < 3  # an unreadable server counts as idle
