"""``SGLangServer.spec``: the whole desired state of one SGLang server (one Deployment + one Service)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints, WithJsonSchema
from pydantic.alias_generators import to_snake

from sglang_operator.api.autoscaling import CANARY_RULE, Autoscaling
from sglang_operator.api.base import (
    Affinity,
    ApiModel,
    CelRule,
    EnvVar,
    Quantity,
    SecurityContext,
    Toleration,
    Volume,
    VolumeMount,
)
from sglang_operator.api.blocks import Memory, ModelSpec, Parallelism, SecretKeyRef, SGLangImage, Speculative
from sglang_operator.api.bounds import MAX_ENV, MAX_EXTRA_ARGS, NAME_LIMIT, POD_ANNOTATION_LIMIT, LabelValue, MapKey
from sglang_operator.api.rollback import RollbackPolicy

SECRET_FLAGS: dict[str, str] = {
    "--api-key": "spec.apiKeySecretRef",
    "--admin-api-key": "spec.adminApiKeySecretRef",
    "--ssl-keyfile-password": "spec.sslKeyfilePasswordSecretRef",
}
"""The SGLang launch flags whose value is a secret (every spelling in any supported release; flag tables in
``sglang/data/flags.json``) → the typed field that takes a Secret reference instead. Such a field renders
``--flag $(VAR)`` with ``VAR`` an env var ``valueFrom.secretKeyRef``, so the value appears in no argv, annotation,
status or event; ``extraArgs`` may not name one of these flags (nor an abbreviation of one), in either spelling
``--flag value`` or ``--flag=value``. tests/api/test_secret_flags.py scans every release's flag table for names with
``key``, ``password``, ``token`` or ``secret`` in them: each is here or exempted there with its reason."""

NOT_ABBREVIATIONS: tuple[str, ...] = ("--ssl-keyfile",)
"""Real SGLang flags (of their own, not owned) that are a prefix of an owned flag (``--ssl-keyfile``, a file path,
of ``--ssl-keyfile-password``): argparse takes an exact match before any abbreviation, so ``extraArgs`` may use
them. tests/api/test_owned_flags.py checks the list against every release's flag table."""

#: Every spelling (aliases included, in any supported SGLang release) of the launch flags that typed fields
#: render → the field that renders it. ``extraArgs`` may not name one of them nor an abbreviation of one. Aliases
#: as in the extracted flag tables (``sglang/data/flags-<version>.json``); tests/api/test_owned_flags.py checks
#: they agree.
OWNED: dict[str, str] = {
    "--model-path": "spec.model.path", "--model": "spec.model.path",
    "--served-model-name": "spec.model.servedModelName", "--revision": "spec.model.revision",
    "--trust-remote-code": "spec.model.trustRemoteCode",
    "--tp-size": "spec.parallelism.tensor", "--tensor-parallel-size": "spec.parallelism.tensor",
    "--dp-size": "spec.parallelism.data", "--data-parallel-size": "spec.parallelism.data",
    "--pp-size": "spec.parallelism.pipeline", "--pipeline-parallel-size": "spec.parallelism.pipeline",
    "--nnodes": "spec.parallelism.nodes", "--node-rank": "spec.parallelism.nodes",
    "--dist-init-addr": "spec.parallelism.nodes", "--nccl-init-addr": "spec.parallelism.nodes",
    "--host": "the operator (always --host 0.0.0.0)", "--port": "spec.port",
    "--enable-metrics": "the operator (always --enable-metrics)",
    **SECRET_FLAGS,
    "--speculative-algorithm": "spec.speculative.algorithm", "--speculative-num-steps": "spec.speculative.numSteps",
    "--speculative-eagle-topk": "spec.speculative.eagleTopk",
    "--speculative-num-draft-tokens": "spec.speculative.numDraftTokens",
    "--speculative-draft-model-path": "spec.speculative.draftModelPath",
    "--speculative-draft-model": "spec.speculative.draftModelPath",
    "--speculative-adaptive": "spec.speculative.adaptive",
    "--speculative-adaptive-config": "spec.speculative.adaptive",
    "--mem-fraction-static": "spec.memory.memFractionStatic", "--context-length": "spec.memory.contextLength",
    "--max-running-requests": "spec.memory.maxRunningRequests", "--max-total-tokens": "spec.memory.maxTotalTokens",
    "--chunked-prefill-size": "spec.memory.chunkedPrefillSize",
    "--mamba-full-memory-ratio": "spec.memory.mambaFullMemoryRatio",
    "--mamba-scheduler-strategy": "spec.memory.mambaSchedulerStrategy",
    "--mamba-radix-cache-strategy": "spec.memory.mambaSchedulerStrategy",
    "--cuda-graph-max-bs": "spec.memory.cudaGraphMaxBs", "--cuda-graph-max-bs-decode": "spec.memory.cudaGraphMaxBs",
}
OWNED_FLAGS: tuple[str, ...] = tuple(OWNED)


