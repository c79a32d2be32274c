"""Developer tools the tests need that are not Python packages, built from the Go module proxy into a
cache outside the repository and reused when present.

Usage::

    python -m e2e.tools helm                      # build (or reuse) helm and print its path
    python -m e2e.tools prometheus                # build (or reuse) prometheus + promtool, print the directory
    python -m e2e.tools prometheus-operator-crds  # fetch the Prometheus Operator CRDs, print the directory
    python -m e2e.tools prometheus-operator       # build (or reuse) the Prometheus Operator, print the directory
    python -m e2e.tools kubeconform               # build (or reuse) kubeconform and print its path
    python -m e2e.tools actionlint                # build (or reuse) actionlint and print its path

Cache (``${XDG_CACHE_HOME:-$HOME/.cache}/sglang-operator/tools/``):

- ``helm-<version>/helm``: ``GOBIN=<dir> go install helm.sh/helm/v3/cmd/helm@<version>`` (cold: about
  5 CPU-minutes).
- ``prometheus-<version>/{prometheus,promtool}``: ``go install -tags remove_all_sd,enable_kubernetes_sd``
  of ``github.com/prometheus/prometheus/cmd/{prometheus,promtool}@<version>`` (Prometheus 3; the tags keep
  Kubernetes, file and HTTP discovery only; cold: about 2-3 minutes of 2 cores). No web UI assets (that needs
  an npm build): the HTTP API, ``/-/ready`` and ``/metrics`` work.
- ``prometheus-operator-crds-<version>/monitoring.coreos.com_{podmonitors,servicemonitors,prometheusrules}.yaml``:
  copied from the ``github.com/prometheus-operator/prometheus-operator@<version>`` module zip
  (``go mod download -json``; ``example/prometheus-operator-crd/``).

- ``prometheus-operator-<version>/``: ``operator`` (the Prometheus Operator's controller,
  ``github.com/prometheus-operator/prometheus-operator/cmd/operator``, built with ``go build`` from the wrapper
  module ``e2e/prometheus-operator/`` whose ``go.mod`` requires it as a ``tool`` and whose ``go.sum`` pins the
  graph: the upstream go.mod's ``replace`` directives point at local paths, so ``go install …@version`` cannot
  work; cold: about 4 minutes of 2 cores), ``crds/`` (every CRD of its module zip, the ``Prometheus`` one
  included) and ``stamp`` (hash of the wrapper's go.mod and go.sum; a mismatch rebuilds). The tests use it for
  the scrape configuration it generates (``e2e/prometheus_operator.py``).

- ``kubeconform-<version>/kubeconform``: ``go install github.com/yannh/kubeconform/cmd/kubeconform@<version>``
  (about 30 s); used with local schemas only (``scripts/lint_manifests.py``).
- ``actionlint-<version>/actionlint``: ``go install github.com/rhysd/actionlint/cmd/actionlint@<version>``
  (about 1 minute); checks ``.github/workflows/`` in ``.ci/run``'s lint stage.

Errors: ``SystemExit`` with a message when ``go`` is not on PATH or the build/download fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from e2e import gobuild
from e2e.build_k8s import cache_root

HELM_VERSION = "v3.19.0"
HELM_PACKAGE = "helm.sh/helm/v3/cmd/helm"
HELM_K8S_MINOR = "34"  # helm v3.19.0's go.mod: k8s.io/client-go v0.34.0 (helm's default Capabilities.KubeVersion)
BUILD_COMMAND = "python -m e2e.tools helm"

PROMETHEUS_VERSION = "v0.316.0"  # the Go module version of Prometheus 3.16.0
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_TAGS = "remove_all_sd,enable_kubernetes_sd"
PROMETHEUS_BINARIES = ("prometheus", "promtool")
PROMETHEUS_BUILD_COMMAND = "python -m e2e.tools prometheus"

PROMETHEUS_OPERATOR_VERSION = "v0.85.0"  # the only root-module version the proxy serves
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_OPERATOR_CRDS = ("podmonitors", "servicemonitors", "prometheusrules")
PROMETHEUS_OPERATOR_CRDS_COMMAND = "python -m e2e.tools prometheus-operator-crds"
PROMETHEUS_OPERATOR_MODULE_DIR = Path(__file__).resolve().parent / "prometheus-operator"
PROMETHEUS_OPERATOR_PACKAGE = f"{PROMETHEUS_OPERATOR_MODULE}/cmd/operator"
PROMETHEUS_OPERATOR_BUILD_COMMAND = "python -m e2e.tools prometheus-operator"

KUBECONFORM_VERSION = "v0.8.0"
KUBECONFORM_PACKAGE = "github.com/yannh/kubeconform/cmd/kubeconform"
KUBECONFORM_BUILD_COMMAND = "python -m e2e.tools kubeconform"

ACTIONLINT_VERSION = "v1.7.12"
ACTIONLINT_PACKAGE = "github.com/rhysd/actionlint/cmd/actionlint"
ACTIONLINT_BUILD_COMMAND = "python -m e2e.tools actionlint"


def log(msg: str) -> None:
    print(f"[tools] {msg}", file=sys.stderr, flush=True)


def _require_go(what: str, command: str) -> None:
    gobuild.require_go(f"tools: {what} needs the 'go' command on PATH (Go >= 1.24); install Go, then run `{command}`")


def helm_path(version: str = HELM_VERSION) -> Path:
    """Where the cached helm binary of ``version`` lives (it may not exist yet)."""
    return cache_root() / "tools" / f"helm-{version}" / "helm"


def find_helm(version: str = HELM_VERSION) -> Path | None:
    """The cached helm binary, or None when it has not been built."""
    path = helm_path(version)
    return path if gobuild.is_executable(path) else None


def build_helm(version: str = HELM_VERSION, force: bool = False) -> Path:
    """Return the cached helm binary, building it with ``go install`` when missing (or ``force``)."""
    path = helm_path(version)
    if not force and find_helm(version):
        log(f"cached helm {version} at {path}")
        return path
    _require_go(f"building helm {version}", BUILD_COMMAND)
    log(f"building helm {version} into {path.parent} (cold: about 5 CPU-minutes)")
    start = time.monotonic()
    # the version stamps helm's Makefile sets (`helm version`, the KubeVersion `helm template` assumes)
    ldflags = " ".join(["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={version}",
                        *(f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{k}={v}" for pkg in ("chartutil", "lint/rules")
                          for k, v in (("Major", "1"), ("Minor", HELM_K8S_MINOR)))])
    gobuild.go_install(["-trimpath", "-ldflags", ldflags], [f"{HELM_PACKAGE}@{version}"], ["helm"], path.parent,
                       "tools")
    log(f"built helm {version} in {time.monotonic() - start:.0f} s")
    return path


def require_helm() -> Path:
    """The cached helm for tests: ``pytest.fail`` (never skip) with the build command when it is missing."""
    return gobuild.require_built(find_helm(), f"helm {HELM_VERSION} not found at {helm_path()}: run `{BUILD_COMMAND}` "
                                 "first (builds it with go install, about 5 CPU-minutes)")


def helm_template(helm: Path, chart: Path, release: str, namespace: str,
                  values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``helm template`` ``chart`` as ``release`` in ``namespace`` with ``values`` (a values file);
    return the rendered objects (empty documents dropped). Raises AssertionError with helm's stderr."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(values or {}, f)
        f.flush()
        proc = subprocess.run([str(helm), "template", release, str(chart), "--namespace", namespace,
                               "--values", f.name], capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"helm template failed ({proc.returncode}):\n{proc.stderr}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def prometheus_dir(version: str = PROMETHEUS_VERSION) -> Path:
    """The cache directory holding ``prometheus`` and ``promtool`` of module ``version`` (may not exist)."""
    return cache_root() / "tools" / f"prometheus-{version}"


def prometheus_release(version: str = PROMETHEUS_VERSION) -> str:
    """The Prometheus release a Go module version stands for: ``v0.316.0`` -> ``3.16.0``
    (Prometheus 3 publishes its Go module as ``v0.3XX.Y``)."""
    major_minor, patch = version.removeprefix("v0.").split(".")
    return f"{int(major_minor) // 100}.{int(major_minor) % 100}.{patch}"


def find_prometheus(version: str = PROMETHEUS_VERSION) -> Path | None:
    """The cache directory when both binaries are there, else None."""
    d = prometheus_dir(version)
    return d if all(gobuild.is_executable(d / b) for b in PROMETHEUS_BINARIES) else None


def build_prometheus(version: str = PROMETHEUS_VERSION, force: bool = False) -> Path:
    """Return the directory with ``prometheus`` and ``promtool``, building them with ``go install`` when
    missing (or ``force``). Version stamps as Prometheus' Makefile sets them (``prometheus --version``)."""
    d = prometheus_dir(version)
    if not force and find_prometheus(version):
        log(f"cached prometheus {version} at {d}")
        return d
    _require_go(f"building prometheus {version}", PROMETHEUS_BUILD_COMMAND)
    log(f"building prometheus + promtool {version} into {d} (cold: about 2-3 minutes of 2 cores)")
    start = time.monotonic()
    ldflags = gobuild.prometheus_ldflags(prometheus_release(version), version)
    packages = [f"{PROMETHEUS_MODULE}/cmd/{b}@{version}" for b in PROMETHEUS_BINARIES]
    gobuild.go_install(["-trimpath", "-tags", PROMETHEUS_TAGS, "-ldflags", ldflags], packages, PROMETHEUS_BINARIES, d,
                       "tools")
    log(f"built prometheus + promtool {version} in {time.monotonic() - start:.0f} s")
    return d


