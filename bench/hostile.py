"""Benchmark: what each hostile input of issue 16 costs the operator, one mode at a time, for ``--minutes`` each.

On a local control plane of its own, the operator (``sglang-operator run``, defaults but ``--metrics-max-connections
1024``, which leaves room for this bench's own reads beside 500 idle connections) serves ``--healthy`` healthy
simulated SGLangServers (the known-good sample, the fast rollback policy: sampled and probed every 5 s). Then, in
turn, a baseline without any hostile input, and each mode of ``e2e/hostile.py``: one hostile SGLangServer (an endless
SSE line on the probe's stream, 5 000 000 tiny chunks, a 7 MiB label value, 100 000 series, a 1 MiB ``/server_info``
string), 500 idle TCP connections to the operator's metrics port, or 600 small SGLangTunings naming an SGLangServer
that does not exist (``missing-server-tunings``: then also how long creating them took and how long deleting them
all took: one DELETE of the collection, then until none is left), or 20 SGLangServers whose lists and maps are at
their bounds, without pods (``fat-specs``: then also the RSS they added). ``parse-cost`` (issue 42, offline, not in the
default list) runs ``bench/hostile_parse.py`` for ``--seconds``: 8 pods at interval 1 with a body within every limit
beside 4 healthy servers, the loop's lag and the healthy servers' gaps. ``tuning-starvation`` (two namespaces, alice's
two long tunings holding both running slots, then bob's one: how long bob's waited, and how long after the trial
boundary of alice's yielding tuning it started) and ``fast-trial`` (tunings one after another of a server whose pods
answer at once: the requests per second its trial pods received and the trials' verdicts) are issue 42's
(``bench/hostile_tunings.py``); not in the default list: each needs servers and tunings of its own, and
``tuning-starvation`` is measured for at least two of alice's trials (~5 min) whatever ``--minutes``. Per mode it
prints:

- the operator's peak RSS over the mode (VmHWM, reset at the mode's start through ``/proc/<pid>/clear_refs``; where
  that is not allowed, the peak since the operator started) and its RSS at the end, MiB;
- its CPU share (of one core) over the mode; the 99th percentile of its event loop's lag over the mode (its own
  histogram ``sglang_operator_event_loop_lag_seconds``, read at the mode's start and end);
- the scrape errors it counted during the mode, by endpoint and reason, and the hostile server's Error samples;
- whether every healthy server kept being sampled every interval (its sample count grew with no gap over 1.6
  intervals), with the fewest samples of one and the longest gap.

    python bench/hostile.py                          # 20 healthy servers, every mode for 10 minutes (~75 min)
    python bench/hostile.py --minutes 0.5            # a smoke run
    python bench/hostile.py --modes tiny-chunks,long-label --minutes 2
    python bench/hostile.py --modes missing-server-tunings --healthy 4 --minutes 2
    python bench/hostile.py --modes baseline,fat-specs --healthy 4 --minutes 1
    python bench/hostile.py --retained-scrapes       # offline: 32 pods, an 8 MB /metrics (bench/hostile_scrapes.py)
    python bench/hostile.py --modes parse-cost --seconds 60   # offline: 8 pods at interval 1 (bench/hostile_parse.py)
    python bench/hostile.py --modes tuning-starvation,fast-trial --healthy 4 --minutes 10   # issue 42's tuning modes

Exit status 0 either way (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import tear_down  # noqa: E402
from bench.hostile_tunings import (  # noqa: E402
    FAST_MODE,
    STARVATION_MODE,
    fast_trial_mode,
    lag_buckets,
    lag_p99,
    starvation_mode,
)
from e2e.build_k8s import build  # noqa: E402
from e2e.cluster import Cluster, NodeOptions  # noqa: E402
from e2e.conftest import K8sCluster, wait_for  # noqa: E402
from e2e.hostile import (  # noqa: E402
    IDLE_MODE,
    MODES,
    TUNINGS_MODE,
    IdleClients,
    Reading,
    cpu_seconds,
    error_deltas,
    longest_gap,
    orphan_tunings,
    read_metrics,
    reset_peak,
    rss_mib,
    server,
    tunings_path,
)
from e2e.operator_proc import OperatorProcess  # noqa: E402
from e2e.policies import INTERVAL  # noqa: E402
from sglang_operator.api import GROUP  # noqa: E402
from sglang_operator.api import tuning as tuning_api  # noqa: E402

NS = "hostile"
BASELINE = "baseline"
IDLE = 500
FAT_MODE = "fat-specs"
FAT_SERVERS = 20
PARSE_MODE = "parse-cost"


def _key(i: int) -> str:
    """A label or annotation key at the 317-character bound: a 253-character DNS prefix, ``/``, a 63-character
    name."""
    prefix = ".".join([f"p{i:02d}" + "a" * 60, "b" * 63, "c" * 63, "d" * 61])
    return f"{prefix}/k{i:02d}" + "x" * 60


def fat_server(name: str) -> dict[str, Any]:
    """SGLangServer ``name`` (the known-good sample, ``replicas: 0``) with its lists and maps at their bounds
    (``api/bounds.py``, ``api/spec.py``): 32 env entries (128-character names, 1 024-character values), 16 pod
    annotations (317-character keys, 512-character values), 8 pod labels and 8 node selector entries (317-character
    keys, 63-character values), 8 tolerations."""
    obj = server(name)
    spec = obj["spec"]
    spec["replicas"] = 0
    env = spec["env"]
    env += [{"name": f"PAD_{i:02d}_" + "X" * 121, "value": "v" * 1024} for i in range(32 - len(env))]
    spec["podAnnotations"] = {_key(i): "a" * 512 for i in range(16)}
    spec["podLabels"] = {_key(i): "l" * 63 for i in range(8)}
    selector = spec.get("nodeSelector") or {}
    selector |= {_key(i): "n" * 63 for i in range(8 - len(selector))}
    spec["nodeSelector"] = selector
    spec["tolerations"] = [{"key": _key(i), "operator": "Equal", "value": "t" * 63, "effect": "NoSchedule"}
                           for i in range(8)]
    return obj


def fat_mode(k8s: K8sCluster, op: OperatorProcess, healthy: list[str], minutes: float) -> None:
    """:data:`FAT_MODE`: :data:`FAT_SERVERS` servers at the spec bounds (no pods), each observed once, then measured;
    the RSS they added (the operator's RSS before them against its RSS after the mode), their spec size."""
    assert op.proc is not None
    before = rss_mib(op.proc.pid)[0]
    names = [f"fat-{i:02d}" for i in range(FAT_SERVERS)]
    items = [fat_server(n) for n in names]
    size = len(json.dumps(items[0]["spec"], separators=(",", ":")))
    apply(k8s, items)
    wait_for(f"{FAT_SERVERS} servers at the bounds observed", lambda: all(
        (statuses(k8s).get(n) or {}).get("observedGeneration") for n in names), timeout=300, interval=2)
    got = measure(op, 60 * minutes)
    report(FAT_MODE, healthy, None, *got, extra=f"{FAT_SERVERS} specs of {size / 1024:.0f} KiB each: RSS "
           f"{before:.0f} MiB before them, {got[3]:.0f} MiB after ({got[3] - before:+.0f} MiB)")
    k8s.run("delete", "sglangservers", *names, "-n", NS, "--wait=true", timeout=300)


def statuses(k8s: K8sCluster) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o.get("status") or {} for o in k8s.get("sglangservers", "-n", NS)["items"]}


