"""The demo: the operator on a local control plane, serving the published known-good sample and rolling back.

    python -m e2e.demo               # build/reuse binaries, start the cluster and the operator, apply the
                                     # known-good sample, follow its analysis until it is promoted (the
                                     # baseline), measure it with one request, then exit
    python -m e2e.demo --regress     # ... then apply the regressed sample over it and follow the operator
                                     # judging it slower and applying the known-good revision again by itself;
                                     # prints the Degraded/RolledBack message, `history` and `diff`
    python -m e2e.demo --tune        # instead: serve the regressed sample (1/1/2) and let an SGLangTuning (Shadow
                                     # mode: trials beside the server) climb from it to a better point; prints each
                                     # step of the climb, `tune status` and the plot (`tune plot`, with matplotlib),
                                     # and checks the recommendation is at least as fast as the known-good 3/1/4
    python -m e2e.demo --autoscale   # instead: KEDA and Prometheus too (as `python -m e2e.cluster up --keda`), the
                                     # README's autoscaling example (samples/local/qwen3.6-27b-autoscaling.yaml)
                                     # applied, 12 streams (as `python -m e2e.load`): KEDA's HPA scales it 1 -> 3,
                                     # and back to 1 once the streams stop
    python -m e2e.demo --keep        # keep everything running until Ctrl-C or SIGTERM (prints the KUBECONFIG
                                     # export; with --tune, the printed `kubectl sglang tune apply` can then be
                                     # run); the work directory (operator log, the plot) is kept too
    python -m e2e.demo --pod-cidr 127.5.0.0/16   # pod IPs from another loopback network (as `python -m e2e.cluster
                                     # up --pod-cidr`): beside another local cluster

Ctrl-C and SIGTERM end it the same way, at any point: the operator and the cluster are stopped and the work
directory (the operator's log, ``--tune``'s plot) is removed unless ``--keep``.

Both samples are applied from ``samples/local/``: the published ones with the fast rollback policy (printed;
production defaults stay in ``samples/``) and the simulator's one-second model load. Every SGLang pod runs the
project's simulator (``sglang-sim``) at real speed on a fake GPU node;
throughput figures are the simulator's calibrated model of Qwen3.6-27B on 2×A6000, not a real GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.build_k8s import build
from e2e.cluster import Cluster, ClusterError, NodeOptions, autoscale
from e2e.conftest import K8sCluster
from e2e.load import STREAMS, Load, Server
from e2e.operator_proc import OperatorProcess
from e2e.policies import BAD, FAST_POLICY, GOOD, LOCAL, ROOT, earliest_rollback_seconds, policy
from sglang_operator.io.loadgen import probe

NAME = "qwen36-27b"
T0 = time.monotonic()
Status = dict[str, Any]


def kubectl(cluster: Cluster, *args: str, input: str | None = None) -> str:
    out = subprocess.run([str(cluster.kubectl), f"--kubeconfig={cluster.kubeconfig}", *args], input=input,
                         capture_output=True, text=True, check=True)
    return out.stdout


def status(cluster: Cluster) -> Status:
    obj: dict[str, Any] = json.loads(kubectl(cluster, "get", "sgls", NAME, "-o", "json"))
    return obj.get("status") or {}


def cond(st: Status, type_: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c["type"] == type_), {})


def analysis(st: Status) -> dict[str, Any]:
    out: dict[str, Any] = st.get("analysis") or {}
    return out


def progress_line(st: Status) -> str:
    """One line of what the operator decided: revision, pods Ready, analysis phase, counters, last sample."""
    an, last = analysis(st), analysis(st).get("lastSample") or {}
    line = (f"{st.get('revision', '—'):<11} Ready={cond(st, 'Ready').get('status', '—'):<6} "
            f"{an.get('phase', '—'):<12} samples {an.get('validSamples', 0)}, failures in a row "
            f"{an.get('consecutiveFailures', 0)}")
    if last:
        line += f" | last sample {last['verdict']}"
        if last.get("tokensPerSecond") is not None:
            line += f" {last['tokensPerSecond']:.1f} tok/s"
        if last.get("acceptLength") is not None:
            line += f", accept length {last['acceptLength']:.2f}"
        if last["verdict"] != "Pass" and last.get("reason"):
            line += f" ({last['reason']})"
    return line


def follow(cluster: Cluster, what: str, done: Callable[[Status], bool], timeout: float = 180) -> Status:
    """Poll the status every second, print a line whenever the operator's view changes, return the status once
    ``done`` holds. Exits the demo with the status when ``timeout`` seconds pass first."""
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        st = status(cluster)
        line = progress_line(st)
        if line != last:
            print(f"   {time.monotonic() - T0:6.1f} s  {line}")
            last = line
        if done(st):
            return st
        time.sleep(1)
    raise SystemExit(f"demo: {what} not reached after {timeout:.0f} s; status: {json.dumps(status(cluster))}")


def show_effective(st: Status) -> None:
    eff = {k: v for k, v in st["effective"].items() if k != "observedAt"}
    print("\n-- what SGLang reports it runs (GET /server_info; SGLang reports NEXTN as EAGLE):")
    print("   " + ", ".join(f"{k}={v}" for k, v in sorted(eff.items())))
    print(f"-- command: {st['command']}")


def measure(cluster: Cluster) -> float:
    """One single-stream 512-token coding request to a pod of the server; its decode tok/s (client side)."""
    pods = json.loads(kubectl(cluster, "get", "pods", "-l", f"app.kubernetes.io/instance={NAME}", "-o", "json"))
    ip = next(p["status"]["podIP"] for p in pods["items"] if not p["metadata"].get("deletionTimestamp"))
    print(f"\n-- one 512-token coding request to http://{ip}:30000 (single stream, as the published case measured)")
    res = asyncio.run(probe(f"http://{ip}:30000", max_tokens=512)).results[0]
    print(f"   {res.completion_tokens} tokens, TTFT {res.ttft_s or 0:.2f} s, {res.decode_tok_s:.1f} tok/s (wall clock)")
    return res.decode_tok_s


def apply_sample(cluster: Cluster, name: str) -> None:
    print(f"\n-- kubectl apply -f samples/local/{name}   (the sample with the fast policy and the simulator's env)")
    print("   " + kubectl(cluster, "apply", "-f", str(LOCAL / name)).rstrip())


def print_policy() -> None:
    p = policy()
    print(f"\n-- spec.rollback for the demo (production defaults: warm-up 120 s, interval 30 s, 5 samples, 600 s):\n"
          f"   {json.dumps(FAST_POLICY)}\n"
          f"   judged: probe decode tok/s >= {p.min_relative_tokens_per_second} × baseline, accept length >= "
          f"{p.min_relative_accept_length} × baseline; promoted after {p.min_samples} samples and "
          f"{p.verify_seconds} s; earliest rollback {p.warmup_seconds} + {p.failure_threshold} × "
          f"{p.interval_seconds} = {earliest_rollback_seconds(p)} s after all pods are Ready")


def ledger_cli(cluster: Cluster, *args: str, echo: bool = True) -> str:
    """Run a ledger command as the kubectl plugin ``kubectl sglang`` (``kubectl-sglang`` on PATH next to this
    Python), else as ``sglang-operator``; returns what it printed (after the command line when ``echo``)."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
           "PATH": os.pathsep.join([str(bin_dir), str(cluster.bin_dir), os.environ.get("PATH", "")])}
    if (bin_dir / "kubectl-sglang").exists():
        argv, shown = [str(cluster.kubectl), "sglang", *args], ["kubectl", "sglang", *args]
    else:
        argv, shown = [sys.executable, "-m", "sglang_operator.entry.cli", *args], ["sglang-operator", *args]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"demo: {' '.join(shown)} failed: {out.stderr}")
    return f"\n$ {' '.join(shown)}\n{out.stdout.rstrip()}" if echo else out.stdout


