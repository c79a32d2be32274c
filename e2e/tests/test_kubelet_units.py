"""Pieces of the launcher and the fake kubelet that need no API server."""

from __future__ import annotations

import ipaddress
import sys
import time
from pathlib import Path

import pytest

from e2e.cluster import Cluster, ClusterError
from e2e.cluster.launcher import worker_pod_cidr
from e2e.kubelet.container import ContainerRunner
from e2e.kubelet.images import expand, image_version, launch_spec, load_rules, pull_error
from e2e.kubelet.kubelet import IPAllocator

RULES = load_rules(Path(__file__).resolve().parents[1] / "images.yaml")
POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"nodeName": "gpu-node-1"}}


def test_missing_binaries_fail_with_the_build_command(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"run `python -m e2e\.build_k8s`"):
        Cluster(tmp_path / "no-bin").start()


@pytest.mark.parametrize(("image", "version"), [
    ("lmsysorg/sglang:v0.5.10-cu129", "0.5.10"), ("lmsysorg/sglang:v0.5.23", "0.5.23"),
    ("lmsysorg/sglang:v0.4.9.post6-cu126", "0.4.9.post6"),
    ("registry.local:5000/lmsysorg/sglang:latest", ""), ("lmsysorg/sglang", "")])
def test_image_version_from_tag(image: str, version: str) -> None:
    assert image_version(image) == version


def test_var_expansion_follows_kubernetes_rules() -> None:
    env = {"A": "x"}
    assert expand("$(A)-$(B)-$$(A)", env) == "x-$(B)-$(A)"


def test_sglang_image_runs_the_simulator_with_container_argv_and_env() -> None:
    c = {"name": "sglang", "image": "lmsysorg/sglang:v0.5.10-cu129",
         "command": ["python3", "-m", "sglang.launch_server"],
         "args": ["--model-path", "$(MODEL)", "--port", "30000"], "ports": [{"containerPort": 30000}]}
    argv, env = launch_spec(RULES, POD, c, {"MODEL": "m"}, "127.1.0.9", "NVIDIA-RTX-A6000")
    assert Path(argv[0]).name == "sglang-sim"
    assert argv[1:] == ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30000"]
    assert env["SGLANG_SIM_HOST"] == "127.1.0.9" and env["SGLANG_SIM_GPU"] == "NVIDIA-RTX-A6000"
    assert env["SGLANG_SIM_VERSION"] == "0.5.10" and env["MODEL"] == "m"
    root = Path(__file__).resolve().parents[2]  # the checkout's packages first: not another checkout's install
    assert env["PYTHONPATH"].split(":") == [str(root / d) for d in ("operator", "sim", "tools")] + [str(root)]


def test_unknown_image_gets_the_idle_placeholder_on_its_ports() -> None:
    c = {"name": "x", "image": "quay.io/some/thing:1", "ports": [{"containerPort": 81}, {"containerPort": 82}]}
    argv, _ = launch_spec(RULES, POD, c, {}, "127.1.0.3", "")
    assert argv[:3] == [sys.executable, "-m", "e2e.kubelet.echo"]
    assert "--idle" in argv and argv[argv.index("--ports") + 1] == "81,82"


@pytest.mark.parametrize("image", [
    "lmsysorg/sglang:v0.5.10-cu129", "lmsysorg/sglang:v0.4.9.post6-cu126", "lmsysorg/sglang:0.5.23-cu130-runtime",
    "lmsysorg/sglang:v0.5.10-cu129@sha256:" + "ab" * 32, "quay.io/some/thing:1", "lmsysorg/sglang"])
def test_a_pinned_release_and_other_images_pull(image: str) -> None:
    assert pull_error(RULES, image) is None


@pytest.mark.parametrize("tag", ["v0.5.100-cu129", "v0.5.1O", "v0.5.0", "latest", "v0.3.0-cu124"])
def test_an_sglang_tag_no_pinned_release_has_is_not_found(tag: str) -> None:
    ref = f"docker.io/lmsysorg/sglang:{tag}"
    assert pull_error(RULES, f"lmsysorg/sglang:{tag}") == (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve reference '
        f'"{ref}": {ref}: not found')


