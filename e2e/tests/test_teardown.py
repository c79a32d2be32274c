"""A second, separate local cluster: start it, run a pod, stop it, and find no process left."""

from __future__ import annotations

import json
import subprocess

import pytest

from e2e.cluster import Cluster, NodeOptions
from e2e.cluster.procs import marked_pids, pid_alive
from e2e.conftest import K8sCluster, local_bin_dir, wait_for
from e2e.tests.objects import ECHO_IMAGE, container, http_json, pod, ready_pods

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]


def test_no_process_of_the_cluster_remains_after_teardown() -> None:
    cluster = Cluster(local_bin_dir(), NodeOptions(count=1, gpus=2))
    cluster.start()
    try:
        workdir = cluster.workdir
        assert workdir is not None
        k8s = K8sCluster(cluster.kubeconfig, cluster.kubectl, cluster)
        echo = pod("echo", [container("echo", ECHO_IMAGE, gpus=1)])
        echo["metadata"]["labels"] = {"app": "echo"}
        k8s.apply(echo, "default")
        items = wait_for("pod Ready", lambda: ready_pods(k8s, "default", "app=echo", 1), timeout=90)
        echo_pid = int(http_json(items[0]["status"]["podIP"], 8080)["pid"])
        component_pids = {c.name: c.pid for c in cluster.components}
        assert set(component_pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                       "kubelet"}
        before = set(marked_pids(cluster.cluster_id))
        assert set(component_pids.values()) | {echo_pid} <= before
    finally:
        stragglers = cluster.stop()
    assert stragglers == [], "processes survived the orderly stop and had to be killed"
    assert not any(pid_alive(p) for p in before)
    assert marked_pids(cluster.cluster_id) == []
    assert not workdir.exists()
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert str(cluster.kubeconfig) not in ps
    assert json.dumps(str(workdir)).strip('"') not in ps