def promoted(st: Status) -> bool:
    return bool(st.get("stableRevision")) and st["stableRevision"] == st.get("revision") \
        and analysis(st).get("phase") == "Stable" and bool(st.get("effective"))


def regress(cluster: Cluster, good: Status) -> None:
    """Apply the regressed sample over the promoted known-good revision and follow the automatic rollback."""
    rev_good = good["revision"]
    apply_sample(cluster, BAD)
    t_apply = time.monotonic()
    print("-- the operator judges the new revision against the baseline (no traffic but its own probes):")

    def rolled_back(st: Status) -> bool:
        return st.get("revision") == rev_good and analysis(st).get("phase") == "RolledBack" \
            and cond(st, "Ready").get("status") == "True" and cond(st, "Degraded").get("reason") == "RolledBack"

    st = follow(cluster, "the automatic rollback", rolled_back)
    rev_bad = st["rejectedRevisions"][-1]["revision"]
    print(f"-- rolled back by itself: {rev_good} serves again {time.monotonic() - t_apply:.0f} s after the "
          f"regressed sample was applied")
    degraded = cond(st, "Degraded")
    print(f"   Degraded={degraded['status']} reason {degraded['reason']}: {degraded['message']}")
    spec = json.loads(kubectl(cluster, "get", "sgls", NAME, "-o", "json"))["spec"]
    args = json.loads(kubectl(cluster, "get", "deployment", NAME, "-o", "json"))["spec"]["template"]["spec"][
        "containers"][0]
    print(f"   the user's spec is untouched: spec.speculative.numSteps={spec['speculative']['numSteps']}; the "
          f"Deployment runs --speculative-num-steps "
          f"{args['args'][args['args'].index('--speculative-num-steps') + 1]}, image {args['image']}")
    print(f"   {rev_bad} stays rejected until `kubectl sglang retry {NAME}`; `promote` accepts the serving "
          f"revision as stable, `undo` writes an earlier revision's spec back")
    deadline = time.monotonic() + 30  # the table's TOK/S and ACCEPTLEN come back with the first samples
    while time.monotonic() < deadline and not all(status(cluster).get(k) for k in ("tokensPerSecond", "acceptLength")):
        time.sleep(1)
    print("\n" + kubectl(cluster, "get", "sgls", NAME).rstrip())
    print(ledger_cli(cluster, "history", NAME))
    print(ledger_cli(cluster, "diff", NAME))
    rejected = next(r for r in json.loads(ledger_cli(cluster, "history", NAME, "-o", "json", echo=False))
                    if r["revision"] == rev_bad)
    print(f"\n-- published: 47-57 tok/s known-good vs 35.8 tok/s, accept length 1.75 regressed; here: "
          f"{good['baseline']['tokensPerSecond']:.1f} tok/s, accept length {good['baseline']['acceptLength']:.2f} vs "
          f"{rejected['tokensPerSecond']:.1f} tok/s, accept length {rejected['acceptLength']:.2f}")
    selector = f"involvedObject.kind=SGLangServer,involvedObject.name={NAME}"
    items = json.loads(kubectl(cluster, "get", "events", "--field-selector", selector, "-o", "json"))["items"]
    items.sort(key=lambda e: (e["metadata"]["creationTimestamp"], int(e["metadata"]["resourceVersion"])))
    print(f"\n-- the operator's events, in the order posted (kubectl get events --field-selector {selector}):")
    for e in items:
        print(f"   {e['type']:<8} {e['reason']:<12} {e['message']}")


