"""The steps the e2e builds from the Go module proxy share (:mod:`e2e.build_keda`, :mod:`e2e.build_lws`,
:mod:`e2e.tools`): the ``go`` environment, ``go mod download``, ``go install``/``go build`` into a cache directory
with the result moved into place atomically, the stamp of a wrapper module, and the ``pytest.fail`` a test gets
when a build is missing.

Every build runs with ``GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod``; ``prefix`` names the caller in messages
(``build-keda``, ``build-lws``, ``tools``). Errors: ``SystemExit`` with ``go``'s stderr when a command fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from e2e.build_k8s import cache_root

GO_ENV = {"GOWORK": "off", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
PROMETHEUS_VERSION_PACKAGE = "github.com/prometheus/common/version"
"""Where Prometheus' projects keep their version stamps (``--version``)."""


def go_env(gobin: Path | None = None) -> dict[str, str]:
    """This process' environment with :data:`GO_ENV` (and ``GOBIN=gobin`` when given)."""
    return {**os.environ, **GO_ENV, **({"GOBIN": str(gobin)} if gobin is not None else {})}


def require_go(message: str) -> None:
    """Raise ``SystemExit(message)`` when ``go`` is not on PATH."""
    if shutil.which("go") is None:
        raise SystemExit(message)


def run_go(*args: str, cwd: Path | str, gobin: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``go ARGS`` in ``cwd`` with :func:`go_env`, output captured (never raises on a failed command)."""
    return subprocess.run(["go", *args], cwd=cwd, env=go_env(gobin), capture_output=True, text=True)


def is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def required_version(module_dir: Path, module: str, prefix: str) -> str:
    """The version of ``module`` the wrapper module's ``go.mod`` in ``module_dir`` requires (``v0.7.0``).
    Raises ``SystemExit`` when it does not require it."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", (module_dir / "go.mod").read_text(), re.M)
    if found is None:
        raise SystemExit(f"{prefix}: {module_dir}/go.mod does not require {module}")
    return found.group(1)


def module_stamp(module_dir: Path) -> str:
    """The hash of the wrapper module's go.mod and go.sum (16 hex digits): a cached build's ``stamp``."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((module_dir / name).read_bytes())
    return digest.hexdigest()[:16]


def stamp_is_current(cache: Path, module_dir: Path) -> bool:
    """True when ``cache/stamp`` holds :func:`module_stamp` of ``module_dir``."""
    stamp = cache / "stamp"
    return stamp.is_file() and stamp.read_text().strip() == module_stamp(module_dir)


def write_stamp(cache: Path, module_dir: Path) -> None:
    (cache / "stamp").write_text(module_stamp(module_dir) + "\n")


def download_module(ref: str, cwd: Path | str, prefix: str) -> Path:
    """The extracted directory of module ``ref`` (``path@version``; ``go mod download -json`` in ``cwd``)."""
    proc = run_go("mod", "download", "-json", ref, cwd=cwd)
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        info = {"Error": proc.stderr.strip() or "no output"}
    if proc.returncode != 0 or "Error" in info:
        raise SystemExit(f"{prefix}: go mod download {ref} failed: {info.get('Error', proc.stderr.strip())}")
    return Path(info["Dir"])


def copy_files(files: Iterable[Path], dest: Path) -> None:
    """Make ``dest`` a directory holding exactly ``files`` (filled beside it, then renamed into place)."""
    tmp = dest.parent / f".{dest.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in files:
        shutil.copyfile(f, tmp / f.name)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


def go_install(flags: Sequence[str], packages: Sequence[str], binaries: Sequence[str], dest: Path,
               prefix: str) -> None:
    """``go install FLAGS PACKAGES`` into a fresh ``dest/tmp-gobin``, then each of ``binaries`` moved into ``dest``
    (atomic: a half-written binary is never in ``dest``)."""
    gobin = dest / "tmp-gobin"
    shutil.rmtree(gobin, ignore_errors=True)
    gobin.mkdir(parents=True)
    proc = run_go("install", *flags, *packages, cwd="/", gobin=gobin)
    if proc.returncode != 0 or not all((gobin / b).is_file() for b in binaries):
        raise SystemExit(f"{prefix}: go install {' '.join(packages)} failed:\n{proc.stderr.strip()}")
    for b in binaries:
        os.replace(gobin / b, dest / b)
    shutil.rmtree(gobin, ignore_errors=True)


def go_build(module_dir: Path, ldflags: str, packages: Sequence[str], output: str, built: Sequence[Path],
             prefix: str) -> None:
    """``go build -trimpath -ldflags LDFLAGS -o OUTPUT PACKAGES`` in the wrapper module ``module_dir``; raises
    ``SystemExit`` unless it succeeds and every file of ``built`` is there."""
    proc = run_go("build", "-trimpath", "-ldflags", ldflags, "-o", output, *packages, cwd=module_dir)
    if proc.returncode != 0 or not all(p.is_file() for p in built):
        raise SystemExit(f"{prefix}: go build {' '.join(packages)} failed:\n{proc.stderr.strip()}")


def prometheus_ldflags(version: str, revision: str) -> str:
    """``-ldflags`` with the version stamps Prometheus' Makefiles set (:data:`PROMETHEUS_VERSION_PACKAGE`)."""
    stamp = PROMETHEUS_VERSION_PACKAGE
    return " ".join(["-s", "-w", f"-X {stamp}.Version={version}", f"-X {stamp}.Revision={revision}",
                     f"-X {stamp}.Branch=HEAD", f"-X {stamp}.BuildUser=sglang-operator-e2e",
                     f"-X {stamp}.BuildDate={time.strftime('%Y%m%d-%H:%M:%S', time.gmtime())}"])


