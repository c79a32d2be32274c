"""One SGLang release, resolved once: what every consumer of SGLang facts needs about the release an image runs
(its image's tag, :mod:`.versions`). A render resolves the image's release into one :class:`Release` and hands it
down to the command builder, the validation and the argument resolution, instead of each looking the release up again.

- ``version``: the release the image runs (``0.5.10``, a post-release, or a release newer than the newest known);
- ``dialect``: entry point, routes, spec-v2 meaning, renamed flags (:func:`sglang_operator.sglang.versions.dialect`);
- ``flags``: the flag table standing for it (:func:`sglang_operator.sglang.flags.load_table`);
- ``rules``: which variant of each hand-ported rule it runs (:func:`sglang_operator.sglang.rule_eras.rules_for`);
- ``metrics``: its metric families by name (:func:`sglang_operator.sglang.metrics.load_metrics`).

Raises ``SGLangVersionError`` for a release that is not supported.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from sglang_operator.sglang import metrics as _metrics
from sglang_operator.sglang import versions as _versions
from sglang_operator.sglang._version import SGLangVersion
from sglang_operator.sglang.flags import FlagTable, load_table
from sglang_operator.sglang.metrics import MetricFamily
from sglang_operator.sglang.rule_eras import RuleSet, rules_for


@dataclass(frozen=True, eq=False)
class Release:
    """The facts of one SGLang release (see the module docstring); immutable, one per version per process."""

    version: SGLangVersion
    dialect: _versions.Dialect
    flags: FlagTable
    rules: RuleSet
    metrics: dict[str, MetricFamily]


@cache
def release(version: SGLangVersion) -> Release:
    """The :class:`Release` of ``version`` (resolved once per process; raises ``SGLangVersionError``)."""
    d = _versions.dialect(version)
    return Release(version, d, load_table(version), rules_for(d.release or version), _metrics.load_metrics(version))