def prometheus_operator_crds_dir(version: str = PROMETHEUS_OPERATOR_VERSION) -> Path:
    """The cache directory of the Prometheus Operator CRD files of ``version`` (may not exist)."""
    return cache_root() / "tools" / f"prometheus-operator-crds-{version}"


def crd_file_name(plural: str) -> str:
    return f"monitoring.coreos.com_{plural}.yaml"


def find_prometheus_operator_crds(version: str = PROMETHEUS_OPERATOR_VERSION) -> Path | None:
    d = prometheus_operator_crds_dir(version)
    return d if all((d / crd_file_name(p)).is_file() for p in PROMETHEUS_OPERATOR_CRDS) else None


def _prometheus_operator_crd_source(version: str, cwd: Path | str) -> Path:
    """``example/prometheus-operator-crd/`` of the Prometheus Operator's module zip of ``version``."""
    module = gobuild.download_module(f"{PROMETHEUS_OPERATOR_MODULE}@{version}", cwd, "tools")
    return module / "example" / "prometheus-operator-crd"


def fetch_prometheus_operator_crds(version: str = PROMETHEUS_OPERATOR_VERSION, force: bool = False) -> Path:
    """Return the directory with the PodMonitor, ServiceMonitor and PrometheusRule CRDs of the Prometheus
    Operator ``version``, copied from its module zip (``go mod download -json``) when missing."""
    d = prometheus_operator_crds_dir(version)
    if not force and find_prometheus_operator_crds(version):
        log(f"cached Prometheus Operator CRDs {version} at {d}")
        return d
    _require_go(f"fetching the Prometheus Operator CRDs {version}", PROMETHEUS_OPERATOR_CRDS_COMMAND)
    src = _prometheus_operator_crd_source(version, "/")
    gobuild.copy_files([src / crd_file_name(plural) for plural in PROMETHEUS_OPERATOR_CRDS], d)
    log(f"copied {len(PROMETHEUS_OPERATOR_CRDS)} Prometheus Operator CRDs {version} into {d}")
    return d