def require_built(found: Path | None, message: str) -> Path:
    """``found`` for a test; ``pytest.fail(message)`` (never skip; the message names the build command) when it is
    None."""
    import pytest

    if found is None:
        pytest.fail(message, pytrace=False)
    return found


def logger(prefix: str) -> Callable[[str], None]:
    """A function printing ``[prefix] message`` lines on stderr (a build's progress)."""
    def log(msg: str) -> None:
        print(f"[{prefix}] {msg}", file=sys.stderr, flush=True)
    return log


@contextlib.contextmanager
def timed(log: Callable[[str], None], building: str | None, built: str) -> Iterator[None]:
    """Log ``building`` (when given), run the block, then log ``<built> in <seconds> s``."""
    if building is not None:
        log(building)
    start = time.monotonic()
    yield
    log(f"{built} in {time.monotonic() - start:.0f} s")


@dataclass(frozen=True)
class WrapperModule:
    """A wrapper Go module of the repository (``directory``: a ``go.mod`` requiring ``module`` as a ``tool``, a
    ``go.sum`` pinning the graph) and its build's cache directory ``<cache>/<cache_name>-<version>``. ``prefix``
    names the build in messages, ``build_command`` is what a developer runs, ``go`` the Go release it needs."""

    directory: Path
    module: str
    cache_name: str
    prefix: str
    build_command: str
    go: str

    def version(self) -> str:
        """The version of :attr:`module` the wrapper's go.mod requires. Raises ``SystemExit`` when it has none."""
        return required_version(self.directory, self.module, self.prefix)

    def cache_dir(self, version: str | None = None) -> Path:
        """``<cache>/<cache_name>-<version>`` (default: the required version; may not exist yet)."""
        return cache_root() / f"{self.cache_name}-{version or self.version()}"

    def require_go(self) -> None:
        require_go(f"{self.prefix}: the 'go' command is not on PATH; install Go >= {self.go}, then run "
                   f"`{self.build_command}`")

    def source(self, version: str) -> Path:
        """The extracted module directory of ``module@version`` (``go mod download -json`` in the wrapper)."""
        self.require_go()
        return download_module(f"{self.module}@{version}", self.directory, self.prefix)

    def stamp_is_current(self, cache: Path) -> bool:
        return stamp_is_current(cache, self.directory)

    def write_stamp(self, cache: Path) -> None:
        write_stamp(cache, self.directory)

    def build(self, ldflags: str, packages: Sequence[str], output: str, built: Sequence[Path]) -> None:
        """:func:`go_build` in the wrapper."""
        go_build(self.directory, ldflags, packages, output, built, self.prefix)
