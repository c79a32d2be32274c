"""The noise-free truth of a tuning trial: what the simulator's perf model says a trial's settings achieve, shared by
the tuning e2e tests (``e2e/tests/test_tuning.py``) and the end-to-end bench (``bench/tuning_pods.py``).

The figure is computed from the command line the operator renders for the trial (``plan.trial_spec`` of the
server's spec, then ``builders.render``), resolved by the simulator's own argument parser as it would be in a pod
(``sglang_sim.facts.resolve`` with the release's facts), and evaluated by ``sglang_sim.measure.measure_point`` with
``noise=False``: the same memory plan (out of memory → no figure), CUDA graphs and closed-loop load as a simulated
pod, without the per-step jitter and the per-trial speed draw.

The load is the trials' own: prompts of the built-in set's mean length as the simulator counts them
(:func:`default_prompt_tokens`, about 100 tokens) and 12 requests per concurrent stream (a steady window, as a trial
measures after its warm-up, not the first few requests' ramp). Until 2026-12-04 the truth assumed 256-token prompts:
identical at concurrency 1 (decode tok/s leaves prefill out), but 20-40 % below what the trials' pods really give at
16 concurrent requests, where prefill shares the batch (``bench/tuning_pods.py`` and the e2e tests compare with it).
"""

from __future__ import annotations

from typing import Any

from sglang_operator import builders
from sglang_operator.api.server import parse
from sglang_operator.api.tuning_status import TrialSettings
from sglang_operator.decisions.tuning import trials as plan

GPU = "NVIDIA RTX A6000"
"""The published case's GPU (the sample's node selector; the simulator's default profile)."""
REQUESTS_PER_STREAM = 12
"""Requests per concurrent stream of the perf model's load (``num_requests`` = this × concurrency)."""


def noise_free(server: dict[str, Any], settings: TrialSettings, concurrency: int, *,
               max_output_tokens: int = 32, gpu: str = GPU) -> float | None:
    """The objective of a trial's settings at ``concurrency`` by the simulator's perf model without noise: decode
    tok/s (per request, after the first token) at concurrency 1, output tok/s of all requests above; ``None`` when
    SGLang would fail (the simulator's out-of-memory at start-up or under load).

    ``server`` is the SGLangServer object as applied (camelCase dict with ``spec``; ``metadata.name`` optional),
    ``settings`` the trial's point (``plan.settings_of``; the control trial has ``speculative=False``),
    ``max_output_tokens`` the workload's ``maxOutputTokens`` (tokens per request), ``gpu`` the simulator's GPU
    profile name. Raises ``SpecError`` when the trial's spec does not parse (an invalid point)."""
    fig = _figures(server, settings, concurrency, max_output_tokens, gpu)
    return None if fig is None else float(fig.decode_tok_s if concurrency == 1 else fig.output_tok_s)


def default_prompt_tokens() -> int:
    """Mean prompt tokens of the trials' built-in prompts (``io/trialbench.DEFAULT_PROMPTS``, sent in turn) as the
    simulator counts a chat request: (characters + 3) ÷ 4 per message, + 4 per message, + 3
    (``sglang_sim.openai_api``). About 100: the rollback probe's coding prompt (555) and seven short ones."""
    from sglang_operator.io.trialbench import DEFAULT_PROMPTS

    counts = [max(1, (len(p) + 3) // 4) + 4 + 3 for p in DEFAULT_PROMPTS]
    return round(sum(counts) / len(counts))


def noise_free_per_request(server: dict[str, Any], settings: TrialSettings, concurrency: int, *,
                           max_output_tokens: int = 32, gpu: str = GPU) -> float | None:
    """Output tok/s each of ``concurrency`` requests receives by the simulator's perf model without noise (output
    tok/s of all requests ÷ ``concurrency``: the figure ``spec.autoscaling.slo.minTokensPerSecondPerRequest`` is
    compared with, ``decisions/capacity.py``); None when SGLang would fail. Arguments as :func:`noise_free`."""
    fig = _figures(server, settings, concurrency, max_output_tokens, gpu)
    return float(fig.output_tok_s) / concurrency if fig is not None else None


def _figures(server: dict[str, Any], settings: TrialSettings, concurrency: int, max_output_tokens: int,
             gpu: str) -> Any:
    """``sglang_sim.measure.PointFigures`` of the trial's rendered command line without noise under the trials' load
    (module docstring); None when SGLang would fail."""
    from sglang_sim.facts import resolve, version_facts
    from sglang_sim.launch import spec_shape
    from sglang_sim.measure import Workload, measure_point
    from sglang_sim.profiles import load_gpu_profile, load_model_profile

    name = (server.get("metadata") or {}).get("name") or "server"
    spec = plan.trial_spec(server["spec"], settings)
    rendered = builders.render(parse({**server, "metadata": {"name": name, "namespace": "default"}, "spec": spec}))
    args = resolve(rendered.command.args, version_facts(str(rendered.command.version)), {}).server_args
    fig = measure_point(load_model_profile(str(args["model_path"])), load_gpu_profile(gpu), int(args["tp_size"]),
                        spec_shape(args), concurrency, noise=False, memory=args,
                        workload=Workload(prompt_tokens=default_prompt_tokens(), max_new_tokens=max_output_tokens,
                                          num_requests=REQUESTS_PER_STREAM * concurrency))
    return None if fig.failure is not None else fig
