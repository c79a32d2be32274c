"""The typed blocks of ``SGLangServer.spec`` (``sglang``, ``model``, ``parallelism``, ``speculative``, ``memory``).

Field names are camelCase in YAML; each maps to one SGLang launch flag, named in its description with the
flag of SGLang 0.5.23 (``python/sglang/srt/arg_groups/fields/*.py``) and, where it was renamed, of 0.5.10
(``python/sglang/srt/server_args.py``). Unset optional fields are not rendered: SGLang's own automatic value
applies.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from sglang_operator.api.base import ApiModel, CelRule, Quantity
from sglang_operator.api.bounds import NAME_LIMIT, PATH_LIMIT


class PullPolicy(StrEnum):
    """Kubernetes ``imagePullPolicy``."""

    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class SGLangImage(ApiModel):
    """Which SGLang release runs, and from which container image."""

    image: Annotated[str, Field(min_length=1, max_length=512)]
    """Container image running SGLang, e.g. ``lmsysorg/sglang:v0.5.10-cu129``."""
    version: Annotated[str | None, Field(pattern=r"^v?[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?$", max_length=32)] = None
    """SGLang release the image runs (e.g. ``0.5.10``, ``0.4.9.post6``); parsed from the image tag when absent.
    Rendering uses that release's flag names, entry point and probe endpoint."""
    image_pull_policy: PullPolicy = PullPolicy.IF_NOT_PRESENT
    """Kubernetes imagePullPolicy of the SGLang container."""