def test_a_failed_pull_waits_err_image_pull_then_image_pull_back_off(tmp_path: Path) -> None:
    r = ContainerRunner({"name": "c", "image": "lmsysorg/sglang:v0.5.100-cu129"}, tmp_path, "Always",
                        backoff_base=0.4)
    delays = []
    for _ in range(2):
        r.pull_failed("rpc error: not found")
        t = time.monotonic()
        delays.append(r.next_start - t)
        assert r.state == {"waiting": {"reason": "ErrImagePull", "message": "rpc error: not found"}}
        assert not r.tick(t) and not r.wants_start(t)
        assert r.tick(r.pull_backoff_at)
        assert r.state["waiting"] == {"reason": "ImagePullBackOff",
                                      "message": 'Back-off pulling image "lmsysorg/sglang:v0.5.100-cu129"'}
        assert r.wants_start(r.next_start)
    assert 0.3 < delays[0] <= 0.4 < delays[1] <= 0.8  # the image back-off doubles
    status = r.status()
    assert status["restartCount"] == 0 and not status["started"] and "containerID" not in status


def test_ip_allocator_never_hands_out_an_address_twice() -> None:
    ips = IPAllocator()
    first = [ips.allocate() for _ in range(100)]
    assert len(set(first)) == 100 and all(ip.startswith("127.1.") for ip in first)
    ips.release(first[0])
    assert ips.allocate() not in first  # round-robin: a released address is not reused at once


def test_each_xdist_worker_gets_a_pod_network_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    nets = []
    for worker in ("", "gw0", "gw1", "gw7"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        nets.append(worker_pod_cidr())
    assert nets == ["127.1.0.0/16", "127.2.0.0/16", "127.3.0.0/16", "127.9.0.0/16"]
    ips = IPAllocator(ipaddress.ip_network(nets[2]))
    assert all(ip.startswith("127.3.") for ip in (ips.allocate() for _ in range(50)))


def test_container_restarts_with_back_off_and_log_tail(tmp_path: Path) -> None:
    r = ContainerRunner({"name": "c", "terminationMessagePolicy": "FallbackToLogsOnError"}, tmp_path,
                        "Always", backoff_base=0.3)
    argv = [sys.executable, "-c", "print('boom'); raise SystemExit(7)"]
    delays = []
    for _ in range(3):
        r.start(argv, {}, tmp_path)
        assert r.proc is not None
        r.proc.wait(10)
        assert r.poll("p_ns(u)")
        delays.append(r.next_start - time.monotonic())
        assert r.state["waiting"]["reason"] == "CrashLoopBackOff"
        assert r.last_state["terminated"]["exitCode"] == 7
        assert r.last_state["terminated"]["message"].endswith("boom")
    assert r.restart_count == 2
    assert delays[0] <= 0 < delays[1] <= 0.3 < delays[2] <= 0.6


def test_leaderworkerset_pod_env_and_rank_expand_as_on_a_kubelet() -> None:
    """A worker pod as LWS v0.7.0's pod webhook leaves it (plain LWS_* values first, pkg/utils/pod AddLWSVariables),
    plus the downward-API form older LWS releases documented (labels and annotations by fieldRef): the args'
    ``$(VAR)`` references expand to the rank and the leader's address."""
    from e2e.kubelet.images import container_env

    pod = {"metadata": {"name": "dsv3-0-1", "namespace": "ml", "uid": "u2",
                        "labels": {"leaderworkerset.sigs.k8s.io/worker-index": "1"},
                        "annotations": {"leaderworkerset.sigs.k8s.io/size": "2"}},
           "spec": {"nodeName": "gpu-node-2"}}
    c = {"name": "sglang", "image": "lmsysorg/sglang:v0.5.23", "command": ["sglang", "serve"],
         "args": ["--nnodes", "$(GROUP_SIZE)", "--node-rank", "$(LWS_WORKER_INDEX)",
                  "--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000"],
         "env": [{"name": "LWS_LEADER_ADDRESS", "value": "dsv3-0.dsv3-0.ml"}, {"name": "LWS_GROUP_SIZE", "value": "2"},
                 {"name": "LWS_WORKER_INDEX", "value": "1"},
                 {"name": "INDEX", "valueFrom": {"fieldRef": {
                     "fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"}}},
                 {"name": "GROUP_SIZE", "valueFrom": {"fieldRef": {
                     "fieldPath": "metadata.annotations['leaderworkerset.sigs.k8s.io/size']"}}}]}
    env = container_env(None, pod, c)  # type: ignore[arg-type]  # no Secret/ConfigMap reference: no API call
    assert env["INDEX"] == "1" and env["GROUP_SIZE"] == "2"
    argv, _ = launch_spec(RULES, pod, c, env, "127.1.0.7", "NVIDIA-RTX-A6000")
    assert argv[1:] == ["sglang", "serve", "--nnodes", "2", "--node-rank", "1",
                        "--dist-init-addr", "dsv3-0.dsv3-0.ml:20000"]