TUNING = f"{NAME}-tune"
TUNE_OPTIONS = ("--steps", "1-5", "--concurrency", "1", "--max-output-tokens", "64", "--seconds-per-level", "5",
                "--warmup-seconds", "1", "--repetitions", "1", "--max-trials", "9", "--start-steps", "1")
"""The demo's tuning: chains of 1-5 steps at concurrency 1 (the published case's single stream), short trials, the
climb starting from the server's own 1/1/2 (the default search starts at SGLang's default 3)."""
KNOWN_GOOD = "3/1/4"


def tuning_status(cluster: Cluster) -> Status:
    obj: Status = json.loads(kubectl(cluster, "get", "sglangtuning", TUNING, "-o", "json"))
    return obj.get("status") or {}


def tune(cluster: Cluster, workdir: Path) -> None:
    """The regressed sample served, then a Shadow SGLangTuning of it followed to its recommendation."""
    apply_sample(cluster, BAD)
    follow(cluster, "the regressed revision Ready", lambda st: st.get("phase") == "Ready")
    regressed = measure(cluster)
    print(ledger_cli(cluster, "tune", "start", NAME, "--name", TUNING, *TUNE_OPTIONS))
    print("-- each trial is a Deployment beside the server (no user request reaches it), measured, then deleted.\n"
          "   The default search measures no speculation first, then climbs numSteps from the server's own 1/1/2\n"
          "   while a step gains (one step past a small drop), then measures the best points again (the noise rule):")
    deadline, shown = time.monotonic() + 420, 0
    st: Status = {}
    climb, picked_up = Climb(), time.monotonic() + 60
    while time.monotonic() < deadline:
        st = tuning_status(cluster)
        trials = [t for t in st.get("trials") or [] if t.get("verdict") in ("Completed", "Failed", "Pruned")]
        for t in trials[shown:]:
            print(f"   {time.monotonic() - T0:6.1f} s  {t['name']}: {climb.step(t)}")
        shown = len(trials)
        if st.get("phase") in ("Succeeded", "Failed", "Cancelled"):
            break
        if not st.get("phase") and time.monotonic() > picked_up:
            raise SystemExit("demo: the operator has not picked up the SGLangTuning after 60 s (status {}); see the "
                             "operator's log")
        time.sleep(1)
    else:
        raise SystemExit(f"demo: the tuning did not finish; status: {json.dumps(st)}")
    print(ledger_cli(cluster, "tune", "status", TUNING))
    image = plot_path(workdir)
    try:
        print(ledger_cli(cluster, "tune", "plot", TUNING, "-o", str(image)))
    except SystemExit as exc:
        print(f"-- no plot: {exc}")
    best = st.get("best") or {}
    good = [t["objective"] for t in st.get("trials") or []
            if t.get("verdict") == "Completed" and summary(t["settings"]) == KNOWN_GOOD and t.get("objective")]
    if st.get("phase") != "Succeeded" or not best:
        raise SystemExit(f"demo: the tuning ended {st.get('phase')}: {json.dumps(st.get('conditions'))}")
    reference = sum(good) / len(good) if good else None
    print(f"\n-- recommendation {best['summary']}: {best['objective']:.1f} tok/s ({best.get('speedup') or 0:.2f}x no "
          f"speculation); regressed 1/1/2: {regressed:.1f} tok/s (one request); known-good {KNOWN_GOOD}: "
          + (f"{reference:.1f} tok/s" if reference else "not measured"))
    if reference is not None and best["objective"] < 0.98 * reference:
        raise SystemExit("demo: the recommendation is slower than the known-good 3/1/4")
    print("-- the operator recommends; it never writes the server's spec. Apply it with:\n"
          f"   kubectl sglang tune apply {TUNING}")
    deadline = time.monotonic() + 20  # the server's next observation compares its spec with what the tuning measured
    while time.monotonic() < deadline and not cond(status(cluster), "SpeculativeSettings"):
        time.sleep(1)
    told = cond(status(cluster), "SpeculativeSettings")
    if told:
        print(f"-- and the server is told (condition SpeculativeSettings={told['status']}, reason {told['reason']}):\n"
              f"   {told['message']}")
    print(ledger_cli(cluster, "tune", "best"))


