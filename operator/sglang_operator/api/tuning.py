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

import logging
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError

from sglang_operator.api.base import GROUP, VERSION, ApiModel, CelRule, FreeForm
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.api.tuning_status import SGLangTuningStatus

log = logging.getLogger("sglang_operator.api")

KIND = "SGLangTuning"
PLURAL = "sglangtunings"
SINGULAR = "sglangtuning"
SHORT_NAMES = ("sgtune",)
API_VERSION = f"{GROUP}/{VERSION}"
NAME_LIMIT = 52
"""Characters at most of an SGLangTuning's name: its trial workloads are named ``<name>-trial-<n>`` (n < 1000),
which must stay a DNS-1035 label of at most 63 characters (Service names)."""
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def _name_ok(m: SGLangTuning) -> bool:
    name = m.metadata.get("name")
    return name is None or (len(str(name)) <= NAME_LIMIT and bool(_DNS_1035.fullmatch(str(name))))


class SGLangTuning(ApiModel):
    """An SGLangTuning object; ``metadata`` is kept as the raw Kubernetes ObjectMeta dict."""

    api_version: Literal["sglang-operator.io/v1alpha1"] = "sglang-operator.io/v1alpha1"
    kind: Literal["SGLangTuning"] = "SGLangTuning"
    metadata: FreeForm = Field(default_factory=dict)
    spec: SGLangTuningSpec
    status: SGLangTuningStatus | None = None

    cel_rules = (
        CelRule(
            f"self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= {NAME_LIMIT}",
            f"metadata.name must be a DNS-1035 label of at most {NAME_LIMIT} characters: it names the trial "
            "workloads (<name>-trial-<n>)",
            _name_ok,
            message_expression="'metadata.name \"%s\" must be a DNS-1035 label (lowercase letters, digits and "
            f"\\'-\\', starting with a letter) of at most {NAME_LIMIT} characters: it names the trial workloads "
            "(<name>-trial-<n>); rename the object'.format([self.metadata.name])",
            explain=lambda m: f'metadata.name "{m.metadata["name"]}" must be a DNS-1035 label (lowercase letters, '
            f"digits and '-', starting with a letter) of at most {NAME_LIMIT} characters: it names the trial "
            "workloads (<name>-trial-<n>); rename the object",
            name="tuning-name",
        ),
    )

    @property
    def name(self) -> str:
        """metadata.name (raises KeyError when absent)."""
        return str(self.metadata["name"])

    @property
    def namespace(self) -> str:
        """metadata.namespace, ``default`` when absent."""
        return str(self.metadata.get("namespace") or "default")


def parse_tuning(body: Mapping[str, Any]) -> SGLangTuning:
    """Parse a whole SGLangTuning (a kopf body, ``kubectl get -o json``). Raises
    :class:`~sglang_operator.api.server.SpecError` with every problem (``path: message``)."""
    from sglang_operator.api.server import SpecError, error_messages

    try:
        return SGLangTuning.model_validate(dict(body))
    except ValidationError as err:
        raise SpecError(error_messages(err, model=SGLangTuning)) from None


def parse_tuning_status(body: Mapping[str, Any]) -> SGLangTuningStatus:
    """``body['status']`` as :class:`SGLangTuningStatus`; none yet, or one that does not parse (edited by hand,
    logged): an empty one."""
    from sglang_operator.api.server import error_messages

    raw = body.get("status") or {}
    try:
        return SGLangTuningStatus.model_validate(dict(raw))
    except ValidationError as err:
        log.warning("status of SGLangTuning %s does not parse; read as empty: %s",
                    (body.get("metadata") or {}).get("name"), error_messages(err, "status"))
        return SGLangTuningStatus()

