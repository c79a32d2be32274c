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
from pathlib import Path

from e2e import gobuild

MODULE = "sigs.k8s.io/lws"
BUILD_COMMAND = "python -m e2e.build_lws"
WRAPPER = gobuild.WrapperModule(Path(__file__).resolve().parent / "lws", MODULE, "lws", "build-lws", BUILD_COMMAND,
                                go="1.24")
MAIN_PACKAGE = "sigs.k8s.io/lws/cmd"
BINARY = "lws-manager"
CRD_SOURCE = "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
WEBHOOK_SOURCE = "config/webhook/manifests.yaml"

log = gobuild.logger("build-lws")
committed_version = WRAPPER.version
"""The LWS version the wrapper's go.mod requires (``v0.7.0``)."""
cache_dir = WRAPPER.cache_dir
"""``<cache>/lws-<version>`` (may not exist yet)."""
module_source = WRAPPER.source
"""The extracted module directory of ``sigs.k8s.io/lws@version`` (``go mod download -json``)."""


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
          and webhooks_path(version).is_file() and WRAPPER.stamp_is_current(d))
    return d if ok else None


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
    with gobuild.timed(log, f"building {MAIN_PACKAGE}@{version} into {d / 'bin'} (cold: about 2 minutes of 2 cores)",
                       f"built LWS {version}"):
        stamp_pkg = "sigs.k8s.io/lws/pkg/version"
        ldflags = f"-s -w -X {stamp_pkg}.GitVersion={version} -X {stamp_pkg}.GitCommit=module-proxy"
        tmp = d / "bin" / f".{BINARY}.tmp"
        WRAPPER.build(ldflags, [MAIN_PACKAGE], str(tmp), [tmp])
        os.replace(tmp, binary_path(version))  # atomic: a half-written binary is never at the path
        WRAPPER.write_stamp(d)
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