def apply(k8s: K8sCluster, items: list[dict[str, Any]]) -> None:
    k8s.run("apply", "-n", NS, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            timeout=300)


def wait_ready(k8s: K8sCluster, op: OperatorProcess, names: list[str], timeout: float = 300) -> None:
    """Until every server of ``names`` is Ready and has one sample."""
    wait_for(f"{len(names)} servers Ready", lambda: all(
        statuses(k8s).get(n, {}).get("phase") == "Ready" for n in names), timeout=timeout, interval=2)

    def sampled() -> bool:
        r = read_metrics(op.metrics_port, NS)
        return all(r.count(n) + r.count(n, error=True) > 0 for n in names)
    wait_for("a sample of each", sampled, timeout=60, interval=1)


def wait_gone(k8s: K8sCluster, name: str) -> None:
    """Until the pods of server ``name`` are gone (the next mode starts without them)."""
    wait_for(f"the pods of {name} gone", lambda: not k8s.get(
        "pods", "-n", NS, "-l", f"app.kubernetes.io/instance={name}")["items"], timeout=120, interval=1)


def measure(op: OperatorProcess, seconds: float) -> tuple[list[Reading], float, float, float, bool, float | None]:
    """Read the operator's ``/metrics`` every second for ``seconds``: (readings, CPU share of one core, peak RSS
    MiB, end RSS MiB, whether the peak is the mode's own, the event loop's lag p99 over them, seconds)."""
    assert op.proc is not None
    pid = op.proc.pid
    own_peak = reset_peak(pid)
    lag0 = lag_buckets(op.metrics_port)
    first = read_metrics(op.metrics_port, NS)
    cpu0 = cpu_seconds(pid)
    readings = [first]
    while time.monotonic() - first.at < seconds:
        time.sleep(max(0.0, 1.0 - (time.monotonic() - readings[-1].at)))
        readings.append(read_metrics(op.metrics_port, NS))
    cpu = (cpu_seconds(pid) - cpu0) / (readings[-1].at - first.at)
    rss, peak, _ = rss_mib(pid)
    return readings, cpu, peak, rss, own_peak, lag_p99(lag0, lag_buckets(op.metrics_port))


