"""Build the LeaderWorkerSet controller (``sigs.k8s.io/lws``) from the Go module proxy, and copy its CRD and
webhook manifests, into a cache outside the repository.

Usage::

    python -m e2e.build_lws          # build (or reuse) and print the cache directory

Why a wrapper module: ``go install sigs.k8s.io/lws/cmd@v0.7.0`` fails (the go command looks up deprecations in
the module's version list, which the proxy refuses; the exact version is served). ``e2e/lws/go.mod`` requires
the module as a ``tool`` and pins the whole graph in its committed ``go.sum``; ``go build sigs.k8s.io/lws/cmd``
from there builds LWS' own ``main`` (``cmd/main.go``), version stamps as its Makefile sets them.

Cache: ``${XDG_CACHE_HOME:-$HOME/.cache}/sglang-operator/lws-<version>/``:

- ``bin/lws-manager``: the controller manager (controllers and webhooks in one process);
- ``config/crd.yaml``: ``config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml`` of the module;
- ``config/webhooks.yaml``: ``config/webhook/manifests.yaml`` of the module (the launcher points its
  ``clientConfig`` at a loopback URL, :mod:`e2e.cluster.lws`);
- ``stamp``: hash of go.mod and go.sum; a mismatch rebuilds.

Errors: ``SystemExit`` with a message when ``go`` is missing or the download/build fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from e2e import gobuild
from e2e.build_k8s import cache_root

MODULE_DIR = Path(__file__).resolve().parent / "lws"
MODULE = "sigs.k8s.io/lws"
MAIN_PACKAGE = "sigs.k8s.io/lws/cmd"
BINARY = "lws-manager"
CRD_SOURCE = "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
WEBHOOK_SOURCE = "config/webhook/manifests.yaml"
BUILD_COMMAND = "python -m e2e.build_lws"


def log(msg: str) -> None:
    print(f"[build-lws] {msg}", file=sys.stderr, flush=True)


def committed_version(module_dir: Path = MODULE_DIR) -> str:
    """The LWS version the wrapper's go.mod requires (``v0.7.0``)."""
    return gobuild.required_version(module_dir, MODULE, "build-lws")


def cache_dir(version: str | None = None) -> Path:
    """``<cache>/lws-<version>`` (may not exist yet)."""
    return cache_root() / f"lws-{version or committed_version()}"


def binary_path(version: str | None = None) -> Path:
    return cache_dir(version) / "bin" / BINARY


def crd_path(version: str | None = None) -> Path:
    return cache_dir(version) / "config" / "crd.yaml"


def webhooks_path(version: str | None = None) -> Path:
    return cache_dir(version) / "config" / "webhooks.yaml"


def find(version: str | None = None) -> Path | None:
    """The cache directory when the binary, both manifests and a current stamp are there, else None."""
    d = cache_dir(version)
    ok = (gobuild.is_executable(binary_path(version)) and crd_path(version).is_file()
          and webhooks_path(version).is_file() and gobuild.stamp_is_current(d, MODULE_DIR))
    return d if ok else None


def module_source(version: str) -> Path:
    """The extracted module directory of ``sigs.k8s.io/lws@version`` (``go mod download -json``)."""
    gobuild.require_go(f"build-lws: the 'go' command is not on PATH; install Go >= 1.24, then run `{BUILD_COMMAND}`")
    return gobuild.download_module(f"{MODULE}@{version}", MODULE_DIR, "build-lws")


def build(force: bool = False) -> Path:
    """Build or reuse ``lws-manager`` and the manifests; return the cache directory."""
    version = committed_version()
    if not force and (found := find(version)):
        log(f"cached LWS {version} in {found}")
        return found
    d = cache_dir(version)
    (d / "bin").mkdir(parents=True, exist_ok=True)
    (d / "config").mkdir(parents=True, exist_ok=True)
    src = module_source(version)
    for source, target in ((CRD_SOURCE, crd_path(version)), (WEBHOOK_SOURCE, webhooks_path(version))):
        shutil.copyfile(src / source, target)
    log(f"building {MAIN_PACKAGE}@{version} into {d / 'bin'} (cold: about 2 minutes of 2 cores)")
    start = time.monotonic()
    stamp_pkg = "sigs.k8s.io/lws/pkg/version"
    ldflags = f"-s -w -X {stamp_pkg}.GitVersion={version} -X {stamp_pkg}.GitCommit=module-proxy"
    tmp = d / "bin" / f".{BINARY}.tmp"
    gobuild.go_build(MODULE_DIR, ldflags, [MAIN_PACKAGE], str(tmp), [tmp], "build-lws")
    os.replace(tmp, binary_path(version))  # atomic: a half-written binary is never at the path
    gobuild.write_stamp(d, MODULE_DIR)
    log(f"built LWS {version} in {time.monotonic() - start:.0f} s")
    return d


def require() -> Path:
    """The cache directory for tests: ``pytest.fail`` (never skip) with the build command when missing."""
    return gobuild.require_built(find(), f"the LeaderWorkerSet controller {committed_version()} is not built in "
                                 f"{cache_dir()}: run `{BUILD_COMMAND}` first (go build, about 2 minutes)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=BUILD_COMMAND, description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    args = parser.parse_args(argv)
    print(build(args.force))


if __name__ == "__main__":
    main()
