"""Invalid SGLangServer (and SGLangTuning) specs, each with its expected message, against the real API server (issue 3
§7, issue 17 item 1).

``CASES`` is the table: a mutation of the valid known-good spec, the message the API server gives (schema or
CEL, checked with ``kubectl apply --dry-run=server``), and the message of the Python side (pydantic models +
:func:`sglang_operator.builders.check`, i.e. what the operator puts in the SpecValid=False condition). Cases
with ``server=None`` are beyond the schema (release-dependent): the API server must accept them and the
Python validator must refuse them. ``TUNING_CASES`` (in ``CASES`` too) mutate a valid SGLangTuning instead
(:func:`valid_tuning`): the schema and the CEL rules of ``api/tuning.py``, ``api/tuning_spec.py`` and
``api/tuning_status.py``, the same text from Python.
``tests/api/test_invalid_specs_offline.py`` runs the Python half without a cluster.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import K8sCluster, wait_for
from sglang_operator.api import SpecError, parse
from sglang_operator.api.spec import owned_flag_refusal
from sglang_operator.api.tuning import parse_tuning
from sglang_operator.builders import check

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "sglangservers.yaml"
TUNING_CRD = ROOT / "crds" / "sglangtunings.yaml"


def valid_server() -> dict[str, Any]:
    """The published known-good configuration (samples/qwen3.6-27b-known-good.yaml) as a dict."""
    return {
        "apiVersion": "sglang-operator.io/v1alpha1",
        "kind": "SGLangServer",
        "metadata": {"name": "qwen36-27b"},
        "spec": {
            "sglang": {"image": "lmsysorg/sglang:v0.5.10-cu129"},
            "model": {"path": "Qwen/Qwen3.6-27B"},
            "parallelism": {"tensor": 2},
            "speculative": {"algorithm": "NEXTN", "numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4,
                            "specV2": True},
            "memory": {"memFractionStatic": 0.88, "contextLength": 131072, "maxRunningRequests": 16,
                       "mambaFullMemoryRatio": 0.5, "mambaSchedulerStrategy": "extra_buffer"},
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-RTX-A6000"},
        },
    }


def valid_tuning() -> dict[str, Any]:
    """A valid SGLangTuning of the published server: chains and trees, two concurrency levels, goodput."""
    return {
        "apiVersion": "sglang-operator.io/v1alpha1",
        "kind": "SGLangTuning",
        "metadata": {"name": "qwen36-27b-tune"},
        "spec": {
            "serverRef": {"name": "qwen36-27b"},
            "parameters": {"numSteps": {"min": 1, "max": 6}, "eagleTopk": {"list": [1, 2, 4]},
                           "numDraftTokens": {"min": 2, "max": 16, "step": 2}, "adaptive": True},
            "objective": {"objectiveMetricName": "goodput", "maxP95InterTokenLatencySeconds": 0.05},
            "workload": {"concurrency": [{"level": 1, "weight": 2}, {"level": 16}], "secondsPerLevel": 20},
            "budget": {"maxTrialCount": 12, "maxFailedTrialCount": 2},
            "algorithm": {"algorithmName": "Default", "seed": 7},
        },
    }


def setting(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting ``path`` (dotted, from the object root); ``value=DELETE`` removes the key."""
    def apply(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = obj
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return apply


DELETE = object()


@dataclass(frozen=True)
class Case:
    id: str
    changes: tuple[Callable[[dict[str, Any]], None], ...]
    server: str | None  # substring of the API server's error; None = the schema accepts it
    python: str  # substring of the Python-side message (SpecError or SpecValid=False)
    rule: str = "schema"  # the CelRule.name or builders.validate.PYTHON_RULES name that refuses it
    value: str = ""  # the offending value, as the message must name it
    base: Callable[[], dict[str, Any]] = valid_server  # the valid object the changes mutate

    def body(self) -> dict[str, Any]:
        obj = copy.deepcopy(self.base())
        for change in self.changes:
            change(obj)
        return obj


def case(id_: str, server: str | None, python: str, *changes: Callable[[dict[str, Any]], None],
         rule: str = "schema", value: str = "") -> Case:
    return Case(id_, changes, server, python, rule, value)


def cel(id_: str, message: str, *changes: Callable[[dict[str, Any]], None], rule: str, value: str) -> Case:
    """A CEL rule: the API server and Python give the same message (messageExpression / CelRule.explain)."""
    return Case(id_, changes, message, message, rule, value)


def owned(flag: str, field: str, abbrev_of: str | None = None) -> str:
    """The refusal of an owned flag in extraArgs: names the flag as written and the field that owns it (the
    SGLang spellings it lists come from api/spec.py OWNED; the API server must give the very same text)."""
    message = owned_flag_refusal(flag)
    assert message.startswith(f"spec.extraArgs: {flag} is rendered ") and field in message, message
    assert abbrev_of is None or abbrev_of in message, message
    return message


def secret(flag: str, field: str) -> str:
    """The refusal of a secret-carrying flag (api/spec.py SECRET_FLAGS) in extraArgs: names the flag as written and
    the typed field that takes a Secret reference, never the value."""
    message = owned_flag_refusal(flag)
    assert message.startswith(f"spec.extraArgs: {flag} takes a secret") and field in message, message
    return message


def ndt(value: int, steps: int) -> str:
    return (f"spec.speculative.numDraftTokens is {value} but must equal numSteps + 1 = {steps + 1} when eagleTopk "
            f"is 1 (SGLang would silently change it); set it to {steps + 1} or omit it to have it derived")


def gpu(value: int, tensor: int, data: int) -> str:
    return (f"spec.resources.gpu is {value} but parallelism.tensor × parallelism.pipeline × parallelism.data ÷ "
            f"parallelism.nodes is {tensor} × 1 × {data} ÷ 1 = {tensor * data}: set spec.resources.gpu to at least "
            f"{tensor * data}, or omit it (default: tensor × pipeline × data ÷ nodes)")


NDT_MSG = "spec.speculative.numDraftTokens is 4 but must equal numSteps + 1 = 2"
S = "spec."
CACHE_TWO = ("spec.model.cache sets 2 of pvc, hostPath, emptyDir (pvc: true, hostPath: true, emptyDir: false): it "
             "needs exactly one; keep one source")
CACHE_NONE = ("spec.model.cache sets 0 of pvc, hostPath, emptyDir (pvc: false, hostPath: false, emptyDir: false): it "
              "needs exactly one; keep one source")
DRAFT = ("spec.speculative.draftModelPath is required with algorithm {} (SGLang loads a separate draft model from "
         "--speculative-draft-model-path); set spec.speculative.draftModelPath, or use algorithm NEXTN with a model "
         "that has MTP layers")
CASES: list[Case] = [
    # --- CEL rules (same message from the API server and from Python, values filled in) ---
    cel("ndt-4-steps-1", ndt(4, 1), setting(S + "speculative.numSteps", 1),
        rule="draft-tokens-steps-plus-one", value="is 4"),
    cel("ndt-3-steps-3", ndt(3, 3), setting(S + "speculative.numDraftTokens", 3),
        rule="draft-tokens-steps-plus-one", value="is 3"),
    cel("topk2-no-ndt", "spec.speculative.numDraftTokens is required when eagleTopk > 1 (eagleTopk is 2: SGLang "
        "derives no value for it then); set spec.speculative.numDraftTokens",
        setting(S + "speculative.eagleTopk", 2), setting(S + "speculative.numDraftTokens", DELETE),
        setting(S + "speculative.specV2", False), rule="draft-tokens-with-topk", value="eagleTopk is 2"),
    cel("specv2-topk2", "spec.speculative.specV2 needs eagleTopk 1, got eagleTopk 2 (SGLang: Spec v2 currently only "
        "supports topk = 1); set eagleTopk to 1 or specV2 to false", setting(S + "speculative.eagleTopk", 2),
        rule="spec-v2-topk", value="eagleTopk 2"),
    cel("eagle3-no-draft", DRAFT.format("EAGLE3"), setting(S + "speculative.algorithm", "EAGLE3"),
        rule="draft-model-required", value="EAGLE3"),
    cel("standalone-no-draft", DRAFT.format("STANDALONE"), setting(S + "speculative.algorithm", "STANDALONE"),
        rule="draft-model-required", value="STANDALONE"),
    cel("served-name-colon", 'spec.model.servedModelName "qwen:27b" may not contain ":" (SGLang reserves it for '
        "LoRA adapters: server_args.py check_server_args); remove the colon",
        setting(S + "model.servedModelName", "qwen:27b"), rule="served-model-name-colon", value="qwen:27b"),
    cel("nodes-not-dividing", "spec.parallelism.nodes is 3 but parallelism.tensor × parallelism.pipeline is 2 × 1 = "
        "2, which it does not divide (every node runs the same number of GPUs; SGLang: tp_size must be divisible by "
        "number of nodes); change parallelism.tensor or parallelism.nodes", setting(S + "parallelism.nodes", 3),
        rule="nodes-divide-tensor-pipeline", value="is 3"),
    cel("data-across-nodes", "spec.parallelism.data is 2 with parallelism.nodes 2: data parallelism across nodes is "
        "not supported (SGLang: multi-node data-parallel replicas are not supported); set parallelism.data to 1 and "
        "use spec.replicas for more copies", setting(S + "parallelism", {"tensor": 2, "nodes": 2, "data": 2}),
        rule="no-data-parallel-across-nodes", value="data is 2"),
    cel("extra-tp-abbrev", owned("--tp", "spec.parallelism.tensor", "--tp-size"),
        setting(S + "extraArgs", ["--tp", "2"]), rule="extra-args-owned-flag", value="--tp"),
    cel("extra-tp-size", owned("--tp-size", "spec.parallelism.tensor"), setting(S + "extraArgs", ["--tp-size", "4"]),
        rule="extra-args-owned-flag", value="--tp-size"),
    cel("extra-tp-alias", owned("--tensor-parallel-size", "spec.parallelism.tensor"),
        setting(S + "extraArgs", ["--tensor-parallel-size=2"]), rule="extra-args-owned-flag",
        value="--tensor-parallel-size"),
    cel("extra-mem-abbrev", owned("--mem-frac", "spec.memory.memFractionStatic", "--mem-fraction-static"),
        setting(S + "extraArgs", ["--mem-frac", "0.9"]), rule="extra-args-owned-flag", value="--mem-frac"),
    cel("extra-mamba-old", owned("--mamba-scheduler-strategy", "spec.memory.mambaSchedulerStrategy"),
        setting(S + "extraArgs", ["--mamba-scheduler-strategy", "no_buffer"]), rule="extra-args-owned-flag",
        value="--mamba-scheduler-strategy"),
    cel("extra-mamba-new", owned("--mamba-radix-cache-strategy", "spec.memory.mambaSchedulerStrategy"),
        setting(S + "extraArgs", ["--mamba-radix-cache-strategy", "no_buffer"]), rule="extra-args-owned-flag",
        value="--mamba-radix-cache-strategy"),
    cel("extra-port", owned("--port", "spec.port"), setting(S + "extraArgs", ["--port", "8000"]),
        rule="extra-args-owned-flag", value="--port"),
    cel("extra-host", owned("--host", "the operator (always --host 0.0.0.0)"),
        setting(S + "extraArgs", ["--host", "::"]),
        rule="extra-args-owned-flag", value="--host"),
    cel("extra-spec-prefix", owned("--speculative-num", "spec.speculative.numSteps", "--speculative-num-steps"),
        setting(S + "extraArgs", ["--speculative-num", "2"]), rule="extra-args-owned-flag",
        value="--speculative-num"),
    cel("extra-model", owned("--model", "spec.model.path"), setting(S + "extraArgs", ["--model", "other/model"]),
        rule="extra-args-owned-flag", value="--model"),
    cel("extra-api-key", secret("--api-key", "spec.apiKeySecretRef"),
        setting(S + "extraArgs", ["--api-key", "sk-not-shown"]), rule="extra-args-owned-flag", value="--api-key"),
    cel("extra-admin-api-key-equals", secret("--admin-api-key", "spec.adminApiKeySecretRef"),
        setting(S + "extraArgs", ["--admin-api-key=sk-not-shown"]), rule="extra-args-owned-flag",
        value="--admin-api-key"),
    cel("extra-admin-abbrev", secret("--admin", "spec.adminApiKeySecretRef"),
        setting(S + "extraArgs", ["--admin", "sk-not-shown"]), rule="extra-args-owned-flag", value="--admin"),
    cel("extra-ssl-keyfile-password", secret("--ssl-keyfile-password", "spec.sslKeyfilePasswordSecretRef"),
        setting(S + "extraArgs", ["--ssl-keyfile", "/tls/key.pem", "--ssl-keyfile-password", "not-shown"]),
        rule="extra-args-owned-flag", value="--ssl-keyfile-password"),
    cel("cache-two-sources", CACHE_TWO,
        setting(S + "model.cache", {"pvc": {"claimName": "hf"}, "hostPath": "/data/hf"}),
        rule="cache-one-source", value="sets 2"),
    cel("cache-no-source", CACHE_NONE, setting(S + "model.cache", {"mountPath": "/cache"}),
        rule="cache-one-source", value="sets 0"),
    case("env-10000-entries", "spec.env: Too many: 10000: must have at most 32 items",
         "spec.env: List should have at most 32 items",
         setting(S + "env", [{"name": f"V{i}", "value": "1"} for i in range(10_000)])),
    case("pod-annotation-value-too-long", "spec.podAnnotations.a: Too long: may not be more than 512 bytes",
         "spec.podAnnotations.a: String should have at most 512 characters",
         setting(S + "podAnnotations", {"a": "x" * 513})),
    case("pod-label-key-too-long", "a key of this map is longer than 317 characters",
         "spec.podLabels.", setting(S + "podLabels", {"k" * 318: "v"})),
    cel("cache-read-only-not-host-path", "spec.model.cache.hostPathReadOnly is false but the cache is not a hostPath: "
        "it applies to hostPath only (pvc has its own readOnly); remove it",
        setting(S + "model.cache", {"pvc": {"claimName": "hf"}, "hostPathReadOnly": False}),
        rule="cache-host-path-read-only", value="is false"),
    cel("chunked-prefill-0", "spec.memory.chunkedPrefillSize is 0: it must be -1 (disabled) or a positive number of "
        "tokens", setting(S + "memory.chunkedPrefillSize", 0), rule="chunked-prefill-size", value="is 0"),
    cel("gpu-below-tp", gpu(1, 2, 1), setting(S + "resources", {"gpu": 1}), rule="gpus-cover-parallelism",
        value="is 1"),
    cel("gpu-2-tensor-4", gpu(2, 4, 1), setting(S + "resources", {"gpu": 2}), setting(S + "parallelism.tensor", 4),
        rule="gpus-cover-parallelism", value="4 × 1 × 1 ÷ 1 = 4"),
    cel("max-unavailable-recreate", "spec.strategy.maxUnavailable is 1 but type is Recreate: it applies to "
        "RollingUpdate only; set type: RollingUpdate or remove maxUnavailable",
        setting(S + "strategy", {"maxUnavailable": 1}), rule="max-unavailable-rolling-only", value="is 1"),
    cel("max-unavailable-0", "spec.strategy.maxUnavailable is 0%: with no extra pod started (maxSurge 0) the update "
        "could never progress; set it to at least 1",
        setting(S + "strategy", {"type": "RollingUpdate", "maxUnavailable": "0%"}), rule="max-unavailable-positive",
        value="is 0%"),
    cel("drain-rolling", "spec.strategy.drainSeconds is 30 but type is RollingUpdate: draining applies to Recreate and "
        "Canary (a rolling update keeps the other replicas serving); remove drainSeconds or set type: Recreate or "
        "Canary",
        setting(S + "strategy", {"type": "RollingUpdate", "drainSeconds": 30}), rule="drain-recreate-or-canary",
        value="is 30"),
    cel("canary-recreate", "spec.strategy.canary is set but type is Recreate: it applies to Canary only; set type: "
        "Canary or remove canary", setting(S + "strategy", {"canary": {"maxSurge": 1}}), rule="canary-canary-only",
        value="Recreate"),
    cel("canary-one-replica", "spec.strategy.type is Canary but spec.replicas is 1: a canary runs beside stable "
        "replicas, so it needs at least 2; set replicas to 2 or more, or type: Recreate",
        setting(S + "strategy", {"type": "Canary"}), rule="canary-replicas", value="is 1"),
    cel("canary-max-unavailable", "spec.strategy.maxUnavailable is 1 but type is Canary: it applies to "
        "RollingUpdate only; set type: RollingUpdate or remove maxUnavailable", setting(S + "replicas", 2),
        setting(S + "strategy", {"type": "Canary", "maxUnavailable": 1}), rule="max-unavailable-rolling-only",
        value="is 1"),
    cel("canary-one-group", "spec.strategy.type is Canary but spec.replicas is 1: a canary runs beside stable "
        "replicas, so it needs at least 2; set replicas to 2 or more, or type: Recreate",
        setting(S + "parallelism.nodes", 2), setting(S + "strategy", {"type": "Canary"}), rule="canary-replicas",
        value="is 1"),
    cel("rollback-verify", "spec.rollback.verifySeconds is 60 but minSamples × intervalSeconds is 5 × 30 = 150 "
        "(promotion needs both minSamples samples and verifySeconds); set verifySeconds to at least 150 or lower "
        "minSamples", setting(S + "rollback", {"minSamples": 5, "intervalSeconds": 30, "verifySeconds": 60}),
        rule="rollback-verify-covers-min-samples", value="is 60"),
    cel("rollback-probe-timeout", "spec.rollback.probe.timeoutSeconds is 30 but intervalSeconds is 30 (one probe "
        "per interval: it must end within it); set probe.timeoutSeconds below 30",
        setting(S + "rollback", {"intervalSeconds": 30, "probe": {"timeoutSeconds": 30}}),
        rule="rollback-probe-within-interval", value="is 30"),
    cel("rollback-deadline", "spec.rollback.progressDeadlineSeconds is 3600 but warmupSeconds is 3600 (the deadline "
        "covers the rollout and the warm-up); set progressDeadlineSeconds above 3600",
        setting(S + "rollback", {"warmupSeconds": 3600, "progressDeadlineSeconds": 3600}),
        rule="rollback-deadline-covers-warmup", value="is 3600"),
    cel("rollback-min-tps", "spec.rollback.minTokensPerSecond is 1: a probe of probe.maxTokens 256 tokens at that "
        "speed takes longer than probe.timeoutSeconds 25 (it would time out, an error instead of a failure); raise "
        "probe.timeoutSeconds or lower probe.maxTokens",
        setting(S + "rollback", {"minTokensPerSecond": 1, "probe": {"maxTokens": 256, "timeoutSeconds": 25}}),
        rule="rollback-probe-finishes-at-the-floor", value="is 1"),
    cel("rollback-min-tps-fraction", "spec.rollback.minTokensPerSecond is 2.5: a probe of probe.maxTokens 256",
        setting(S + "rollback", {"minTokensPerSecond": 2.5, "probe": {"maxTokens": 256, "timeoutSeconds": 25}}),
        rule="rollback-probe-finishes-at-the-floor", value="is 2.5"),
    cel("name-not-dns1035", 'metadata.name "qwen3.6-27b" must be a DNS-1035 label (lowercase letters, digits and '
        "'-', starting with a letter, at most 63 characters): it names the Service; rename the object",
        setting("metadata.name", "qwen3.6-27b"), rule="name-dns-1035", value="qwen3.6-27b"),
    cel("adaptive-tree", "spec.speculative.adaptive needs eagleTopk 1 and algorithm NEXTN, EAGLE or EAGLE3, got "
        "eagleTopk 2 and algorithm NEXTN (SGLang would silently run static settings: adaptive_spec_params.py "
        "adaptive_unsupported_reason); set eagleTopk to 1 or remove adaptive",
        setting(S + "speculative", {"algorithm": "NEXTN", "numSteps": 3, "eagleTopk": 2, "numDraftTokens": 8,
                                    "adaptive": {}}), rule="adaptive-chain", value="eagleTopk 2"),
    # --- schema: bounds, enums, required fields, types ---
    case("mem-fraction-1", "should be less than 1", "less than 1 (got 1.0)",
         setting(S + "memory.memFractionStatic", 1.0), value="1.0"),
    case("mem-fraction-0", "should be greater than 0", "greater than 0 (got 0)",
         setting(S + "memory.memFractionStatic", 0), value="0"),
    case("algorithm-unknown", 'Unsupported value: "MEDUSA"', "Input should be",
         setting(S + "speculative.algorithm", "MEDUSA"), value="MEDUSA"),
    case("algorithm-lowercase", 'Unsupported value: "nextn"', "Input should be",
         setting(S + "speculative.algorithm", "nextn"), value="nextn"),
    case("tensor-0", "should be greater than or equal to 1", "greater than or equal to 1",
         setting(S + "parallelism.tensor", 0), value="0"),
    case("steps-0", "should be greater than or equal to 1", "greater than or equal to 1",
         setting(S + "speculative.numSteps", 0), value="0"),
    case("port-too-big", "should be less than or equal to 65535", "less than or equal to 65535",
         setting(S + "port", 70000), value="70000"),
    case("no-model-path", "Required value", "Field required", setting(S + "model.path", DELETE), value="path"),
    case("no-image", "Required value", "Field required", setting(S + "sglang.image", DELETE), value="image"),
    case("no-algorithm", "Required value", "Field required", setting(S + "speculative.algorithm", DELETE),
         value="algorithm"),
    case("mamba-strategy-unknown", 'Unsupported value: "fast"', "Input should be",
         setting(S + "memory.mambaSchedulerStrategy", "fast"), value="fast"),
    case("pull-policy-unknown", 'Unsupported value: "Sometimes"', "Input should be",
         setting(S + "sglang.imagePullPolicy", "Sometimes"), value="Sometimes"),
    case("replicas-negative", "should be greater than or equal to 0", "greater than or equal to 0",
         setting(S + "replicas", -1), value="-1"),
    case("shm-not-quantity", "should match", "should match pattern", setting(S + "resources.shmSize", "lots"),
         value="lots"),
    case("context-0", "should be greater than or equal to 1", "greater than or equal to 1",
         setting(S + "memory.contextLength", 0), value="0"),
    case("ndt-string", "must be of type integer", "valid integer", setting(S + "speculative.numDraftTokens", "four"),
         value="four"),
    case("strategy-unknown", 'Unsupported value: "BlueGreen"', "Input should be",
         setting(S + "strategy", {"type": "BlueGreen"}), value="BlueGreen"),
    case("canary-max-surge-2", "should be less than or equal to 1", "less than or equal to 1",
         setting(S + "replicas", 2), setting(S + "strategy", {"type": "Canary", "canary": {"maxSurge": 2}}),
         value="2"),
    case("max-unavailable-text", "should match", "should match pattern",
         setting(S + "strategy", {"type": "RollingUpdate", "maxUnavailable": "lots"}), value="lots"),
    case("typo-field", 'unknown field "spec.speculative.numDraftToken"', "unknown field; did you mean numDraftTokens?",
         setting(S + "speculative.numDraftToken", 4), value="numDraftToken"),
    # --- pass-through pod fields carry Kubernetes' own schemas (api/kube_types.py) ---
    case("security-context-typo", 'unknown field "spec.securityContext.runAsUsr"', "runAsUsr: unknown field",
         setting(S + "securityContext", {"runAsUsr": 1000}), value="runAsUsr"),
    case("affinity-typo", 'unknown field "spec.affinity.nodeAfinity"', "nodeAfinity: unknown field",
         setting(S + "affinity", {"nodeAfinity": {}}), value="nodeAfinity"),
    case("toleration-type", "spec.tolerations[0].tolerationSeconds", "tolerationSeconds: 'soon' is not of type",
         setting(S + "tolerations", [{"key": "gpu", "tolerationSeconds": "soon"}]), value="soon"),
    case("env-no-name", "spec.env[0].name: Required value", "'name' is a required property",
         setting(S + "env", [{"value": "1"}]), value="name"),
    case("volume-typo", 'unknown field "spec.volumes[0].persistentVolumeClaim.claim"',
         "persistentVolumeClaim.claim: unknown field",
         setting(S + "volumes", [{"name": "v", "persistentVolumeClaim": {"claim": "x"}}]), value="claim"),
    case("volume-mount-no-path", "spec.volumeMounts[0].mountPath: Required value", "'mountPath' is a required",
         setting(S + "volumeMounts", [{"name": "v"}]), value="mountPath"),
    # --- beyond the schema: the target SGLang release decides (SpecValid=False) ---
    case("image-latest", None, "holds no SGLang version; set spec.sglang.version to the release the image runs",
         setting(S + "sglang.image", "lmsysorg/sglang:latest"), rule="version-supported", value="'latest'"),
    case("version-unsupported", None, "SGLang 0.3.0 is older than",
         setting(S + "sglang", {"image": "registry.local/sglang:prod", "version": "0.3.0"}),
         rule="version-supported", value="0.3.0"),
    case("version-vs-tag", None, "contradicts the image tag", setting(S + "sglang.version", "0.5.23"),
         rule="version-supported", value="0.5.23"),
    case("strategy-not-in-release", None, "'extra_buffer_lazy' is not supported by SGLang 0.5.10",
         setting(S + "memory.mambaSchedulerStrategy", "extra_buffer_lazy"), rule="typed-choice-in-release",
         value="extra_buffer_lazy"),
    case("extra-abbrev-unowned", None, "spec.extraArgs: --page ",
         setting(S + "extraArgs", ["--page", "64"]), rule="extra-args-known-flag", value="--page"),
    case("extra-unknown", None, "spec.extraArgs: --no-such-flag ",
         setting(S + "extraArgs", ["--no-such-flag"]), rule="extra-args-known-flag", value="--no-such-flag"),
    case("extra-renamed-in-0.5.23", None, "spec.extraArgs: --cuda-graph-bs ",
         setting(S + "sglang.image", "lmsysorg/sglang:v0.5.23-cu130"), setting(S + "speculative.specV2", False),
         setting(S + "extraArgs", ["--cuda-graph-bs", "64"]), rule="extra-args-known-flag",
         value="--cuda-graph-bs"),
    case("admin-key-before-0.5.8", None, "spec.adminApiKeySecretRef: SGLang 0.5.6 has no --admin-api-key",
         setting(S + "sglang.image", "lmsysorg/sglang:v0.5.6"), setting(S + "speculative.specV2", False),
         setting(S + "adminApiKeySecretRef", {"name": "sglang-admin"}), rule="typed-flag-in-release",
         value="--admin-api-key"),
    case("adaptive-before-0.5.11", None, "spec.speculative.adaptive: SGLang 0.5.10 has no --speculative-adaptive "
         "(not supported by that release; SGLang has it in 0.5.11 on)", setting(S + "speculative.adaptive", {}),
         rule="typed-flag-in-release", value="--speculative-adaptive"),
    case("adaptive-0.5.11-spec-v2", None, "spec.speculative.adaptive: SGLang 0.5.11 would turn it off at start-up and "
         "run static settings (speculative_adaptive disabled: the overlap scheduler (spec v2) is enabled (adaptive is "
         "only implemented for EAGLEWorker v1). Falling back to static speculative params.); set "
         "spec.speculative.specV2 to false", setting(S + "sglang.image", "lmsysorg/sglang:v0.5.11"),
         setting(S + "speculative.adaptive", {}), rule="adaptive-kept", value="spec v2"),
    case("adaptive-steps-not-candidate", None, "spec.speculative.numSteps=2: SGLang 0.5.13 refuses the command line: "
         "ValueError: --speculative-num-steps=2 is not in the adaptive config candidate_steps [1, 3, 7]. Pass one of "
         "those values.", setting(S + "sglang.image", "lmsysorg/sglang:v0.5.13"),
         setting(S + "speculative", {"algorithm": "NEXTN", "numSteps": 2, "eagleTopk": 1, "adaptive": {}}),
         rule="sglang-refuses", value="numSteps=2"),
    case("env-overrides-operator", None, "spec.env: SGLANG_ENABLE_SPEC_V2 is set by the operator from "
         "spec.speculative.specV2", setting(S + "env", [{"name": "SGLANG_ENABLE_SPEC_V2", "value": "0"}]),
         rule="env-owned", value="SGLANG_ENABLE_SPEC_V2"),
    case("nextn-model-without-mtp", None, "spec.speculative.algorithm NEXTN without spec.speculative.draftModelPath "
         "needs a model with MTP layers, and spec.model.path Qwen/Qwen3-8B (Qwen3ForCausalLM) has none",
         setting(S + "model.path", "Qwen/Qwen3-8B"), setting(S + "memory.mambaSchedulerStrategy", DELETE),
         setting(S + "memory.mambaFullMemoryRatio", DELETE), rule="mtp-or-draft", value="Qwen/Qwen3-8B"),
    case("sglang-mamba-no-buffer", None, "SGLang 0.5.10 refuses the command line: ValueError: Speculative decoding "
         "for Qwen3_5ForConditionalGeneration is not compatible with radix cache when using "
         "--mamba-scheduler-strategy no_buffer", setting(S + "memory.mambaSchedulerStrategy", "no_buffer"),
         rule="sglang-refuses", value="spec.memory.mambaSchedulerStrategy=no_buffer"),
    case("sglang-topk-trtllm", None, "spec.speculative.eagleTopk=2, spec.speculative.algorithm=NEXTN, spec.extraArgs "
         "--attention-backend trtllm_mha: SGLang 0.5.10 refuses the command line: ValueError: trtllm_mha backend only "
         "supports topk = 1",
         setting(S + "speculative", {"algorithm": "NEXTN", "numSteps": 3, "eagleTopk": 2, "numDraftTokens": 8}),
         setting(S + "extraArgs", ["--attention-backend", "trtllm_mha"]), rule="sglang-refuses",
         value="eagleTopk=2"),
    case("sglang-chunk-vs-page", None, "spec.memory.chunkedPrefillSize=100, spec.extraArgs --page-size 64: SGLang "
         "0.5.10 refuses the command line: AssertionError: chunked_prefill_size must be divisible by page_size",
         setting(S + "memory.chunkedPrefillSize", 100), setting(S + "extraArgs", ["--page-size", "64"]),
         rule="sglang-refuses", value="chunkedPrefillSize=100"),
    case("sglang-track-interval", None, "spec.speculative.numDraftTokens=4, spec.extraArgs --mamba-track-interval 2: "
         "SGLang 0.5.10 refuses the command line: "
         "AssertionError: mamba_track_interval 2 must be greater than or equal to speculative_num_draft_tokens 4",
         setting(S + "extraArgs", ["--mamba-track-interval", "2"]), rule="sglang-refuses",
         value="numDraftTokens=4"),
    case("sglang-bad-extra-value", None, "spec.extraArgs --page-size x: SGLang 0.5.10 refuses the command line: "
         "sglang serve: error: argument --page-size: invalid int value: 'x'",
         setting(S + "extraArgs", ["--page-size", "x"]), rule="sglang-refuses", value="--page-size x"),
]


T = "spec."


def tcel(id_: str, message: str, *changes: Callable[[dict[str, Any]], None], rule: str, value: str) -> Case:
    """A CEL rule of the SGLangTuning API: the same message from the API server and from Python."""
    return Case(id_, changes, message, message, rule, value, valid_tuning)


def tcase(id_: str, server: str, python: str, *changes: Callable[[dict[str, Any]], None], value: str = "") -> Case:
    return Case(id_, changes, server, python, "schema", value, valid_tuning)


TUNING_CASES: list[Case] = [
    tcel("tune-steps-both-forms", "spec.parameters.numSteps sets min: true, max: true, list: true: it takes min and "
         "max (a range) or list (the values), not both", setting(T + "parameters.numSteps.list", [1, 3]),
         rule="parameter-range-or-list", value="list: true"),
    tcel("tune-topk-min-only", "spec.parameters.eagleTopk sets min: true, max: false, list: false: it takes min and "
         "max (a range) or list (the values), not both", setting(T + "parameters.eagleTopk", {"min": 1}),
         rule="parameter-range-or-list", value="max: false"),
    tcel("tune-ndt-empty-range", "spec.parameters.numDraftTokens.min is 16 but max is 2: the range is empty; swap "
         "them", setting(T + "parameters.numDraftTokens", {"min": 16, "max": 2}), rule="parameter-range-ordered",
         value="is 16"),
    tcel("tune-mrr-repeated", "spec.parameters.maxRunningRequests.list names 8 more than once; list each value once",
         setting(T + "parameters.maxRunningRequests", {"list": [4, 8, 8]}), rule="parameter-list-distinct",
         value="names 8"),
    tcel("tune-in-place-forbidden", "spec.mode is InPlace but spec.disruption is Forbidden: every trial replaces the "
         "server's pods and reloads the model; set disruption: Allowed, or use mode: Shadow (trials on other GPUs)",
         setting(T + "mode", "InPlace"), rule="in-place-needs-disruption", value="Forbidden"),
    tcel("tune-output-without-level", "spec.objective.objectiveMetricName outputTokensPerSecond needs "
         "spec.objective.concurrency (the level it is measured at); set it to one of "
         "spec.workload.concurrency[].level",
         setting(T + "objective", {"objectiveMetricName": "outputTokensPerSecond"}),
         rule="objective-concurrency", value="outputTokensPerSecond"),
    tcel("tune-decode-with-level", "spec.objective.concurrency is 16 but objectiveMetricName is decodeTokensPerSecond, "
         "which is measured at concurrency 1; remove concurrency",
         setting(T + "objective", {"objectiveMetricName": "decodeTokensPerSecond", "concurrency": 16}),
         rule="objective-concurrency", value="is 16"),
    tcel("tune-goodput-no-limit", "spec.objective.objectiveMetricName goodput needs a limit: set "
         "maxP95InterTokenLatencySeconds, maxP95TimeToFirstTokenSeconds or both",
         setting(T + "objective.maxP95InterTokenLatencySeconds", DELETE), rule="goodput-limits", value="goodput"),
    tcel("tune-limit-without-goodput", "spec.objective sets a latency limit but objectiveMetricName is "
         "decodeTokensPerSecond: limits apply to goodput only; set objectiveMetricName: goodput or remove the limits",
         setting(T + "objective.objectiveMetricName", "decodeTokensPerSecond"), rule="goodput-limits",
         value="decodeTokensPerSecond"),
    tcel("tune-level-not-measured", "spec.objective.objectiveMetricName outputTokensPerSecond is measured at "
         "concurrency 8, which spec.workload.concurrency does not list (levels [1, 16]); add level 8 to "
         "spec.workload.concurrency",
         setting(T + "objective", {"objectiveMetricName": "outputTokensPerSecond", "concurrency": 8}),
         rule="objective-level-measured", value="concurrency 8"),
    tcel("tune-decode-without-level-1", "spec.objective.objectiveMetricName decodeTokensPerSecond is measured at "
         "concurrency 1, which spec.workload.concurrency does not list (levels [16]); add level 1 to "
         "spec.workload.concurrency", setting(T + "objective", {}),
         setting(T + "workload.concurrency", [{"level": 16}]), rule="objective-level-measured", value="levels [16]"),
    tcel("tune-level-twice", "spec.workload.concurrency names level 16 more than once; list each level once (its "
         "weight says how much it counts)", setting(T + "workload.concurrency", [{"level": 16}, {"level": 1},
                                                                                  {"level": 16, "weight": 3}]),
         rule="concurrency-levels-distinct", value="level 16"),
    tcel("tune-load-too-long", "spec.workload asks 21600 s of measured load per trial (secondsPerLevel 3600 × "
         "repetitions 3 × 2 levels), over the 7200 s limit; lower secondsPerLevel, repetitions or the number of "
         "levels", setting(T + "workload.secondsPerLevel", 3600), setting(T + "workload.repetitions", 3),
         rule="workload-load-bounded", value="21600 s"),
    tcel("tune-failures-beyond-trials", "spec.budget.maxFailedTrialCount is 20 but maxTrialCount is 12: it could "
         "never be reached; lower maxFailedTrialCount or raise maxTrialCount",
         setting(T + "budget.maxFailedTrialCount", 20), rule="budget-failed-within-trials", value="is 20"),
    tcel("tune-name-too-long", 'metadata.name "' + "t" * 53 + '" must be a DNS-1035 label (lowercase letters, digits '
         "and '-', starting with a letter) of at most 52 characters: it names the trial workloads "
         "(<name>-trial-<n>); rename the object", setting("metadata.name", "t" * 53), rule="tuning-name",
         value="t" * 53),
    tcase("tune-no-server", "Required value", "Field required", setting(T + "serverRef", DELETE), value="serverRef"),
    tcase("tune-algorithm-unknown", 'Unsupported value: "Bayesian"', "Input should be",
          setting(T + "algorithm.algorithmName", "Bayesian"), value="Bayesian"),
    tcase("tune-mode-unknown", 'Unsupported value: "Canary"', "Input should be", setting(T + "mode", "Canary"),
          value="Canary"),
    tcase("tune-trials-too-many", "should be less than or equal to 100", "less than or equal to 100",
          setting(T + "budget.maxTrialCount", 500), value="500"),
    tcase("tune-too-many-levels", "must have at most 6 items", "at most 6 items",
          setting(T + "workload.concurrency", [{"level": n} for n in (1, 2, 4, 8, 16, 32, 64)])),
    tcase("tune-typo", 'unknown field "spec.budget.maxTrials"', "unknown field; did you mean maxTrialCount?",
          setting(T + "budget.maxTrials", 3), value="maxTrials"),
]
A = S + "autoscaling"
KEDA_AUTOSCALING = {"maxReplicas": 3, "target": 4}
AUTOSCALING_CASES: list[Case] = [
    cel("autoscaling-external-with-target", "spec.autoscaling.mode is External (your own HPA or ScaledObject scales "
        "the SGLangServer through its /scale subresource) but spec.autoscaling.target is set: the operator renders no "
        "scaler that would use it; remove it, or set mode: KEDA", setting(A, {"mode": "External", "target": 4}),
        rule="autoscaling-external-alone", value="target"),
    cel("autoscaling-keda-without-target", "spec.autoscaling.mode is KEDA but target is not set: the ScaledObject "
        "needs maxReplicas (its maxReplicaCount) and target (the metric per replica); set it",
        setting(A, {"maxReplicas": 3}), rule="autoscaling-keda-needs-max-and-target", value="target"),
    cel("autoscaling-min-above-max", "spec.autoscaling.maxReplicas is 3 but minReplicas is 5; set maxReplicas to at "
        "least 5", setting(A, {**KEDA_AUTOSCALING, "minReplicas": 5}), rule="autoscaling-min-within-max",
        value="is 5"),
    cel("autoscaling-query-without-metric-query", "spec.autoscaling.query is set but metric is runningRequests: a "
        "query is used with metric: query only; set metric: query or remove query",
        setting(A, {**KEDA_AUTOSCALING, "query": "sum(up)"}), rule="autoscaling-query-with-metric-query",
        value="runningRequests"),
    cel("autoscaling-metric-query-without-query", "spec.autoscaling.metric is query but query is not set: set query "
        "to a PromQL expression", setting(A, {**KEDA_AUTOSCALING, "metric": "query"}),
        rule="autoscaling-query-with-metric-query", value="query"),
    cel("autoscaling-kv-cache-target-above-1", "spec.autoscaling.target is 4.5 but metric kvCacheUsage is a share of "
        "the KV-cache pool (0 … 1); set target to at most 1, e.g. 0.8",
        setting(A, {**KEDA_AUTOSCALING, "metric": "kvCacheUsage", "target": 4.5}),
        rule="autoscaling-kv-cache-usage-share", value="4.5"),
    cel("autoscaling-measured-capacity-without-slo", "spec.autoscaling.metric is measuredCapacity but slo is not set: "
        "set slo.minTokensPerSecondPerRequest, e.g. 20", setting(A, {**KEDA_AUTOSCALING, "metric": "measuredCapacity"}),
        rule="autoscaling-slo-with-measured-capacity", value="measuredCapacity"),
    cel("autoscaling-slo-without-measured-capacity", "spec.autoscaling.slo is set but metric is runningRequests: the "
        "SLO sets the measured capacity of metric: measuredCapacity only; set metric: measuredCapacity or remove slo",
        setting(A, {**KEDA_AUTOSCALING, "slo": {"minTokensPerSecondPerRequest": 20}}),
        rule="autoscaling-slo-with-measured-capacity", value="runningRequests"),
    cel("autoscaling-fallback-above-max", "spec.autoscaling.fallback.replicas is 9 but minReplicas … maxReplicas is "
        "1 … 3; set it within them", setting(A, {**KEDA_AUTOSCALING, "fallback": {"replicas": 9}}),
        rule="autoscaling-fallback-within-range", value="is 9"),
    cel("autoscaling-canary-min-1", "spec.autoscaling.minReplicas is 1 but spec.strategy.type is Canary: a canary "
        "runs beside stable replicas, so it needs at least 2; set minReplicas to 2 or more",
        setting(S + "replicas", 2), setting(S + "strategy", {"type": "Canary"}), setting(A, KEDA_AUTOSCALING),
        rule="autoscaling-canary-min-replicas", value="is 1"),
    case("autoscaling-metric-unknown", 'Unsupported value: "gpuUtilization"', "Input should be",
         setting(A, {**KEDA_AUTOSCALING, "metric": "gpuUtilization"}), value="gpuUtilization"),
    case("autoscaling-address-not-url", "should match", "should match",
         setting(A, {**KEDA_AUTOSCALING, "prometheus": {"address": "prometheus:9090"}}), value="prometheus:9090"),
    cel("autoscaling-address-with-a-path", "spec.autoscaling.prometheus.address is "
        "http://169.254.169.254/latest/meta-data/#: name Prometheus by scheme, host and port only (no path, query, "
        "fragment or user info), e.g. http://prometheus-operated.monitoring.svc:9090: KEDA adds the path "
        "/api/v1/query itself",
        setting(A, {**KEDA_AUTOSCALING, "prometheus": {"address": "http://169.254.169.254/latest/meta-data/#"}}),
        rule="autoscaling-prometheus-address-host-only", value="169.254.169.254/latest"),
]
CASES += AUTOSCALING_CASES
CASES += TUNING_CASES


def python_errors(body: dict[str, Any]) -> list[str]:
    """What the operator reports for ``body``: parse errors, else the release-dependent check's errors (an
    SGLangTuning: its parse errors)."""
    if body.get("kind") == "SGLangTuning":
        try:
            parse_tuning(body)
        except SpecError as err:
            return err.messages
        return []
    try:
        server = parse(body)
    except SpecError as err:
        return err.messages
    return check(server.spec).errors


def python_rules(body: dict[str, Any]) -> list[str]:
    """The names of the release-dependent rules (``builders.validate.PYTHON_RULES``) that refuse ``body``."""
    return check(parse(body).spec).rules


@pytest.fixture(scope="module")
def crd_installed(k8s_cluster: K8sCluster) -> K8sCluster:
    k8s_cluster.install_crd(CRD)
    k8s_cluster.install_crd(TUNING_CRD)
    for short in ("sgls", "sgtune"):
        wait_for(f"{short} API discovery",
                 lambda s=short: k8s_cluster.run("get", s, "-A", check=False).returncode == 0, timeout=30)
    return k8s_cluster


def dry_run(cluster: K8sCluster, namespace: str, body: dict[str, Any]) -> tuple[int, str]:
    proc = cluster.run("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(body),
                       check=False)
    return proc.returncode, proc.stderr


pytestmark = pytest.mark.cluster


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("valid", [valid_server, valid_tuning], ids=["SGLangServer", "SGLangTuning"])
def test_valid_spec_is_accepted(crd_installed: K8sCluster, namespace: str, valid: Callable[[], dict[str, Any]]) -> None:
    code, err = dry_run(crd_installed, namespace, valid())
    assert code == 0, err
    assert python_errors(valid()) == []


VALID_AUTOSCALING = [
    {"mode": "External"},
    KEDA_AUTOSCALING,
    {"minReplicas": 2, "maxReplicas": 4, "metric": "kvCacheUsage", "target": 0.8,
     "prometheus": {"address": "http://prometheus-operated.monitoring.svc:9090"},
     "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0, "replicas": 3, "periodSeconds": 15},
                  "scaleDown": {"stabilizationWindowSeconds": 30}}, "fallback": {"failureThreshold": 2, "replicas": 3}},
    {"maxReplicas": 2, "metric": "query", "target": 500,
     "query": 'sum(rate(sglang:generation_tokens_total{namespace="$namespace", sglang_server="$server"}[1m]))'},
]