def report(mode: str, healthy: list[str], hostile: str | None, readings: list[Reading], cpu: float, peak: float,
           rss: float, own_peak: bool, lag: float | None = None, extra: str = "") -> None:
    first, last = readings[0], readings[-1]
    window = last.at - first.at
    gaps = {n: longest_gap(readings, n) for n in healthy}
    counts = {n: last.count(n) - first.count(n) for n in healthy}
    healthy_errors = sum(last.count(n, error=True) - first.count(n, error=True) for n in healthy)
    kept = max(gaps.values()) <= 1.6 * INTERVAL and not healthy_errors and min(counts.values()) >= window / (
        1.6 * INTERVAL)
    errors = error_deltas(first, last)
    line = (f"{mode:<17} peak RSS {peak:5.0f} MiB{'' if own_peak else ' (since start)'}, end {rss:5.0f} MiB, "
            f"CPU {100 * cpu:5.1f} % of one core; loop lag p99 "
            f"{'n/a' if lag is None else f'{1e3 * lag:.0f} ms'}; errors "
            f"{', '.join(f'{e}/{r} {v:.0f}' for (e, r), v in sorted(errors.items())) or 'none'}")
    if hostile is not None:
        line += (f"; {hostile}: {last.count(hostile, error=True) - first.count(hostile, error=True):.0f} Error, "
                 f"{last.count(hostile) - first.count(hostile):.0f} other samples")
    line += (f"; healthy sampled every interval: {'yes' if kept else 'NO'} (fewest samples {min(counts.values()):.0f} "
             f"in {window:.0f} s, longest gap {max(gaps.values()):.1f} s, {healthy_errors:.0f} Error samples)")
    print(line + (f"; {extra}" if extra else ""), flush=True)


