"""How well the tuner's search finds the best speculative settings, and with how many trials (prints a table; not
a test).

    python bench/tuning.py [--seeds 20] [--budget-fraction 0.25,0.125] [--profiles qwen36-a6000,llama8b-h100,...]
    python bench/tuning.py --through-pods [--budget-fraction 0.25]   # one profile end to end (bench/tuning_pods.py;
                                                                     # its --profile picks another)

In process against the simulator's perf and noise model (``sglang_sim.measure.measure_point``: a fresh server per
trial, its memory plan and CUDA graphs, then a closed-loop load on the simulated scheduler; noise = the engine's
seeded per-step jitter plus one draw of the server's speed per trial). Per model/GPU profile and objective
(decode tok/s at concurrency 1, output tok/s at concurrency 16), over ``--seeds`` seeds:

- ``Grid``: the control trial and every valid point of the default space (SGLang's sweep script's method);
- the default search (``CoordinateAscent``), ``TPE`` (Optuna's sampler through the operator's own
  ``algorithmName: TPE``, :mod:`sglang_operator.decisions.tuning.tpe`; left out when ``optuna`` is not importable:
  ``pip install -e '.[tpe]'``) and ``Random``, each with ``maxTrialCount`` = a quarter and an eighth of the grid's
  trials (``--budget-fraction``), driven through :func:`suggest` exactly as the controller drives them.

Each recommendation (:func:`sglang_operator.decisions.tuning.decide`: the cheapest point within the measured noise
of the highest mean) is scored by its noise-free objective ÷ the noise-free optimum over every valid point (the
perf model evaluated without noise). A point's k-th measurement uses the same seed in every algorithm, so they
differ only in what they choose to measure. Goal: ≥ 0.98 of the optimum with ≤ a quarter of the grid's trials on
every profile. ``trial_s`` is the GPU time a trial would take (model load + CUDA-graph capture + the load).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sglang_sim import perf
from sglang_sim.measure import PointFigures, Workload, measure_point
from sglang_sim.profiles import GPUProfile, ModelProfile, load_gpu_profile, load_model_profile

from bench.common import commit_line
from sglang_operator.decisions import tuning

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED_MEMORY = {"mem_fraction_static": 0.88, "context_length": 131072, "max_running_requests": 16,
                    "mamba_full_memory_ratio": 0.5, "mamba_scheduler_strategy": "extra_buffer"}
WORKLOAD = Workload(prompt_tokens=256, max_new_tokens=256)


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


def score(objective: tuning.Objective, optimum: float, truth: Callable[[tuning.Point | None], float],
          done: list[tuning.TrialResult]) -> float:
    d = tuning.decide(done, objective)
    return truth(d.best) / optimum if d is not None else 0.0


def bench_one(profile: Profile, obj_name: str, seeds: int, fractions: list[float],
              algorithms: list[str]) -> dict[str, Any]:
    objective = OBJECTIVES[obj_name]
    valid, invalid = tuning.enumerate_space(tuning.SearchSpace())
    grid_trials = len(valid) + 1
    model, gpu = profile.model(), profile.gpu_profile()
    noise_free: dict[tuning.Point | None, float] = {}

    def truth(p: tuning.Point | None) -> float:
        if p not in noise_free:
            fig = measure_point(model, gpu, profile.tp, _shape(p), objective.concurrency, noise=False,
                                workload=WORKLOAD, memory=profile.memory)
            v = tuning.objective_value(objective, to_trial(p, fig))
            noise_free[p] = 0.0 if v is None else v
        return noise_free[p]

    optimum_point = max([None, *valid], key=truth)
    optimum = truth(optimum_point)
    runs = [("Grid", grid_trials)] if "Grid" in algorithms else []
    runs += [(a, max(int(grid_trials * f), 4)) for f in fractions for a in algorithms if a != "Grid"]
    rows: dict[tuple[str, int], list[tuple[int, float, float]]] = {r: [] for r in runs}
    for seed in range(seeds):
        trials = Trials(profile, objective.concurrency, seed)
        for algo, budget in runs:
            settings = tuning.SearchSettings(objective=objective, max_trial_count=budget,
                                             algorithm=tuning.Algorithm(algo), seed=seed,
                                             max_failed_trial_count=grid_trials)
            done, seconds = run_search(trials, settings, valid)
            rows[(algo, budget)].append((len(done), score(objective, optimum, truth, done), seconds))
    failed = sum(1 for p in valid if truth(p) == 0.0)
    return {"profile": profile.name, "objective": obj_name, "grid": grid_trials, "invalid": len(invalid),
            "failed": failed, "optimum": "no-spec" if optimum_point is None else optimum_point.label,
            "optimum_value": optimum, "speedup": optimum / truth(None) if truth(None) else 0.0, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python bench/tuning.py", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per profile and objective (default 20)")
    parser.add_argument("--budget-fraction", default="0.25,0.125",
                        help="maxTrialCount of the searches as fractions of the grid's trials, comma-separated "
                        "(default 0.25,0.125: a quarter and an eighth)")
    parser.add_argument("--profiles", default=",".join(PROFILES), help=f"comma-separated, of {', '.join(PROFILES)}")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES), help=f"of {', '.join(OBJECTIVES)}")
    parser.add_argument("--algorithms", default="Grid,CoordinateAscent,TPE,Random",
                        help="of Grid, CoordinateAscent, TPE, Random (TPE is left out when optuna is not importable)")
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
    algorithms = args.algorithms.split(",")
    try:
        import optuna  # noqa: F401
    except ImportError:
        algorithms = [a for a in algorithms if a != "TPE"]
    commit = commit_line()
    print(f"bench/tuning.py at {commit}\n{args.seeds} seeds; searches get "
          + " and ".join(f"{f:.1%}" for f in fractions) + " of the grid's trials (maxTrialCount, the control trial "
          "included); ratio = noise-free objective of the recommendation / noise-free optimum"
          + ("" if "TPE" in algorithms else "; TPE skipped (optuna not importable)"))
    print(f"{'profile':<16}{'objective':<11}{'optimum':>10}{'value':>9}{'speedup':>8}  {'algorithm':<17}"
          f"{'budget':>7}{'trials':>7}{'ratio mean':>11}{'min':>7}{'>=0.98':>8}{'trial h':>9}")
    t0 = time.monotonic()
    worst: dict[tuple[str, int], float] = {}
    for pname in args.profiles.split(","):
        for oname in args.objectives.split(","):
            r = bench_one(PROFILES[pname], oname, args.seeds, fractions, algorithms)
            first = True
            for (algo, budget), runs in r["rows"].items():
                ratios = [x[1] for x in runs]
                share = "grid" if algo == "Grid" else f"{budget / r['grid']:.0%}"
                key = (algo, round(budget / r["grid"] * 8))
                worst[key] = min(worst.get(key, 1.0), min(ratios))
                lead = (f"{r['profile']:<16}{r['objective']:<11}{r['optimum']:>10}{r['optimum_value']:>9.1f}"
                        f"{r['speedup']:>7.2f}x" if first else " " * 53)
                hours = statistics.mean(x[2] for x in runs) / 3600
                print(f"{lead}  {algo:<17}{share:>7}{statistics.mean(x[0] for x in runs):>7.1f}"
                      f"{statistics.mean(ratios):>11.3f}{min(ratios):>7.3f}"
                      f"{sum(x >= 0.98 for x in ratios) / len(ratios):>8.0%}{hours:>9.2f}", flush=True)
                first = False
            print(f"{'':<16}grid {r['grid']} trials (control + valid points), {r['invalid']} invalid never run, "
                  f"{r['failed']} fail at start-up or under load")
    print("worst ratio over every seed and profile: " + ", ".join(
        f"{a} {'grid' if a == 'Grid' else f'{k}/8'} {v:.3f}" for (a, k), v in worst.items())
        + f"; {time.monotonic() - t0:.0f} s")
    print("goal: the default search >= 0.98 on every seed and profile with <= 25 % of the grid's trials")


if __name__ == "__main__":
    main()
