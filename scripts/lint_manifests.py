"""Lint every manifest the project ships or renders, offline (a ``.ci/run`` stage):

- ``helm lint --strict`` of the chart in every mode of :data:`MODES`;
- ``helm template`` in every mode, the samples (``samples/*.yaml``, SGLangTuning included) and what
  ``sglang-operator render`` makes of the SGLangServer samples and of a two-node variant of the known-good one (a
  LeaderWorkerSet), through kubeconform v0.8.0 ``-strict`` with local schemas only, nothing fetched: the built-in
  kinds of the local cluster's Kubernetes minor (``e2e.build_k8s``: v1.36) from the ``kubernetes-validate`` package,
  and the CRDs (ours, the Prometheus Operator's, LeaderWorkerSet's, KEDA's ScaledObject: an autoscaled two-node
  variant renders one) converted by ``scripts/crd_to_jsonschema.py``. A kind without a schema is an error (no
  ``-ignore-missing-schemas``).

    python scripts/lint_manifests.py [--schemas DIR]

Tools: helm and kubeconform from ``python -m e2e.tools`` (built when missing), the Prometheus Operator CRDs from
``python -m e2e.tools prometheus-operator-crds``, the LWS CRD from the ``sigs.k8s.io/lws`` module ``e2e.build_lws``
pins, KEDA's from the module ``e2e.build_keda`` pins (``python -m e2e.build_keda crds``). Schemas go to ``DIR``
(default ``<cache>/sglang-operator/schemas``), rewritten on every run. Exit status 1 when anything fails, with the
tool's output.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from e2e import tools  # noqa: E402
from e2e.build_k8s import cache_root, committed_version  # noqa: E402

CHART = ROOT / "charts" / "sglang-operator"
MONITORING = ["--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
              "--set", "grafanaDashboard.enabled=true", "--set", "serviceMonitor.labels.release=kps"]
MODES: dict[str, list[str]] = {
    "defaults (cluster-wide, 2 replicas, leader election, CRD)": [],
    "namespaced, kopf peering": ["--set", "watchNamespaces={team-a,team-b}", "--set", "peering=ops"],
    "monitoring objects": MONITORING,
    "secure metrics, namespaced, NetworkPolicy, token Secret, certificate Secret": [
        *MONITORING, "--set", "metrics.secure=true", "--set", "watchNamespaces={team-a}",
        "--set", "metrics.readerServiceAccounts[0].name=prometheus",
        "--set", "metrics.readerServiceAccounts[0].namespace=monitoring",
        "--set", "metrics.networkPolicy.enabled=true", "--set", "serviceMonitor.bearerTokenSecret.name=prom",
        "--set", "metrics.certSecret=metrics-cert"],
    "secure metrics, the Prometheus' own token, self-signed certificate": [*MONITORING, "--set", "metrics.secure=true"],
    "admission policy restricted, allowed host paths and service accounts, no aggregate roles": [
        "--set", "admissionPolicy.level=restricted", "--set", "admissionPolicy.allowedHostPaths={/models,/data/hf}",
        "--set", "admissionPolicy.allowedServiceAccounts={puller,team-a/hf-reader}",
        "--set", "aggregateClusterRoles=false"],
    "no admission policy": ["--set", "admissionPolicy.enabled=false"],
    "one replica, no Lease, no CRD, no PodMonitors": [
        "--set", "replicaCount=1", "--set", "leaderElection.enabled=false", "--set", "crds.install=false",
        "--set", "podMonitor.enabled=false", "--set", "podAntiAffinity=required"],
}


def k8s_schemas(dest: Path) -> Path:
    """The built-in kinds' strict schemas of the local cluster's minor, copied from ``kubernetes-validate`` with
    their ``/api/_definitions.json`` references (resolved against ``$id`` ``https://kubernetes.io/api/...``, which
    kubeconform would fetch) pointed at the local copy's ``file://`` URL."""
    minor = ".".join(committed_version().lstrip("v").split(".")[:2])
    src = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{minor}.0-local-strict"
    if not src.is_dir():
        raise SystemExit(f"lint_manifests: kubernetes-validate has no schemas for Kubernetes {minor} ({src})")
    out = dest / f"kubernetes-v{minor}-strict"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    definitions = (out / "_definitions.json").as_uri()
    for f in src.glob("*.json"):
        (out / f.name).write_text(f.read_text().replace('"/api/_definitions.json#', f'"{definitions}#'))
    return out


