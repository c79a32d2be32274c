"""SGLangServer → Deployment and Service dicts (``apps/v1`` / ``v1``), pure.

The Deployment uses ``spec.strategy``: Recreate by default (two copies of a large model do not fit the GPUs), or
RollingUpdate with maxSurge 0; it requests and limits
``nvidia.com/gpu`` and requests CPU and memory (``spec.resources``, else :func:`default_requests`), no service
account token unless ``spec.automountServiceAccountToken`` (SGLang never calls the Kubernetes API), a container
``securityContext`` of :data:`DEFAULT_SECURITY_CONTEXT` merged with ``spec.securityContext``, a memory-backed
``/dev/shm``, a named container port ``http``, a startup budget fit for
loading tens of GB (startupProbe every 2 s, 900 failures = 30 min: :data:`STARTUP_PERIOD_SECONDS`), readiness on the
release's readiness endpoint (``/ready`` from 0.5.20, else ``/health_generate``;
``python/sglang/srt/entrypoints/http_server.py``) every 5 s (:data:`READINESS_PERIOD_SECONDS`), liveness on
``/health``, and ``terminationMessagePolicy: FallbackToLogsOnError`` so a crash's log tail shows in
the pod status. Owner references are added by the caller (:func:`sglang_operator.builders.owner.adopt`).
"""

from __future__ import annotations

from typing import Any

from sglang_operator.api.spec import SGLangServerSpec, StrategyType
from sglang_operator.builders import drain
from sglang_operator.builders.command import ADAPTIVE_CONFIG_DIR, ADAPTIVE_CONFIG_VOLUME, RenderedCommand
from sglang_operator.builders.labels import (
    COMMAND_ANNOTATION,
    REVISION_LABEL,
    VERSION_ANNOTATION,
    common_labels,
    revision_hash,
    selector_labels,
)

CONTAINER = "sglang"
PORT_NAME = "http"
GPU_RESOURCE = "nvidia.com/gpu"
STARTUP_PERIOD_SECONDS = 2
"""Seconds between two start-up probes. A pod that serves is not Ready before its next start-up probe succeeds (the
kubelet then runs the readiness probe at once: ``pkg/kubelet/prober/prober_manager.go`` ``UpdatePodStatus``
triggers a readiness probe that has no result yet), so every replaced pod (an update, a rollback) loses up to
one period, half of it on average, after it already serves. Measured with ``bench/canary.py`` (4 replicas,
RollingUpdate, a regression and its rollback): from serving to Ready a median 5.3 s with 10 s, 1.2 s (at most
2.0 s) with 2 s; not-Ready per replaced pod 10.5 s → 7.4 s. Cheap:
while the weights load the port is closed (connection refused) and during warm-up the endpoint answers 503 at
once (``http_server.py``: ``ServerStatus.Starting``); the probe stops at its first success."""
STARTUP_FAILURE_THRESHOLD = 900
"""Start-up budget: 2 s × 900 = 30 min for downloading and loading weights and capturing CUDA graphs."""
READINESS_PERIOD_SECONDS = 5
READINESS_FAILURE_THRESHOLD = 3
"""Readiness: every 5 s, 3 failures in a row (15 s) take the pod out of the Service; one slow or failed answer
(``/health_generate`` under load) does not. Each probe is a flag check on ``/ready`` (0.5.20+) or a 1-token
generation on ``/health_generate`` (one extra token in a batch every 5 s)."""
PROGRESS_DEADLINE_SECONDS = STARTUP_PERIOD_SECONDS * STARTUP_FAILURE_THRESHOLD + 600
LIVENESS_PATH = "/health"
HEALTH_TIMEOUT_SECONDS = 30
"""``/health`` and ``/health_generate`` run a 1-token generation and may take up to 20 s
(``SGLANG_HEALTH_CHECK_TIMEOUT``) before answering 503."""


