"""The accept length and accept rate the simulator computes for a server's speculative settings: what the e2e tests
compare the operator's ledger (``status.revisions[]``), ``status.baseline`` and ``kubectl sglang history -o json``
with. From the simulator's own model (``sim/sglang_sim/perf.py``: the model profile's acceptance α, the chain or
tree expectation, and the release's accept-rate formula: ``len_over_ndt`` before 0.5.11, ``drafts_over_ndt_minus_1``
from 0.5.11), so a recalibration of the simulator moves the expectation with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglang_sim import perf
from sglang_sim.facts import version_facts
from sglang_sim.profiles import load_model_profile


def expected(spec: Mapping[str, Any], version: str) -> tuple[float, float]:
    """``(accept length, accept rate)`` the simulator reports for the SGLangServer ``spec`` (camelCase; its
    ``speculative`` block: numSteps, eagleTopk, numDraftTokens defaulting as SGLang resolves a chain: steps + 1) on
    SGLang ``version`` (``"0.5.10"``). Raises ``KeyError`` without ``spec.speculative``."""
    s = spec["speculative"]
    steps, topk = int(s.get("numSteps") or 1), int(s.get("eagleTopk") or 1)
    shape = perf.SpecShape(steps, topk, int(s.get("numDraftTokens") or steps + 1))
    model = load_model_profile(str(spec["model"]["path"]))
    length = perf.expected_accept_length(model.alpha, shape, model.tree_candidate_decay)
    return length, perf.accept_rate(length, shape, version_facts(version).accept_rate_formula)


def off_by(figures: Mapping[str, Any], spec: Mapping[str, Any], version: str, rel: float = 0.10) -> list[str]:
    """What of ``figures`` (a camelCase record with ``acceptLength`` and ``acceptRate``: a ledger record, a baseline,
    a ``history -o json`` row) is missing or further than ``rel`` from :func:`expected`; empty when both hold."""
    want = dict(zip(("acceptLength", "acceptRate"), expected(spec, version), strict=True))
    out = []
    for key, value in want.items():
        got = figures.get(key)
        if got is None or abs(float(got) - value) > rel * value:
            out.append(f"{key} {got} (the simulator's {value:.3f} ± {rel:.0%})")
    return out