def flag_name(arg: str) -> str | None:
    """The flag an ``extraArgs`` item names (``--x=1`` → ``--x``), or None for a value item."""
    return arg.split("=", 1)[0] if arg.startswith("--") else None


def owned_by_typed_field(arg: str) -> str | None:
    """The owned flag ``arg`` equals or abbreviates (argparse prefix matching), or None."""
    name = flag_name(arg)
    if name is None or name in NOT_ABBREVIATIONS:
        return None
    return next((f for f in OWNED_FLAGS if f.startswith(name)), None)


def _owned_groups() -> dict[str, tuple[str, ...]]:
    """Field → the owned flags it renders (every spelling), in :data:`OWNED` order."""
    groups: dict[str, tuple[str, ...]] = {}
    for flag, field in OWNED.items():
        groups[field] = (*groups.get(field, ()), flag)
    return groups


_OWNED_NOTES = {"spec.memory.cudaGraphMaxBs": " (SGLang 0.5.14 split the old flag: --cuda-graph-max-bs-prefill, "
                                               "the prefill side, stays in spec.extraArgs)"}
"""What a refusal adds for a field that owns only part of a flag's successors (``history.successors``)."""


def _owned_message(name: str, field: str) -> str:
    """The refusal of flag ``name`` in extraArgs, owned by ``field`` (``%s`` as name: the CEL template; no quote nor
    other ``%`` in it). A secret's refusal shows the flag only, never the value."""
    if field in SECRET_FLAGS.values():
        flags = ", ".join(_owned_groups()[field])
        return (f"spec.extraArgs: {name} takes a secret, which spec.extraArgs would show in status.command, the "
                f"Deployment and events: remove it from spec.extraArgs, put the value in a Secret and set {field} "
                f"(SGLang {flags}, passed from the Secret through the env)")
    if field.startswith("spec."):
        flags = ", ".join(_owned_groups()[field])
        return (f"spec.extraArgs: {name} is rendered from {field} (SGLang {flags}); remove it from spec.extraArgs "
                f"and set {field}{_OWNED_NOTES.get(field, '')}")
    return f"spec.extraArgs: {name} is rendered by {field}; remove it from spec.extraArgs"


def owned_flag_refusal(arg: str) -> str:
    """The refusal of ``extraArgs`` item ``arg`` that names (or abbreviates) an owned flag: the flag as written,
    the field that owns it with its SGLang spellings, the fix. The same text as the CEL rule of that field."""
    name = flag_name(arg) or arg
    flag = owned_by_typed_field(arg) or name
    return _owned_message(name, OWNED[flag])


def _owned_rule(field: str, flags: tuple[str, ...]) -> CelRule:
    """One CEL rule per owning field: no extraArgs item may equal or abbreviate one of ``flags``."""
    listed = "[" + ", ".join(f"'{f}'" for f in flags) + "]"
    exempt = tuple(n for n in NOT_ABBREVIATIONS if any(f.startswith(n) for f in flags))
    hit = f"a.startsWith('--') && {listed}.exists(f, f.startsWith(a.split('=')[0]))"
    if exempt:
        hit += " && !(a.split('=')[0] in [" + ", ".join(f"'{n}'" for n in exempt) + "])"
    first = f"self.extraArgs.filter(a, {hit})[0].split('=')[0]"

    def hits(name: str | None) -> bool:
        return name is not None and name not in exempt and any(f.startswith(name) for f in flags)

    return CelRule(
        f"!has(self.extraArgs) || !self.extraArgs.exists(a, {hit})",
        _owned_message(" or ".join(flags) + " (or an abbreviation)", field),
        lambda m: not any(hits(n) for n in map(flag_name, m.extra_args)),
        ".extraArgs",
        message_expression=f"'{_owned_message('%s', field)}'.format([{first}])",
        explain=lambda m: _owned_message(next(n for n in map(flag_name, m.extra_args) if n is not None and hits(n)),
                                         field),
        name="extra-args-owned-flag",
    )