def prometheus_operator_dir(version: str = PROMETHEUS_OPERATOR_VERSION) -> Path:
    """The cache directory of the Prometheus Operator ``version`` (``operator``, ``crds/``, ``stamp``; may not
    exist)."""
    return cache_root() / "tools" / f"prometheus-operator-{version}"


def prometheus_operator_wrapper_version(module_dir: Path = PROMETHEUS_OPERATOR_MODULE_DIR) -> str:
    """The Prometheus Operator version the wrapper module's go.mod requires (``v0.85.0``)."""
    return gobuild.required_version(module_dir, PROMETHEUS_OPERATOR_MODULE, "tools")


def find_prometheus_operator(version: str = PROMETHEUS_OPERATOR_VERSION) -> Path | None:
    """The cache directory when the binary, its CRDs and a current stamp are there, else None."""
    d = prometheus_operator_dir(version)
    ok = (gobuild.is_executable(d / "operator") and (d / "crds" / crd_file_name("prometheuses")).is_file()
          and gobuild.stamp_is_current(d, PROMETHEUS_OPERATOR_MODULE_DIR))
    return d if ok else None


def build_prometheus_operator(force: bool = False) -> Path:
    """Return the cache directory with the Prometheus Operator's ``operator`` binary and ``crds/``, building it
    with ``go build`` in the wrapper module when missing, stale (go.mod/go.sum changed) or ``force``. Version
    stamps as its Makefile sets them (``operator --version``)."""
    module_dir = PROMETHEUS_OPERATOR_MODULE_DIR
    version = prometheus_operator_wrapper_version(module_dir)
    d = prometheus_operator_dir(version)
    if not force and find_prometheus_operator(version):
        log(f"cached Prometheus Operator {version} at {d}")
        return d
    _require_go(f"building the Prometheus Operator {version}", PROMETHEUS_OPERATOR_BUILD_COMMAND)
    src = _prometheus_operator_crd_source(version, module_dir)
    gobuild.copy_files(sorted(src.glob("monitoring.coreos.com_*.yaml")), d / "crds")
    log(f"building {PROMETHEUS_OPERATOR_PACKAGE}@{version} into {d} (cold: about 4 minutes of 2 cores)")
    start = time.monotonic()
    ldflags = gobuild.prometheus_ldflags(version.removeprefix("v"), version)
    tmp = d / ".operator.tmp"
    gobuild.go_build(module_dir, ldflags, [PROMETHEUS_OPERATOR_PACKAGE], str(tmp), [tmp], "tools")
    os.replace(tmp, d / "operator")  # atomic: a half-written binary is never at the path
    gobuild.write_stamp(d, module_dir)
    log(f"built the Prometheus Operator {version} in {time.monotonic() - start:.0f} s")
    return d


