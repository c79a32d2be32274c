"""Developer tools the tests need that are not Python packages, built from the Go module proxy into a
cache outside the repository and reused when present.

Usage::

    python -m e2e.tools helm     # build (or reuse) helm and print its path

Cache: ``${XDG_CACHE_HOME:-$HOME/.cache}/sglang-operator/tools/helm-<version>/helm``, built with
``GOBIN=<dir> go install helm.sh/helm/v3/cmd/helm@<version>`` (cold: about 5 CPU-minutes).

Errors: ``SystemExit`` with a message when ``go`` is not on PATH or the build fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.build_k8s import cache_root

HELM_VERSION = "v3.19.0"
HELM_PACKAGE = "helm.sh/helm/v3/cmd/helm"
HELM_K8S_MINOR = "34"  # helm v3.19.0's go.mod: k8s.io/client-go v0.34.0 (helm's default Capabilities.KubeVersion)
BUILD_COMMAND = "python -m e2e.tools helm"


def log(msg: str) -> None:
    print(f"[tools] {msg}", file=sys.stderr, flush=True)


def helm_path(version: str = HELM_VERSION) -> Path:
    """Where the cached helm binary of ``version`` lives (it may not exist yet)."""
    return cache_root() / "tools" / f"helm-{version}" / "helm"


def find_helm(version: str = HELM_VERSION) -> Path | None:
    """The cached helm binary, or None when it has not been built."""
    path = helm_path(version)
    return path if path.is_file() and os.access(path, os.X_OK) else None


def build_helm(version: str = HELM_VERSION, force: bool = False) -> Path:
    """Return the cached helm binary, building it with ``go install`` when missing (or ``force``)."""
    path = helm_path(version)
    if not force and find_helm(version):
        log(f"cached helm {version} at {path}")
        return path
    if shutil.which("go") is None:
        raise SystemExit(f"tools: building helm {version} needs the 'go' command on PATH (Go >= 1.24); "
                         f"install Go, then run `{BUILD_COMMAND}`")
    gobin = path.parent / "tmp-gobin"
    shutil.rmtree(gobin, ignore_errors=True)
    gobin.mkdir(parents=True)
    log(f"building helm {version} into {path.parent} (cold: about 5 CPU-minutes)")
    start = time.monotonic()
    env = {**os.environ, "GOBIN": str(gobin), "GOWORK": "off", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    # the version stamps helm's Makefile sets (`helm version`, the KubeVersion `helm template` assumes)
    ldflags = " ".join(["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={version}",
                        *(f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{k}={v}" for pkg in ("chartutil", "lint/rules")
                          for k, v in (("Major", "1"), ("Minor", HELM_K8S_MINOR)))])
    proc = subprocess.run(["go", "install", "-trimpath", "-ldflags", ldflags, f"{HELM_PACKAGE}@{version}"],
                          env=env, cwd="/", capture_output=True, text=True)
    if proc.returncode != 0 or not (gobin / "helm").is_file():
        raise SystemExit(f"tools: go install {HELM_PACKAGE}@{version} failed:\n{proc.stderr.strip()}")
    os.replace(gobin / "helm", path)  # atomic: a half-written binary is never at `path`
    shutil.rmtree(gobin, ignore_errors=True)
    log(f"built helm {version} in {time.monotonic() - start:.0f} s")
    return path


def require_helm() -> Path:
    """The cached helm for tests: ``pytest.fail`` (never skip) with the build command when it is missing."""
    import pytest

    path = find_helm()
    if path is None:
        pytest.fail(f"helm {HELM_VERSION} not found at {helm_path()}: run `{BUILD_COMMAND}` first "
                    "(builds it with go install, about 5 CPU-minutes)", pytrace=False)
    return path


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m e2e.tools", description=__doc__.split("\n")[0])
    parser.add_argument("tool", choices=["helm"], help="the tool to build (or reuse) and print the path of")
    parser.add_argument("--version", default=HELM_VERSION, help=f"tool version (default {HELM_VERSION})")
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    args = parser.parse_args(argv)
    print(build_helm(args.version, args.force))


if __name__ == "__main__":
    main()
