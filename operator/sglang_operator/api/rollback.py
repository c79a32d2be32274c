"""``spec.rollback``: how the operator judges every new revision and when it returns to the stable one.

Each interval the operator measures the revision that runs (signal ``probe``: its own streamed request, decode
tok/s after the first token; signal ``traffic``: per-request decode speed from SGLang's
``sglang:inter_token_latency_seconds`` histogram) together with the acceptance length (from
``sglang:spec_verify_calls_total`` / generation tokens, or the ``sglang:spec_accept_length`` gauge). After a
warm-up that starts when all of the revision's pods are Ready, each measured interval is a sample that passes or
fails the criteria below; ``failureThreshold`` failing samples in a row reject the revision and the stable revision
is applied again (the spec is never edited). ``minSamples`` samples and ``verifySeconds`` of verification promote
it to stable, with the median of its samples as the new baseline. The decision itself is
``sglang_operator.decisions.rollback.step``; ``docs/rollback.md`` has the state machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from sglang_operator.api.base import ApiModel, CelRule

PROBE_PROMPT = (
    "You are a senior Python engineer. Implement a complete red-black tree module in Python 3.11 with type "
    "hints and docstrings. Write a Node class with key, value, color, left, right and parent fields, and a "
    "RedBlackTree class that uses a single shared sentinel NIL node instead of None. The tree must provide "
    "insert(key, value), delete(key), search(key) returning the value or raising KeyError, minimum(), "
    "maximum(), successor(node), predecessor(node), an in-order iterator, len(), a contains check, and a "
    "validate() method that checks every red-black property: the root is black, every leaf is black, no red "
    "node has a red child, and every path from a node to its descendant leaves contains the same number of "
    "black nodes; validate() must also check the binary-search-tree ordering and the parent pointers, and "
    "raise an AssertionError that names the violated property and the offending key. Implement left_rotate "
    "and right_rotate, the insert fix-up and the delete fix-up explicitly, following the classic case "
    "analysis: for insertion, the uncle is red (recolor and move up), the uncle is black and the node is an "
    "inner child (rotate the parent), the uncle is black and the node is an outer child (rotate the "
    "grandparent and recolor); for deletion, the sibling is red, the sibling is black with two black "
    "children, the sibling is black with a red inner child, and the sibling is black with a red outer child, "
    "each mirrored for the left and right sides. Comment every case with the invariant it restores and why "
    "the black height stays the same. Add a transplant helper and keep the implementation iterative, not "
    "recursive, so that deep trees cannot exhaust the stack. Finish with a test function "
    "that inserts 1000 random integer keys with a fixed seed, validates the tree after every operation, "
    "deletes half of the keys in random order, validates again, checks that the in-order traversal is sorted "
    "and equals the sorted list of remaining keys, and measures the tree height to show that it stays below "
    "2 * log2(n + 1). Explain the time complexity of each operation in a short closing paragraph, and point "
    "out two common bugs in textbook implementations of delete and how your code avoids them."
)
"""The built-in probe prompt: a fixed coding request of about 512 tokens (≈ 4 characters per token), like the one the
published case was measured with. ``io/loadgen.py`` uses the same text. Sent when ``probe.prompt`` is empty (its
default); never copied into objects (it was once the CRD default, so older objects hold it: that exact
text reads as the default, see :class:`ProbePolicy`)."""


class RollbackAction(StrEnum):
    """What the operator does with a revision that fails its verification."""

    ROLLBACK = "Rollback"
    """Reject it and apply the stable revision again (the spec is not edited)."""
    ALERT = "Alert"
    """Judge and report (Warning event, ``Degraded`` condition), never roll back."""
    DRY_RUN = "DryRun"
    """Judge and record verdicts in ``status`` only: no events, no conditions beyond ``status.analysis``."""


class Signal(StrEnum):
    """Where a sample's decode speed (tok/s) comes from (``spec.rollback.signal``, and each sample's ``signal``)."""

    PROBE = "probe"
    """The operator streams ``probe.prompt`` (greedy) to the revision's Ready pods in turn and measures
    single-stream decode tok/s after the first token: fair to idle servers, comparable across revisions."""
    TRAFFIC = "traffic"
    """Users' traffic: per-request decode speed, 1 / mean inter-token latency over the interval; below
    ``minTraffic`` a sample is inconclusive."""


class MinTraffic(ApiModel):
    """Least load for a ``traffic`` sample to count (below it the sample is inconclusive, never a failure)."""

    running_requests: Annotated[int, Field(ge=0, le=100000)] = 1
    """Running requests (``sglang:num_running_reqs``, summed over the revision's pods), count."""


def _empty_if_builtin(text: str) -> str:
    """``""`` for the built-in prompt's text (an older object's copy of the default), else ``text``."""
    return "" if text == PROBE_PROMPT else text


class ProbePolicy(ApiModel):
    """The request the operator sends each interval with signal ``probe``."""

    prompt: Annotated[str, Field(max_length=8192), AfterValidator(_empty_if_builtin)] = ""
    """Prompt text, sent as one user message of a streaming ``/v1/chat/completions`` request with temperature 0.
    Empty (the default): the operator's built-in prompt, a fixed coding request of about 512 tokens (a red-black
    tree module in Python, like the prompt the published case was measured with). Changing it makes samples
    incomparable with the baseline measured with the old prompt."""
    max_tokens: Annotated[int, Field(ge=2, le=8192)] = 256
    """Output tokens per probe request (``max_tokens``), count."""
    timeout_seconds: Annotated[int, Field(ge=1, le=3600)] = 25
    """Timeout of one probe request, seconds; shorter than ``intervalSeconds`` (one probe per interval). A probe
    that times out is a measurement error, not a failure."""

    @property
    def text(self) -> str:
        """The prompt sent: ``prompt``, or the built-in :data:`PROBE_PROMPT` when it is empty."""
        return self.prompt or PROBE_PROMPT


def without_default_prompt(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the SGLangServer ``spec`` dict (camelCase) without ``rollback.probe.prompt`` when it is the default:
    empty, or the built-in text older objects hold (once the CRD default). What the ledger keeps and compares."""
    rollback = spec.get("rollback")
    if not isinstance(rollback, Mapping):
        return dict(spec)
    probe = rollback.get("probe")
    if not isinstance(probe, Mapping) or probe.get("prompt", None) not in ("", PROBE_PROMPT):
        return dict(spec)
    return {**spec, "rollback": {**rollback, "probe": {k: v for k, v in probe.items() if k != "prompt"}}}


def without_replicas(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The SGLangServer ``spec`` dict (camelCase, as stored) a revision is: without ``replicas`` (scaling is the
    user's or an autoscaler's, never the revision's) and without a default probe prompt
    (:func:`without_default_prompt`). The one rule that tells a spec change from a scale: :func:`same_spec` (the
    ledger, the observer, the reconcile handler) and an InPlace hold's ``specHash``
    (:func:`sglang_operator.decisions.tuning.hold.spec_hash`)."""
    return {k: v for k, v in without_default_prompt(spec).items() if k != "replicas"}


def same_spec(a: Any, b: Any) -> bool:
    """Whether SGLangServer specs ``a`` and ``b`` (camelCase dicts; anything else: False) are the same revision's:
    equal :func:`without_replicas`."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return False
    return without_replicas(a) == without_replicas(b)


class RollbackPolicy(ApiModel):
    """How each new revision is judged and when the operator returns to the stable revision. Every field is
    optional; the defaults suit production (earliest rollback: warmupSeconds + failureThreshold ×
    intervalSeconds = 210 s after all pods are Ready)."""

    action: RollbackAction = RollbackAction.ROLLBACK
    """``Rollback`` (apply the stable revision again), ``Alert`` (report only) or ``DryRun`` (record verdicts in
    status only)."""
    signal: Signal = Signal.PROBE
    """``probe`` (the operator's own request) or ``traffic`` (users' requests)."""
    warmup_seconds: Annotated[int, Field(ge=0, le=86400)] = 120
    """Seconds after all of the revision's pods are Ready (continuously: a pod leaving Ready restarts it) before
    samples count (CUDA graphs, caches, JIT)."""
    interval_seconds: Annotated[int, Field(ge=1, le=3600)] = 30
    """Length of one sample, seconds."""
    min_samples: Annotated[int, Field(ge=1, le=1000)] = 5
    """Measured samples needed before promotion, count (failures are never gated by it)."""
    verify_seconds: Annotated[int, Field(ge=0, le=604800)] = 600
    """Seconds of verification after warm-up before promotion; promotion needs both this and minSamples."""
    failure_threshold: Annotated[int, Field(ge=1, le=100)] = 3
    """Failing samples in a row that reject a revision, count (a passing sample resets it)."""
    error_threshold: Annotated[int, Field(ge=1, le=1000)] = 4
    """Measurement errors in a row (scrape or probe failed while the pods are Ready), count, after which the
    analysis is Paused; errors never cause a rollback."""
    progress_deadline_seconds: Annotated[int, Field(ge=1, le=604800)] = 3600
    """Seconds from the moment a revision is applied until its pods must all be Ready and warmed up; a revision
    that misses it fails (crash loops, a flag the image rejects). Readiness blips do not reset it. Keep it above
    the pod's startup-probe budget (1800 s) in production, or a model still loading fails."""
    max_restarts_before_ready: Annotated[int, Field(ge=1, le=100)] = 3
    """Restarts of one pod before it was ever Ready, count, that fail a revision at once instead of at
    progressDeadlineSeconds (a crash loop at start-up: a flag the image rejects, "Not enough memory"). Multi-node:
    restarts of a group's leader pod, a worker's own restarts are not counted; LeaderWorkerSet recreates the whole
    group after any container's restart, and each leader recreated so counts as one. A pod that has been Ready once
    is judged by the deadline and the samples instead (readiness blips never reset the deadline)."""
    max_restarts_while_verifying: Annotated[int, Field(ge=1, le=100)] = 3
    """Restarts of the revision's pods after its warm-up ended and before it is promoted, count, that fail it with
    reason ``CrashLoop`` (a pod that crashes under load and comes back Ready in seconds: the passing samples between
    its crashes would otherwise reset ``failureThreshold``'s count). All pods of the revision add up; multi-node:
    the restart counts the sampler reports per group. The stable revision is not failed by restarts (its samples
    judge it)."""
    min_relative_tokens_per_second: Annotated[float, Field(gt=0, le=1)] = 0.85
    """A sample fails when its decode speed (tok/s) is below this fraction of the baseline's (0.85 = more than
    15 % slower). Applies only when the model (path and revision), GPU product and parallelism equal the
    baseline's."""
    min_relative_accept_length: Annotated[float, Field(gt=0, le=1)] = 0.9
    """A sample fails when its mean acceptance length (tokens per verify step) is below this fraction of the
    baseline's; same conditions as minRelativeTokensPerSecond."""
    min_tokens_per_second: Annotated[float | None, Field(gt=0, le=100000)] = None
    """Absolute floor of decode speed, tok/s (unset: none). Applies to every revision, the first one included."""
    min_accept_length: Annotated[float | None, Field(ge=1, le=64)] = None
    """Absolute floor of the mean acceptance length, tokens per verify step (unset: none)."""
    max_time_to_first_token_seconds: Annotated[float | None, Field(gt=0, le=3600)] = None
    """Absolute ceiling of the median time to first token, seconds, from the pods' histogram
    ``sglang:time_to_first_token_seconds`` (unset: none; with maxRelativeTimeToFirstToken unset too, TTFT is no
    criterion)."""
    max_relative_time_to_first_token: Annotated[float | None, Field(ge=1, le=100)] = None
    """A sample fails when its median time to first token is above this multiple of the baseline's (1.5 = more than
    50 % slower to answer); same conditions as minRelativeTokensPerSecond. Unset: TTFT is not compared."""
    min_traffic: MinTraffic = Field(default_factory=MinTraffic, json_schema_extra={"default": {}})
    """Signal ``traffic``: least load for a sample to count."""
    max_rollbacks: Annotated[int, Field(ge=1, le=100)] = 3
    """Automatic rollbacks allowed per rollbackWindowSeconds, count; one more failing revision that still serves (a
    Ready pod) is Paused (keeps running, reported) instead of rolled back. A failing revision that serves nothing
    (no Ready pod) is always replaced by the stable revision, whatever this limit says."""
    rollback_window_seconds: Annotated[int, Field(ge=1, le=31536000)] = 86400
    """Window of maxRollbacks, seconds."""
    history_limit: Annotated[int, Field(ge=1, le=50)] = 10
    """Revisions kept in ``status.revisions`` (the stable one is never dropped), count."""
    probe: ProbePolicy = Field(default_factory=ProbePolicy, json_schema_extra={"default": {}})
    """Signal ``probe``: the request sent each interval."""

    cel_rules = (
        CelRule(
            "self.verifySeconds >= self.minSamples * self.intervalSeconds",
            "spec.rollback.verifySeconds must be at least minSamples × intervalSeconds (promotion needs both "
            "minSamples samples and verifySeconds)",
            lambda m: m.verify_seconds >= m.min_samples * m.interval_seconds,
            ".verifySeconds",
            message_expression="'spec.rollback.verifySeconds is %d but minSamples × intervalSeconds is %d × %d = %d "
            "(promotion needs both minSamples samples and verifySeconds); set verifySeconds to at least %d or lower "
            "minSamples'.format([self.verifySeconds, self.minSamples, self.intervalSeconds, "
            "self.minSamples * self.intervalSeconds, self.minSamples * self.intervalSeconds])",
            explain=lambda m: f"spec.rollback.verifySeconds is {m.verify_seconds} but minSamples × intervalSeconds is "
            f"{m.min_samples} × {m.interval_seconds} = {m.min_samples * m.interval_seconds} (promotion needs both "
            f"minSamples samples and verifySeconds); set verifySeconds to at least "
            f"{m.min_samples * m.interval_seconds} or lower minSamples",
            name="rollback-verify-covers-min-samples",
        ),
        CelRule(
            "self.probe.timeoutSeconds < self.intervalSeconds",
            "spec.rollback.probe.timeoutSeconds must be shorter than intervalSeconds (one probe per interval)",
            lambda m: m.probe.timeout_seconds < m.interval_seconds,
            ".probe.timeoutSeconds",
            message_expression="'spec.rollback.probe.timeoutSeconds is %d but intervalSeconds is %d (one probe per "
            "interval: it must end within it); set probe.timeoutSeconds below %d'.format([self.probe.timeoutSeconds, "
            "self.intervalSeconds, self.intervalSeconds])",
            explain=lambda m: f"spec.rollback.probe.timeoutSeconds is {m.probe.timeout_seconds} but intervalSeconds "
            f"is {m.interval_seconds} (one probe per interval: it must end within it); set probe.timeoutSeconds "
            f"below {m.interval_seconds}",
            name="rollback-probe-within-interval",
        ),
        CelRule(
            "self.progressDeadlineSeconds > self.warmupSeconds",
            "spec.rollback.progressDeadlineSeconds must be longer than warmupSeconds (the deadline covers "
            "the rollout and the warm-up)",
            lambda m: m.progress_deadline_seconds > m.warmup_seconds,
            ".progressDeadlineSeconds",
            message_expression="'spec.rollback.progressDeadlineSeconds is %d but warmupSeconds is %d (the deadline "
            "covers the rollout and the warm-up); set progressDeadlineSeconds above %d'.format(["
            "self.progressDeadlineSeconds, self.warmupSeconds, self.warmupSeconds])",
            explain=lambda m: f"spec.rollback.progressDeadlineSeconds is {m.progress_deadline_seconds} but "
            f"warmupSeconds is {m.warmup_seconds} (the deadline covers the rollout and the warm-up); set "
            f"progressDeadlineSeconds above {m.warmup_seconds}",
            name="rollback-deadline-covers-warmup",
        ),
        CelRule(
            "!has(self.minTokensPerSecond) || "
            "double(self.probe.maxTokens) < self.minTokensPerSecond * double(self.probe.timeoutSeconds)",
            "spec.rollback.probe.maxTokens at minTokensPerSecond must finish within probe.timeoutSeconds "
            "(a probe at the floor would time out, an error instead of a failure)",
            lambda m: m.min_tokens_per_second is None
            or m.probe.max_tokens < m.min_tokens_per_second * m.probe.timeout_seconds,
            ".minTokensPerSecond",
            message_expression="'spec.rollback.minTokensPerSecond is %s: a probe of probe.maxTokens %d tokens at that "
            "speed takes longer than probe.timeoutSeconds %d (it would time out, an error instead of a failure); "
            "raise probe.timeoutSeconds or lower probe.maxTokens'.format([string(self.minTokensPerSecond), "
            "self.probe.maxTokens, self.probe.timeoutSeconds])",
            explain=lambda m: f"spec.rollback.minTokensPerSecond is {_number(m.min_tokens_per_second)}: a probe of "
            f"probe.maxTokens {m.probe.max_tokens} tokens at that speed takes longer than probe.timeoutSeconds "
            f"{m.probe.timeout_seconds} (it would time out, an error instead of a failure); raise "
            "probe.timeoutSeconds or lower probe.maxTokens",
            name="rollback-probe-finishes-at-the-floor",
        ),
    )


def _number(value: float | None) -> str:
    """A number as CEL's ``string(double)`` writes it (``1``, ``40.5``)."""
    return f"{value:g}" if value is not None else ""
