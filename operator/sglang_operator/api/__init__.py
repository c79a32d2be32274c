"""The API (group ``sglang-operator.io``, version ``v1alpha1``): pydantic v2 models of the SGLangServer and
SGLangTuning custom resources, the CRDs generated from them (:mod:`.crd`), their CEL rules and Python mirrors of
them. The bottom layer, beside :mod:`sglang_operator.sglang`.

- :mod:`.analysis`: the rollback analysis in ``status`` (stable revision, baseline, analysis, canary, rejections).
- :mod:`.autoscaling`: ``spec.autoscaling`` and ``status.autoscaling`` (KEDA, the scale target, the pause).
- :mod:`.base`: the shared pieces: the camelCase base model, CEL rules, Kubernetes value types.
- :mod:`.blocks`: the typed blocks of ``spec`` (``sglang``, ``model``, ``parallelism``, ``speculative``, ``memory``).
- :mod:`.bounds`: the size bounds of every list, string and map of both specs (:data:`~.bounds.SPEC_SIZE_LIMIT`).
- :mod:`.crd`: the CustomResourceDefinitions generated from the models (``sglang-operator crd``).
- :mod:`.kube_types`: Kubernetes' own schemas for the pod fields an SGLangServer passes through.
- :mod:`.names`: field names for error messages (the closest known field to a misspelt one).
- :mod:`.resource`: the custom-resource root both kinds share (apiVersion, metadata, the name rule, parsing and
  its errors).
- :mod:`.rollback`: ``spec.rollback``: how every new revision is judged, and the probe.
- :mod:`.server`: the ``SGLangServer`` resource as a whole (apiVersion, kind, metadata, spec, status).
- :mod:`.spec`: ``SGLangServer.spec``: the whole desired state of one server.
- :mod:`.status`: ``SGLangServer.status``: what the operator observed and decided.
- :mod:`.tuning`: the ``SGLangTuning`` resource as a whole.
- :mod:`.tuning_setup`: ``status.setup`` of an SGLangTuning: what it measured on.
- :mod:`.tuning_spec`: the spec models of an SGLangTuning (server, search space, objective, workload, budget, mode).
- :mod:`.tuning_status`: the status models of an SGLangTuning (phase, trials and their figures, the recommendation).
- :mod:`.view`: the typed views built once per object delivered (``ServerView``, ``TuningView``, ``ObjectRef``): what
  every function below the kopf registrations reads instead of the raw body."""

from sglang_operator.api.base import API_VERSION, GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from sglang_operator.api.server import SGLangServer, SpecError, parse, parse_spec
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.status import ConditionType, Phase, SGLangServerStatus, Verdict

__all__ = [
    "API_VERSION", "GROUP", "KIND", "PLURAL", "SHORT_NAMES", "SINGULAR", "VERSION",
    "ConditionType", "Phase", "SGLangServer", "SGLangServerSpec", "SGLangServerStatus", "SpecError",
    "Verdict", "parse", "parse_spec",
]