def require_promtool() -> Path:
    """The cached promtool for tests: ``pytest.fail`` (never skip) with the build command when missing."""
    return require_prometheus().parent / "promtool"


def require_prometheus() -> Path:
    """The cached prometheus binary for tests: ``pytest.fail`` (never skip) when missing."""
    d = gobuild.require_built(find_prometheus(), f"prometheus/promtool {PROMETHEUS_VERSION} not found at "
                              f"{prometheus_dir()}: run `{PROMETHEUS_BUILD_COMMAND}` first")
    return d / "prometheus"


def require_prometheus_operator_crds() -> list[Path]:
    """The cached Prometheus Operator CRD files for tests: ``pytest.fail`` (never skip) when missing."""
    d = gobuild.require_built(find_prometheus_operator_crds(), f"Prometheus Operator CRDs {PROMETHEUS_OPERATOR_VERSION}"
                              f" not found at {prometheus_operator_crds_dir()}: run "
                              f"`{PROMETHEUS_OPERATOR_CRDS_COMMAND}` first")
    return [d / crd_file_name(p) for p in PROMETHEUS_OPERATOR_CRDS]


def require_prometheus_operator() -> Path:
    """The cached Prometheus Operator directory for tests (``operator``, ``crds/``): ``pytest.fail`` (never skip)
    with the build command when missing."""
    return gobuild.require_built(find_prometheus_operator(), f"the Prometheus Operator {PROMETHEUS_OPERATOR_VERSION} "
                                 f"(go build, about 4 minutes) not found at {prometheus_operator_dir()}: run "
                                 f"`{PROMETHEUS_OPERATOR_BUILD_COMMAND}` first")