class Climb:
    """Each finished trial as a step of the search: no speculation, a new best, below the best so far, a repeat."""

    def __init__(self) -> None:
        self.seen: dict[str, list[float]] = {}
        self.best: tuple[str, float] | None = None
        self.control: float | None = None

    def step(self, t: Status) -> str:
        label, value = summary(t["settings"]), t.get("objective")
        if t.get("verdict") != "Completed" or value is None:
            why = (t.get("reason") or "").strip().splitlines()
            self.seen.setdefault(label, [])
            return f"{label:<15} {t.get('verdict')}: {why[-1][:100] if why else ''}"
        again = label in self.seen and bool(self.seen[label])
        self.seen.setdefault(label, []).append(value)
        text = f"{label:<15} {value:6.1f} tok/s  "
        if label == "no speculation":
            self.control = value
            text += "the control trial: what no speculative decoding gives"
        elif again:
            text += f"measured again (the noise rule): mean {sum(self.seen[label]) / len(self.seen[label]):.1f}"
        elif self.best is None:
            text += "the climb starts at the server's own settings" + (
                f" ({value / self.control:.2f}× no speculation)" if self.control else "")
            self.best = (label, value)
        elif value > self.best[1]:
            text += f"↑ new best, +{value / self.best[1] - 1:.0%} over {self.best[0]}"
            self.best = (label, value)
        else:
            text += f"↓ {1 - value / self.best[1]:.0%} below the best so far, {self.best[0]}"
        return text