CPU_PER_GPU = 4
"""Default CPU request per GPU (cores): SGLang runs one scheduler process per GPU (tensor-parallel rank), which
keeps a core busy launching kernels, beside the tokenizer, detokenizer and HTTP server processes; fewer cores than
about 2 per GPU slow decoding (CPU launch overhead shows as lower tok/s)."""
MEMORY_GIB_PER_GPU = 16
"""Default memory request per GPU (GiB): each rank reads its weight shard through host memory while loading
(safetensors, pinned buffers) and keeps its own Python process, CUDA context and NCCL buffers; 16 GiB per GPU is a
floor for a 27B model at tensor 2, not a limit (none is set)."""
DEFAULT_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""The SGLang container's securityContext defaults (Kubernetes Pod Security Standards ``restricted`` asks for the
three of them; ``baseline`` is met): no setuid escalation, no Linux capability, the container runtime's default
seccomp filter. Read-only: :func:`security_context` copies it."""


def _probe(path: str, period: int, failures: int, timeout: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PORT_NAME},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def default_requests(gpus: int) -> dict[str, str]:
    """The CPU and memory requested when ``spec.resources`` gives none: :data:`CPU_PER_GPU` cores and
    :data:`MEMORY_GIB_PER_GPU` GiB per GPU of the pod (at least one GPU's worth), e.g. ``{"cpu": "8", "memory":
    "32Gi"}`` for 2 GPUs. Requests only, never limits: the pod is Burstable (not BestEffort, the first evicted under
    node memory pressure) and may use more while the node has it."""
    n = max(gpus, 1)
    return {"cpu": str(CPU_PER_GPU * n), "memory": f"{MEMORY_GIB_PER_GPU * n}Gi"}


def _resources(spec: SGLangServerSpec) -> dict[str, Any]:
    """``nvidia.com/gpu`` requested and limited; CPU and memory requested and limited as ``spec.resources`` says,
    each one it leaves out only requested, at its :func:`default_requests` value."""
    limits: dict[str, str] = {}
    if spec.gpus > 0:
        limits[GPU_RESOURCE] = str(spec.gpus)
    if spec.resources.cpu:
        limits["cpu"] = spec.resources.cpu
    if spec.resources.memory:
        limits["memory"] = spec.resources.memory
    return {"requests": {**default_requests(spec.gpus), **limits}, **({"limits": limits} if limits else {})}


def security_context(spec: SGLangServerSpec) -> dict[str, Any]:
    """The SGLang container's ``securityContext``: :data:`DEFAULT_SECURITY_CONTEXT` merged per field with
    ``spec.securityContext`` (a field the spec sets wins; ``capabilities`` merged per key: the spec's ``add`` is kept
    alongside the default ``drop: [ALL]`` unless the spec sets ``drop`` too). Root and a writable root filesystem
    are left as the image has them (SGLang images run as root and write caches under ``/root``)."""
    given = dict(spec.security_context or {})
    caps = {**DEFAULT_SECURITY_CONTEXT["capabilities"], **(given.pop("capabilities", None) or {})}
    merged = {**DEFAULT_SECURITY_CONTEXT, **given, "capabilities": caps}
    if "allowPrivilegeEscalation" not in given and escalates(merged):
        del merged["allowPrivilegeEscalation"]  # the default would make the pod template invalid
    return merged


def escalates(context: dict[str, Any]) -> bool:
    """Whether a container ``securityContext`` (camelCase) grants privilege escalation by itself: ``privileged:
    true`` or ``capabilities.add`` holding ``SYS_ADMIN``. The API server refuses such a context with
    ``allowPrivilegeEscalation: false`` ("cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
    k8s.io/kubernetes pkg/apis/core/validation/validation.go ``ValidateSecurityContext``), so the default is left
    out there (an explicit ``false`` from the spec is kept: the API server's refusal then names it)."""
    added = (context.get("capabilities") or {}).get("add") or []
    return context.get("privileged") is True or any(c in ("SYS_ADMIN", "CAP_SYS_ADMIN") for c in added)


def _volumes(spec: SGLangServerSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shm_size}}
    ]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    cache = spec.model.cache
    if cache is not None:
        source: dict[str, Any]
        if cache.pvc is not None:
            source = {"persistentVolumeClaim": {"claimName": cache.pvc.claim_name, "readOnly": cache.pvc.read_only}}
        elif cache.host_path is not None:  # read-only unless asked: other servers on the node load these files
            kind = "Directory" if cache.host_path_read_only else "DirectoryOrCreate"
            source = {"hostPath": {"path": cache.host_path, "type": kind}}
        else:
            size = cache.empty_dir.size_limit if cache.empty_dir else None
            source = {"emptyDir": {"sizeLimit": size} if size else {}}
        volumes.append({"name": "model-cache", **source})
        read_only = cache.host_path is not None and cache.host_path_read_only
        mount: dict[str, Any] = {"name": "model-cache", "mountPath": cache.mount_path}
        mounts.append({**mount, "readOnly": True} if read_only else mount)
    adaptive = spec.speculative.adaptive if spec.speculative is not None else None
    if adaptive is not None and adaptive.enabled and adaptive.config_map_ref is not None:
        ref = adaptive.config_map_ref  # --speculative-adaptive-config names a file: the key, mounted read-only
        volumes.append({"name": ADAPTIVE_CONFIG_VOLUME,
                        "configMap": {"name": ref.name, "items": [{"key": ref.key, "path": ref.key}]}})
        mounts.append({"name": ADAPTIVE_CONFIG_VOLUME, "mountPath": ADAPTIVE_CONFIG_DIR, "readOnly": True})
    return volumes + list(spec.volumes), mounts + list(spec.volume_mounts)


