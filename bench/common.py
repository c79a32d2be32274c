"""What several benches share: the JSON merge patch of their in-memory API servers, numeric options from a table,
a helper process serving fake pods, the commit line of a report, and the local cluster's operator (started and
stopped). Imported as ``bench.common`` (each bench puts the repository root on ``sys.path``); the e2e imports are
deferred so a bench without a cluster does not load them.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from e2e.merge_patch import merge_patch as merge_patch  # a small module: loads no cluster code

if TYPE_CHECKING:
    from e2e.cluster import Cluster
    from e2e.operator_proc import OperatorProcess

ROOT = Path(__file__).resolve().parents[1]


class StatusStore:
    """The SGLangServers of a bench's in-memory API server, by ``(namespace, name)``: :meth:`patch_status` answers a
    status patch as the API server does."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.resource_version = 1000
        self.writes = 0
        """Status patches asked for (conflicts included)."""

    async def patch_status(self, ns: str, name: str, resource_version: str | None,
                           patch: Any) -> dict[str, Any] | None:
        """Merge ``patch`` into the status of ``ns/name``; its new body (a copy), or None (a 409 Conflict) when
        ``resource_version`` is given and not the object's."""
        self.writes += 1
        obj = self.objects[(ns, name)]
        if resource_version and resource_version != obj["metadata"]["resourceVersion"]:
            return None
        obj["status"] = merge_patch(obj.get("status") or {}, dict(patch))
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        return copy.deepcopy(obj)


def add_numeric_options(parser: argparse.ArgumentParser, defaults: Mapping[str, int | float]) -> None:
    """One ``--option`` per entry of ``defaults`` (``{"--pods": 32, "--seconds": 60.0}``), of its default's type."""
    for option, default in defaults.items():
        parser.add_argument(option, type=type(default), default=default)


def parse_args_or_serve(parser: argparse.ArgumentParser, serve: Callable[..., None],
                        serve_types: Sequence[Callable[[str], Any]]) -> argparse.Namespace | None:
    """The bench's arguments; or, in its helper process (:func:`serving_child` runs the bench with a hidden
    ``--serve ARG…``, one ``ARG`` per entry of ``serve_types``, which convert them), ``serve(*ARGs)`` run and None."""
    parser.add_argument("--serve", nargs=len(serve_types), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*(convert(arg) for convert, arg in zip(serve_types, args.serve, strict=True)))
        return None
    return args


@contextlib.contextmanager
def serving_child(*argv: str, what: str) -> Iterator[subprocess.Popen[str]]:
    """Run ``python ARGV`` (a bench's own ``--serve`` mode) for the ``with`` block, once it printed ``ready`` on its
    first line; terminated after. Raises ``SystemExit`` (``what did not start``) when it prints anything else."""
    child = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise SystemExit(f"{what} did not start")
        yield child
    finally:
        child.terminate()
        child.wait(10)


def commit_line() -> str:
    """``<short hash> <subject>`` of this checkout's HEAD (100 characters at most), for a report's first line."""
    return subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"], capture_output=True,
                          text=True).stdout.strip()[:100]


def start_operator(cluster: Cluster) -> OperatorProcess:
    """Install the SGLangServer CRD (waits until Established) on the started local ``cluster`` and start the operator
    as the demo runs it (status every second, samples every ``intervalSeconds``), its log in the cluster's
    directory."""
    from e2e.conftest import K8sCluster
    from e2e.operator_proc import OperatorProcess

    K8sCluster(cluster.kubeconfig, cluster.kubectl, cluster).install_crd()
    assert cluster.workdir is not None
    op = OperatorProcess(cluster.kubeconfig, cluster.workdir / "operator.log", status_interval=1.0,
                         sample_interval=None)
    op.start()
    return op


def tear_down(op: OperatorProcess | None, cluster: Cluster, work: Path | None = None) -> None:
    """Stop the operator (when it was started), then the local cluster; remove the directory ``work`` if given."""
    if op is not None:
        op.stop()
    cluster.stop()
    if work is not None:
        shutil.rmtree(work, ignore_errors=True)
