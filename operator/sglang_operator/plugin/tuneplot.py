"""``tune plot``: a tuning's objective over (speculative steps, draft tokens), one panel per eagle topk (columns) and
concurrency level (rows), the winner marked. matplotlib is an optional extra (``pip install
'sglang-operator[plot]'``; ``dev`` includes it), never a dependency of the operator or its image:
:func:`plot_tuning` raises :class:`PlotUnavailable` without it.

Each completed trial is a dot at (numSteps, numDraftTokens) coloured and labelled by its figure at that level
(:func:`~sglang_operator.plugin.tuneplan.level_score`: the level's objective, else decode tok/s for
``decodeTokensPerSecond`` and output tok/s otherwise); failed trials are red crosses; the best point at the level is
ringed and starred, the overall recommendation's point named in the title. The control trial (no speculative
decoding) has no place on the axes: its figure is in each panel's title; the panel holding a level's best point
gives that point's speedup over it as stored in the status (``bestPerLevel[].speedup``: output tok/s ÷ the control
trial's, two decimals, the figure ``tune status`` and ``kubectl get sgtune`` show).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglang_operator.api.tuning import SGLangTuning
from sglang_operator.api.tuning_spec import ObjectiveMetric
from sglang_operator.api.tuning_status import SGLangTuningStatus, TrialSettings, TrialVerdict
from sglang_operator.plugin.tuneplan import level_score, objective_title, status_levels


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("tune plot needs matplotlib, an optional extra: pip install 'sglang-operator[plot]' "
                              "(or pip install matplotlib)") from None
    return plt


def _point(s: TrialSettings) -> tuple[int, int] | None:
    if not s.speculative or s.num_steps is None:
        return None
    return s.num_steps, s.num_draft_tokens if s.num_draft_tokens is not None else s.num_steps + 1


def panel_title(level: int, topk: int, base: float | None, speedup: float | None) -> str:
    """A panel's title: its level and topk, the control trial's figure ``base`` (tok/s) and, in the panel holding
    the level's best point, that point's ``speedup`` as stored in the status (two decimals, as ``tune status``)."""
    title = f"concurrency {level}, topk {topk}"
    if base is not None:
        title += f"\nno speculation: {base:.0f} tok/s"
    if speedup is not None:
        title += f"\n★ {speedup:.2f}× no speculation (output tok/s)"
    return title


def plot_tuning(tuning: SGLangTuning, out: Path) -> Path:
    """Draw ``tuning``'s trials into ``out`` (PNG, or whatever its suffix names) and return it. Raises
    :class:`PlotUnavailable` without matplotlib, ``ValueError`` when no trial measured anything."""
    status = tuning.status or SGLangTuningStatus()
    levels = status_levels(status)
    if not levels:
        raise ValueError(f"SGLangTuning {tuning.metadata.get('name')} has no measured trial to plot yet")
    plt = _pyplot()
    metric = tuning.spec.objective.objective_metric_name
    topks = sorted({t.settings.eagle_topk or 1 for t in status.trials if _point(t.settings)}) or [1]
    best_at = {b.concurrency: b.trial for b in status.best_per_level}
    speedup_at = {b.concurrency: b.speedup for b in status.best_per_level}
    overall = status.best.trial if status.best else None
    if status.best is not None and not status.best_per_level:  # an older status: the overall best, its level's
        speedup_at[tuning.spec.objective.concurrency or 1] = status.best.speedup
    control = next((t for t in status.trials if t.name == status.control_trial), None)
    from matplotlib.ticker import MaxNLocator

    points = [p for t in status.trials if (p := _point(t.settings)) is not None]
    xlim = (min(p[0] for p in points) - 0.5, max(p[0] for p in points) + 0.5) if points else (0.5, 1.5)
    ylim = (min(p[1] for p in points) - 0.8, max(p[1] for p in points) + 0.8) if points else (1.5, 2.5)
    fig, axes = plt.subplots(len(levels), len(topks), figsize=(max(4.2 * len(topks) + 1.2, 8.0), 3.6 * len(levels)),
                             squeeze=False, layout="constrained")
    for row, level in enumerate(levels):
        values = [v for t in status.trials for f in t.levels if f.concurrency == level
                  and (v := level_score(metric, f)) is not None]
        vmin, vmax = (min(values), max(values)) if values else (0.0, 1.0)
        base = next((level_score(metric, f) for f in (control.levels if control else []) if f.concurrency == level),
                    None)
        mappable = None
        for col, topk in enumerate(topks):
            ax = axes[row][col]
            xs, ys, cs = [], [], []
            starred = False
            for t in status.trials:
                p = _point(t.settings)
                if p is None or (t.settings.eagle_topk or 1) != topk:
                    continue
                f = next((f for f in t.levels if f.concurrency == level), None)
                v = level_score(metric, f) if f is not None else None
                if t.verdict == TrialVerdict.FAILED.value:
                    ax.scatter([p[0]], [p[1]], marker="x", c="tab:red", s=60)
                    continue
                if v is None:
                    continue
                xs.append(p[0])
                ys.append(p[1])
                cs.append(v)
                ax.annotate(f"{v:.0f}", p, textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7)
                if t.name == best_at.get(level) or (t.name == overall and level not in best_at):
                    ax.scatter([p[0]], [p[1]], marker="*", s=260, facecolors="gold", edgecolors="black", zorder=3)
                    starred = True
            if xs:
                mappable = ax.scatter(xs, ys, c=cs, cmap="viridis", vmin=vmin, vmax=vmax, s=70, edgecolors="black",
                                      linewidths=0.4, zorder=2)
            ax.set_title(panel_title(level, topk, base, speedup_at.get(level) if starred else None), fontsize=9)
            ax.set_xlabel("speculative num steps")
            ax.set_ylabel("num draft tokens")
            ax.set_xlim(*xlim)
            ax.set_ylim(*ylim)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(True, alpha=0.3)
        if mappable is not None:
            unit = "decode" if metric is ObjectiveMetric.DECODE_TOKENS_PER_SECOND and level == 1 else "output"
            fig.colorbar(mappable, ax=list(axes[row]), label=f"c{level}: {unit} tok/s", shrink=0.9)
    name = tuning.metadata.get("name") or "tuning"
    head = f"SGLangTuning {name} on {tuning.spec.server_ref.name}: {objective_title(tuning)}"
    if status.best is not None:
        head += f"; recommended {status.best.summary or status.best.settings.summary()} ★"
    fig.suptitle(head, fontsize=11)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