class SecretKeyRef(ApiModel):
    """A key of a Secret in the SGLangServer's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=NAME_LIMIT)]
    """Secret name."""
    key: Annotated[str, Field(min_length=1, max_length=NAME_LIMIT)] = "token"
    """Key inside the Secret."""


class PVCSource(ApiModel):
    """An existing PersistentVolumeClaim (never deleted by the operator)."""

    claim_name: Annotated[str, Field(min_length=1, max_length=NAME_LIMIT)]
    """Name of the PersistentVolumeClaim."""
    read_only: bool = False
    """Mount read-only (the weights must then already be downloaded)."""


class EmptyDirSource(ApiModel):
    """A per-pod scratch directory: the weights are downloaded at every pod start."""

    size_limit: Quantity | None = None
    """sizeLimit of the emptyDir, e.g. ``120Gi``."""


class ModelCache(ApiModel):
    """Where model weights are cached. Exactly one of pvc, hostPath and emptyDir."""

    cel_rules = (
        CelRule(
            "[has(self.pvc), has(self.hostPath), has(self.emptyDir)].filter(x, x).size() == 1",
            "spec.model.cache needs exactly one of pvc, hostPath, emptyDir",
            lambda m: [m.pvc, m.host_path, m.empty_dir].count(None) == 2,
            message_expression="'spec.model.cache sets %d of pvc, hostPath, emptyDir (pvc: %s, hostPath: %s, "
            "emptyDir: %s): it needs exactly one; keep one source'.format([[has(self.pvc), has(self.hostPath), "
            "has(self.emptyDir)].filter(x, x).size(), has(self.pvc), has(self.hostPath), has(self.emptyDir)])",
            explain=lambda m: (
                f"spec.model.cache sets {3 - [m.pvc, m.host_path, m.empty_dir].count(None)} of pvc, hostPath, "
                f"emptyDir (pvc: {str(m.pvc is not None).lower()}, hostPath: {str(m.host_path is not None).lower()}, "
                f"emptyDir: {str(m.empty_dir is not None).lower()}): it needs exactly one; keep one source"
            ),
            name="cache-one-source",
        ),
        CelRule(
            "!has(self.hostPathReadOnly) || self.hostPathReadOnly || has(self.hostPath)",
            "spec.model.cache.hostPathReadOnly applies to hostPath only",
            lambda m: m.host_path_read_only or m.host_path is not None,
            ".hostPathReadOnly",
            message_expression="'spec.model.cache.hostPathReadOnly is false but the cache is not a hostPath: it "
            "applies to hostPath only (pvc has its own readOnly); remove it'",
            explain=lambda m: "spec.model.cache.hostPathReadOnly is false but the cache is not a hostPath: it "
            "applies to hostPath only (pvc has its own readOnly); remove it",
            name="cache-host-path-read-only",
        ),
    )
    pvc: PVCSource | None = None
    """Mount an existing PersistentVolumeClaim."""
    host_path: Annotated[str | None, Field(pattern=r"^/", max_length=PATH_LIMIT)] = None
    """Mount a directory of the node (absolute path), e.g. ``/data/hf-cache``: read-only and ``type: Directory`` (it
    must exist, with the weights in it) unless ``hostPathReadOnly`` is false."""
    host_path_read_only: bool = True
    """hostPath only: mount the node's directory read-only with ``type: Directory`` (default: SGLang reads weights
    already there and cannot change the files other servers on the node load). False: read-write with ``type:
    DirectoryOrCreate``, so SGLang downloads into it; the chart's admission policy refuses it unless the admin allows
    writes (``admissionPolicy.hostPathWrites``)."""
    empty_dir: EmptyDirSource | None = None
    """Use an emptyDir volume."""
    mount_path: Annotated[str, Field(pattern=r"^/", max_length=PATH_LIMIT)] = "/root/.cache/huggingface"
    """Where the cache is mounted in the container; ``HF_HOME`` is set to it."""


class ModelSpec(ApiModel):
    """The model SGLang serves."""

    path: Annotated[str, Field(min_length=1, max_length=PATH_LIMIT)]
    """Hugging Face model id or local path (``--model-path``)."""
    served_model_name: Annotated[str | None, Field(max_length=256)] = None
    """Model name in the OpenAI API and the metrics' ``model_name`` label (``--served-model-name``); may not
    contain ``:`` (SGLang reserves it for LoRA adapters). Defaults to the path."""
    revision: Annotated[str | None, Field(max_length=256)] = None
    """Model revision: branch, tag or commit (``--revision``)."""
    trust_remote_code: bool = False
    """Allow the model repository's custom code (``--trust-remote-code``)."""
    cache: ModelCache | None = None
    """Weights cache volume; none means the container's own filesystem."""
    token_secret_ref: SecretKeyRef | None = None
    """Hugging Face token, exposed as ``HF_TOKEN``."""

    cel_rules = (
        CelRule(
            "!has(self.servedModelName) || !self.servedModelName.contains(':')",
            "spec.model.servedModelName may not contain ':' (SGLang reserves it for LoRA adapters)",
            lambda m: m.served_model_name is None or ":" not in m.served_model_name,
            ".servedModelName",
            message_expression="'spec.model.servedModelName \"%s\" may not contain \":\" (SGLang reserves it for "
            "LoRA adapters: server_args.py check_server_args); remove the colon'.format([self.servedModelName])",
            explain=lambda m: f'spec.model.servedModelName "{m.served_model_name}" may not contain ":" (SGLang '
            "reserves it for LoRA adapters: server_args.py check_server_args); remove the colon",
            name="served-model-name-colon",
        ),
    )