def strategy(spec: SGLangServerSpec) -> dict[str, Any]:
    """The Deployment ``strategy`` of ``spec.strategy``: ``Recreate`` (also for ``Canary``: a revision that is not
    canaried, e.g. the first one, replaces the pods), or ``RollingUpdate`` with
    ``maxUnavailable`` (default 1) and ``maxSurge: 0`` (no extra copy of the model is started: its GPUs may not
    exist)."""
    s = spec.strategy
    if s.type in (StrategyType.RECREATE, StrategyType.CANARY):  # Canary: a replacement without a canary recreates
        return {"type": "Recreate"}
    unavailable = 1 if s.max_unavailable is None else s.max_unavailable
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": unavailable, "maxSurge": 0}}


def pod_template(name: str, spec: SGLangServerSpec, cmd: RenderedCommand) -> dict[str, Any]:
    """The pod template without the revision label (what the revision hash is computed over)."""
    d = cmd.dialect
    ready_timeout = 5 if d.readiness_path == "/ready" else HEALTH_TIMEOUT_SECONDS
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.sglang.image,
        "imagePullPolicy": spec.sglang.image_pull_policy.value,
        "command": list(cmd.command),
        "args": list(cmd.args),
        "ports": [{"name": PORT_NAME, "containerPort": spec.port, "protocol": "TCP"}],
        "resources": _resources(spec),
        "startupProbe": _probe(d.readiness_path, STARTUP_PERIOD_SECONDS, STARTUP_FAILURE_THRESHOLD, ready_timeout),
        "readinessProbe": _probe(d.readiness_path, READINESS_PERIOD_SECONDS, READINESS_FAILURE_THRESHOLD,
                                 ready_timeout),
        "livenessProbe": _probe(LIVENESS_PATH, 30, 5, HEALTH_TIMEOUT_SECONDS),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    env = [*cmd.env, *spec.env]
    if env:
        container["env"] = env
    hook = drain.pre_stop(spec)
    if hook is not None:  # Canary with drainSeconds: a removed pod finishes its requests first
        container["lifecycle"] = hook
    volumes, mounts = _volumes(spec)
    container["volumeMounts"] = mounts
    container["securityContext"] = security_context(spec)
    pod: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "enableServiceLinks": False,
        "automountServiceAccountToken": spec.automount_service_account_token is True,
        "terminationGracePeriodSeconds": drain.grace_seconds(spec),
    }
    optional: dict[str, Any] = {
        "nodeSelector": spec.node_selector,
        "tolerations": spec.tolerations,
        "affinity": spec.affinity,
        "runtimeClassName": spec.runtime_class_name,
        "priorityClassName": spec.priority_class_name,
        "serviceAccountName": spec.service_account_name,
        "imagePullSecrets": [{"name": s.name} for s in spec.image_pull_secrets],
    }
    pod.update({k: v for k, v in optional.items() if v})
    labels = {**spec.pod_labels, **common_labels(name, str(cmd.version))}
    annotations = {**spec.pod_annotations, VERSION_ANNOTATION: str(cmd.version)}
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod}


def stamp_revision(templates: list[dict[str, Any]], revision: str) -> None:
    """Label and annotate each pod template (from :func:`pod_template`) with :data:`REVISION_LABEL` ``revision``."""
    for template in templates:
        template["metadata"]["labels"][REVISION_LABEL] = revision
        template["metadata"]["annotations"][REVISION_LABEL] = revision


def workload_metadata(name: str, namespace: str, cmd: RenderedCommand, revision: str) -> dict[str, Any]:
    """The ``metadata`` of a server's workload (Deployment, LeaderWorkerSet): its labels with the revision, and
    annotations holding the revision, the SGLang release and the rendered command line."""
    version = str(cmd.version)
    return {
        "name": name,
        "namespace": namespace,
        "labels": {**common_labels(name, version), REVISION_LABEL: revision},
        "annotations": {REVISION_LABEL: revision, VERSION_ANNOTATION: version, COMMAND_ANNOTATION: cmd.command_line},
    }


def deployment(name: str, namespace: str, spec: SGLangServerSpec, cmd: RenderedCommand) -> dict[str, Any]:
    """The Deployment of SGLangServer ``name``; its pod template carries label ``sglang-operator.io/revision``.

    ``metadata.annotations`` hold the revision, the SGLang release and the rendered command line.
    """
    template = pod_template(name, spec, cmd)
    revision = revision_hash(template)
    stamp_revision([template], revision)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": workload_metadata(name, namespace, cmd, revision),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector_labels(name)},
            "strategy": strategy(spec),
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
            "template": template,
        },
    }


def service(name: str, namespace: str, spec: SGLangServerSpec, sglang_version: str) -> dict[str, Any]:
    """The Service of SGLangServer ``name``: port ``http`` → the pods' named port ``http``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": common_labels(name, sglang_version)},
        "spec": {
            "type": spec.service_type.value,
            "selector": selector_labels(name),
            "ports": [{"name": PORT_NAME, "port": spec.port, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }
