"""Load for autoscaling on the local cluster: concurrent streams to a Ready pod of an SGLangServer, each sent again as
soon as it ends, until stopped.

    python -m e2e.load qwen36-27b                 # 12 streams of up to 2048 tokens to a Ready pod of
                                                  # default/qwen36-27b, until Ctrl-C (or SIGTERM)
    python -m e2e.load qwen36-27b -n ml --streams 8 --seconds 120

It finds the pod with ``kubectl`` (``$KUBECONFIG``; the local cluster has no Service routing: pods are reached by
their IP) and prints a line every 5 s: streams finished and failed, the server's ``spec.replicas`` (what KEDA's HPA
writes) and its Ready pods. The streams all go to one pod: the autoscaling metrics are the server's total
(``runningRequests``: ``sum(sglang:num_running_reqs)``), so 12 running streams make ⌈12 ÷ 4⌉ = 3 replicas with
``target: 4`` wherever they run. A stream that fails moves to another Ready pod (a pod replaced by a new revision).

:class:`Load` is the same load for the tests (``e2e/tests/test_keda_scaling.py``, ``test_keda_local.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from sglang_operator.io.loadgen import served_model, stream_once

STREAMS = 12
MAX_TOKENS = 2048
"""A stream lasts tens of seconds on the simulator: the streams are nearly always all running (the samples'
``memory.maxRunningRequests`` is 16: 12 streams and the operator's probe run, none queue)."""
PORT = 30000
"""SGLang's port in the pods the operator makes."""


class Load:
    """``streams`` concurrent streams of up to ``max_tokens`` tokens to ``url`` (a Ready pod of the server), each sent
    again as soon as it ends, until :meth:`stop` cancels them (the simulator aborts a request whose client went away).
    ``follow``: the Ready pods' URLs now; after a failed stream its worker moves to one of them (pods replaced by a
    new revision). ``finished`` and ``errors`` count the streams."""

    def __init__(self, url: str, follow: Callable[[], list[str]] | None = None, streams: int = STREAMS,
                 max_tokens: int = MAX_TOKENS) -> None:
        self.url = url
        self.follow = follow
        self.streams, self.max_tokens = streams, max_tokens
        self.finished = self.errors = 0
        self.failure: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Future[Any] | None = None
        self.thread = threading.Thread(target=self._thread, daemon=True)

    def _thread(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # the model not read: the caller sees it (wait_started)
            self.failure = exc

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        limits = httpx.Limits(max_connections=self.streams + 4, max_keepalive_connections=self.streams + 4)
        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
            model = await served_model(client, self.url)

            async def worker(index: int) -> None:
                url = self.url
                while True:
                    res = await stream_once(client, url, model, max_tokens=self.max_tokens)
                    if res.error:
                        self.errors += 1
                        await asyncio.sleep(0.5)
                        urls = await asyncio.to_thread(self.follow) if self.follow is not None else []
                        url = urls[index % len(urls)] if urls else url
                    else:
                        self.finished += 1

            self.task = asyncio.gather(*(worker(i) for i in range(self.streams)))
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def start(self, timeout: float = 30) -> Load:
        """Start the streams; return once they are sent. Raises RuntimeError when the pod's model cannot be read."""
        self.thread.start()
        deadline = time.monotonic() + timeout
        while self.task is None:
            if self.failure is not None or not self.thread.is_alive():
                raise RuntimeError(f"the load did not start: {self.failure!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the load's streams not started after {timeout:.0f} s")
            time.sleep(0.1)
        return self

    def __enter__(self) -> Load:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.loop is not None and self.task is not None and not self.task.done():
            self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(60)


class Server:
    """An SGLangServer read with ``kubectl`` (``kubeconfig``, default ``$KUBECONFIG``)."""

    def __init__(self, name: str, namespace: str, kubectl: str = "kubectl", kubeconfig: str | None = None) -> None:
        self.name, self.namespace = name, namespace
        self.kubectl = [kubectl, *([f"--kubeconfig={kubeconfig}"] if kubeconfig else [])]

    def _get(self, *args: str) -> dict[str, Any] | None:
        proc = subprocess.run([*self.kubectl, "get", *args, "-n", self.namespace, "-o", "json"], capture_output=True,
                              text=True, timeout=30)
        out: dict[str, Any] | None = json.loads(proc.stdout) if proc.returncode == 0 else None
        return out

    def ready_urls(self) -> list[str]:
        """``http://<pod IP>:30000`` of each Ready pod of the server, sorted."""
        pods = self._get("pods", "-l", f"app.kubernetes.io/instance={self.name}") or {"items": []}
        return sorted(f"http://{p['status']['podIP']}:{PORT}" for p in pods["items"]
                      if not p["metadata"].get("deletionTimestamp") and any(
                          c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or []))

    def replicas(self) -> int | None:
        obj = self._get("sglangserver", self.name)
        return None if obj is None else obj["spec"].get("replicas")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m e2e.load", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("server", help="the SGLangServer's name")
    p.add_argument("-n", "--namespace", default="default")
    p.add_argument("--streams", type=int, default=STREAMS, help=f"concurrent streams (default {STREAMS})")
    p.add_argument("--max-tokens", type=int, default=MAX_TOKENS,
                   help=f"max_tokens of each request (default {MAX_TOKENS})")
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (default 0: until Ctrl-C)")
    p.add_argument("--kubectl", default="kubectl", help="the kubectl to run (default: kubectl on PATH)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    if not os.environ.get("KUBECONFIG"):
        print("e2e.load: KUBECONFIG is not set (the export line `python -m e2e.cluster up` printed)", file=sys.stderr)
        return 2
    server = Server(a.server, a.namespace, a.kubectl)
    try:
        deadline = time.monotonic() + 120
        while not (urls := server.ready_urls()):
            if time.monotonic() > deadline:
                print(f"e2e.load: no Ready pod of {a.namespace}/{a.server} after 120 s", file=sys.stderr)
                return 1
            time.sleep(1)
        load = Load(urls[0], server.ready_urls, a.streams, a.max_tokens)
        try:
            load.start()
        except RuntimeError as exc:
            print(f"e2e.load: {exc}", file=sys.stderr)
            return 1
        print(f"# {a.streams} streams of up to {a.max_tokens} tokens to {urls[0]} (a Ready pod of "
              f"{a.namespace}/{a.server}); {'Ctrl-C stops them' if not a.seconds else f'for {a.seconds:.0f} s'}",
              flush=True)
        t0 = time.monotonic()
        try:
            while not a.seconds or time.monotonic() - t0 < a.seconds:
                time.sleep(5)
                print(f"{time.monotonic() - t0:6.0f} s  streams finished {load.finished}, failed {load.errors}; "
                      f"spec.replicas {server.replicas()}, Ready pods {len(server.ready_urls())}", flush=True)
        finally:
            load.stop()
    except KeyboardInterrupt:
        pass
    print("# load stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
