"""Parse and resolve an SGLang command line like the emulated release's ``launch_server`` does.

``resolve_server_args(argv, version, env)`` = argparse with the release's own flag table
(``server_args.py:prepare_server_args``; unknown, renamed, ambiguous, mistyped or out-of-choice flags fail
with argparse's message) + the hand-ported rules of :mod:`sglang_operator.sglang.rules`.
The simulator and the operator's builders/tests both use it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.sglang import catalog, rules
from sglang_operator.sglang._parser import SGLangArgError, SGLangParser, build_parser
from sglang_operator.sglang.flags import FlagTable, load_table
from sglang_operator.sglang.models import architecture_for, draft_architecture_for
from sglang_operator.sglang.release import Release, release
from sglang_operator.sglang.versions import SGLangVersion, parse_version

__all__ = ["ResolvedArgs", "SGLangArgError", "resolve_server_args", "warm_up"]

# server_args.py:ServerArgs.from_cli_args (0.4.6-0.5.13): argparse dests copied to differently named fields
# (``args.tp_size = args.tensor_parallel_size``); from 0.5.14 the dests are the field names already.
_FIELD_FOR_DEST = {
    "tensor_parallel_size": "tp_size",
    "pipeline_parallel_size": "pp_size",
    "attention_context_parallel_size": "attn_cp_size",
    "moe_data_parallel_size": "moe_dp_size",
    "data_parallel_size": "dp_size",
    "expert_parallel_size": "ep_size",
}


@dataclass
class ResolvedArgs:
    """The outcome of a successful resolution.

    - ``values``: server-args fields by name (``tp_size``, ``speculative_algorithm``, ...) as SGLang's
      ``/server_info`` reports them after resolution, including the values SGLang rewrote (NEXTN → EAGLE,
      num-draft-tokens forced to steps + 1, max-running-requests 48, mamba strategy ``auto`` resolved).
      GPU-dependent automatic values (mem-fraction-static, chunked-prefill-size, attention backend,
      context length from config.json) stay ``None``.
    - ``warnings``: SGLang's warning log messages, in the order it prints them (without logger prefix).
    - ``architecture``: the target's ``architectures[0]`` (e.g. ``Qwen3_5ForConditionalGeneration``) or None.
    - ``draft_architecture``: the MTP/NextN draft class SGLang loads when EAGLE/NEXTN runs without a separate
      draft model (e.g. ``Qwen3_5ForCausalLMMTP``; logged as ``Load weight end. ... type=...``), else None.
    - ``spec_v2``: whether the V2 (overlap) speculative worker is used (``SGLANG_ENABLE_SPEC_V2`` semantics).
    - ``explicit``: fields given on the command line.
    - ``notes``: rules this port does not emulate for this configuration.
    """

    version: SGLangVersion
    values: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    architecture: str | None = None
    draft_architecture: str | None = None
    spec_v2: bool = False
    explicit: frozenset[str] = frozenset()
    notes: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def speculative(self) -> bool:
        """Whether speculative decoding is on."""
        return self.values.get("speculative_algorithm") is not None


def _explicit(argv: Sequence[str], table_opts: Mapping[str, str]) -> frozenset[str]:
    out = set()
    for tok in argv:
        if tok.startswith("--"):
            m = tok.split("=", 1)[0]
            if m in table_opts:
                out.add(table_opts[m])
    return frozenset(out)


@functools.cache
def _parser_for(table: SGLangVersion) -> SGLangParser:
    """The argparse parser of flag table ``table``, built once (building one takes 5-30 ms: 120-530 options)."""
    return build_parser(load_table(table))


def warm_up(versions: Sequence[SGLangVersion] | None = None) -> None:
    """Build the parsers of ``versions`` (default: every known release) now, so that a long-running process does
    not pay 5-30 ms on the first render of each release. Releases sharing a flag table share one parser."""
    for version in versions or [r.version for r in catalog.releases()]:
        _parser_for(load_table(version).version)


def _free_algorithm(table: FlagTable) -> bool:
    flag = table.get("--speculative-algorithm")
    return flag is not None and flag.choices is None


def resolve_server_args(
    argv: Sequence[str],
    version: SGLangVersion | str | Release,
    env: Mapping[str, str] | None = None,
    *,
    architecture: str | None = None,
) -> ResolvedArgs:
    """Parse ``argv`` (SGLang flags, without the entry point) as SGLang ``version`` would, then resolve.

    ``env`` is the server's environment (``SGLANG_ENABLE_SPEC_V2`` matters on 0.5.4.post1–0.5.13).
    ``architecture`` overrides the guess from the model path (``models.architecture_for``).
    ``version``: the release, or its :class:`~sglang_operator.sglang.release.Release` already resolved (a render's).
    Raises :class:`SGLangArgError` with SGLang's message when SGLang would exit at start-up, and
    ``versions.SGLangVersionError`` for an unsupported release.
    """
    rel = version if isinstance(version, Release) else release(
        parse_version(version) if isinstance(version, str) else version)
    ver, d, table = rel.version, rel.dialect, rel.flags
    parser = _parser_for(table.version)
    parser.sglang_warnings = []  # the cached parser collects warnings per parse
    ns = parser.parse_args(list(argv))
    values = dict(vars(ns))
    field_map = {dest: name for dest, name in _FIELD_FOR_DEST.items() if dest in values and name not in values}
    for dest, name in field_map.items():
        values[name] = values.pop(dest)
    arch = architecture or architecture_for(values.get("model_path"))
    ctx = rules.Ctx(v=values, dialect=d, env=dict(env or {}), arch=arch, warnings=list(parser.sglang_warnings),
                    free_algorithm=_free_algorithm(table))
    rules.apply(ctx)
    opt_to_field = {o: field_map.get(f.dest, f.dest) for f in table.flags for o in f.options}
    draft = None
    if values.get("speculative_algorithm") == "EAGLE" and values.get("speculative_draft_model_path") in (
        None,
        values.get("model_path"),
    ):
        draft = draft_architecture_for(arch)
    return ResolvedArgs(
        version=ver,
        values=values,
        warnings=ctx.warnings,
        architecture=arch,
        draft_architecture=draft,
        spec_v2=ctx.spec_v2 if ctx.v.get("speculative_algorithm") else False,
        explicit=_explicit(argv, opt_to_field),
        notes=ctx.notes,
    )
