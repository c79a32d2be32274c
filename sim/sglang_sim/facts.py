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


_V0_5_11 = versions.SGLangVersion(0, 5, 11)
_V0_5_20 = versions.SGLangVersion(0, 5, 20)


@dataclass(frozen=True)
class VersionFacts:
    """The emulated release: its number, dialect (entry points, routes, argparse prog), metric table and the
    release-dependent details of its metrics and ``/server_info``."""

    version: versions.SGLangVersion
    dialect: versions.Dialect

    @property
    def table(self) -> str:
        """The known release whose flag and metric tables apply (``"0.5.10"``, ``"0.4.9.post6"``; the newest
        known release for a newer one)."""
        return str(self.dialect.release)

    @property
    def accept_rate_formula(self) -> str:
        """``len_over_ndt`` before 0.5.11 (``observability/scheduler_metrics_mixin.py`` 0.5.10: accepted tokens
        incl. bonus / (verify steps × num_draft_tokens); 0.5.3.post2–0.5.9 the same with steps + 1);
        ``drafts_over_ndt_minus_1`` from 0.5.11 (correct drafts / (steps × draft tokens per round); 0.5.23
        ``scheduler_components/metrics_reporter.py``)."""
        return "len_over_ndt" if self.dialect.release < _V0_5_11 else "drafts_over_ndt_minus_1"

    @property
    def has_ready(self) -> bool:
        return self.dialect.has_ready

    @property
    def routes(self) -> frozenset[str]:
        """The probe/read-back routes the release serves (``/server_info`` from 0.5.6, ``/ready`` from 0.5.20)."""
        return self.dialect.routes

    @property
    def server_info_extras(self) -> bool:
        """``/server_info`` reports ``launch_command``, ``startup_time``, ``frontend`` (0.5.2x, README §4)."""
        return self.dialect.release >= _V0_5_20

    def entry_error(self, entry: tuple[str, ...]) -> SimArgError | None:
        """How the container fails when its command does not exist in the release: ``sglang serve`` before 0.5.5
        (no ``sglang`` console script: the shell's "not found", exit status 127)."""
        if entry[:1] == ("sglang",) and not self.dialect.serve_cli:
            return SimArgError(f"/bin/sh: 1: sglang: not found (SGLang {self.version} has no 'sglang serve'; "
                               "use python3 -m sglang.launch_server)", 127)
        return None

    def legacy_warns(self, entry: tuple[str, ...]) -> bool:
        """Whether ``python -m sglang.launch_server`` prints SGLang's UserWarning recommending ``sglang serve``
        (``sglang/launch_server.py``, 0.5.10 on)."""
        return len(entry) == 3 and self.dialect.entry_point == ("sglang", "serve")


def version_facts(text: str | None) -> VersionFacts:
    """Facts for ``text`` (``0.5.10``, ``v0.5.23`` or an image reference ``lmsysorg/sglang:v0.5.10-cu129``);
    ``None`` means :data:`DEFAULT_VERSION`. Raises :class:`SimArgError` for unsupported releases."""
    try:
        raw = text or DEFAULT_VERSION
        version = versions.parse_image_tag(raw) if ":" in raw else versions.parse_version(raw)
        return VersionFacts(version, versions.dialect(version))
    except versions.SGLangVersionError as exc:
        raise SimArgError(f"sglang-sim: {exc}", 2) from exc


def resolve(argv: list[str], facts: VersionFacts, env: Mapping[str, str],
            entry: tuple[str, ...] = ("sglang", "serve")) -> Resolved:
    """Parse and resolve ``argv`` (without the entry point ``entry``) like the emulated ``launch_server``.

    Delegates to ``sglang_operator.sglang.args.resolve_server_args``; raises :class:`SimArgError` with
    SGLang's message (argparse's prog as the release names it for ``entry``) when it raises ``SGLangArgError``.
    """
    from sglang_operator.sglang import args as sgl_args

    try:
        result = sgl_args.resolve_server_args(argv, facts.version, dict(env))
    except sgl_args.SGLangArgError as exc:
        raise SimArgError(exc.log_line(facts.dialect.prog_for(entry)), exc.exit_code) from exc
    return Resolved(dict(result.values), list(result.warnings), result.architecture, result.draft_architecture,
                    result.spec_v2)
