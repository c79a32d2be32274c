"""Where the probe goes (:mod:`sglang_operator.decisions.sampling.probing`): round robin, but on a speculative server
it stays on a pod until SGLang has written that pod's speculative gauges (every 40 decode steps), at most
``STAY_PROBES`` times in a row."""

from __future__ import annotations

import pytest

from sglang_operator.decisions.sampling.probing import STAY_PROBES, ProbeTurn, next_target


def walk(ready: list[str], rounds: int, speculative: bool, written_after: dict[str, int]) -> list[str]:
    """The pods probed in ``rounds`` intervals; a pod's gauges are written once it got ``written_after[pod]``
    probes (64 tokens at an accept length of 2.7 are about 24 decode steps: 2 probes pass 40)."""
    turn, got, out = ProbeTurn(), {p: 0 for p in ready}, []
    for _ in range(rounds):
        refreshed = {p for p in ready if got[p] >= written_after.get(p, 2)}
        pod, turn = next_target(ready, turn, refreshed, speculative)
        got[pod] += 1
        out.append(pod)
    return out


def test_round_robin_without_speculative_decoding() -> None:
    assert walk(["a", "b", "c", "d"], 6, False, {}) == ["a", "b", "c", "d", "a", "b"]


def test_a_speculative_server_keeps_the_probe_on_a_pod_until_its_gauges_are_written() -> None:
    # 4 pods, 15 s judged at 5 s intervals: round robin gave every pod one 24-step probe and no gauge was written;
    # now the first pod passes 40 steps with its second probe, and each pod in turn after it
    assert walk(["a", "b", "c", "d"], 8, True, {}) == ["a", "a", "b", "b", "c", "c", "d", "d"]
    # once every pod's gauges were written: round robin
    assert walk(["a", "b"], 8, True, {})[4:] == ["a", "b", "a", "b"]


def test_a_pod_that_never_writes_its_gauges_keeps_the_probe_at_most_stay_probes_times() -> None:
    got = walk(["a", "b"], STAY_PROBES + 3, True, {"a": 10 ** 6})
    assert got[:STAY_PROBES] == ["a"] * STAY_PROBES
    assert got[STAY_PROBES] == "b"


def test_a_pod_that_left_is_not_probed_again() -> None:
    pod, turn = next_target(["a", "b"], ProbeTurn(), set(), True)
    assert pod == "a"
    pod, _ = next_target(["b"], turn, set(), True)
    assert pod == "b"
    with pytest.raises(ValueError, match="no Ready pod"):
        next_target([], turn, set(), True)
