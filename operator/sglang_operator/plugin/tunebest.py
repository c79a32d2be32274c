"""``tune best [MODEL]``: the known best speculative settings of a namespace as a table (pure: rows from the
SGLangTunings' bodies; :mod:`sglang_operator.plugin.tune` reads them from the cluster and prints).

One row per setup (model, GPU product, parallelism, SGLang release), workload (``maxOutputTokens``, prompts by
hash, pods per trial) and concurrency level: the best measured settings, their figure (decode tok/s at concurrency
1, output tok/s above), how often it was measured, its ratio to no speculative decoding when that was measured,
the runner-up, the noise of the level and the tuning that measured the best
(:mod:`sglang_operator.decisions.tuning.known_best`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sglang_operator.decisions.tuning import known_best as best_table

HEADER = ["MODEL", "GPU", "PARALLELISM", "SGLANG", "WORKLOAD", "CONCURRENCY", "BEST", "FIGURE", "×NO SPEC",
          "MEASURED", "NEXT", "NOISE", "TUNING"]


def known_best(bodies: Iterable[Mapping[str, Any]], model: str | None = None) -> best_table.KnownBest:
    """The known best of the SGLangTunings ``bodies`` (API JSON), only the tables whose model path contains
    ``model`` (case-insensitive) when given."""
    got = best_table.build(r for b in bodies if (r := best_table.record_of(b)) is not None)
    if not model:
        return got
    return best_table.KnownBest(tables=tuple(t for t in got.tables if model.lower() in t.setup.model_path.lower()))


def _figure(f: best_table.MeanLevelFigures) -> str:
    return f"{f.value:.1f} {f.figure}"


def rows(known: best_table.KnownBest) -> list[list[str]]:
    """The table's rows (:data:`HEADER`), one per table and level."""
    out = []
    for t in known.tables:
        s, w = t.setup, t.workload
        par = f"TP{s.tensor}" + (f" PP{s.pipeline}" if s.pipeline > 1 else "") + (
            f" DP{s.data}" if s.data > 1 else "") + (f" nodes {s.nodes}" if s.nodes > 1 else "")
        workload = f"{w.max_output_tokens} tokens, prompts {w.prompts_hash[:8]}" + (
            f", {w.replicas} pods" if w.replicas > 1 else "")
        control = next((p for p in t.points if not p.settings.speculative), None)
        for c in t.levels():
            best = t.best(c)
            if best is None:
                continue
            b = best.level(c)
            assert b is not None
            ref = control.level(c) if control is not None else None
            ranked = sorted((p for p in t.points if p.level(c) is not None and p is not best),
                            key=lambda p: -p.level(c).value)  # type: ignore[union-attr]
            nxt = ranked[0] if ranked else None
            nf = nxt.level(c) if nxt is not None else None
            out.append([
                s.model_path + (f"@{s.model_revision}" if s.model_revision else ""), s.gpu_product or "unknown",
                par, s.sglang_version, workload, str(c), best.settings.summary(), _figure(b),
                f"{b.value / ref.value:.2f}x" if ref is not None and ref.value > 0 else "-",
                str(b.measurements),
                f"{nxt.settings.summary()} {nf.value:.1f}" if nxt is not None and nf is not None else "-",
                f"{t.sigma(c):.1%}", b.tunings[-1]])
    return out
