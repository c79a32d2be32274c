"""Validation of a parsed spec against its SGLang release: what the CRD schema and CEL cannot know.

The schema and CEL rules (``crds/sglangservers.yaml``) hold for every release. Here, per release: the release
is supported; every flag a typed field renders exists in that release with an allowed value; ``extraArgs``
uses full flag names of that release and none a typed field owns; ``env`` does not redefine what the operator
sets; NEXTN / EAGLE without a draft model need a model with MTP layers; and finally the whole argv goes through
the SGLang-compatible parser and resolution rules (:func:`sglang_operator.sglang.args.resolve_server_args`),
whose refusal is translated into the spec fields that caused it (SGLang's own text kept after them).

Every refusal names the field, the offending value and the fix. Errors are the SpecValid=False message
(nothing is applied); warnings (what the user can act on) go to the SpecValid=True message (reason
``ValidWithWarnings``) and become Warning events; SGLang's informational start-up lines become ``notes``
(shown by ``sglang-operator render``, never events).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from sglang_operator.api.analysis import simulated_acceptance
from sglang_operator.api.blocks import SGLangImage, SpeculativeAlgorithm
from sglang_operator.api.server import SpecError, parse
from sglang_operator.api.spec import OWNED, SGLangServerSpec, flag_name, owned_flag_refusal
from sglang_operator.builders.command import RenderedCommand, render_command
from sglang_operator.builders.dialect import (
    Release,
    SGLangArgError,
    SGLangVersion,
    VersionError,
    model_architecture,
    resolve_release,
)

FIELD_OF_FLAG: dict[str, str] = {f: v for f, v in OWNED.items() if v.startswith("spec.")}
"""Flag (every owned spelling) → the spec field that renders it (for messages)."""

PYTHON_RULES: tuple[str, ...] = (
    "version-supported", "typed-flag-in-release", "typed-choice-in-release", "extra-args-known-flag", "env-owned",
    "mtp-or-draft", "sglang-refuses", "adaptive-kept",
)
"""Names of the release-dependent rules checked here (``SpecCheck.rules`` says which failed).
``typed-flag-in-release``: a typed field whose flag the release lacks (``spec.adminApiKeySecretRef`` before SGLang
0.5.8, ``spec.sslKeyfilePasswordSecretRef`` before 0.5.10). One more guard no spec reaches while the flag tables
agree with :data:`sglang_operator.api.spec.OWNED` (tests/api/test_owned_flags.py): ``extra-args-owned-dest`` (an
extraArgs spelling of an owned option that CEL does not know). ``adaptive-kept``: ``spec.speculative.adaptive`` that
SGLang would turn off at start-up with a warning only (0.5.11's overlap scheduler, ``--enable-dp-attention`` ...):
refused, as the spec would silently not run what it says."""


@dataclass
class SpecCheck:
    """Outcome of :func:`check`: errors (SpecValid=False), warnings, notes, and the rendered command.

    ``rules[i]`` names the rule (one of :data:`PYTHON_RULES`) behind ``errors[i]``.
    """

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """SGLang's informational start-up lines (e.g. "Spec v2 is enabled ..."): not for events."""
    command: RenderedCommand | None = None
    resolved: dict[str, object] = field(default_factory=dict)
    """SGLang's resolved server args (dest → value) when the argv was accepted."""
    rules: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors

    def refuse(self, rule: str, message: str) -> None:
        """Record a refusal by rule ``rule``."""
        self.rules.append(rule)
        self.errors.append(message)


def _typed_flag_errors(out: SpecCheck, cmd: RenderedCommand, release: Release, n_extra: int) -> None:
    typed = cmd.args[: len(cmd.args) - n_extra] if n_extra else cmd.args
    for i, token in enumerate(typed):
        if not token.startswith("--"):
            continue
        where = FIELD_OF_FLAG.get(token, "spec")
        info = release.flag(token)
        if info is None:
            known = release.advice(token).available  # which releases have it, from the tables
            out.refuse("typed-flag-in-release", f"{where}: SGLang {cmd.version} has no {token} (not supported by "
                                                "that release" + (f"; SGLang has it in {known}" if known else "")
                                                + "); unset the field or choose another release")
            continue
        value = typed[i + 1] if info.takes_value and i + 1 < len(typed) else None
        if info.choices and value is not None and value not in info.choices:
            out.refuse("typed-choice-in-release", f"{where}: {value!r} is not supported by SGLang {cmd.version} "
                                                  f"(choices: {', '.join(info.choices)})")


def _extra_args_errors(out: SpecCheck, extra_args: list[str], release: Release) -> None:
    owned = {info.dest: f for f in OWNED if (info := release.flag(f)) is not None}
    for i, arg in enumerate(extra_args):
        name = flag_name(arg)
        if name is None:
            continue
        info = release.flag(name)
        if info is None:  # renamed, abbreviated, misspelt...: successors / closest flags, SGLang's wording
            nxt = extra_args[i + 1] if i + 1 < len(extra_args) else None
            value = nxt if nxt is not None and flag_name(nxt) is None and "=" not in arg else None
            out.refuse("extra-args-known-flag",
                       f"spec.extraArgs: {release.advice(arg, value, FIELD_OF_FLAG).text}")
        elif info.dest in owned:
            out.refuse("extra-args-owned-dest", owned_flag_refusal(owned[info.dest]).replace(
                f"spec.extraArgs: {owned[info.dest]}", f"spec.extraArgs: {name} (the same option as "
                                                       f"{owned[info.dest]})", 1))


def _env_errors(out: SpecCheck, spec: SGLangServerSpec, cmd: RenderedCommand) -> None:
    ours = {e["name"]: e for e in cmd.env}
    simulated = simulated_acceptance(spec.env)
    if simulated:
        out.warnings.append(
            f"spec.env {', '.join(simulated)}: SGLang's forced-acceptance benchmark knob commits draft tokens it never "
            "verified, so this revision's accept length and tok/s are made up (outputs too) and no rollback "
            "judgement or tuning can rest on them; remove it outside a benchmark")
    for e in spec.env:
        name = e.get("name")
        if name in ours:
            source = "spec.speculative.specV2" if name == "SGLANG_ENABLE_SPEC_V2" else "typed fields"
            out.refuse("env-owned", f"spec.env: {name} is set by the operator from {source}; remove it from "
                                    "spec.env")


def _mtp_or_draft(out: SpecCheck, spec: SGLangServerSpec) -> None:
    """NEXTN and EAGLE without a draft model load the draft from the target checkpoint's MTP layers (SGLang
    ``configs/model_config.py`` renames the architecture to its ``...MTP`` / ``...NextN`` draft class,
    ``server_args.py:_handle_speculative_decoding`` points the draft path at the model for the MTP families);
    a known architecture without MTP layers cannot start. Unknown models are left to SGLang."""
    s = spec.speculative
    if s is None or s.draft_model_path or s.algorithm not in (SpeculativeAlgorithm.NEXTN, SpeculativeAlgorithm.EAGLE):
        return
    arch, has_mtp = model_architecture(spec.model.path)
    if arch is not None and not has_mtp:
        out.refuse("mtp-or-draft",
                   f"spec.speculative.algorithm {s.algorithm.value} without spec.speculative.draftModelPath needs a "
                   f"model with MTP layers, and spec.model.path {spec.model.path} ({arch}) has none: set "
                   "spec.speculative.draftModelPath to a draft model for it, or choose a model with MTP layers")


# --- SGLang's refusals, in the spec's terms -------------------------------------------------------------------

_MENTIONS: tuple[tuple[str, str], ...] = (
    (r"\btopk\b|eagle_topk", "spec.speculative.eagleTopk"),
    (r"[Ss]pec v2|SGLANG_ENABLE_SPEC_V2", "spec.speculative.specV2"),
    (r"[Ss]peculative decoding|speculative_algorithm|speculative algorithm", "spec.speculative.algorithm"),
    (r"num_draft_tokens|num-draft-tokens", "spec.speculative.numDraftTokens"),
    (r"mamba[-_](scheduler|radix[-_]cache)[-_]strategy|no_buffer|extra_buffer", "spec.memory.mambaSchedulerStrategy"),
    (r"served_model_name", "spec.model.servedModelName"),
    (r"chunked_prefill_size", "spec.memory.chunkedPrefillSize"),
    (r"\btp_size\b", "spec.parallelism.tensor"),
    (r"\bdp_size\b|data[- ]parallel", "spec.parallelism.data"),
    (r"\bpp_size\b|[Pp]ipeline parallel", "spec.parallelism.pipeline"),
    (r"number of nodes|\bnnodes\b", "spec.parallelism.nodes"),
    (r"context_length", "spec.memory.contextLength"),
)
"""Words of SGLang's messages (its flags, dest names and phrases) → the spec field they stand for."""


def _value_at(spec: SGLangServerSpec, path: str) -> Any:
    node: Any = spec.dump()
    for key in path.split(".")[1:]:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _fields_in(message: str, spec: SGLangServerSpec, release: Release) -> list[str]:
    """The spec fields (``path=value``) and extraArgs items SGLang's ``message`` speaks of, in spec order."""
    found: list[str] = []
    for flag, path in FIELD_OF_FLAG.items():
        if re.search(rf"{re.escape(flag)}\b|\b{flag[2:].replace('-', '_')}\b", message) and path not in found:
            found.append(path)
    for pattern, path in _MENTIONS:
        if re.search(pattern, message) and path not in found:
            found.append(path)
    parts = []
    for path in found:
        value = _value_at(spec, path)
        shown = str(value).lower() if isinstance(value, bool) else value
        parts.append(f"{path}={shown}" if value is not None else f"{path} (unset)")
    args = spec.extra_args
    for i, arg in enumerate(args):
        name = flag_name(arg)
        info = release.flag(name) if name else None
        if not name:
            continue
        value = args[i + 1] if "=" not in arg and i + 1 < len(args) and not args[i + 1].startswith("--") else None
        named = re.search(rf"{re.escape(name)}\b", message) or (info and re.search(rf"\b{info.dest}\b", message))
        said = value is not None and len(value) > 2 and re.search(rf"\b{re.escape(value)}\b", message)
        if named or said:
            parts.append(f"spec.extraArgs {arg}" + (f" {value}" if value is not None else ""))
    return parts


def sglang_refusal(err: SGLangArgError, spec: SGLangServerSpec, release: Release) -> str:
    """SGLang's refusal of the rendered command line, led by the spec fields (with values) that caused it."""
    where = _fields_in(str(err), spec, release) or ["spec"]
    text = f"{err.kind}: {err}" if err.kind != "argparse" else f"sglang serve: error: {err}"
    return f"{', '.join(where)}: SGLang {release.version} refuses the command line: {text}"


# --- SGLang's start-up warnings: actionable ones in the spec's terms, the rest as notes ------------------------

_INFO = (
    "Spec v2 is enabled for eagle/eagle3 speculative decoding",
    "Non-overlap (synchronous) spec v2 is used",
    "The overlap scheduler and mixed chunked prefill are disabled because of using ngram",
    "speculative_num_draft_tokens is set to 12 by default for ngram",
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1",
    "Max running requests is reset to 48",  # the operator's own maxRunningRequests warning says it in spec terms
)
"""SGLang start-up lines that describe a choice the spec already made: notes, not warnings
(``server_args.py:_handle_speculative_decoding`` 0.5.10, ``arg_groups/speculative_hook.py`` 0.5.23)."""


def _sglang_warning(text: str, spec: SGLangServerSpec, version: SGLangVersion) -> str | None:
    """The actionable form of one SGLang warning, or None when it is informational."""
    if text.startswith(_INFO):
        return None
    if text.startswith("Overlap scheduler is disabled when spec v2 is off"):
        said = (f"spec.speculative.specV2 is false: SGLang {version} then runs speculative decoding without the "
                "overlap scheduler; ")
        topk = spec.speculative.eagle_topk if spec.speculative is not None else 1
        if topk == 1:
            return said + "set specV2: true to overlap scheduling and drafting"
        return (said + f"spec v2 overlaps scheduling and drafting with eagleTopk 1 only (SGLang: \"Spec v2 currently "
                f"only supports topk = 1\"), and eagleTopk is {topk}: set eagleTopk: 1 and specV2: true for it, or "
                f"keep eagleTopk {topk} without overlap")
    if text.startswith("Disabling overlap schedule since mamba no_buffer"):
        value = _value_at(spec, "spec.memory.mambaSchedulerStrategy") or "unset (auto: no_buffer)"
        return (f"spec.memory.mambaSchedulerStrategy is {value}: SGLang {version} turns the overlap scheduler off "
                "with the mamba no_buffer strategy; set it to extra_buffer to keep overlap scheduling")
    if text.startswith("Mixed chunked prefill is disabled because of using eagle"):
        return ("spec.extraArgs --enable-mixed-chunk has no effect with speculative decoding (SGLang turns it "
                "off); remove it")
    if text.startswith("DeepSeek MTP does not require setting speculative_draft_model_path"):
        return (f"spec.speculative.draftModelPath {_value_at(spec, 'spec.speculative.draftModelPath')} is not "
                "needed: SGLang uses the model's own MTP layers for it; remove it")
    if text.startswith("SGLANG_ENABLE_SPEC_V2 has been removed"):
        return (f"spec.env SGLANG_ENABLE_SPEC_V2 has no effect on SGLang {version} (the V2 worker is always used); "
                "remove it")
    return f"SGLang {version} will log: {text}"


def check(spec: SGLangServerSpec) -> SpecCheck:
    """Render ``spec`` and validate it against its SGLang release (never raises for a bad spec). The release is
    resolved once (:func:`~sglang_operator.builders.dialect.resolve_release`) and handed to the command builder, the
    checks and SGLang's argument resolution."""
    out = SpecCheck()
    try:
        release = resolve_release(spec.sglang)
        cmd = render_command(spec, release)
    except (VersionError, ValueError) as err:
        out.refuse("version-supported", str(err))
        return out
    out.command = cmd
    out.warnings += cmd.warnings
    _typed_flag_errors(out, cmd, release, len(spec.extra_args))
    _extra_args_errors(out, spec.extra_args, release)
    _env_errors(out, spec, cmd)
    _mtp_or_draft(out, spec)
    if out.errors:
        return out
    try:
        out.resolved, sglang_warnings = release.resolve_args(cmd.args, cmd.literal_env)
    except SGLangArgError as err:
        out.refuse("sglang-refuses", sglang_refusal(err, spec, release))
        return out
    s = spec.speculative
    if s is not None and s.adaptive is not None and s.adaptive.enabled and out.resolved.get("speculative_adaptive") \
            is False:
        said = next((w for w in sglang_warnings if w.startswith("speculative_adaptive disabled")), "")
        fix = ("set spec.speculative.specV2 to false (SGLang 0.5.11 runs adaptive mode on the spec v1 worker only)"
               if "overlap scheduler" in said else "remove what the reason names, or remove spec.speculative.adaptive")
        out.refuse("adaptive-kept", f"spec.speculative.adaptive: SGLang {cmd.version} would turn it off at start-up "
                                    f"and run static settings ({said}); {fix}")
        return out
    for text in dict.fromkeys(sglang_warnings):
        actionable = _sglang_warning(text, spec, cmd.version)
        if actionable is None:
            out.notes.append(f"SGLang {cmd.version} will log: {text}")
        elif actionable not in out.warnings:
            out.warnings.append(actionable)
    return out


EXTRA_ARGS = "spec.extraArgs: "
"""How every refusal of an ``extraArgs`` item begins (the CEL rules' and the release's)."""


def refusals(body: Mapping[str, Any]) -> list[str]:
    """Every refusal ``sglang-operator render`` (and ``import``) gives the SGLangServer dict ``body``: the schema's
    and the CEL rules' (:func:`sglang_operator.api.server.parse`), else the release's (:func:`check`). The problems
    of ``spec.extraArgs`` come in one message whichever stage finds them, so they are fixed in one round: a flag a
    typed field owns (CEL, before the release is looked at) is reported with the items the release does not know
    (renamed, misspelt, abbreviated: :func:`_extra_args_errors`) whenever ``spec.sglang`` names a release."""
    try:
        return _one_extra_args_message(check(parse(body).spec).errors)
    except SpecError as err:
        messages = list(err.messages)
    spec = body.get("spec")
    args = spec.get("extraArgs") if isinstance(spec, Mapping) else None
    if (isinstance(spec, Mapping) and isinstance(args, list) and all(isinstance(a, str) for a in args)
            and any(m.startswith(EXTRA_ARGS) for m in messages)):
        try:  # the release needs spec.sglang only
            release = resolve_release(SGLangImage.model_validate(spec.get("sglang")))
        except (ValidationError, VersionError, ValueError):
            return _one_extra_args_message(messages)
        found = SpecCheck()
        _extra_args_errors(found, list(args), release)
        messages += [m for m, rule in zip(found.errors, found.rules, strict=True)
                     if rule == "extra-args-known-flag" and m not in messages]  # owned ones: CEL's said them
    return _one_extra_args_message(messages)


def _one_extra_args_message(messages: list[str]) -> list[str]:
    """``messages`` with every ``spec.extraArgs: …`` refusal joined into the first one's place."""
    extra = [m.removeprefix(EXTRA_ARGS) for m in messages if m.startswith(EXTRA_ARGS)]
    if len(extra) < 2:
        return messages
    joined = f"{EXTRA_ARGS}{len(extra)} problems: " + "; ".join(extra)
    first = next(i for i, m in enumerate(messages) if m.startswith(EXTRA_ARGS))
    rest = [m for m in messages if not m.startswith(EXTRA_ARGS)]
    return [*rest[:first], joined, *rest[first:]]


def validate(spec: SGLangServerSpec, version: SGLangVersion | None = None) -> list[str]:
    """Errors of ``spec`` for its SGLang release (empty = valid); ``version`` overrides the spec's release."""
    if version is not None:
        spec = spec.model_copy(
            update={"sglang": spec.sglang.model_copy(update={"version": str(version)})}, deep=True
        )
    return check(spec).errors