def _gpu_refusal(m: SGLangServerSpec) -> str:
    p = m.parallelism
    need = p.gpus_per_node
    return (f"spec.resources.gpu is {m.resources.gpu} but parallelism.tensor × parallelism.pipeline × "
            f"parallelism.data ÷ parallelism.nodes is {p.tensor} × {p.pipeline} × {p.data} ÷ {p.nodes} = {need}: set "
            f"spec.resources.gpu to at least {need}, or omit it (default: tensor × pipeline × data ÷ nodes)")


_GPUS_PER_NODE_CEL = ("self.parallelism.tensor * self.parallelism.pipeline * self.parallelism.data / "
                      "self.parallelism.nodes")


class LocalObjectRef(ApiModel):
    """A reference to an object by name in the same namespace."""

    name: Annotated[str, Field(min_length=1, max_length=NAME_LIMIT)]
    """Object name."""


class ApiKeyRef(SecretKeyRef):
    """Secret key holding the API key SGLang requires from clients (``--api-key``)."""

    key: Annotated[str, Field(min_length=1, max_length=NAME_LIMIT)] = "api-key"
    """Key inside the Secret."""


class AdminApiKeyRef(SecretKeyRef):
    """Secret key holding the admin API key SGLang requires on its admin endpoints (``--admin-api-key``, SGLang
    0.5.8 and later)."""

    key: Annotated[str, Field(min_length=1, max_length=NAME_LIMIT)] = "admin-api-key"
    """Key inside the Secret."""


class SslKeyfilePasswordRef(SecretKeyRef):
    """Secret key holding the password of the TLS private key file (``--ssl-keyfile-password``, SGLang 0.5.10 and
    later; the key file itself is ``--ssl-keyfile`` in ``spec.extraArgs``, mounted from ``spec.volumes``)."""

    key: Annotated[str, Field(min_length=1, max_length=NAME_LIMIT)] = "ssl-keyfile-password"
    """Key inside the Secret."""


class Resources(ApiModel):
    """Compute resources of the SGLang container."""

    gpu: Annotated[int | None, Field(ge=0, le=64)] = None
    """``nvidia.com/gpu`` requested and limited per pod; default parallelism.tensor × parallelism.pipeline ×
    parallelism.data ÷ parallelism.nodes (every pod of a multi-node group gets the same number)."""
    cpu: Quantity | None = None
    """CPU request and limit, e.g. ``8``. Unset: requested only (no limit), 4 cores per GPU of the pod (at least
    4): SGLang runs one scheduler process per GPU that keeps a core busy launching kernels, beside its tokenizer,
    detokenizer and HTTP server (builders/workload.py ``CPU_PER_GPU``)."""
    memory: Quantity | None = None
    """Memory request and limit, e.g. ``64Gi`` (the /dev/shm emptyDir counts against it). Unset: requested only
    (no limit), 16Gi per GPU of the pod (at least 16Gi): every rank reads its weight shard through host memory while
    loading (builders/workload.py ``MEMORY_GIB_PER_GPU``). With these requests a GPU pod is Burstable, never
    BestEffort (the first pods evicted under node memory pressure)."""
    shm_size: Quantity = "16Gi"
    """Size limit of the memory-backed ``/dev/shm`` (NCCL and tensor parallel workers use it)."""


class StrategyType(StrEnum):
    """How pods are replaced when the pod template changes (the Deployment's strategy type)."""

    RECREATE = "Recreate"
    ROLLING_UPDATE = "RollingUpdate"
    CANARY = "Canary"


INT_OR_PERCENT_PATTERN = r"^([0-9]+|[0-9]{1,3}%)$"
IntOrPercent = Annotated[
    int | Annotated[str, StringConstraints(pattern=INT_OR_PERCENT_PATTERN, max_length=16)],
    WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": INT_OR_PERCENT_PATTERN,
                    "maxLength": 16,
                    "x-kubernetes-int-or-string": True}),
]
"""A count or a percentage (``1``, ``25%``), as Kubernetes' ``IntOrString`` in a rolling update."""


