"""The SGLangServer API (group ``sglang-operator.io``, version ``v1alpha1``): pydantic v2 models for spec and
status, the CRD generated from them (:mod:`sglang_operator.api.crd`) and version-aware validation
(:mod:`sglang_operator.api.validation`)."""

from sglang_operator.api.base import API_VERSION, GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from sglang_operator.api.server import SGLangServer, SpecError, parse, parse_spec
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.status import ConditionType, Phase, SGLangServerStatus, Verdict

__all__ = [
    "API_VERSION", "GROUP", "KIND", "PLURAL", "SHORT_NAMES", "SINGULAR", "VERSION",
    "ConditionType", "Phase", "SGLangServer", "SGLangServerSpec", "SGLangServerStatus", "SpecError",
    "Verdict", "parse", "parse_spec",
]
