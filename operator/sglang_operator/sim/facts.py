"""The simulator's only door to the project's SGLang facts layer (``sglang_operator.sglang``): version
parsing and dialects (``versions.py``), argument resolution (``args.py``) and the accept-rate formula.

Keeping every call here means a change of that layer's interface touches one file of the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.sglang import versions

DEFAULT_VERSION = "0.5.23"


class SimArgError(Exception):
    """The argv is invalid for the emulated release; ``str()`` is SGLang's message, ``exit_code`` its
    exit status (2 for argparse errors, 1 for exceptions raised during resolution)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Resolved:
    """What ``/server_info`` reports (``server_args``), SGLang's warning lines, the target's
    ``architectures[0]`` and the MTP/NextN draft class (``None`` when unknown or not used)."""

    server_args: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    architecture: str | None = None
    draft_architecture: str | None = None
    spec_v2: bool = False


@dataclass(frozen=True)
class VersionFacts:
    """The emulated release: its number, dialect, metric table and accept-rate formula."""

    version: versions.SGLangVersion
    dialect: versions.Dialect

    @property
    def table(self) -> str:
        """The metric/flag table version string (``"0.5.10"`` or ``"0.5.23"``)."""
        return str(self.dialect.table)

    @property
    def accept_rate_formula(self) -> str:
        """``len_over_ndt`` up to the 0.5.10 table (``observability/scheduler_metrics_mixin.py``: accepted
        tokens incl. bonus / (verify steps × num_draft_tokens)); ``drafts_over_ndt_minus_1`` for the 0.5.23
        table (``scheduler_components/metrics_reporter.py``: correct drafts / (steps × (ndt − 1)))."""
        return "len_over_ndt" if self.dialect.table <= versions.V0_5_10 else "drafts_over_ndt_minus_1"

    @property
    def has_ready(self) -> bool:
        return self.dialect.has_ready


def version_facts(text: str | None) -> VersionFacts:
    """Facts for ``text`` (``0.5.10``, ``v0.5.23`` or an image reference ``lmsysorg/sglang:v0.5.10-cu129``);
    ``None`` means :data:`DEFAULT_VERSION`. Raises :class:`SimArgError` for unsupported releases."""
    try:
        raw = text or DEFAULT_VERSION
        version = versions.parse_image_tag(raw) if ":" in raw else versions.parse_version(raw)
        return VersionFacts(version, versions.dialect(version))
    except versions.SGLangVersionError as exc:
        raise SimArgError(f"sglang-sim: {exc}", 2) from exc


def resolve(argv: list[str], facts: VersionFacts, env: Mapping[str, str]) -> Resolved:
    """Parse and resolve ``argv`` (without the entry point) like the emulated ``launch_server``.

    Delegates to ``sglang_operator.sglang.args.resolve_server_args``; raises :class:`SimArgError` with
    SGLang's message when it raises ``SGLangArgError``.
    """
    from sglang_operator.sglang import args as sgl_args

    try:
        result = sgl_args.resolve_server_args(argv, facts.version, dict(env))
    except sgl_args.SGLangArgError as exc:
        raise SimArgError(exc.log_line("sglang serve"), exc.exit_code) from exc
    return Resolved(dict(result.values), list(result.warnings), result.architecture, result.draft_architecture,
                    result.spec_v2)