def crd_files() -> list[Path]:
    """Our CRDs (SGLangServer, SGLangTuning), the Prometheus Operator's, LeaderWorkerSet's and KEDA's ScaledObject."""
    from e2e import build_keda, build_lws

    lws = build_lws.module_source(build_lws.committed_version()) / build_lws.CRD_SOURCE
    prom = tools.fetch_prometheus_operator_crds()
    keda = build_keda.fetch_crds() / build_keda.SCALED_OBJECT_CRD
    return [*sorted((ROOT / "crds").glob("*.yaml")), *sorted(prom.glob("*.yaml")), lws, keda]


def run(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, cwd=ROOT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/lint_manifests.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemas", type=Path, default=cache_root() / "schemas", help="where schemas are written")
    args = parser.parse_args(argv)
    helm, kubeconform = tools.build_helm(), tools.build_kubeconform()
    builtin = k8s_schemas(args.schemas)
    crds = args.schemas / "crds"
    shutil.rmtree(crds, ignore_errors=True)
    converted = run([sys.executable, str(ROOT / "scripts" / "crd_to_jsonschema.py"), str(crds),
                     *map(str, crd_files())])
    if converted.returncode != 0:
        print(converted.stdout + converted.stderr)
        return 1
    locations = ["-schema-location", str(builtin / "{{ .ResourceKind }}{{ .KindSuffix }}.json"),
                 "-schema-location", str(crds / "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json")]

    failed = False

    def check(what: str, proc: subprocess.CompletedProcess[str], kinds: str = "") -> None:
        nonlocal failed
        ok = proc.returncode == 0
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}{kinds}")
        if not ok:
            print("     " + (proc.stdout + proc.stderr).strip().replace("\n", "\n     "))

    def conform(what: str, docs: str) -> None:
        kinds = sorted({d["kind"] for d in yaml.safe_load_all(docs) if d})
        check(f"kubeconform -strict: {what}", run([str(kubeconform), "-strict", "-summary", *locations, "-"], docs),
              f" ({', '.join(kinds)})")

    start = time.monotonic()
    for mode, values in MODES.items():
        check(f"helm lint --strict: {mode}", run([str(helm), "lint", "--strict", str(CHART), *values]))
        rendered = run([str(helm), "template", "rel", str(CHART), "--namespace", "ops", *values])
        if rendered.returncode != 0:
            check(f"helm template: {mode}", rendered)
            continue
        conform(f"helm template, {mode}", rendered.stdout)
    samples = sorted((ROOT / "samples").glob("*.yaml"))
    conform("samples/*.yaml", "\n---\n".join(p.read_text() for p in samples))
    multinode: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    multinode["spec"]["parallelism"] = {"tensor": 16, "nodes": 2}  # TP 16 over two 8-GPU nodes
    servers = [p for p in samples if yaml.safe_load(p.read_text())["kind"] == "SGLangServer"]  # render takes these
    autoscaled = {**multinode, "spec": {**multinode["spec"], "autoscaling": {"maxReplicas": 3, "target": 4}}}
    renders = [(p.name, p.read_text()) for p in servers] + [("two-node known-good", yaml.safe_dump(multinode)),
                                                            ("two-node autoscaled", yaml.safe_dump(autoscaled))]
    for name, text in renders:
        proc = run([sys.executable, "-m", "sglang_operator.entry.cli", "render", "-", "--prometheus-address",
                    "http://prometheus-operated.monitoring.svc:9090"], stdin=text)
        if proc.returncode != 0:
            check(f"sglang-operator render {name}", proc)
            continue
        conform(f"sglang-operator render {name}", proc.stdout)
    print(f"{'FAILED' if failed else 'all clean'} in {time.monotonic() - start:.1f} s "
          f"(schemas: {builtin.name}, {', '.join(sorted(p.name for p in crds.iterdir()))})")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
