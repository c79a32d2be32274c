"""What an SGLangTuning measured on: ``status.setup`` of an SGLangTuning, recorded when it begins.

A trial's figures hold only for the setup they were measured on: the model, the GPU product, the parallelism, the
SGLang release and image, forced acceptance, the workload (its prompts, by hash, and ``maxOutputTokens``) and the
pods per trial. The setup is
recorded once, from the server's spec when the tuning begins, so that the figures stay comparable with other
servers' specs after the tuned server changed (the known best across servers,
:mod:`sglang_operator.decisions.tuning.known_best`). The speculative algorithm, the draft model, ``specV2`` and the
server's own ``maxRunningRequests`` / ``cudaGraphMaxBs`` complete each trial's settings (a trial leaves them as the
server has them).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sglang_operator.api.base import StatusModel

SetupText = Annotated[str, Field(max_length=512)]


class TuningSetup(StatusModel):
    """The setup a tuning's trials ran on (figures are compared only between equal setups)."""

    model_path: SetupText
    """``spec.model.path`` of the server."""
    model_revision: SetupText | None = None
    """``spec.model.revision``."""
    gpu_product: SetupText | None = None
    """The server's node selector ``nvidia.com/gpu.product``; unset when the spec does not name one (unknown: it
    matches only another unknown)."""
    tensor: int = 1
    """``spec.parallelism.tensor``."""
    pipeline: int = 1
    """``spec.parallelism.pipeline``."""
    data: int = 1
    """``spec.parallelism.data``."""
    nodes: int = 1
    """``spec.parallelism.nodes``."""
    sglang_version: Annotated[str, Field(max_length=32)]
    """The SGLang release the trials rendered for (``0.5.13``)."""
    image: SetupText | None = None
    """The image the trials ran: the digest of ``spec.sglang.image`` (``sha256:…``) when the reference names one,
    else the reference itself (``lmsysorg/sglang:v0.5.10-cu129``). Unset in a setup recorded before it existed: such
    a tuning matches no server any more (every server's image is known), so figures of another image, or of a
    forced-acceptance benchmark, are never used."""
    forced_acceptance: SetupText | None = None
    """The server's forced-acceptance variables (``spec.env`` ``SGLANG_SIMULATE_ACC_*``) as ``NAME=value`` joined by
    ``,`` in name order; unset without any. A tuning of such a server is refused (``ForcedAcceptance``), so a
    recorded value means a tuning of an operator that did not refuse it yet."""
    prompts_hash: Annotated[str, Field(max_length=64)]
    """SHA-256 (first 16 hex digits) of ``spec.workload.prompts`` as JSON; the built-in prompts hash as ``[]``."""
    max_output_tokens: int
    """``spec.workload.maxOutputTokens``."""
    replicas: int = 1
    """Pods a trial was measured on (Shadow: 1; InPlace: the server's replicas)."""
    algorithm: Annotated[str | None, Field(max_length=32)] = None
    """``spec.speculative.algorithm`` of the server (unset: none)."""
    draft_model_path: SetupText | None = None
    """``spec.speculative.draftModelPath``."""
    spec_v2: bool | None = None
    """``spec.speculative.specV2`` (unset: false)."""
    max_running_requests: int | None = None
    """``spec.memory.maxRunningRequests`` of the server: what a trial without its own value ran with."""
    cuda_graph_max_bs: int | None = None
    """``spec.memory.cudaGraphMaxBs`` of the server: what a trial without its own value ran with."""
