"""Benchmark: the CPU time of one observation of an unchanged SGLangServer (issue 10's harness, issue 15's
goal ≤ 0.27 ms), without a cluster.

The observer's real ``observe`` runs over ``--count`` servers (the known-good sample, ``replicas: 0``: no pod, so
no scrape: the figure is the control loop's own) against an in-memory API (status patches answered like the API
server's, every other call a no-op). Each server is observed once to settle its status, then ``--rounds`` times
more while nothing changes; the figure is the mean wall time per observation of those rounds, on one event loop,
nothing else running.

    python bench/observe.py [--count 500] [--rounds 5]
    python bench/observe.py --fairness   # 32 servers whose pods never answer beside 16 healthy (bench/observe_fair.py)

Runs on this tree's layout and on the layout before issue 15's re-layout (``sglang_operator.observer``), so the
same harness measures a commit before and after (``git worktree add /tmp/old 7a75fdc`` and
``PYTHONPATH=/tmp/old/operator python bench/observe.py``). Prints the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime as dt
import gc
import importlib
import logging
import runpy
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import StatusStore  # noqa: E402


def _modules() -> tuple[Any, Any, Any]:
    """(observer module, kube client module, ControllerRevision client module) of whichever layout is installed."""
    try:
        return (importlib.import_module("sglang_operator.control.observer"),
                importlib.import_module("sglang_operator.io.kube"),
                importlib.import_module("sglang_operator.io.revisions"))
    except ModuleNotFoundError:
        return (importlib.import_module("sglang_operator.observer"),
                importlib.import_module("sglang_operator.clients.kube"),
                importlib.import_module("sglang_operator.clients.ledger"))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fairness", action="store_true",
                        help="whether healthy servers are sampled every interval beside 32 whose pods never answer "
                             "(bench/observe_fair.py, its defaults)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    observer_mod, kube, revisions = _modules()
    from sglang_operator import builders
    from sglang_operator.api.server import parse

    store = StatusStore()
    objects = store.objects

    async def nothing(*_: Any, **__: Any) -> Any:
        return None

    async def no_pods(*_: Any, **__: Any) -> list[Any]:
        return []

    try:  # the writes live apart from the reads since the one-writer change
        writer: Any = importlib.import_module(kube.__name__ + "_write")
    except ImportError:
        writer = kube
    writer.patch_status, writer.post_event = store.patch_status, nothing
    kube.list_pods, kube.secret_value = no_pods, nothing
    revisions.list_revisions = no_pods
    base: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    base["spec"]["replicas"] = 0
    obs = observer_mod.Observer(5.0)
    for i in range(args.count):
        body = copy.deepcopy(base)
        body["metadata"] = {"name": f"s{i:04d}", "namespace": "bench", "uid": f"uid-{i}", "generation": 1,
                            "resourceVersion": "1"}
        revision = builders.render(parse(body)).revision  # as the reconcile handler applied it
        body["status"] = {"revision": revision, "sglangVersion": "0.5.10", "phase": "Progressing",
                          "revisions": [{"revision": revision, "spec": copy.deepcopy(body["spec"])}]}
        objects[("bench", body["metadata"]["name"])] = body
        obs.track("ADDED", copy.deepcopy(body))

    async def observe_all() -> float:
        bodies = [copy.deepcopy(objects[key]) for key in objects]  # the watch's views (not timed)
        for body in bodies:
            obs.track("MODIFIED", body)
        started = time.perf_counter()
        for body in bodies:  # the typed view is built in the timed part (once per object delivered)
            mem = obs.memories.get(("bench", body["metadata"]["name"]))
            view = mem.view() if callable(getattr(mem, "view", None)) else body  # the layout before the view: a dict
            await obs.observe(view, dt.datetime.now(dt.UTC))
        return time.perf_counter() - started

    await observe_all()  # first looks: status settles
    await observe_all()
    gc.collect()
    store.writes = 0
    times = [await observe_all() for _ in range(args.rounds)]
    per = [t / args.count * 1000 for t in times]
    print(f"{args.count} unchanged servers x {args.rounds} rounds ({observer_mod.__name__}): "
          f"{min(per):.3f} / {sorted(per)[len(per) // 2]:.3f} / {max(per):.3f} ms per observation "
          f"(min / median / max); {store.writes} status patches meanwhile")


if __name__ == "__main__":
    if "--fairness" in sys.argv[1:]:  # a harness of its own, with its own event loop
        sys.argv = [str(ROOT / "bench" / "observe_fair.py")]
        runpy.run_path(sys.argv[0], run_name="__main__")
    else:
        asyncio.run(main())