class Parallelism(ApiModel):
    """How the model is split over GPUs, and over nodes. Multi-node (``nodes`` > 1) runs a LeaderWorkerSet: one
    group of ``nodes`` pods per replica, each pod with tensor × pipeline ÷ nodes GPUs (``docs/multinode.md``)."""

    tensor: Annotated[int, Field(ge=1, le=64)] = 1
    """Tensor parallel size (``--tp-size``), over all nodes of a group."""
    pipeline: Annotated[int, Field(ge=1, le=64)] = 1
    """Pipeline parallel size (``--pp-size``), over all nodes of a group."""
    data: Annotated[int, Field(ge=1, le=64)] = 1
    """Data parallel size (``--dp-size``): copies of the model inside one pod (single node only)."""
    nodes: Annotated[int, Field(ge=1, le=64)] = 1
    """Nodes per group (``--nnodes``; LeaderWorkerSet group size). Each node runs tensor × pipeline ÷ nodes GPUs;
    node rank 0 (the leader) serves HTTP."""

    cel_rules = (
        CelRule(
            "(self.tensor * self.pipeline) % self.nodes == 0",
            "spec.parallelism.nodes must divide parallelism.tensor × parallelism.pipeline (every node runs the "
            "same number of GPUs)",
            lambda m: (m.tensor * m.pipeline) % m.nodes == 0,
            ".nodes",
            message_expression="'spec.parallelism.nodes is %d but parallelism.tensor × parallelism.pipeline is %d × "
            "%d = %d, which it does not divide (every node runs the same number of GPUs; SGLang: tp_size must be "
            "divisible by number of nodes); change parallelism.tensor or parallelism.nodes'.format([self.nodes, "
            "self.tensor, self.pipeline, self.tensor * self.pipeline])",
            explain=lambda m: f"spec.parallelism.nodes is {m.nodes} but parallelism.tensor × parallelism.pipeline is "
            f"{m.tensor} × {m.pipeline} = {m.tensor * m.pipeline}, which it does not divide (every node runs the same "
            "number of GPUs; SGLang: tp_size must be divisible by number of nodes); change parallelism.tensor or "
            "parallelism.nodes",
            name="nodes-divide-tensor-pipeline",
        ),
        CelRule(
            "self.nodes == 1 || self.data == 1",
            "spec.parallelism.data > 1 is not supported with parallelism.nodes > 1 (SGLang: multi-node "
            "data-parallel replicas are not supported)",
            lambda m: m.nodes == 1 or m.data == 1,
            ".data",
            message_expression="'spec.parallelism.data is %d with parallelism.nodes %d: data parallelism across "
            "nodes is not supported (SGLang: multi-node data-parallel replicas are not supported); set "
            "parallelism.data to 1 and use spec.replicas for more copies'.format([self.data, self.nodes])",
            explain=lambda m: f"spec.parallelism.data is {m.data} with parallelism.nodes {m.nodes}: data parallelism "
            "across nodes is not supported (SGLang: multi-node data-parallel replicas are not supported); set "
            "parallelism.data to 1 and use spec.replicas for more copies",
            name="no-data-parallel-across-nodes",
        ),
    )

    @property
    def gpus_per_node(self) -> int:
        """GPUs each pod needs: tensor × pipeline × data ÷ nodes (data is 1 when nodes > 1)."""
        return self.tensor * self.pipeline * self.data // self.nodes


class SpeculativeAlgorithm(StrEnum):
    """Speculative decoding algorithms SGLang accepts at every supported release
    (0.5.10 argparse choices in ``python/sglang/srt/server_args.py``)."""

    NEXTN = "NEXTN"
    EAGLE = "EAGLE"
    EAGLE3 = "EAGLE3"
    STANDALONE = "STANDALONE"
    NGRAM = "NGRAM"


DRAFT_REQUIRED = frozenset({SpeculativeAlgorithm.EAGLE3, SpeculativeAlgorithm.STANDALONE})
"""Algorithms that always run a separate draft model: EAGLE3 heads and STANDALONE small models have no
automatic draft path in SGLang (``server_args.py:_handle_speculative_decoding`` fills it only for EAGLE/NEXTN
on the MTP architectures it lists)."""


ADAPTIVE_ALGORITHMS = frozenset({SpeculativeAlgorithm.NEXTN, SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.EAGLE3})
"""Algorithms SGLang's adaptive speculative decoding runs with (``python/sglang/srt/speculative/
adaptive_spec_params.py:adaptive_unsupported_reason``, 0.5.11–0.5.17 read: EAGLE and EAGLE3, NEXTN being rewritten
to EAGLE first)."""


