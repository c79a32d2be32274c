"""Validation of a parsed spec against its SGLang release: what the CRD schema and CEL cannot know.

The schema and CEL rules (``crds/sglangservers.yaml``) hold for every release. Here, per release: the release
is supported; every flag a typed field renders exists in that release with an allowed value; ``extraArgs``
uses full flag names of that release and none a typed field owns; ``env`` does not redefine what the operator
sets; and finally the whole argv goes through the SGLang-compatible parser and resolution rules
(:func:`sglang_operator.sglang.args.resolve_server_args`). Errors are the SpecValid=False message (nothing is
applied); warnings go to the SpecValid=True message (reason ``ValidWithWarnings``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang_operator.api.spec import OWNED_FLAGS, SGLangServerSpec, flag_name
from sglang_operator.builders.command import RenderedCommand, render_command
from sglang_operator.builders.dialect import SGLangArgError, SGLangVersion, VersionError, lookup_flag, resolve_args

#: Flag → the spec field that renders it (for messages).
FIELD_OF_FLAG = {
    "--model-path": "spec.model.path", "--served-model-name": "spec.model.servedModelName",
    "--revision": "spec.model.revision", "--trust-remote-code": "spec.model.trustRemoteCode",
    "--tp-size": "spec.parallelism.tensor", "--dp-size": "spec.parallelism.data", "--port": "spec.port",
    "--api-key": "spec.apiKeySecretRef", "--speculative-algorithm": "spec.speculative.algorithm",
    "--speculative-num-steps": "spec.speculative.numSteps", "--speculative-eagle-topk": "spec.speculative.eagleTopk",
    "--speculative-num-draft-tokens": "spec.speculative.numDraftTokens",
    "--speculative-draft-model-path": "spec.speculative.draftModelPath",
    "--mem-fraction-static": "spec.memory.memFractionStatic", "--context-length": "spec.memory.contextLength",
    "--max-running-requests": "spec.memory.maxRunningRequests", "--max-total-tokens": "spec.memory.maxTotalTokens",
    "--chunked-prefill-size": "spec.memory.chunkedPrefillSize",
    "--mamba-full-memory-ratio": "spec.memory.mambaFullMemoryRatio",
    "--mamba-scheduler-strategy": "spec.memory.mambaSchedulerStrategy",
    "--mamba-radix-cache-strategy": "spec.memory.mambaSchedulerStrategy",
}


@dataclass
class SpecCheck:
    """Outcome of :func:`check`: errors (SpecValid=False), warnings, and the rendered command when renderable."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    command: RenderedCommand | None = None
    resolved: dict[str, object] = field(default_factory=dict)
    """SGLang's resolved server args (dest → value) when the argv was accepted."""

    @property
    def valid(self) -> bool:
        return not self.errors


def _typed_flag_errors(cmd: RenderedCommand, n_extra: int) -> list[str]:
    errors = []
    typed = cmd.args[: len(cmd.args) - n_extra] if n_extra else cmd.args
    for i, token in enumerate(typed):
        if not token.startswith("--"):
            continue
        where = FIELD_OF_FLAG.get(token, "spec")
        info = lookup_flag(cmd.version, token)
        if info is None:
            errors.append(f"{where}: SGLang {cmd.version} has no {token} (not supported by that release)")
            continue
        value = typed[i + 1] if info.takes_value and i + 1 < len(typed) else None
        if info.choices and value is not None and value not in info.choices:
            errors.append(
                f"{where}: {value!r} is not supported by SGLang {cmd.version} (choices: {', '.join(info.choices)})"
            )
    return errors


def _extra_args_errors(spec: SGLangServerSpec, version: SGLangVersion) -> list[str]:
    owned_dests = {info.dest for f in OWNED_FLAGS if (info := lookup_flag(version, f)) is not None}
    errors = []
    for arg in spec.extra_args:
        name = flag_name(arg)
        if name is None:
            continue
        info = lookup_flag(version, name)
        if info is None:
            errors.append(
                f"spec.extraArgs: {name} is not a launch flag of SGLang {version} (full flag names only)"
            )
        elif info.dest in owned_dests:
            errors.append(f"spec.extraArgs: {name} is set by a typed field; use the typed field")
    return errors


def _env_errors(spec: SGLangServerSpec, cmd: RenderedCommand) -> list[str]:
    ours = {e["name"] for e in cmd.env}
    return [
        f"spec.env: {e.get('name')} is set by the operator from typed fields; remove it from spec.env"
        for e in spec.env if e.get("name") in ours
    ]


def check(spec: SGLangServerSpec) -> SpecCheck:
    """Render ``spec`` and validate it against its SGLang release (never raises for a bad spec)."""
    out = SpecCheck()
    try:
        cmd = render_command(spec)
    except (VersionError, ValueError) as err:
        out.errors.append(str(err))
        return out
    out.command = cmd
    out.warnings += cmd.warnings
    out.errors += _typed_flag_errors(cmd, len(spec.extra_args))
    out.errors += _extra_args_errors(spec, cmd.version)
    out.errors += _env_errors(spec, cmd)
    if out.errors:
        return out
    try:
        out.resolved, sglang_warnings = resolve_args(cmd.version, cmd.args, cmd.literal_env)
    except SGLangArgError as err:
        out.errors.append(f"SGLang {cmd.version} refuses the command line: {err}")
        return out
    # SGLang's own start-up warnings, labelled so they are not mistaken for the operator's
    out.warnings += [f"SGLang {cmd.version} will log: {w}" for w in dict.fromkeys(sglang_warnings)]
    return out


def validate(spec: SGLangServerSpec, version: SGLangVersion | None = None) -> list[str]:
    """Errors of ``spec`` for its SGLang release (empty = valid); ``version`` overrides the spec's release."""
    if version is not None:
        spec = spec.model_copy(
            update={"sglang": spec.sglang.model_copy(update={"version": str(version)})}, deep=True
        )
    return check(spec).errors