def kubeconform_path(version: str = KUBECONFORM_VERSION) -> Path:
    """Where the cached kubeconform binary of ``version`` lives (it may not exist yet)."""
    return cache_root() / "tools" / f"kubeconform-{version}" / "kubeconform"


def _go_install(name: str, package: str, version: str, path: Path, command: str, force: bool) -> Path:
    """Return the cached binary ``path``, building it with ``go install package@version`` when missing (or
    ``force``). Raises ``SystemExit`` when ``go`` is missing or the build fails (``command`` named)."""
    if not force and gobuild.is_executable(path):
        log(f"cached {name} {version} at {path}")
        return path
    _require_go(f"building {name} {version}", command)
    start = time.monotonic()
    gobuild.go_install(["-trimpath", "-ldflags", "-s -w"], [f"{package}@{version}"], [name], path.parent, "tools")
    log(f"built {name} {version} in {time.monotonic() - start:.0f} s")
    return path


def build_kubeconform(version: str = KUBECONFORM_VERSION, force: bool = False) -> Path:
    """Return the cached kubeconform binary, building it with ``go install`` when missing (or ``force``)."""
    return _go_install("kubeconform", KUBECONFORM_PACKAGE, version, kubeconform_path(version),
                       KUBECONFORM_BUILD_COMMAND, force)


def actionlint_path(version: str = ACTIONLINT_VERSION) -> Path:
    """Where the cached actionlint binary of ``version`` lives (it may not exist yet)."""
    return cache_root() / "tools" / f"actionlint-{version}" / "actionlint"


def build_actionlint(version: str = ACTIONLINT_VERSION, force: bool = False) -> Path:
    """Return the cached actionlint binary (the GitHub Actions workflow linter), building it with ``go install``
    when missing (or ``force``)."""
    return _go_install("actionlint", ACTIONLINT_PACKAGE, version, actionlint_path(version), ACTIONLINT_BUILD_COMMAND,
                       force)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m e2e.tools", description=__doc__.split("\n")[0])
    parser.add_argument("tool", choices=["helm", "prometheus", "prometheus-operator-crds",
                                         "prometheus-operator", "kubeconform", "actionlint"],
                        help="the tool to build (or reuse) and print the path of")
    parser.add_argument("--version", help=f"tool version (defaults: helm {HELM_VERSION}, prometheus "
                        f"{PROMETHEUS_VERSION}, prometheus-operator-crds {PROMETHEUS_OPERATOR_VERSION}, kubeconform "
                        f"{KUBECONFORM_VERSION}, actionlint {ACTIONLINT_VERSION})")
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    args = parser.parse_args(argv)
    if args.tool == "helm":
        print(build_helm(args.version or HELM_VERSION, args.force))
    elif args.tool == "kubeconform":
        print(build_kubeconform(args.version or KUBECONFORM_VERSION, args.force))
    elif args.tool == "actionlint":
        print(build_actionlint(args.version or ACTIONLINT_VERSION, args.force))
    elif args.tool == "prometheus":
        print(build_prometheus(args.version or PROMETHEUS_VERSION, args.force))
    elif args.tool == "prometheus-operator":
        if args.version and args.version != prometheus_operator_wrapper_version():
            raise SystemExit("tools: the Prometheus Operator's version is the wrapper module's "
                             f"({PROMETHEUS_OPERATOR_MODULE_DIR / 'go.mod'}); change it there")
        print(build_prometheus_operator(args.force))
    else:
        print(fetch_prometheus_operator_crds(args.version or PROMETHEUS_OPERATOR_VERSION, args.force))


if __name__ == "__main__":
    main()