class ConfigMapKeyRef(ApiModel):
    """A key of a ConfigMap in the SGLangServer's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    """ConfigMap name."""
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")] = "adaptive.json"
    """Key inside the ConfigMap (its value is the JSON file SGLang reads)."""


class Adaptive(ApiModel):
    """SGLang's adaptive speculative decoding (``--speculative-adaptive``, SGLang 0.5.11 and later): SGLang switches
    ``speculative_num_steps`` at run time among candidate steps by the accept length it measures (an EMA;
    ``python/sglang/srt/speculative/adaptive_spec_params.py``), draft tokens always steps + 1. The tier it runs is in
    ``status.effective.activeNumSteps`` (from ``sglang:spec_num_steps``, 0.5.13 on). SGLang silently runs static
    settings when the rest of the spec does not allow adaptive mode; the operator refuses such a spec instead."""

    enabled: bool = True
    """Render ``--speculative-adaptive`` (false: keep the block, run static settings)."""
    config_map_ref: ConfigMapKeyRef | None = None
    """The tuning knobs as SGLang's JSON file (``--speculative-adaptive-config``, a path: the key is mounted from
    this ConfigMap read-only under ``/etc/sglang-operator/speculative-adaptive/``). 0.5.11–0.5.12: one object with
    ``candidate_steps`` (at least two), ``ema_alpha``, ``update_interval``, ``warmup_batches``, ``up_hysteresis``,
    ``down_hysteresis``; 0.5.13 on: per batch size, ``{"1": {"candidate_steps": [1, 3, 7]}, "8": ...}``, and
    ``numSteps`` must be one of the candidates. Unset: SGLang's defaults (candidate steps 1, 3 and 7 at batch size
    1). The operator does not read the ConfigMap: a change of its content restarts no pod."""


class Speculative(ApiModel):
    """Speculative decoding (MTP / NEXTN, EAGLE, ...). The operator always renders all three of
    ``--speculative-num-steps``, ``--speculative-eagle-topk`` and ``--speculative-num-draft-tokens``: SGLang
    crashes on partial sets and silently rewrites some combinations."""

    algorithm: SpeculativeAlgorithm
    """``--speculative-algorithm``. SGLang reports NEXTN as EAGLE in ``/server_info``."""
    num_steps: Annotated[int, Field(ge=1, le=16)] = 3
    """``--speculative-num-steps``: draft steps per verify. 3 is SGLang's automatic choice for most models."""
    eagle_topk: Annotated[int, Field(ge=1, le=16)] = 1
    """``--speculative-eagle-topk``: branches per draft step. 1 is SGLang's automatic choice for most models."""
    num_draft_tokens: Annotated[int | None, Field(ge=2, le=256)] = None
    """``--speculative-num-draft-tokens``. Derived when absent: numSteps + 1 when eagleTopk is 1 (SGLang
    forces that value), 12 for NGRAM; required when eagleTopk > 1."""
    draft_model_path: Annotated[str | None, Field(max_length=PATH_LIMIT)] = None
    """``--speculative-draft-model-path``: draft model, required by EAGLE3 and STANDALONE (and EAGLE with a
    separate draft). MTP models (NEXTN, or EAGLE on an MTP model) use their own head and need none."""
    spec_v2: bool = False
    """Set ``SGLANG_ENABLE_SPEC_V2=1`` (overlap scheduler for speculative decoding) on releases where the
    variable means something (≤ 0.5.13); needs eagleTopk 1."""
    adaptive: Adaptive | None = None
    """SGLang's adaptive mode (``--speculative-adaptive``, 0.5.11 on; older releases refuse it): the number of steps
    follows the measured accept length. Needs eagleTopk 1 and algorithm NEXTN, EAGLE or EAGLE3; on 0.5.11 also
    specV2 false (adaptive mode ran on the spec v1 worker only there)."""

    cel_rules = (
        CelRule(
            "self.eagleTopk != 1 || !has(self.numDraftTokens) || self.numDraftTokens == self.numSteps + 1",
            "spec.speculative.numDraftTokens must equal numSteps + 1 when eagleTopk is 1 (SGLang would silently "
            "change it); omit it to have it derived",
            lambda m: m.eagle_topk != 1 or m.num_draft_tokens in (None, m.num_steps + 1),
            ".numDraftTokens",
            message_expression="'spec.speculative.numDraftTokens is %d but must equal numSteps + 1 = %d when "
            "eagleTopk is 1 (SGLang would silently change it); set it to %d or omit it to have it derived'.format("
            "[self.numDraftTokens, self.numSteps + 1, self.numSteps + 1])",
            explain=lambda m: f"spec.speculative.numDraftTokens is {m.num_draft_tokens} but must equal numSteps + 1 "
            f"= {m.num_steps + 1} when eagleTopk is 1 (SGLang would silently change it); set it to "
            f"{m.num_steps + 1} or omit it to have it derived",
            name="draft-tokens-steps-plus-one",
        ),
        CelRule(
            "self.eagleTopk == 1 || self.algorithm == 'NGRAM' || has(self.numDraftTokens)",
            "spec.speculative.numDraftTokens is required when eagleTopk > 1",
            lambda m: m.eagle_topk == 1 or m.algorithm is SpeculativeAlgorithm.NGRAM
            or m.num_draft_tokens is not None,
            ".numDraftTokens",
            message_expression="'spec.speculative.numDraftTokens is required when eagleTopk > 1 (eagleTopk is %d: "
            "SGLang derives no value for it then); set spec.speculative.numDraftTokens'.format([self.eagleTopk])",
            explain=lambda m: "spec.speculative.numDraftTokens is required when eagleTopk > 1 (eagleTopk is "
            f"{m.eagle_topk}: SGLang derives no value for it then); set spec.speculative.numDraftTokens",
            name="draft-tokens-with-topk",
        ),
        CelRule(
            "!has(self.specV2) || !self.specV2 || self.eagleTopk == 1",
            "spec.speculative.specV2 needs eagleTopk 1 (SGLang: Spec v2 currently only supports topk = 1)",
            lambda m: not m.spec_v2 or m.eagle_topk == 1,
            ".specV2",
            message_expression="'spec.speculative.specV2 needs eagleTopk 1, got eagleTopk %d (SGLang: Spec v2 "
            "currently only supports topk = 1); set eagleTopk to 1 or specV2 to false'.format([self.eagleTopk])",
            explain=lambda m: f"spec.speculative.specV2 needs eagleTopk 1, got eagleTopk {m.eagle_topk} (SGLang: "
            "Spec v2 currently only supports topk = 1); set eagleTopk to 1 or specV2 to false",
            name="spec-v2-topk",
        ),
        CelRule(
            "!(self.algorithm in ['EAGLE3', 'STANDALONE']) || has(self.draftModelPath)",
            "spec.speculative.draftModelPath is required with algorithm EAGLE3 or STANDALONE (a separate draft "
            "model)",
            lambda m: m.algorithm not in DRAFT_REQUIRED or m.draft_model_path is not None,
            ".draftModelPath",
            message_expression="'spec.speculative.draftModelPath is required with algorithm %s (SGLang loads a "
            "separate draft model from --speculative-draft-model-path); set spec.speculative.draftModelPath, or use "
            "algorithm NEXTN with a model that has MTP layers'.format([self.algorithm])",
            explain=lambda m: f"spec.speculative.draftModelPath is required with algorithm {m.algorithm.value} "
            "(SGLang loads a separate draft model from --speculative-draft-model-path); set "
            "spec.speculative.draftModelPath, or use algorithm NEXTN with a model that has MTP layers",
            name="draft-model-required",
        ),
        CelRule(
            "!has(self.adaptive) || !self.adaptive.enabled || (self.eagleTopk == 1 && self.algorithm in ['NEXTN', "
            "'EAGLE', 'EAGLE3'])",
            "spec.speculative.adaptive needs eagleTopk 1 and algorithm NEXTN, EAGLE or EAGLE3 (SGLang would run "
            "static settings)",
            lambda m: m.adaptive is None or not m.adaptive.enabled
            or (m.eagle_topk == 1 and m.algorithm in ADAPTIVE_ALGORITHMS),
            ".adaptive",
            message_expression="'spec.speculative.adaptive needs eagleTopk 1 and algorithm NEXTN, EAGLE or EAGLE3, got "
            "eagleTopk %d and algorithm %s (SGLang would silently run static settings: adaptive_spec_params.py "
            "adaptive_unsupported_reason); set eagleTopk to 1 or remove adaptive'.format([self.eagleTopk, "
            "self.algorithm])",
            explain=lambda m: "spec.speculative.adaptive needs eagleTopk 1 and algorithm NEXTN, EAGLE or EAGLE3, got "
            f"eagleTopk {m.eagle_topk} and algorithm {m.algorithm.value} (SGLang would silently run static settings: "
            "adaptive_spec_params.py adaptive_unsupported_reason); set eagleTopk to 1 or remove adaptive",
            name="adaptive-chain",
        ),
    )