def summary(settings: Status) -> str:
    if settings.get("speculative") is False:
        return "no speculation"
    return f"{settings.get('numSteps')}/{settings.get('eagleTopk')}/{settings.get('numDraftTokens')}"


def serve_and_regress(cluster: Cluster, regress_too: bool) -> None:
    """The known-good sample promoted, measured and listed; then, with ``regress_too``, the regressed one and the
    automatic rollback."""
    print_policy()
    apply_sample(cluster, GOOD)
    print("-- the operator warms it up, verifies it with its probes and promotes it:")
    good = follow(cluster, "the known-good revision promoted", promoted)
    base = good["baseline"]
    print(f"-- promoted {good['revision']}: baseline {base['tokensPerSecond']:.1f} tok/s, accept length "
          f"{base['acceptLength']:.2f} (median of {base['samples']} probe samples; published: 47-57 tok/s)")
    show_effective(good)
    measure(cluster)
    print(kubectl(cluster, "get", "sgls", NAME).rstrip())
    if regress_too:
        regress(cluster, good)


AUTOSCALED = "qwen3.6-27b-autoscaling.yaml"
"""The README's autoscaling example (``samples/local/``)."""


def start_autoscaling(cluster: Cluster, operator_port: int) -> autoscale.Autoscaling:
    """KEDA and Prometheus, as ``python -m e2e.cluster up --keda`` starts them (built first when missing), Prometheus
    scraping the operator's ``--metrics-port`` ``operator_port`` too."""
    from e2e.build_keda import build as build_keda
    from e2e.tools import build_prometheus

    try:
        scaling = autoscale.start(cluster, keda_home=build_keda(), prometheus_binary=build_prometheus() / "prometheus",
                                  operator_port=operator_port)
    except ClusterError as exc:
        raise SystemExit(f"demo: KEDA did not start: {exc}") from exc
    print("-- " + "\n-- ".join(line.removeprefix("# ") for line in scaling.describe()))
    return scaling


def hpa_active(cluster: Cluster) -> bool:
    """Whether KEDA's HPA for the server reads the metric (its ScalingActive condition)."""
    try:
        hpa = json.loads(kubectl(cluster, "get", "hpa", f"keda-hpa-{NAME}", "-o", "json"))
    except subprocess.CalledProcessError:
        return False
    return any(c["type"] == "ScalingActive" and c["status"] == "True" for c in hpa["status"].get("conditions") or [])


def follow_scale(server: Server, what: str, done: Callable[[int | None, int], bool], t0: float,
                 timeout: float = 180) -> None:
    """Print ``spec.replicas`` and the Ready pods whenever they change (seconds since ``t0``) until ``done``."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        now = (server.replicas(), len(server.ready_urls()))
        if now != last:
            print(f"   {time.monotonic() - t0:6.1f} s  spec.replicas {now[0]}, Ready pods {now[1]}")
            last = now
        if done(*now):
            return
        time.sleep(1)
    raise SystemExit(f"demo: {what} not reached after {timeout:.0f} s")


def autoscaled(cluster: Cluster) -> None:
    """The README's autoscaling example: applied, served, scaled 1 -> 3 under 12 streams, back to 1 without."""
    apply_sample(cluster, AUTOSCALED)
    follow(cluster, "the server Ready", lambda st: cond(st, "Ready").get("status") == "True"
           and cond(st, "Autoscaling").get("status") == "True")
    told = cond(status(cluster), "Autoscaling")
    print(f"-- Autoscaling={told['status']} reason {told['reason']}: {told['message']}")
    deadline = time.monotonic() + 120
    while not hpa_active(cluster):
        if time.monotonic() > deadline:
            raise SystemExit("demo: KEDA's HPA does not read the metric after 120 s (ScalingActive)")
        time.sleep(1)
    print(f"-- KEDA's HPA keda-hpa-{NAME} reads the metric from Prometheus (ScalingActive=True)")
    server = Server(NAME, "default", str(cluster.kubectl), str(cluster.kubeconfig))
    url = server.ready_urls()[0]
    print(f"\n-- {STREAMS} concurrent streams to {url} (python -m e2e.load {NAME}): running requests {STREAMS}, "
          f"target 4 per replica -> 3 replicas")
    t0 = time.monotonic()
    with Load(url, server.ready_urls):
        follow_scale(server, "3 Ready replicas", lambda n, ready: n == 3 and ready == 3, t0)
    print("\n-- the streams stopped: back to 1, one replica per 30 s (spec.autoscaling.behavior.scaleDown)")
    t1 = time.monotonic()
    follow_scale(server, "1 replica", lambda n, ready: n == 1 and ready == 1, t1, timeout=240)
    print("\n" + kubectl(cluster, "get", "sgls,hpa,scaledobject").rstrip())