def percent_of(value: int | str, replicas: int) -> int:
    """A count or a percentage (``25%``) of ``replicas``, a percentage rounded up (``25%`` of 3 is 1)."""
    if isinstance(value, int):
        return value
    if value.endswith("%"):
        return -(-int(value[:-1]) * replicas // 100)
    return int(value)


class OnInconclusive(StrEnum):
    """What an inconclusive canary interval (no measurement of the canary or of the stable revision in the same
    interval) counts for."""

    HOLD = "Hold"
    """Nothing: the canary holds at its step (it is neither promoted nor removed) until intervals measure again."""
    ROLLBACK = "Rollback"
    """A failure: ``spec.rollback.failureThreshold`` inconclusive intervals in a row remove the canary."""


class CanaryStep(ApiModel):
    """One step of a canary: the new revision runs on ``replicas`` pods and is judged side by side with the stable
    revision's pods for ``judgeSeconds`` and ``samples`` measured intervals (defaults: ``spec.rollback.verifySeconds``
    and ``spec.rollback.minSamples``)."""

    replicas: IntOrPercent = 1
    """Pods of the new revision at this step, a count or a percentage of ``spec.replicas`` (rounded up, at least 1,
    at most ``spec.replicas`` − 1: the last step is followed by the promotion to every replica); a percentage
    follows ``spec.replicas`` when the server is scaled."""
    judge_seconds: Annotated[int | None, Field(ge=0, le=604800)] = None
    """Seconds judged at this step after its pods are warmed up; default ``spec.rollback.verifySeconds``."""
    samples: Annotated[int | None, Field(ge=1, le=1000)] = None
    """Measured intervals passed at this step, count; default ``spec.rollback.minSamples``."""


class CanaryStrategy(ApiModel):
    """``spec.strategy.canary``: how a new revision is rolled out next to the stable one (``type: Canary``)."""

    steps: Annotated[list[CanaryStep], Field(min_length=1, max_length=10)] = Field(
        default_factory=lambda: [CanaryStep()], json_schema_extra={"default": [{"replicas": 1}]})
    """The steps, in order (default: one step of 1 replica, then all replicas)."""
    max_surge: Annotated[int, Field(ge=0, le=1)] = 0
    """0 (default: for clusters without spare GPUs): each canary pod replaces a stable pod, ready capacity never
    below ``spec.replicas`` − 1; 1: the first canary pod is added before a stable pod goes, ready capacity never
    below ``spec.replicas`` (one more pod's GPUs are needed)."""
    on_inconclusive: OnInconclusive = OnInconclusive.HOLD
    """``Hold`` (default) or ``Rollback``: what an interval without both revisions' measurement counts for."""

    def step_replicas(self, index: int, replicas: int) -> int:
        """The canary's pods at step ``index`` (0-based) of a server of ``replicas``: the step's count or percentage
        (rounded up), at least 1 and at least the previous step's, at most ``replicas`` − 1."""
        count = 1
        for step in self.steps[: index + 1]:
            count = max(count, percent_of(step.replicas, replicas))
        return max(1, min(count, replicas - 1))


def _type_only(field: str, strategy: StrategyType, name: str, shown: bool = False) -> CelRule:
    """The rule that ``spec.strategy.<field>`` (camelCase) is set only with type ``strategy``; ``shown``: the
    refusal quotes the field's value (else it says ``is set``)."""
    attribute, kind = to_snake(field), strategy.value
    fix = f"it applies to {kind} only; set type: {kind} or remove {field}"
    return CelRule(
        f"!has(self.{field}) || self.type == '{kind}'", f"spec.strategy.{field} applies to type {kind} only",
        lambda m: getattr(m, attribute) is None or m.type is strategy, f".{field}",
        message_expression=f"'spec.strategy.{field} is {'%s' if shown else 'set'} but type is %s: {fix}'.format(["
        + (f"self.{field}, " if shown else "") + "self.type])",
        explain=lambda m: f"spec.strategy.{field} is {getattr(m, attribute) if shown else 'set'} but type is "
        f"{m.type.value}: {fix}",
        name=name,
    )


class UpdateStrategy(ApiModel):
    """How pods are replaced when the pod template changes (rendered as the Deployment's ``strategy``)."""

    type: StrategyType = StrategyType.RECREATE
    """``Recreate`` (default: the GPUs hold one copy of the model, so the old pods stop before the new ones
    start), ``RollingUpdate`` (servers with several replicas: at most ``maxUnavailable`` of them are replaced at
    a time while the others serve; no extra pod is started, maxSurge 0) or ``Canary`` (``replicas`` ≥ 2, pods or
    LeaderWorkerSet groups: a new revision runs on a second workload, ``<name>-canary``, judged side by side with
    the stable pods and promoted step by step or removed, ``canary``; docs/canary.md)."""
    canary: CanaryStrategy | None = None
    """Canary only: the steps, ``maxSurge`` and ``onInconclusive`` (default: one step of 1 replica, maxSurge 0,
    Hold)."""
    max_unavailable: IntOrPercent | None = None
    """RollingUpdate only: replicas that may be down at once, a count or a percentage (``25%``); default 1."""
    drain_seconds: Annotated[int, Field(ge=0, le=3600)] = 0
    """Recreate: before the old pods are replaced (an update or a rollback), wait up to this many seconds until they
    run no request (``sglang:num_running_reqs`` 0), so in-flight requests finish; the operator sends them no probe
    meanwhile. Canary: every pod removed (a stable pod making room for a canary pod, the canary's pods when it is
    removed, the old pods during a promotion) waits up to this many seconds, out of the Service's endpoints, until it
    runs no request (the pods' ``preStop`` hook). 0: no wait."""

    cel_rules = (
        _type_only("maxUnavailable", StrategyType.ROLLING_UPDATE, "max-unavailable-rolling-only", shown=True),
        CelRule(
            "!has(self.maxUnavailable) || (type(self.maxUnavailable) == int ? self.maxUnavailable > 0 : "
            "self.maxUnavailable != '0%')",
            "spec.strategy.maxUnavailable must be at least 1 (no extra pod is started: maxSurge is 0)",
            lambda m: m.max_unavailable is None or m.max_unavailable not in (0, "0%", "0"),
            ".maxUnavailable",
            message_expression="'spec.strategy.maxUnavailable is %s: with no extra pod started (maxSurge 0) the "
            "update could never progress; set it to at least 1'.format([self.maxUnavailable])",
            explain=lambda m: f"spec.strategy.maxUnavailable is {m.max_unavailable}: with no extra pod started "
            "(maxSurge 0) the update could never progress; set it to at least 1",
            name="max-unavailable-positive",
        ),
        _type_only("canary", StrategyType.CANARY, "canary-canary-only"),
        CelRule(
            "!has(self.drainSeconds) || self.drainSeconds == 0 || self.type == 'Recreate' || self.type == 'Canary'",
            "spec.strategy.drainSeconds applies to types Recreate and Canary only",
            lambda m: m.drain_seconds == 0 or m.type in (StrategyType.RECREATE, StrategyType.CANARY),
            ".drainSeconds",
            message_expression="'spec.strategy.drainSeconds is %d but type is %s: draining applies to Recreate and "
            "Canary (a rolling update keeps the other replicas serving); remove drainSeconds or set type: Recreate "
            "or Canary'.format([self.drainSeconds, self.type])",
            explain=lambda m: f"spec.strategy.drainSeconds is {m.drain_seconds} but type is {m.type.value}: draining "
            "applies to Recreate and Canary (a rolling update keeps the other replicas serving); remove drainSeconds "
            "or set type: Recreate or Canary",
            name="drain-recreate-or-canary",
        ),
    )


    @property
    def canary_policy(self) -> CanaryStrategy | None:
        """The canary policy in force: ``canary`` (or its defaults) with type Canary, else None."""
        if self.type is not StrategyType.CANARY:
            return None
        return self.canary or CanaryStrategy()


class ServiceType(StrEnum):
    """Kubernetes Service type."""

    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"


class SGLangServerSpec(ApiModel):
    """Desired state of an SGLang server. The operator renders it into the target release's launch flags, one
    Deployment (``spec.strategy``: Recreate by default, RollingUpdate, or Canary with a second Deployment
    ``<name>-canary`` while a canary runs) or, with ``parallelism.nodes`` above 1, a LeaderWorkerSet; one Service;
    a PodMonitor when the Prometheus Operator is installed; a ScaledObject with ``autoscaling.mode: KEDA``."""

    sglang: SGLangImage
    """SGLang image and release."""
    model: ModelSpec
    """Model to serve."""
    parallelism: Parallelism = Field(default_factory=Parallelism, json_schema_extra={"default": {}})
    """Tensor / pipeline / data parallelism and nodes per group (multi-node: a LeaderWorkerSet)."""
    speculative: Speculative | None = None
    """Speculative decoding; absent means off."""
    memory: Memory = Field(default_factory=Memory)
    """Memory and batching limits."""
    resources: Resources = Field(default_factory=Resources, json_schema_extra={"default": {}})
    """GPUs, CPU, memory and shared memory."""
    replicas: Annotated[int, Field(ge=0, le=1000)] = 1
    """Number of pods (each a full copy of the model). Changing it alone never restarts pods."""
    port: Annotated[int, Field(ge=1, le=65535)] = 30000
    """HTTP port of SGLang (``--port``); ``/metrics`` is served on it too."""
    service_type: ServiceType = ServiceType.CLUSTER_IP
    """Type of the Service in front of the pods."""
    api_key_secret_ref: ApiKeyRef | None = None
    """Secret holding the API key (``--api-key``, passed through the env, not the command line)."""
    admin_api_key_secret_ref: AdminApiKeyRef | None = None
    """Secret holding the admin API key (``--admin-api-key``, SGLang 0.5.8 and later; passed through the env, not
    the command line). An older release refuses it (SpecValid=False)."""
    ssl_keyfile_password_secret_ref: SslKeyfilePasswordRef | None = None
    """Secret holding the TLS key file's password (``--ssl-keyfile-password``, SGLang 0.5.10 and later; passed
    through the env, not the command line). An older release refuses it (SpecValid=False)."""
    extra_args: Annotated[list[Annotated[str, Field(max_length=512)]], Field(max_length=MAX_EXTRA_ARGS)] = Field(
        default_factory=list
    )
    """Extra SGLang launch arguments, e.g. ``["--page-size", "64"]``: full flag names of the target release
    only. A flag a typed field owns, or an abbreviation of one, is refused."""
    env: Annotated[list[EnvVar], Field(max_length=MAX_ENV)] = Field(default_factory=list)
    """Extra environment variables (Kubernetes EnvVar objects)."""
    node_selector: Annotated[dict[MapKey, LabelValue], Field(max_length=8)] = Field(default_factory=dict)
    """Node labels the pods require, e.g. ``nvidia.com/gpu.product: NVIDIA-RTX-A6000`` for a GPU model."""
    tolerations: Annotated[list[Toleration], Field(max_length=8)] = Field(default_factory=list)
    """Pod tolerations (Kubernetes Toleration objects)."""
    affinity: Affinity | None = None
    """Pod affinity (a Kubernetes Affinity object)."""
    runtime_class_name: Annotated[str | None, Field(max_length=NAME_LIMIT)] = None
    """Pod runtimeClassName, e.g. ``nvidia``."""
    priority_class_name: Annotated[str | None, Field(max_length=NAME_LIMIT)] = None
    """Pod priorityClassName."""
    image_pull_secrets: Annotated[list[LocalObjectRef], Field(max_length=8)] = Field(default_factory=list)
    """Secrets for pulling the image."""
    service_account_name: Annotated[str | None, Field(max_length=NAME_LIMIT)] = None
    """ServiceAccount of the pods."""
    automount_service_account_token: bool | None = None
    """Pod ``automountServiceAccountToken``; unset means false: SGLang never calls the Kubernetes API, so its pods
    get no token (a compromised model server cannot act as its ServiceAccount). Set true for an image that calls
    the Kubernetes API itself."""
    security_context: SecurityContext | None = None
    """SecurityContext of the SGLang container, merged per field over the operator's defaults
    ``allowPrivilegeEscalation: false``, ``capabilities: {drop: [ALL]}``, ``seccompProfile: {type: RuntimeDefault}``
    (a field set here wins; ``capabilities.add`` is kept beside the default ``drop: [ALL]`` unless ``drop`` is set
    here too; ``privileged: true`` or an added ``SYS_ADMIN`` leaves the default ``allowPrivilegeEscalation`` out,
    which the API server refuses beside them). The image's user and a writable root filesystem are kept: SGLang images
    run as root and write caches. RDMA / InfiniBand (GPUDirect RDMA, NCCL over IB verbs) needs ``capabilities: {add:
    [IPC_LOCK]}`` to pin (mlock) its registered memory beyond the memlock limit; IPC_LOCK is outside the Pod Security
    Standards ``baseline`` level, so such a namespace must allow ``privileged``. A model cache whose files another
    user owns needs ``add: [DAC_OVERRIDE]`` (within ``baseline``: without capabilities root may not write them)."""
    pod_labels: Annotated[dict[MapKey, LabelValue], Field(max_length=8)] = Field(default_factory=dict)
    """Extra labels of the pods (the operator's own ``app.kubernetes.io/*`` labels win)."""
    pod_annotations: Annotated[dict[MapKey, Annotated[str, Field(max_length=POD_ANNOTATION_LIMIT)]],
                               Field(max_length=16)] = Field(default_factory=dict)
    """Extra annotations of the pods."""
    volumes: Annotated[list[Volume], Field(max_length=8)] = Field(default_factory=list)
    """Extra pod volumes (Kubernetes Volume objects)."""
    volume_mounts: Annotated[list[VolumeMount], Field(max_length=16)] = Field(default_factory=list)
    """Extra mounts of the SGLang container (Kubernetes VolumeMount objects)."""
    rollback: RollbackPolicy = Field(default_factory=RollbackPolicy, json_schema_extra={"default": {}})
    """Automatic rollback policy."""
    strategy: UpdateStrategy = Field(default_factory=UpdateStrategy, json_schema_extra={"default": {}})
    """How pods are replaced on an update: Recreate (default, with an optional drain) or RollingUpdate."""
    autoscaling: Autoscaling | None = None
    """The replica count follows SGLang's load through a KEDA ScaledObject (or your own scaler); docs/autoscaling.md."""

    cel_rules = (
        *(_owned_rule(field, flags) for field, flags in _owned_groups().items()),
        CelRule(
            "!has(self.resources) || !has(self.resources.gpu) || !has(self.parallelism) || "
            f"self.resources.gpu >= {_GPUS_PER_NODE_CEL}",
            "spec.resources.gpu must be at least parallelism.tensor × parallelism.pipeline × parallelism.data ÷ "
            "parallelism.nodes",
            lambda m: m.resources.gpu is None or m.resources.gpu >= m.parallelism.gpus_per_node,
            ".resources.gpu",
            message_expression="'spec.resources.gpu is %d but parallelism.tensor × parallelism.pipeline × "
            "parallelism.data ÷ parallelism.nodes is %d × %d × %d ÷ %d = %d: set spec.resources.gpu to at least %d, "
            "or omit it (default: tensor × pipeline × data ÷ nodes)'.format([self.resources.gpu, "
            "self.parallelism.tensor, self.parallelism.pipeline, self.parallelism.data, self.parallelism.nodes, "
            f"{_GPUS_PER_NODE_CEL}, {_GPUS_PER_NODE_CEL}])",
            explain=_gpu_refusal,
            name="gpus-cover-parallelism",
        ),
        CelRule(
            "!has(self.strategy) || self.strategy.type != 'Canary' || self.replicas >= 2",
            "spec.strategy.type Canary needs spec.replicas of at least 2 (a stable replica serves beside the canary; "
            "multi-node, replicas are LeaderWorkerSet groups)",
            lambda m: m.strategy.type is not StrategyType.CANARY or m.replicas >= 2,
            ".replicas",
            message_expression="'spec.strategy.type is Canary but spec.replicas is %d: a canary runs beside stable "
            "replicas, so it needs at least 2; set replicas to 2 or more, or type: Recreate'.format([self.replicas])",
            explain=lambda m: f"spec.strategy.type is Canary but spec.replicas is {m.replicas}: a canary runs beside "
            "stable replicas, so it needs at least 2; set replicas to 2 or more, or type: Recreate",
            name="canary-replicas",
        ),
        CANARY_RULE,
    )

    def secret_refs(self) -> dict[str, SecretKeyRef]:
        """Flag of :data:`SECRET_FLAGS` → its Secret reference, for the references set (in that order)."""
        refs: dict[str, SecretKeyRef | None] = {
            "--api-key": self.api_key_secret_ref,
            "--admin-api-key": self.admin_api_key_secret_ref,
            "--ssl-keyfile-password": self.ssl_keyfile_password_secret_ref,
        }
        return {flag: ref for flag, ref in refs.items() if ref is not None}

    @property
    def gpus(self) -> int:
        """GPUs per pod: ``resources.gpu`` or tensor × pipeline × data ÷ nodes."""
        if self.resources.gpu is not None:
            return self.resources.gpu
        return self.parallelism.gpus_per_node
