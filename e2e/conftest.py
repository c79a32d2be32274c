"""pytest fixtures for tests against a real Kubernetes API.

- ``k8s_cluster`` (session): the local control plane from ``e2e.cluster`` (binaries from
  ``python -m e2e.build_k8s``, found in its cache or ``KUBEBUILDER_ASSETS``; missing binaries FAIL the
  fixture), or, with ``E2E_USE_EXISTING_CLUSTER=1``, the cluster ``KUBECONFIG`` points at (kind, ...).
  Sets ``KUBECONFIG`` for the session.
- ``namespace``: a fresh namespace per test (its ``default`` ServiceAccount exists), deleted after.

Markers: ``cluster`` (every test here), ``local_cluster`` (tests that need the local control plane
and its fake kubelet: image mapping, PIDs; deselect them elsewhere with ``-m "not local_cluster"``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from e2e.build_k8s import BINARIES, cache_root, committed_version
from e2e.cluster import Cluster, NodeOptions
from e2e.operator_proc import OperatorProcess

T = TypeVar("T")
P = TypeVar("P", bound="BackgroundPoll")
_startup: list[str] = []


@dataclass
class K8sCluster:
    """A cluster under test: ``kubeconfig`` path, ``kubectl`` path, and the local ``Cluster``
    (``None`` for an existing cluster)."""

    kubeconfig: Path
    kubectl: Path
    local: Cluster | None

    def run(self, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run kubectl with this cluster's kubeconfig; raise AssertionError (with stderr) on failure
        when ``check``."""
        proc = subprocess.run([str(self.kubectl), f"--kubeconfig={self.kubeconfig}", *args], input=input,
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def get(self, *args: str) -> Any:
        """``kubectl get ARGS -o json``, parsed."""
        return json.loads(self.run("get", *args, "-o", "json").stdout)

    def install_crd(self, path: Path | None = None, name: str = "sglangservers.sglang-operator.io",
                    timeout: float = 60) -> None:
        """Server-side apply a CRD (default: the project's SGLangServer CRD) and wait until it is Established.
        Polls: ``kubectl wait --for=condition=Established`` fails outright while the new CRD has no conditions."""
        self.run("apply", "--server-side", "--force-conflicts", "-f",
                 str(path or Path(__file__).resolve().parents[1] / "crds" / "sglangservers.yaml"))
        jsonpath = '{.status.conditions[?(@.type=="Established")].status}'
        wait_for(f"CRD {name} Established", lambda: self.run(
            "get", "crd", name, "-o", f"jsonpath={jsonpath}", check=False).stdout.strip() == "True",
            timeout=timeout, interval=0.3)

    def create_namespace(self, name: str) -> None:
        """Create namespace ``name`` and wait (30 s at most) for its ``default`` ServiceAccount."""
        self.run("create", "namespace", name)
        wait_for(f"ServiceAccount default in {name}",
                 lambda: self.run("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
                 timeout=30, interval=0.2)

    @contextlib.contextmanager
    def fresh_namespace(self, name: str) -> Iterator[str]:
        """:meth:`create_namespace` ``name`` for the ``with`` block, deleted after (without waiting)."""
        self.create_namespace(name)
        try:
            yield name
        finally:
            self.run("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)

    def apply(self, obj: dict[str, Any], namespace: str | None = None) -> None:
        ns = [f"--namespace={namespace}"] if namespace else []
        self.run("apply", *ns, "-f", "-", input=json.dumps(obj))


@contextlib.contextmanager
def running_operator(k8s: K8sCluster, log_dir: Path, **kwargs: Any) -> Iterator[OperatorProcess]:
    """Install the SGLangServer CRD, run ``sglang-operator run`` against ``k8s`` (``kwargs`` as
    :class:`~e2e.operator_proc.OperatorProcess` takes them; its log in ``log_dir``), stop it afterwards and print
    the end of its log (shown by pytest for a failing test)."""
    k8s.install_crd()
    op = OperatorProcess(k8s.kubeconfig, log_dir / "operator.log", **kwargs)
    op.start()
    try:
        yield op
    finally:
        op.stop()
        print(op.log_tail(40))


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 60, interval: float = 0.5) -> T:
    """Call ``fn`` until it returns something truthy; fail with ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class BackgroundPoll:
    """A daemon thread calling :meth:`poll` every ``interval`` seconds while the ``with`` block runs (the first call
    at once, or after ``interval`` when ``poll_at_start`` is False); subclasses record what they see in :meth:`poll`.
    The thread is joined (``join_timeout`` seconds at most) when the block ends."""

    interval = 0.5
    join_timeout = 10.0
    poll_at_start = True

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def poll(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        if self.poll_at_start:
            self.poll()
        while not self._stop.wait(self.interval):
            self.poll()

    def __enter__(self: P) -> P:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.join_timeout)


def local_bin_dir() -> Path:
    """The directory with every control-plane binary; pytest.fail()s with the build command if none."""
    candidates = []
    if os.environ.get("KUBEBUILDER_ASSETS"):
        candidates.append(Path(os.environ["KUBEBUILDER_ASSETS"]))
    candidates.append(cache_root() / f"k8s-{committed_version()}" / "bin")
    for d in candidates:
        if all((d / b).is_file() for b in BINARIES):
            return d
    pytest.fail(f"Kubernetes binaries not found in {', '.join(map(str, candidates))}: "
                "run `python -m e2e.build_k8s` first (cold build: 20-30 min)", pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "local_cluster: needs the local control plane and its fake kubelet (images.yaml, PIDs)")


LONGEST_FIRST = ("test_rollback.py", "test_canary.py", "test_first_day.py", "test_memory_rounds.py", "test_tuning.py",
                 "test_hostile.py",
                 "test_control_loop.py", "test_multinode.py", "test_helm.py", "test_prometheus.py",
                 "test_prometheus_operator.py", "test_keda_scaling.py", "test_leader_election.py")
"""e2e modules by measured wall time in CI (hundreds of seconds each, longest first)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the run for the test command's ``-n 2 --dist loadfile --no-loadscope-reorder`` (docs/development.md): the
    e2e modules of :data:`LONGEST_FIRST`, the other e2e modules, then the unit tests. Each xdist worker is handed whole
    modules in this order as it runs out of work, so the longest go first and the short ones fill in at the end (the
    order changes only the wall time, never an outcome: every module sets up what it needs)."""
    def rank(item: pytest.Item) -> tuple[int, int]:
        path = Path(str(item.path))
        if "e2e" not in path.parts:
            return (2, 0)
        return (0, LONGEST_FIRST.index(path.name)) if path.name in LONGEST_FIRST else (1, 0)
    items.sort(key=rank)  # stable: the order inside each rank stays the collection's


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _startup:
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[K8sCluster]:
    old = os.environ.get("KUBECONFIG")
    if os.environ.get("E2E_USE_EXISTING_CLUSTER") == "1":
        if not old:
            pytest.fail("E2E_USE_EXISTING_CLUSTER=1 needs KUBECONFIG", pytrace=False)
        kubectl = os.environ.get("E2E_KUBECTL") or shutil.which("kubectl")
        if not kubectl:
            pytest.fail("E2E_USE_EXISTING_CLUSTER=1: no kubectl on PATH (or set E2E_KUBECTL)", pytrace=False)
        yield K8sCluster(Path(old), Path(kubectl), None)
        return
    cluster = Cluster(local_bin_dir(), NodeOptions(backoff_base=2.0))
    cluster.start()
    _startup.append(f"local cluster: start-to-ready {cluster.startup_seconds:.1f} s "
                    f"({cluster.nodes.count} fake GPU nodes); logs in {cluster.workdir}/logs")
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    try:
        yield K8sCluster(cluster.kubeconfig, cluster.kubectl, cluster)
    finally:
        if old is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = old
        cluster.stop()


@pytest.fixture
def namespace(k8s_cluster: K8sCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    base = request.node.name.lower().replace("_", "-").removeprefix("test-")
    name = f"e2e-{''.join(c for c in base if c.isalnum() or c == '-')[:40].strip('-')}-{uuid.uuid4().hex[:5]}"
    with k8s_cluster.fresh_namespace(name):
        yield name