def tunings_mode(k8s: K8sCluster, op: OperatorProcess, healthy: list[str], minutes: float) -> None:
    """:data:`TUNINGS_MODE`: create the orphan tunings (one ``kubectl create`` of a List), measure, delete them all
    and time the deletion."""
    items = orphan_tunings()
    t0 = time.monotonic()
    k8s.run("create", "-n", NS, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            timeout=600)
    created = time.monotonic() - t0
    got = measure(op, 60 * minutes)
    t1 = time.monotonic()
    k8s.run("delete", "--raw", tunings_path(NS), timeout=300)
    wait_for("every SGLangTuning gone", lambda: not k8s.get("sglangtunings", "-n", NS)["items"], timeout=900,
             interval=0.5)
    deleted = time.monotonic() - t1
    assert op.proc is not None
    rss_after = rss_mib(op.proc.pid)[0]
    report(TUNINGS_MODE, healthy, None, *got, extra=f"{len(items)} tunings created in {created:.0f} s, all deleted "
           f"in {deleted:.1f} s (RSS then {rss_after:.0f} MiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="minutes each mode is measured")
    parser.add_argument("--healthy", type=int, default=20, help="healthy simulated SGLangServers")
    parser.add_argument("--modes", default=",".join([BASELINE, *MODES, IDLE_MODE, TUNINGS_MODE, FAT_MODE]),
                        help="comma-separated, in order (default: all, the baseline first)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help=f"seconds the offline {PARSE_MODE} mode is measured (bench/hostile_parse.py)")
    parser.add_argument("--retained-scrapes", action="store_true",
                        help="offline, no cluster: the sampler's RSS with 32 pods answering an 8 MB /metrics of 2 000 "
                             "series with 2 000-character labels, new each scrape (bench/hostile_scrapes.py)")
    args = parser.parse_args()
    if args.retained_scrapes:
        from bench.hostile_scrapes import retained_scrapes

        retained_scrapes()
        return
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - {BASELINE, IDLE_MODE, TUNINGS_MODE, FAT_MODE, PARSE_MODE, STARVATION_MODE, FAST_MODE,
                            *MODES}
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; known: {BASELINE}, {', '.join(MODES)}, {IDLE_MODE}, "
                     f"{TUNINGS_MODE}, {FAT_MODE}, {PARSE_MODE}, {STARVATION_MODE}, {FAST_MODE}")
    if PARSE_MODE in modes:  # offline: no cluster
        from bench.hostile_parse import add_options, parse_cost

        offline = argparse.ArgumentParser()
        add_options(offline)
        parse_cost(offline.parse_args(["--seconds", str(args.seconds)]))
        modes.remove(PARSE_MODE)
        if not modes:
            return
    work = Path(tempfile.mkdtemp(prefix="sglang-hostile-"))
    gpus = args.healthy + 8  # 2 GPUs a server (tensor 2), on 2 nodes, and room for one hostile server
    cluster = Cluster(build(), NodeOptions(count=2, gpus=gpus))
    cluster.start()
    k8s = K8sCluster(cluster.kubeconfig, cluster.kubectl, cluster)
    op: OperatorProcess | None = None
    try:
        k8s.install_crd()
        k8s.install_crd(ROOT / "crds" / "sglangtunings.yaml", f"{tuning_api.PLURAL}.{GROUP}")
        k8s.run("create", "namespace", NS)
        op = OperatorProcess(cluster.kubeconfig, work / "operator.log", sample_interval=None,
                             args=["--metrics-max-connections", "1024"])
        op.start()
        healthy = [f"healthy-{i:02d}" for i in range(args.healthy)]
        t0 = time.monotonic()
        apply(k8s, [server(n) for n in healthy])
        wait_ready(k8s, op, healthy)
        print(f"{args.healthy} healthy servers Ready and sampled in {time.monotonic() - t0:.0f} s; sampling interval "
              f"{INTERVAL} s; each mode measured {args.minutes:g} min", flush=True)
        for mode in modes:
            if mode == BASELINE:
                report(mode, healthy, None, *measure(op, 60 * args.minutes))
            elif mode == TUNINGS_MODE:
                tunings_mode(k8s, op, healthy, args.minutes)
            elif mode == FAT_MODE:
                fat_mode(k8s, op, healthy, args.minutes)
            elif mode in (STARVATION_MODE, FAST_MODE):
                run = starvation_mode if mode == STARVATION_MODE else fast_trial_mode
                run(k8s, lambda seconds: measure(op, seconds), report, healthy, args.minutes)
            elif mode == IDLE_MODE:
                idle = IdleClients(op.metrics_port, IDLE)
                thread = idle.start()
                try:
                    got = measure(op, 60 * args.minutes)
                finally:
                    idle.stop.set()
                    thread.join(10)
                report(mode, healthy, None, *got, extra=idle.summary() + (f" ({idle.error!r})" if idle.error else ""))
            else:
                apply(k8s, [server(mode, MODES[mode].faults, hostile=True)])
                wait_ready(k8s, op, [mode])
                got = measure(op, 60 * args.minutes)
                reason = ((statuses(k8s).get(mode, {}).get("analysis") or {}).get("lastSample") or {}).get("reason")
                cut = ""
                if mode == "server-info":
                    st = statuses(k8s)[mode]
                    algo = (st.get("effective") or {}).get("algorithm", "")
                    cut = f"status.effective.algorithm {len(algo)} characters, status {len(json.dumps(st))} bytes"
                report(mode, healthy, mode, *got, extra=cut or f"last sample: {str(reason)[:160]}")
                k8s.run("delete", "sglangserver", mode, "-n", NS, "--wait=true", timeout=120)
                wait_gone(k8s, mode)
    finally:
        tear_down(op, cluster, work)


if __name__ == "__main__":
    main()
