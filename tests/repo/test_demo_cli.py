"""``python -m e2e.demo`` (and ``./demo``) without a cluster: ``--pod-cidr`` reaches the fake nodes as ``python -m
e2e.cluster up --pod-cidr`` does, ``--tune``'s plot is written into the work directory (removed at exit unless
``--keep``), and SIGTERM runs the same clean-up as Ctrl-C, also while ``--keep`` waits."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import demo
from e2e.cluster import NodeOptions

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _signals() -> Iterator[None]:
    """The demo installs SIGTERM and SIGINT handlers: put the test process' back."""
    term, intr = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGTERM, term)
    signal.signal(signal.SIGINT, intr)


def test_pod_cidr_as_the_cluster_command_takes_it() -> None:
    assert demo.node_options(demo.parse_args(["--pod-cidr", "127.5.0.0/16"])).pod_cidr == "127.5.0.0/16"
    assert demo.node_options(demo.parse_args([])).pod_cidr == NodeOptions().pod_cidr
    assert "--pod-cidr" in (ROOT / "e2e" / "cluster" / "__main__.py").read_text()


def test_the_plot_is_written_into_the_work_directory(tmp_path: Path) -> None:
    assert demo.plot_path(tmp_path).parent == tmp_path


class FakeCluster:
    """Stands for the local control plane: ``start`` runs ``on_start`` (a signal to this process)."""

    def __init__(self, on_start: Any) -> None:
        self.on_start, self.stopped = on_start, 0
        self.startup_seconds, self.kubeconfig, self.kubectl, self.bin_dir = 0.0, Path("kc"), Path("kubectl"), Path("b")

    def start(self) -> None:
        self.on_start()

    def stop(self) -> None:
        self.stopped += 1


class FakeOperator:
    def __init__(self, _kubeconfig: Path, log: Path, **_: Any) -> None:
        self.log_path, self.stopped = log, 0
        operators.append(self)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped += 1


operators: list[FakeOperator] = []


def sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the handler raises before this ends


def run(monkeypatch: pytest.MonkeyPatch, argv: list[str], on_start: Any, keep_wait: Any = None) -> FakeCluster:
    cluster = FakeCluster(on_start)
    monkeypatch.setattr(demo, "build", lambda: Path("bin"))
    monkeypatch.setattr(demo, "Cluster", lambda *_a, **_k: cluster)
    monkeypatch.setattr(demo, "OperatorProcess", FakeOperator)
    monkeypatch.setattr(demo, "kubectl", lambda *_a, **_k: "")
    monkeypatch.setattr(demo, "K8sCluster", lambda *_a: type("K", (), {"install_crd": lambda *_: None})())
    monkeypatch.setattr(demo, "serve_and_regress", lambda *_a: None)
    if keep_wait is not None:
        monkeypatch.setattr("time.sleep", keep_wait)
    demo.main(argv)
    return cluster


def test_sigterm_during_start_up_stops_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = run(monkeypatch, [], sigterm)
    assert cluster.stopped == 1


def test_sigterm_to_a_kept_demo_runs_the_ctrl_c_clean_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--keep`` waits in ``time.sleep``: a SIGTERM there stops the operator and the cluster, as Ctrl-C does, and
    keeps the work directory (``--keep``); without ``--keep`` it is removed."""
    operators.clear()
    real_sleep = time.sleep

    def keep_wait(_seconds: float) -> None:  # --keep's wait, interrupted as `kill PID` would
        os.kill(os.getpid(), signal.SIGTERM)
        real_sleep(5)

    cluster = run(monkeypatch, ["--keep"], lambda: None, keep_wait=keep_wait)
    assert cluster.stopped == 1 and operators[-1].stopped == 1
    workdir = operators[-1].log_path.parent
    assert workdir.is_dir()  # --keep: the log (and --tune's plot) stay
    for f in workdir.iterdir():
        f.unlink()
    workdir.rmdir()
    interrupted = run(monkeypatch, [], lambda: None)  # a run to its end, not kept: the work directory goes
    assert interrupted.stopped == 1 and not operators[-1].log_path.parent.exists()
