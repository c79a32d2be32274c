"""How well the tuner's search finds the best speculative settings, and with how many trials (prints a markdown
table; not a test).

    python bench/tuning.py [--seeds 20|A-B|design|reporting] [--space default|trees] [--budget-fraction 0.25,0.125]
                           [--profiles qwen36-a6000,llama8b-h100,...] [--algorithms Grid,Default,TPE,Random] [--jobs N]
    python bench/tuning.py --seeds reporting       # the figures docs/tuning.md publishes (its table = the output)
    python bench/tuning.py --through-pods [--budget-fraction 0.25]   # one profile end to end (bench/tuning_pods.py;
                                                                     # its --profile picks another)

In process against the simulator's perf and noise model (``sglang_sim.measure.measure_point``: a fresh server per
trial, its memory plan and CUDA graphs, then a closed-loop load on the simulated scheduler; noise = the engine's
seeded per-step jitter plus one draw of the server's speed per trial). Per model/GPU profile and objective
(decode tok/s at concurrency 1, output tok/s at concurrency 16), over the ``--seeds``:

- ``Grid``: the control trial and every valid point of the space (SGLang's sweep script's method);
- the default search (``Default``: ``algorithmName: Default``, :data:`trials.DEFAULT`), ``TPE`` (Optuna's sampler
  through the operator's own ``algorithmName: TPE``, :mod:`sglang_operator.decisions.tuning.tpe`) and ``Random``,
  each with ``maxTrialCount`` = a quarter and an eighth of the grid's trials, at least 4 (``--budget-fraction``),
  driven through :func:`suggest` exactly as the controller drives them.

The space (``--space``) is built the way the operator builds it, from an SGLangTuning's ``spec.parameters``
(:func:`trials.search_space`, then :func:`enumerate_space`), so it cannot drift from the API:

- ``default``: an SGLangTuning with ``spec.parameters`` left at the API's defaults (numSteps 1-8, eagleTopk 1: the 8
  chains);
- ``trees``: the sweep script's values (:data:`TREE_PARAMETERS`: numSteps 1-8, eagleTopk 1/2/4/8, numDraftTokens
  2-64 in powers of two; chains get numSteps + 1), ``SearchSpace()``'s defaults, where the search has to climb.

Seeds (``--seeds``): ``N`` (seeds 0 to N-1), ``A-B`` (A to B inclusive) or a named range: ``design`` (0-99), the
seeds the search may be tuned on, and ``reporting`` (1000-1099), the seeds docs/tuning.md publishes, which no
change may be designed on. ``--jobs`` runs seeds in that many processes (the figures do not depend on it).

Each recommendation (:func:`sglang_operator.decisions.tuning.decide`) is scored by its noise-free objective ÷ the
noise-free optimum over every valid point of the space and the control trial (the perf model evaluated without
noise). A point's k-th measurement uses the same seed in every algorithm, so they differ only in what they choose
to measure. Printed per case, algorithm and budget: the ratio's mean, 5th percentile (linear interpolation, numpy's
default rule) and worst over the seeds, the share of seeds >= 0.98, and ``trial h``, the mean GPU time the trials
would take (model load + CUDA-graph capture + the load). Goal (a report, not a gate): the default search at a
quarter of the grid reaches a 5th percentile >= 0.98 and a worst >= 0.95 in every case; the last lines name the
cases that fall short.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sglang_sim import perf
from sglang_sim.measure import PointFigures, Workload, measure_point
from sglang_sim.profiles import GPUProfile, ModelProfile, load_gpu_profile, load_model_profile

from bench.common import commit_line
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.decisions import tuning
from sglang_operator.decisions.tuning import trials as plan

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED_MEMORY = {"mem_fraction_static": 0.88, "context_length": 131072, "max_running_requests": 16,
                    "mamba_full_memory_ratio": 0.5, "mamba_scheduler_strategy": "extra_buffer"}
WORKLOAD = Workload(prompt_tokens=256, max_new_tokens=256)
TREE_PARAMETERS: dict[str, Any] = {
    "numSteps": {"min": 1, "max": 8}, "eagleTopk": {"list": list(tuning.SearchSpace().eagle_topk)},
    "numDraftTokens": {"list": list(tuning.SearchSpace().num_draft_tokens)}}
"""``spec.parameters`` of ``--space trees``: the sweep script's values, ``SearchSpace()``'s defaults (as
``bench/tuning_pods.py``'s ``TREE_PARAMETERS``)."""
SPACES: dict[str, dict[str, Any]] = {"default": {}, "trees": TREE_PARAMETERS}
"""``--space``: the ``spec.parameters`` of the tuning whose space is searched (``{}``: the API's defaults)."""
SEED_RANGES = {"design": range(0, 100), "reporting": range(1000, 1100)}
"""Named ``--seeds``: the search is tuned on ``design``; ``reporting`` is what docs/tuning.md publishes, and no change
is designed on it."""
MIN_BUDGET = 4
"""Trials (control included) a search gets at least."""
GOAL_P5, GOAL_WORST, GOAL_FRACTION = 0.98, 0.95, 0.25
"""The goal of the default search at a quarter of the grid: 5th percentile and worst ratio over the seeds."""
ALGORITHM_NAMES = {"Grid": tuning.Algorithm.GRID, "Default": plan.DEFAULT, "TPE": tuning.Algorithm.TPE,
                   "Random": tuning.Algorithm.RANDOM}
"""``--algorithms`` names (the API's ``algorithmName``; ``CoordinateAscent`` is accepted for ``Default``)."""
FRACTION_NAMES = {0.5: "½", 0.25: "¼", 0.125: "⅛"}


@dataclass(frozen=True)
class Profile:
    """A model on a GPU type: the simulator's profiles, tensor parallelism and memory flags."""

    name: str
    model_path: str
    gpu: str
    tp: int
    memory: dict[str, Any] = field(default_factory=dict)

    def model(self) -> ModelProfile:
        return load_model_profile(self.model_path)

    def gpu_profile(self) -> GPUProfile:
        return load_gpu_profile(self.gpu)


PROFILES = {
    "qwen36-a6000": Profile("qwen36-a6000", "Qwen/Qwen3.6-27B", "NVIDIA RTX A6000", 2, PUBLISHED_MEMORY),
    "llama8b-h100": Profile("llama8b-h100", "meta-llama/Llama-3.1-8B-Instruct", "NVIDIA H100 80GB HBM3", 1),
    "llama70b-h100x8": Profile("llama70b-h100x8", "meta-llama/Llama-3.3-70B-Instruct", "NVIDIA H100 80GB HBM3", 8),
}
OBJECTIVES = {
    "decode@1": tuning.Objective(kind=tuning.ObjectiveKind.DECODE_TOKENS_PER_SECOND, concurrency=1),
    "output@16": tuning.Objective(kind=tuning.ObjectiveKind.OUTPUT_TOKENS_PER_SECOND, concurrency=16),
}


def parse_seeds(text: str) -> range:
    """``--seeds``: ``N`` (0 to N-1), ``A-B`` (inclusive) or a name of :data:`SEED_RANGES`."""
    if text in SEED_RANGES:
        return SEED_RANGES[text]
    try:
        if "-" in text:
            a, b = (int(x) for x in text.split("-", 1))
            seeds = range(a, b + 1)
        else:
            seeds = range(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: N, A-B or one of {', '.join(SEED_RANGES)}") from None
    if not seeds or seeds.start < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: no seeds")
    return seeds


def seeds_text(seeds: range) -> str:
    name = next((f": the {k} range" for k, v in SEED_RANGES.items() if v == seeds), "")
    return f"seeds {seeds.start}-{seeds.stop - 1} ({len(seeds)}{name})"


def space_of(name: str) -> tuple[tuning.SearchSpace, list[tuning.Point], list[tuning.InvalidPoint]]:
    """The space of an SGLangTuning whose ``spec.parameters`` are :data:`SPACES` ``[name]``, as the operator builds
    it (:func:`trials.search_space`), with its valid and invalid points (the shape rules; the simulator's servers
    refuse nothing else, and a point that does not fit fails its trial)."""
    spec = SGLangTuningSpec.model_validate({"serverRef": {"name": "bench"}, "parameters": SPACES[name]})
    space = plan.search_space(spec.parameters)
    valid, invalid = tuning.enumerate_space(space)
    return space, valid, invalid


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile by linear interpolation between the sorted values (numpy's default rule)."""
    v = sorted(values)
    pos = (len(v) - 1) * q / 100
    i = int(pos)
    return v[i] if i + 1 >= len(v) else v[i] + (v[i + 1] - v[i]) * (pos - i)


def _shape(p: tuning.Point | None) -> perf.SpecShape | None:
    return None if p is None else perf.SpecShape(p.num_steps, p.eagle_topk, p.num_draft_tokens)


def to_trial(point: tuning.Point | None, fig: PointFigures) -> tuning.TrialResult:
    """A simulator measurement as the tuner's trial result."""
    if fig.failure is not None:
        return tuning.TrialResult(point=point, verdict=tuning.TrialVerdict.FAILED, reason=fig.failure.splitlines()[0])
    level = tuning.TrialLevelFigures(concurrency=fig.concurrency, decode_tokens_per_second=fig.decode_tok_s,
                         output_tokens_per_second=fig.output_tok_s, itl_p50_seconds=fig.itl_p50_s,
                         itl_p95_seconds=fig.itl_p95_s, ttft_p50_seconds=fig.ttft_p50_s,
                         ttft_p95_seconds=fig.ttft_p95_s, accept_length=fig.accept_length)
    return tuning.TrialResult(point=point, figures=(level,))


class Trials:
    """Noisy measurements of one profile, objective and seed, shared by the algorithms (k-th measurement of a
    point = the same seed everywhere), and the trial seconds they cost."""

    def __init__(self, profile: Profile, concurrency: int, seed: int) -> None:
        self.profile, self.concurrency, self.seed = profile, concurrency, seed
        self.model, self.gpu = profile.model(), profile.gpu_profile()
        self.cache: dict[tuple[tuning.Point | None, int], tuple[tuning.TrialResult, float]] = {}

    def measure(self, point: tuning.Point | None, k: int) -> tuple[tuning.TrialResult, float]:
        key = (point, k)
        if key not in self.cache:
            label = "control" if point is None else point.label
            seed = zlib.crc32(f"{self.seed}/{label}/{k}".encode())
            fig = measure_point(self.model, self.gpu, self.profile.tp, _shape(point), self.concurrency, seed=seed,
                                workload=WORKLOAD, memory=self.profile.memory)
            self.cache[key] = (to_trial(point, fig), fig.startup_seconds + fig.measure_seconds)
        return self.cache[key]


def run_search(trials: Trials, settings: tuning.SearchSettings,
               valid: list[tuning.Point]) -> tuple[list[tuning.TrialResult], float]:
    """Drive :func:`tuning.suggest` until done; every call rebuilds the search from the trial list (as a restarted
    operator would)."""
    done: list[tuning.TrialResult] = []
    seconds = 0.0
    counts: dict[tuning.Point | None, int] = {}
    while True:
        s = tuning.suggest(settings, valid, done)
        if s.done:
            return done, seconds
        k = counts.get(s.point, 0)
        counts[s.point] = k + 1
        result, took = trials.measure(s.point, k)
        done.append(result)
        seconds += took


Run = tuple[str, int]
"""An algorithm name (of :data:`ALGORITHM_NAMES`) and its maxTrialCount."""
Outcome = tuple[int, tuning.Point | None, bool, float]
"""One search on one seed: trials started, the recommendation (``None``: the control trial), whether there is one,
the trials' GPU seconds."""


def search_seed(profile_name: str, obj_name: str, seed: int, runs: list[Run], grid_trials: int,
                valid: list[tuning.Point]) -> list[Outcome]:
    """Every run on one seed, sharing its measurements (a worker's job with ``--jobs``)."""
    objective = OBJECTIVES[obj_name]
    trials = Trials(PROFILES[profile_name], objective.concurrency, seed)
    out: list[Outcome] = []
    for algo, budget in runs:
        settings = tuning.SearchSettings(objective=objective, max_trial_count=budget,
                                         algorithm=ALGORITHM_NAMES[algo], seed=seed,
                                         max_failed_trial_count=grid_trials)
        done, seconds = run_search(trials, settings, valid)
        d = tuning.decide(done, objective)
        out.append((len(done), None if d is None else d.best, d is not None, seconds))
    return out


def _search_seed(args: tuple[str, str, int, list[Run], int, list[tuning.Point]]) -> list[Outcome]:
    return search_seed(*args)


@dataclass
class Case:
    """One profile and objective over the seeds: the noise-free truth and, per run, (trials, ratio, GPU seconds)."""

    profile: Profile
    obj_name: str
    valid: list[tuning.Point]
    invalid: int
    runs: list[Run]
    noise_free: dict[tuning.Point | None, float] = field(default_factory=dict)
    rows: dict[Run, list[tuple[int, float, float]]] = field(default_factory=dict)

    @property
    def grid(self) -> int:
        return len(self.valid) + 1

    def truth(self, p: tuning.Point | None) -> float:
        if p not in self.noise_free:
            objective = OBJECTIVES[self.obj_name]
            fig = measure_point(self.profile.model(), self.profile.gpu_profile(), self.profile.tp, _shape(p),
                                objective.concurrency, noise=False, workload=WORKLOAD, memory=self.profile.memory)
            v = tuning.objective_value(objective, to_trial(p, fig))
            self.noise_free[p] = 0.0 if v is None else v
        return self.noise_free[p]

    def optimum(self) -> tuple[tuning.Point | None, float]:
        best = max([None, *self.valid], key=self.truth)
        return best, self.truth(best)

    def add(self, outcomes: list[Outcome]) -> None:
        _, optimum = self.optimum()
        for run, (n, best, decided, seconds) in zip(self.runs, outcomes, strict=True):
            ratio = self.truth(best) / optimum if decided else 0.0
            self.rows.setdefault(run, []).append((n, ratio, seconds))


def bench_case(profile: Profile, obj_name: str, seeds: range, runs: list[Run], valid: list[tuning.Point],
               invalid: int, pool: Any) -> Case:
    case = Case(profile, obj_name, valid, invalid, runs)
    case.optimum()  # the noise-free figures of every point, before the seeds
    jobs = [(profile.name, obj_name, seed, runs, case.grid, valid) for seed in seeds]
    outcomes: Iterator[list[Outcome]] = pool.imap(_search_seed, jobs) if pool is not None else map(_search_seed,
                                                                                                      jobs)
    for o in outcomes:
        case.add(o)
    return case


def budgets(grid: int, fractions: list[float]) -> dict[int, str]:
    """maxTrialCount of each fraction (``max(⌊fraction × grid⌋, 4)``) and its label, fractions with the same count in
    one: ``{24: "¼ (24)"}``, ``{4: "¼, ⅛ (4)"}``."""
    names: dict[int, list[str]] = {}
    for f in fractions:
        names.setdefault(max(int(grid * f), MIN_BUDGET), []).append(FRACTION_NAMES.get(f, f"{f:g}"))
    return {b: f"{', '.join(n)} ({b})" for b, n in names.items()}


def table_rows(case: Case, labels: dict[int, str]) -> Iterator[str]:
    """The markdown rows of one case (the docs' table rows)."""
    point, optimum = case.optimum()
    control = case.truth(None)
    speedup = optimum / control if control else 0.0
    label = "no-spec" if point is None else point.label
    lead = f"| {case.profile.name} | {case.obj_name} | {label} ({optimum:.1f} tok/s, {speedup:.2f}x) |"
    for algo, budget in case.runs:
        runs = case.rows[(algo, budget)]
        ratios = [x[1] for x in runs]
        share = f"grid ({budget})" if algo == "Grid" else labels[budget]
        yield (f"{lead} {algo} | {share} | {statistics.mean(x[0] for x in runs):.1f} | "
               f"{statistics.mean(ratios):.3f} | {percentile(ratios, 5):.3f} | {min(ratios):.3f} | "
               f"{sum(x >= 0.98 for x in ratios) / len(ratios):.0%} | "
               f"{statistics.mean(x[2] for x in runs) / 3600:.2f} |")
        lead = "| | | |"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python bench/tuning.py", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("20"),
                        help="N (seeds 0 to N-1), A-B (inclusive), design (0-99: the search is tuned on these) or "
                        "reporting (1000-1099: what docs/tuning.md publishes; designing on them is not allowed); "
                        "default 20")
    parser.add_argument("--space", choices=sorted(SPACES), default="default",
                        help="default: an SGLangTuning's space with spec.parameters at the API's defaults (8 chains); "
                        "trees: the sweep script's space (numSteps 1-8, eagleTopk 1/2/4/8, numDraftTokens 2-64)")
    parser.add_argument("--budget-fraction", default="0.25,0.125",
                        help="maxTrialCount of the searches as fractions of the grid's trials (at least 4), "
                        "comma-separated (default 0.25,0.125: a quarter and an eighth)")
    parser.add_argument("--profiles", default=",".join(PROFILES), help=f"comma-separated, of {', '.join(PROFILES)}")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES), help=f"of {', '.join(OBJECTIVES)}")
    parser.add_argument("--algorithms", default="Grid,Default,TPE,Random",
                        help="of Grid, Default (CoordinateAscent), TPE, Random")
    parser.add_argument("--jobs", type=int, default=1, help="processes running seeds (default 1)")
    parser.add_argument("--through-pods", action="store_true",
                        help="instead: the published case end to end through pods on the local control plane, with "
                        "its wall time (bench/tuning_pods.py, whose --profile llama8b-h100 tunes trees; uses the "
                        "first --budget-fraction only)")
    args = parser.parse_args()
    fractions = [float(f) for f in args.budget_fraction.split(",")]
    if args.through_pods:
        from bench.tuning_pods import run as run_through_pods

        run_through_pods(fractions[0])
        return
    algorithms = ["Default" if a == "CoordinateAscent" else a for a in args.algorithms.split(",")]
    if unknown := [a for a in algorithms if a not in ALGORITHM_NAMES]:
        parser.error(f"--algorithms: unknown {', '.join(unknown)}")
    space, valid, invalid = space_of(args.space)
    grid = len(valid) + 1
    labels = budgets(grid, fractions)
    runs: list[Run] = [("Grid", grid)] if "Grid" in algorithms else []
    runs += [(a, b) for b in labels for a in algorithms if a != "Grid"]
    seeds: range = args.seeds
    dims = f"numSteps {','.join(map(str, space.num_steps))}, eagleTopk {','.join(map(str, space.eagle_topk))}" + (
        f", numDraftTokens {','.join(map(str, space.num_draft_tokens))} for trees" if space.num_draft_tokens else "")
    print(f"bench/tuning.py at {commit_line()}\n"
          f"space {args.space} ({dims}: {len(valid)} valid points, {len(invalid)} invalid never run); "
          f"{seeds_text(seeds)}; the searches' maxTrialCount: " + ", ".join(labels.values())
          + " of the grid's trials (at least 4, the control trial included); ratio = noise-free objective of the "
          "recommendation / noise-free optimum; 5th percentile by linear interpolation\n")
    print("| profile | objective | optimum (noise-free, × no speculation) | algorithm | maxTrialCount | "
          "trials run (mean) | ratio mean | ratio 5th percentile | ratio worst | seeds ≥ 0.98 | trial h |\n"
          "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)
    t0 = time.monotonic()
    cases: list[Case] = []
    pool = multiprocessing.Pool(args.jobs) if args.jobs > 1 else None
    try:
        for pname in args.profiles.split(","):
            for oname in args.objectives.split(","):
                case = bench_case(PROFILES[pname], oname, seeds, runs, valid, len(invalid), pool)
                cases.append(case)
                for row in table_rows(case, labels):
                    print(row, flush=True)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    print()
    for case in cases:
        failed = sum(1 for p in valid if case.truth(p) == 0.0)
        print(f"{case.profile.name} {case.obj_name}: grid {case.grid} trials (control + valid points), "
              f"{failed} fail at start-up or under load")
    goal_budget = max(int(grid * GOAL_FRACTION), MIN_BUDGET)
    if "Default" in algorithms and GOAL_FRACTION in fractions:
        short = []
        for case in cases:
            ratios = [x[1] for x in case.rows[("Default", goal_budget)]]
            p5, worst = percentile(ratios, 5), min(ratios)
            if p5 < GOAL_P5 or worst < GOAL_WORST:
                short.append(f"{case.profile.name} {case.obj_name} (5th percentile {p5:.3f}, worst {worst:.3f})")
        print(f"goal: the default search at ¼ of the grid ({goal_budget} trials), 5th percentile >= {GOAL_P5} and "
              f"worst >= {GOAL_WORST}: met in {len(cases) - len(short)} of {len(cases)} cases"
              + (f"; short: {'; '.join(short)}" if short else ""))
    print(f"{time.monotonic() - t0:.0f} s, --jobs {args.jobs}")


if __name__ == "__main__":
    main()
