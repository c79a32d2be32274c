"""Build KEDA's operator and metrics API server (``github.com/kedacore/keda/v2``) from the Go module proxy, and copy
its CRDs, into a cache outside the repository.

Usage::

    python -m e2e.build_keda          # build (or reuse) both binaries and the CRDs, print the cache directory
    python -m e2e.build_keda crds     # only the CRDs (seconds: the module zip), print their directory

Why a wrapper module: KEDA's go.mod has a ``replace`` directive (``nexus-proto-annotations``), which a module
required from elsewhere cannot pass on, so ``go install …@v2.21.0`` cannot build it. ``e2e/keda/go.mod`` copies that
replace, requires ``cmd/operator`` and ``cmd/adapter`` as ``tool``s and pins the whole graph in its committed
``go.sum``; one ``go build -o bin/ …/cmd/operator …/cmd/adapter`` builds both, sharing every package they have in
common (all the scalers). Cold, the module download is about 4 GB (every scaler's cloud SDK) and the compile takes
the better part of half an hour on 2 cores (``.ci/run`` starts it in the background).

Cache: ``${XDG_CACHE_HOME:-$HOME/.cache}/sglang-operator/keda-<version>/``:

- ``bin/operator``: KEDA's operator (``keda`` in KEDA's images: the ScaledObject controller, which makes the HPA);
- ``bin/adapter``: KEDA's metrics API server (``keda-adapter``: serves ``external.metrics.k8s.io`` to the HPA);
- ``config/crds/keda.sh_*.yaml``: ``config/crd/bases/`` of the module;
- ``stamp``: hash of go.mod and go.sum; a mismatch rebuilds.

and ``<cache>/tools/keda-crds-<version>/keda.sh_scaledobjects.yaml`` (and the other CRDs): what the manifest lint
and the schema tests validate the rendered ScaledObject against (no build needed).

Errors: ``SystemExit`` with a message when ``go`` is missing or the download/build fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from e2e import gobuild
from e2e.build_k8s import cache_root

MODULE = "github.com/kedacore/keda/v2"
BUILD_COMMAND = "python -m e2e.build_keda"
WRAPPER = gobuild.WrapperModule(Path(__file__).resolve().parent / "keda", MODULE, "keda", "build-keda", BUILD_COMMAND,
                                go="1.26")
PACKAGES = (f"{MODULE}/cmd/operator", f"{MODULE}/cmd/adapter")
BINARIES = ("operator", "adapter")
CRD_SOURCE = "config/crd/bases"
SCALED_OBJECT_CRD = "keda.sh_scaledobjects.yaml"
CRDS_COMMAND = "python -m e2e.build_keda crds"

log = gobuild.logger("build-keda")


def crds_dir(version: str | None = None) -> Path:
    """``<cache>/tools/keda-crds-<version>`` (may not exist yet)."""
    return cache_root() / "tools" / f"keda-crds-{version or WRAPPER.version()}"


def find(version: str | None = None) -> Path | None:
    """The cache directory when both binaries, the CRDs and a current stamp are there, else None."""
    d = WRAPPER.cache_dir(version)
    ok = (all(gobuild.is_executable(d / "bin" / b) for b in BINARIES)
          and (d / "config" / "crds" / SCALED_OBJECT_CRD).is_file() and WRAPPER.stamp_is_current(d))
    return d if ok else None


def find_crds(version: str | None = None) -> Path | None:
    d = crds_dir(version)
    return d if (d / SCALED_OBJECT_CRD).is_file() else None


def _copy_crds(src: Path, dest: Path) -> None:
    gobuild.copy_files(sorted((src / CRD_SOURCE).glob("*.yaml")), dest)


def fetch_crds(force: bool = False) -> Path:
    """The directory with KEDA's CRDs (``keda.sh_scaledobjects.yaml``, …), copied from the module zip when missing."""
    version = WRAPPER.version()
    if not force and (found := find_crds(version)):
        return found
    d = crds_dir(version)
    _copy_crds(WRAPPER.source(version), d)
    log(f"copied KEDA {version} CRDs into {d}")
    return d


def build(force: bool = False) -> Path:
    """Build or reuse ``bin/operator`` and ``bin/adapter`` (one ``go build``) and the CRDs; return the cache
    directory. Logs the build's wall time."""
    version = WRAPPER.version()
    if not force and (found := find(version)):
        log(f"cached KEDA {version} in {found}")
        return found
    d = WRAPPER.cache_dir(version)
    (d / "config").mkdir(parents=True, exist_ok=True)
    _copy_crds(WRAPPER.source(version), d / "config" / "crds")
    tmp = d / ".bin.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with gobuild.timed(log, f"building {', '.join(PACKAGES)}@{version} into {d / 'bin'} in one go build (cold: about "
                       "4 GB of modules, then the better part of half an hour of 2 cores)",
                       f"built KEDA {version} (operator + adapter)"):
        stamp_pkg = f"{MODULE}/version"
        ldflags = f"-s -w -X {stamp_pkg}.Version={version.removeprefix('v')} -X {stamp_pkg}.GitCommit=module-proxy"
        WRAPPER.build(ldflags, PACKAGES, f"{tmp}/", [tmp / b for b in BINARIES])
        shutil.rmtree(d / "bin", ignore_errors=True)
        os.replace(tmp, d / "bin")  # atomic: half-written binaries are never at the path
        WRAPPER.write_stamp(d)
    return d


def require_crds() -> Path:
    """The CRD directory for tests: ``pytest.fail`` (never skip) with the command when missing."""
    return gobuild.require_built(find_crds(), f"KEDA {WRAPPER.version()}'s CRDs are not in {crds_dir()}: run "
                                 f"`{CRDS_COMMAND}` first (seconds)")


def require() -> Path:
    """The cache directory for tests: ``pytest.fail`` (never skip) with the build command when missing."""
    return gobuild.require_built(find(), f"KEDA {WRAPPER.version()} is not built in {WRAPPER.cache_dir()}: run "
                                 f"`{BUILD_COMMAND}` first (go build, the better part of half an hour cold)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=BUILD_COMMAND, description=__doc__.split("\n")[0])
    parser.add_argument("what", nargs="?", choices=["all", "crds"], default="all",
                        help="all: both binaries and the CRDs (default); crds: the CRDs only")
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    args = parser.parse_args(argv)
    print(fetch_crds(args.force) if args.what == "crds" else build(args.force))


if __name__ == "__main__":
    main()
