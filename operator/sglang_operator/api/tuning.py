"""The ``SGLangTuning`` custom resource: search the speculative settings of one SGLangServer (docs/tuning.md).

An SGLangTuning names a server of its namespace (``spec.serverRef``), the settings to search (``spec.parameters``:
``--speculative-num-steps``, ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``, optionally SGLang's
adaptive mode, ``--max-running-requests`` and the CUDA-graph batch size), what "best" means (``spec.objective``),
the load each trial is measured under (``spec.workload``), how much it may spend (``spec.budget``) and how the
points are chosen (``spec.algorithm``). Each trial is a revision rendered from the server's spec with one candidate
point; the result is a recommendation in ``status.best``, never written into the server's spec.

Vocabulary follows Katib (``kubeflow/katib`` ``pkg/apis/controller/experiments/v1beta1/experiment_types.go``) where
it fits: ``objective.objectiveMetricName`` and ``goal``, ``parameters`` with a feasible space of ``min`` / ``max`` /
``step`` or a ``list`` of values, ``budget.maxTrialCount`` / ``maxFailedTrialCount``, ``algorithm.algorithmName``,
trial verdicts ``Completed`` / ``Failed`` / ``Pruned``. Cross-field rules are :class:`~.base.CelRule` s (the CRD's
``x-kubernetes-validations``, the same text from Python); every list and string of spec and status is bounded.

The models are split by what they describe: the spec in :mod:`sglang_operator.api.tuning_spec`, the status in
:mod:`sglang_operator.api.tuning_status`; this module holds the object itself, its names and its parse helpers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from sglang_operator.api.base import GROUP, VERSION
from sglang_operator.api.resource import CustomResource, name_rule, parse_as, parse_status_as
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.api.tuning_status import SGLangTuningStatus

KIND = "SGLangTuning"
PLURAL = "sglangtunings"
SINGULAR = "sglangtuning"
SHORT_NAMES = ("sgtune",)
API_VERSION = f"{GROUP}/{VERSION}"
NAME_LIMIT = 52
"""Characters at most of an SGLangTuning's name: its trial workloads are named ``<name>-trial-<n>`` (n < 1000),
which must stay a DNS-1035 label of at most 63 characters (Service names)."""


class SGLangTuning(CustomResource):
    """An SGLangTuning object; ``metadata`` is kept as the raw Kubernetes ObjectMeta dict."""

    kind: Literal["SGLangTuning"] = "SGLangTuning"
    spec: SGLangTuningSpec
    status: SGLangTuningStatus | None = None

    cel_rules = (
        name_rule(NAME_LIMIT,
                  f"a DNS-1035 label (lowercase letters, digits and '-', starting with a letter) of at most "
                  f"{NAME_LIMIT} characters",
                  f"a DNS-1035 label of at most {NAME_LIMIT} characters",
                  "it names the trial workloads (<name>-trial-<n>)", "tuning-name"),
    )


def parse_tuning(body: Mapping[str, Any]) -> SGLangTuning:
    """Parse a whole SGLangTuning (a kopf body, ``kubectl get -o json``). Raises
    :class:`~sglang_operator.api.resource.SpecError` with every problem (``path: message``)."""
    return parse_as(SGLangTuning, body)


def parse_tuning_status(body: Mapping[str, Any]) -> SGLangTuningStatus:
    """``body['status']`` as :class:`SGLangTuningStatus`; none yet, or one that does not parse (edited by hand,
    logged): an empty one."""
    return parse_status_as(SGLangTuningStatus, body, "SGLangTuning ")
