"""``SGLangServer.spec``: the whole desired state of one SGLang server (one Deployment + one Service)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

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
from sglang_operator.api.rollback import RollbackPolicy

#: Every spelling (aliases included, in any supported SGLang release) of the launch flags that typed fields
#: render. ``extraArgs`` may not name one of them nor an abbreviation of one. Aliases as in the extracted flag
#: tables (``sglang/data/flags-<version>.json``); tests/api/test_owned_flags.py checks they agree.
OWNED_FLAGS: tuple[str, ...] = (
    "--model-path", "--model", "--served-model-name", "--revision", "--trust-remote-code",
    "--tp-size", "--tensor-parallel-size", "--dp-size", "--data-parallel-size", "--nnodes",
    "--host", "--port", "--enable-metrics", "--api-key",
    "--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
    "--speculative-num-draft-tokens", "--speculative-draft-model-path", "--speculative-draft-model",
    "--mem-fraction-static", "--context-length", "--max-running-requests", "--max-total-tokens",
    "--chunked-prefill-size", "--mamba-full-memory-ratio", "--mamba-scheduler-strategy",
    "--mamba-radix-cache-strategy",
)


def flag_name(arg: str) -> str | None:
    """The flag an ``extraArgs`` item names (``--x=1`` → ``--x``), or None for a value item."""
    return arg.split("=", 1)[0] if arg.startswith("--") else None


def owned_by_typed_field(arg: str) -> str | None:
    """The owned flag ``arg`` equals or abbreviates (argparse prefix matching), or None."""
    name = flag_name(arg)
    if name is None:
        return None
    return next((f for f in OWNED_FLAGS if f.startswith(name)), None)


_OWNED_CEL = "[" + ", ".join(f"'{f}'" for f in OWNED_FLAGS) + "]"


class LocalObjectRef(ApiModel):
    """A reference to an object by name in the same namespace."""

    name: Annotated[str, Field(min_length=1)]
    """Object name."""


class ApiKeyRef(SecretKeyRef):
    """Secret key holding the API key SGLang requires from clients (``--api-key``)."""

    key: Annotated[str, Field(min_length=1)] = "api-key"
    """Key inside the Secret."""


class Resources(ApiModel):
    """Compute resources of the SGLang container."""

    gpu: Annotated[int | None, Field(ge=0, le=64)] = None
    """``nvidia.com/gpu`` requested and limited per pod; default parallelism.tensor × parallelism.data."""
    cpu: Quantity | None = None
    """CPU request and limit, e.g. ``8``."""
    memory: Quantity | None = None
    """Memory request and limit, e.g. ``64Gi`` (the /dev/shm emptyDir counts against it)."""
    shm_size: Quantity = "16Gi"
    """Size limit of the memory-backed ``/dev/shm`` (NCCL and tensor parallel workers use it)."""


class ServiceType(StrEnum):
    """Kubernetes Service type."""

    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"


class SGLangServerSpec(ApiModel):
    """Desired state of an SGLang server. The operator renders it into the target release's launch flags,
    one Deployment (strategy Recreate) and one Service."""

    sglang: SGLangImage
    """SGLang image and release."""
    model: ModelSpec
    """Model to serve."""
    parallelism: Parallelism = Field(default_factory=Parallelism, json_schema_extra={"default": {}})
    """Tensor / data parallelism."""
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
    extra_args: Annotated[list[Annotated[str, Field(max_length=512)]], Field(max_length=128)] = Field(
        default_factory=list
    )
    """Extra SGLang launch arguments, e.g. ``["--page-size", "64"]``: full flag names of the target release
    only. A flag a typed field owns, or an abbreviation of one, is refused."""
    env: list[EnvVar] = Field(default_factory=list)
    """Extra environment variables (Kubernetes EnvVar objects)."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels the pods require, e.g. ``nvidia.com/gpu.product: NVIDIA-RTX-A6000`` for a GPU model."""
    tolerations: list[Toleration] = Field(default_factory=list)
    """Pod tolerations (Kubernetes Toleration objects)."""
    affinity: Affinity | None = None
    """Pod affinity (a Kubernetes Affinity object)."""
    runtime_class_name: str | None = None
    """Pod runtimeClassName, e.g. ``nvidia``."""
    priority_class_name: str | None = None
    """Pod priorityClassName."""
    image_pull_secrets: list[LocalObjectRef] = Field(default_factory=list)
    """Secrets for pulling the image."""
    service_account_name: str | None = None
    """ServiceAccount of the pods."""
    security_context: SecurityContext | None = None
    """SecurityContext of the SGLang container."""
    pod_labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels of the pods (the operator's own ``app.kubernetes.io/*`` labels win)."""
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    """Extra annotations of the pods."""
    volumes: list[Volume] = Field(default_factory=list)
    """Extra pod volumes (Kubernetes Volume objects)."""
    volume_mounts: list[VolumeMount] = Field(default_factory=list)
    """Extra mounts of the SGLang container (Kubernetes VolumeMount objects)."""
    rollback: RollbackPolicy = Field(default_factory=RollbackPolicy, json_schema_extra={"default": {}})
    """Automatic rollback policy."""

    cel_rules = (
        CelRule(
            f"!has(self.extraArgs) || self.extraArgs.all(a, !a.startsWith('--') || "
            f"!{_OWNED_CEL}.exists(f, f.startsWith(a.split('=')[0])))",
            "spec.extraArgs may not set a flag that a typed field owns, or an abbreviation of one "
            "(e.g. --tp for --tp-size); use the typed field",
            lambda m: not any(owned_by_typed_field(a) for a in m.extra_args),
            ".extraArgs",
        ),
        CelRule(
            "!has(self.resources) || !has(self.resources.gpu) || !has(self.parallelism) || "
            "self.resources.gpu >= self.parallelism.tensor * self.parallelism.data",
            "spec.resources.gpu must be at least parallelism.tensor × parallelism.data",
            lambda m: m.resources.gpu is None or m.resources.gpu >= m.parallelism.tensor * m.parallelism.data,
            ".resources.gpu",
        ),
    )

    @property
    def gpus(self) -> int:
        """GPUs per pod: ``resources.gpu`` or tensor × data."""
        if self.resources.gpu is not None:
            return self.resources.gpu
        return self.parallelism.tensor * self.parallelism.data