@pytest.mark.parametrize("autoscaling", VALID_AUTOSCALING, ids=["External", "KEDA", "KEDA-all-fields", "query"])
def test_valid_autoscaling_is_accepted_with_the_models_defaults(crd_installed: K8sCluster, namespace: str,
                                                                autoscaling: dict[str, Any]) -> None:
    """Both sides accept it, and what the API server fills in (mode KEDA; behavior's parts once behavior is set) is
    what the model assumes; External stays External alone (no default makes its rule fail)."""
    body = valid_server()
    body["spec"]["autoscaling"] = autoscaling
    assert python_errors(body) == []
    proc = crd_installed.run("apply", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-",
                             input=json.dumps(body))
    filled = json.loads(proc.stdout)["spec"]["autoscaling"]
    assert filled == parse(body).spec.dump()["autoscaling"]


def test_a_minimal_tuning_gets_the_models_defaults(crd_installed: K8sCluster, namespace: str) -> None:
    """What the API server fills in for an SGLangTuning that sets only serverRef is what the operator assumes."""
    body = {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning", "metadata": {"name": "minimal"},
            "spec": {"serverRef": {"name": "qwen36-27b"}}}
    proc = crd_installed.run("apply", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-",
                             input=json.dumps(body))
    filled = json.loads(proc.stdout)
    assert filled["spec"]["budget"]["maxTrialCount"] == 24 and filled["spec"]["mode"] == "Shadow"
    assert parse_tuning(filled).spec.dump() == parse_tuning(body).spec.dump()


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_invalid_spec(crd_installed: K8sCluster, namespace: str, c: Case) -> None:
    code, err = dry_run(crd_installed, namespace, c.body())
    if c.server is None:
        assert code == 0, f"the schema should leave this to the operator's SpecValid check: {err}"
    else:
        assert code != 0, "the API server accepted an invalid spec"
        assert c.server in err, err
    errors = python_errors(c.body())
    assert any(c.python in e for e in errors), errors
