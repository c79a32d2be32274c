"""SGLangServer with ``parallelism.nodes`` > 1 → LeaderWorkerSet and leader Service dicts, pure.

One LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``, sigs.k8s.io/lws v0.7.0 ``api/leaderworkerset/v1``) named
like the SGLangServer: ``replicas`` groups of ``size = parallelism.nodes`` pods (leader ``<name>-<g>``, workers
``<name>-<g>-<i>``), each pod with tensor × pipeline ÷ nodes GPUs.

- ``startupPolicy: LeaderCreated``: the workers start as soon as the leader pod exists (SGLang's rank 0 waits
  for the other ranks in ``torch.distributed`` init, so waiting for a Ready leader would deadlock).
- ``restartPolicy: RecreateGroupOnPodRestart``: a restarted container anywhere recreates the whole group (the
  NCCL world of a group cannot take a restarted rank back).
- ``networkConfig.subdomainPolicy: UniquePerReplica``: LWS makes one headless Service per group, named like
  the leader pod, so the operator's own Service can keep the SGLangServer's name (with ``Shared`` LWS would take
  that name for its headless Service). ``LWS_LEADER_ADDRESS`` is ``<name>-<g>.<name>-<g>.<namespace>``.
- Both templates come from :func:`sglang_operator.builders.workload.pod_template` (the Deployment's): the
  leader runs the rendered argv (``--node-rank 0``); the worker gets ``--node-rank $(LWS_WORKER_INDEX)`` and
  probes on ``/health``, the only readiness SGLang's non-zero ranks answer (their dummy health server,
  ``python/sglang/srt/utils/common.py:launch_dummy_health_check_server``: ``/health``, ``/health_generate``,
  ``/ping`` and ``/metrics``; no ``/ready``).
- The revision label (pods of both templates) hashes both templates and the group size, so a speculative
  change rolls every group to a new revision (LWS rolls groups one at a time: maxUnavailable 1, maxSurge 0).

The Service selects leaders only (``leaderworkerset.sigs.k8s.io/worker-index: "0"``): rank 0 is the only one
serving the API.
"""

from __future__ import annotations

import copy
from typing import Any

from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.builders.command import NODE_RANK_FLAG, WORKER_INDEX_ENV, RenderedCommand
from sglang_operator.builders.labels import revision_hash, selector_labels
from sglang_operator.builders.workload import LIVENESS_PATH, pod_template, service, stamp_revision, workload_metadata

GROUP = "leaderworkerset.x-k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "LeaderWorkerSet"
PLURAL = "leaderworkersets"
CRD_NAME = f"{PLURAL}.{GROUP}"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
"""Set by LWS on every pod of a group: ``"0"`` on the leader (``api/leaderworkerset/v1`` WorkerIndexLabelKey)."""
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
"""Set by LWS on every pod: the group's index (GroupIndexLabelKey)."""
SET_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
"""Set by LWS on every pod: the LeaderWorkerSet's name (SetNameLabelKey)."""
LEADER_INDEX = "0"
WORKER_PROBE_PATH = "/health"
"""What a non-zero rank's dummy health server answers 200 on once its schedulers are up."""


def leader_selector(name: str) -> dict[str, str]:
    """Labels selecting the leader pods (node rank 0) of SGLangServer ``name``."""
    return {**selector_labels(name), WORKER_INDEX_LABEL: LEADER_INDEX}


def worker_template(leader: dict[str, Any]) -> dict[str, Any]:
    """The worker pod template from the leader's: ``--node-rank $(LWS_WORKER_INDEX)`` and ``/health`` probes.

    Raises ValueError when the leader's argv has no ``--node-rank`` (not a multi-node command line).
    """
    out = copy.deepcopy(leader)
    container = out["spec"]["containers"][0]
    args: list[str] = container["args"]
    if NODE_RANK_FLAG not in args:
        raise ValueError(f"the leader's command line has no {NODE_RANK_FLAG}: not a multi-node command line")
    args[args.index(NODE_RANK_FLAG) + 1] = f"$({WORKER_INDEX_ENV})"
    for key in ("startupProbe", "readinessProbe"):
        container[key]["httpGet"]["path"] = WORKER_PROBE_PATH
    container["livenessProbe"]["httpGet"]["path"] = LIVENESS_PATH
    return out


def leader_worker_set(name: str, namespace: str, spec: SGLangServerSpec, cmd: RenderedCommand) -> dict[str, Any]:
    """The LeaderWorkerSet of SGLangServer ``name`` (``spec.parallelism.nodes`` > 1).

    Both pod templates carry label and annotation ``sglang-operator.io/revision``; ``metadata.annotations`` hold
    the revision, the SGLang release and the rendered (leader's) command line. Raises ValueError when
    ``spec.parallelism.nodes`` is 1.
    """
    nodes = spec.parallelism.nodes
    if nodes < 2:
        raise ValueError("a LeaderWorkerSet needs spec.parallelism.nodes > 1")
    leader = pod_template(name, spec, cmd)
    worker = worker_template(leader)
    revision = revision_hash({"size": nodes, "leaderTemplate": leader, "workerTemplate": worker})
    stamp_revision([leader, worker], revision)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": workload_metadata(name, namespace, cmd, revision),
        "spec": {
            "replicas": spec.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate",
                                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
            "networkConfig": {"subdomainPolicy": "UniquePerReplica"},
            "leaderWorkerTemplate": {
                "size": nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }


def leader_service(name: str, namespace: str, spec: SGLangServerSpec, sglang_version: str) -> dict[str, Any]:
    """The Service of a multi-node SGLangServer: like the single-node one, selecting leaders only."""
    svc = service(name, namespace, spec, sglang_version)
    svc["spec"]["selector"] = leader_selector(name)
    return svc


def pod_templates(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a rendered workload: ``[template]`` of a Deployment, ``[leader, worker]`` of a
    LeaderWorkerSet (the same dicts, for callers that rewrite them, e.g. to pin an image)."""
    if workload.get("kind") == KIND:
        lwt = workload["spec"]["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"], lwt["workerTemplate"]]
    return [workload["spec"]["template"]]