class MambaStrategy(StrEnum):
    """Mamba radix cache strategy (union over supported releases; ``extra_buffer_lazy`` is 0.5.2x only)."""

    AUTO = "auto"
    NO_BUFFER = "no_buffer"
    EXTRA_BUFFER = "extra_buffer"
    EXTRA_BUFFER_LAZY = "extra_buffer_lazy"


class Memory(ApiModel):
    """Memory and batching limits. Unset fields keep SGLang's automatic values."""

    mem_fraction_static: Annotated[float | None, Field(gt=0, lt=1)] = None
    """``--mem-fraction-static``: fraction of GPU memory for weights and KV cache, in (0, 1)."""
    context_length: Annotated[int | None, Field(ge=1)] = None
    """``--context-length`` in tokens; default from the model's config.json."""
    max_running_requests: Annotated[int | None, Field(ge=1)] = None
    """``--max-running-requests``. Unset, SGLang picks its own limit (48 under speculative decoding, capped by
    the KV cache); the effective value appears in ``status.effective.maxRunningRequests``."""
    max_total_tokens: Annotated[int | None, Field(ge=1)] = None
    """``--max-total-tokens``: KV cache pool size in tokens."""
    chunked_prefill_size: int | None = None
    """``--chunked-prefill-size`` in tokens; -1 disables chunked prefill."""
    mamba_full_memory_ratio: Annotated[float | None, Field(gt=0)] = None
    """``--mamba-full-memory-ratio``: mamba state memory relative to full-attention KV memory (hybrid models)."""
    mamba_scheduler_strategy: MambaStrategy | None = None
    """Mamba radix cache strategy: ``--mamba-scheduler-strategy`` up to 0.5.19, ``--mamba-radix-cache-strategy``
    from 0.5.20 (the operator renders the target release's name)."""
    cuda_graph_max_bs: Annotated[int | None, Field(ge=1, le=4096)] = None
    """Largest decode batch size SGLang captures CUDA graphs for (requests; batches above it run without a graph,
    and every captured size costs start-up time and memory): ``--cuda-graph-max-bs`` up to 0.5.13,
    ``--cuda-graph-max-bs-decode`` from 0.5.14, where the old spelling is a deprecated alias until 0.5.19 and
    ambiguous from 0.5.20 (the operator renders the target release's name, from its flag table). Unset: SGLang
    picks it from the GPU's memory."""

    cel_rules = (
        CelRule(
            "!has(self.chunkedPrefillSize) || self.chunkedPrefillSize == -1 || self.chunkedPrefillSize >= 1",
            "spec.memory.chunkedPrefillSize must be -1 (disabled) or a positive number of tokens",
            lambda m: m.chunked_prefill_size is None or m.chunked_prefill_size == -1 or m.chunked_prefill_size >= 1,
            ".chunkedPrefillSize",
            message_expression="'spec.memory.chunkedPrefillSize is %d: it must be -1 (disabled) or a positive number "
            "of tokens'.format([self.chunkedPrefillSize])",
            explain=lambda m: f"spec.memory.chunkedPrefillSize is {m.chunked_prefill_size}: it must be -1 "
            "(disabled) or a positive number of tokens",
            name="chunked-prefill-size",
        ),
    )
