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
import tempfile
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
PROMETHEUS_OPERATOR_PACKAGE = f"{PROMETHEUS_OPERATOR_MODULE}/cmd/operator"
PROMETHEUS_OPERATOR_BUILD_COMMAND = "python -m e2e.tools prometheus-operator"
PROMETHEUS_OPERATOR_WRAPPER = gobuild.WrapperModule(
    Path(__file__).resolve().parent / "prometheus-operator", PROMETHEUS_OPERATOR_MODULE, "tools/prometheus-operator",
    "tools", PROMETHEUS_OPERATOR_BUILD_COMMAND, go="1.24")
PROMETHEUS_OPERATOR_MODULE_DIR = PROMETHEUS_OPERATOR_WRAPPER.directory

GO_INSTALLED = {"kubeconform": ("v0.8.0", "github.com/yannh/kubeconform/cmd/kubeconform"),
                "actionlint": ("v1.7.12", "github.com/rhysd/actionlint/cmd/actionlint")}
"""The tools a plain ``go install <package>@<version>`` builds: name → (version, package); each is built into
``<cache>/tools/<name>-<version>/<name>`` by ``python -m e2e.tools <name>``."""
KUBECONFORM_VERSION = GO_INSTALLED["kubeconform"][0]
ACTIONLINT_VERSION = GO_INSTALLED["actionlint"][0]

log = gobuild.logger("tools")


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
    # the version stamps helm's Makefile sets (`helm version`, the KubeVersion `helm template` assumes)
    ldflags = " ".join(["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={version}",
                        *(f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{k}={v}" for pkg in ("chartutil", "lint/rules")
                          for k, v in (("Major", "1"), ("Minor", HELM_K8S_MINOR)))])
    with gobuild.timed(log, f"building helm {version} into {path.parent} (cold: about 5 CPU-minutes)",
                       f"built helm {version}"):
        gobuild.go_install(["-trimpath", "-ldflags", ldflags], [f"{HELM_PACKAGE}@{version}"], ["helm"], path.parent,
                           "tools")
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
    ldflags = gobuild.prometheus_ldflags(prometheus_release(version), version)
    packages = [f"{PROMETHEUS_MODULE}/cmd/{b}@{version}" for b in PROMETHEUS_BINARIES]
    with gobuild.timed(log, f"building prometheus + promtool {version} into {d} (cold: about 2-3 minutes of 2 cores)",
                       f"built prometheus + promtool {version}"):
        gobuild.go_install(["-trimpath", "-tags", PROMETHEUS_TAGS, "-ldflags", ldflags], packages, PROMETHEUS_BINARIES,
                           d, "tools")
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


prometheus_operator_wrapper_version = PROMETHEUS_OPERATOR_WRAPPER.version
"""The Prometheus Operator version the wrapper module's go.mod requires (``v0.85.0``)."""


def find_prometheus_operator(version: str = PROMETHEUS_OPERATOR_VERSION) -> Path | None:
    """The cache directory when the binary, its CRDs and a current stamp are there, else None."""
    d = prometheus_operator_dir(version)
    ok = (gobuild.is_executable(d / "operator") and (d / "crds" / crd_file_name("prometheuses")).is_file()
          and PROMETHEUS_OPERATOR_WRAPPER.stamp_is_current(d))
    return d if ok else None


def build_prometheus_operator(force: bool = False) -> Path:
    """Return the cache directory with the Prometheus Operator's ``operator`` binary and ``crds/``, building it
    with ``go build`` in the wrapper module when missing, stale (go.mod/go.sum changed) or ``force``. Version
    stamps as its Makefile sets them (``operator --version``)."""
    wrapper = PROMETHEUS_OPERATOR_WRAPPER
    version = wrapper.version()
    d = prometheus_operator_dir(version)
    if not force and find_prometheus_operator(version):
        log(f"cached Prometheus Operator {version} at {d}")
        return d
    _require_go(f"building the Prometheus Operator {version}", PROMETHEUS_OPERATOR_BUILD_COMMAND)
    src = _prometheus_operator_crd_source(version, wrapper.directory)
    gobuild.copy_files(sorted(src.glob("monitoring.coreos.com_*.yaml")), d / "crds")
    with gobuild.timed(log, f"building {PROMETHEUS_OPERATOR_PACKAGE}@{version} into {d} (cold: about 4 minutes of 2 "
                       "cores)", f"built the Prometheus Operator {version}"):
        ldflags = gobuild.prometheus_ldflags(version.removeprefix("v"), version)
        tmp = d / ".operator.tmp"
        wrapper.build(ldflags, [PROMETHEUS_OPERATOR_PACKAGE], str(tmp), [tmp])
        os.replace(tmp, d / "operator")  # atomic: a half-written binary is never at the path
        wrapper.write_stamp(d)
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


def installed_path(name: str, version: str | None = None) -> Path:
    """Where the cached binary of :data:`GO_INSTALLED` tool ``name`` at ``version`` (default: the pinned one) lives
    (it may not exist yet)."""
    return cache_root() / "tools" / f"{name}-{version or GO_INSTALLED[name][0]}" / name


def build_installed(name: str, version: str | None = None, force: bool = False) -> Path:
    """Return the cached binary of :data:`GO_INSTALLED` tool ``name``, building it with ``go install
    package@version`` when missing (or ``force``). Raises ``SystemExit`` when ``go`` is missing or the build fails."""
    version = version or GO_INSTALLED[name][0]
    path = installed_path(name, version)
    if not force and gobuild.is_executable(path):
        log(f"cached {name} {version} at {path}")
        return path
    _require_go(f"building {name} {version}", f"python -m e2e.tools {name}")
    with gobuild.timed(log, None, f"built {name} {version}"):
        gobuild.go_install(["-trimpath", "-ldflags", "-s -w"], [f"{GO_INSTALLED[name][1]}@{version}"], [name],
                           path.parent, "tools")
    return path


def kubeconform_path(version: str = KUBECONFORM_VERSION) -> Path:
    """Where the cached kubeconform binary of ``version`` lives (it may not exist yet)."""
    return installed_path("kubeconform", version)


def build_kubeconform(version: str = KUBECONFORM_VERSION, force: bool = False) -> Path:
    """Return the cached kubeconform binary, building it with ``go install`` when missing (or ``force``)."""
    return build_installed("kubeconform", version, force)


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
    elif args.tool in GO_INSTALLED:
        print(build_installed(args.tool, args.version, args.force))
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