def plot_path(workdir: Path) -> Path:
    """Where ``--tune`` writes ``tune plot``'s image: in the demo's work directory, removed with it at exit unless
    ``--keep``."""
    return workdir / f"{TUNING}.png"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m e2e.demo", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--regress", action="store_true",
                        help="then apply the regressed configuration and follow the automatic rollback")
    parser.add_argument("--tune", action="store_true",
                        help="serve the regressed configuration and let an SGLangTuning recommend a better one")
    parser.add_argument("--autoscale", action="store_true",
                        help="instead: start KEDA and Prometheus too (as python -m e2e.cluster up --keda), apply the "
                             "README's autoscaling example and follow KEDA scaling it 1 -> 3 under load and back")
    parser.add_argument("--keep", action="store_true",
                        help="keep running until Ctrl-C or SIGTERM, and keep the work directory (log, plot)")
    parser.add_argument("--pod-cidr", default=None,
                        help="loopback network for pod IPs (default: 127.1.0.0/16), as python -m e2e.cluster up")
    return parser.parse_args(argv)


def node_options(args: argparse.Namespace) -> NodeOptions:
    """The fake nodes: the defaults, with ``--pod-cidr`` when given."""
    return NodeOptions(**({"pod_cidr": args.pod_cidr} if args.pod_cidr else {}))


def interrupt_on_sigterm() -> None:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does: the same clean-up (operator, cluster, work directory) runs
    in ``main``'s ``finally``, also while ``--keep`` waits."""
    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def ignore_sigterm() -> None:
    """During the clean-up: a second SIGTERM does not cut it short (a cluster left half-stopped); a second Ctrl-C
    still does, on purpose."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    interrupt_on_sigterm()
    cluster = Cluster(build(), node_options(args))
    op: OperatorProcess | None = None
    scaling: autoscale.Autoscaling | None = None
    workdir: Path | None = None
    try:
        cluster.start()
        print(f"-- local control plane ready in {cluster.startup_seconds:.1f} s")
        print(kubectl(cluster, "get", "nodes", "-L", "nvidia.com/gpu.product").rstrip())
        k8s = K8sCluster(cluster.kubeconfig, cluster.kubectl, cluster)
        for crd, name in (("sglangservers.yaml", "sglangservers.sglang-operator.io"),
                          ("sglangtunings.yaml", "sglangtunings.sglang-operator.io")):
            # both Established before the operator starts: a watch begun before its CRD is served never recovers
            k8s.install_crd(ROOT / "crds" / crd, name)  # polls until Established
            print(f"-- CRD {name} installed (crds/{crd}), Established")
        workdir = Path(tempfile.mkdtemp(prefix="sglang-demo-"))
        op = OperatorProcess(cluster.kubeconfig, workdir / "operator.log", status_interval=1.0, sample_interval=None)
        if args.autoscale:  # before the operator: it sees KEDA's CRDs at its start
            scaling = start_autoscaling(cluster, op.metrics_port)
        op.start()
        print(f"-- operator running (log: {op.log_path}); samples every spec.rollback.intervalSeconds")
        if args.autoscale:
            autoscaled(cluster)
        elif args.tune:
            tune(cluster, workdir)
        else:
            serve_and_regress(cluster, args.regress)
        print(f"\n-- demo done in {time.monotonic() - T0:.0f} s (cluster start included)")
        if args.keep:
            print(f"\nexport KUBECONFIG={cluster.kubeconfig}\nexport PATH={cluster.bin_dir}:$PATH\n"
                  f"# Ctrl-C (or SIGTERM) stops the operator and the cluster; {workdir} is kept")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        ignore_sigterm()
        if op is not None:
            op.stop()
        if scaling is not None:  # after the operator: it would apply the ScaledObjects KEDA's stop deletes again
            scaling.stop()
        cluster.stop()
        if workdir is not None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
