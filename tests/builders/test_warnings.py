"""Warnings are what the user can act on, in the spec's terms; SGLang's informational start-up lines are notes
(shown by render, never a Warning event)."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from sglang_operator.api import parse
from sglang_operator.builders import check

ROOT = Path(__file__).resolve().parents[2]
KNOWN_GOOD: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())


def checked(**changes: Any) -> Any:
    """:func:`check` of the known-good sample changed by ``changes``: ``a__b=value`` sets ``spec.a.b``, ``None``
    removes it."""
    body = copy.deepcopy(KNOWN_GOOD)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = functools.reduce(lambda parent, key: parent.setdefault(key, {}), parents, body["spec"])
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return check(parse(body).spec)


def test_known_good_sample_has_no_warning_only_notes() -> None:
    result = checked()
    assert result.errors == [] and result.warnings == []
    assert any("Spec v2 is enabled" in n for n in result.notes)


def test_unset_max_running_requests_says_what_sglang_does_and_where_to_read_it() -> None:
    [warning] = checked(memory__maxRunningRequests=None).warnings
    assert warning.startswith("spec.memory.maxRunningRequests is unset: under speculative decoding SGLang picks "
                              "its own limit (at most 48")
    assert "status.effective.maxRunningRequests" in warning
    assert not any("Max running requests is reset to 48" in w for w in checked(memory__maxRunningRequests=None)
                   .warnings)  # SGLang's own line is not repeated as a second warning


def test_actionable_sglang_lines_are_said_in_spec_terms() -> None:
    # 0.5.10 without specV2: SGLang turns the overlap scheduler off (a hybrid model needs extra_buffer + spec v2;
    # use a non-hybrid model with MTP layers)
    result = checked(model__path="deepseek-ai/DeepSeek-V3", speculative__specV2=False,
                     memory__mambaSchedulerStrategy=None, memory__mambaFullMemoryRatio=None)
    assert result.errors == []
    assert any(w.startswith("spec.speculative.specV2 is false: SGLang 0.5.10 then runs speculative decoding "
                            "without the overlap scheduler") for w in result.warnings), result.warnings
    [overlap] = [w for w in result.warnings if w.startswith("spec.speculative.specV2 is false")]
    assert overlap.endswith("without the overlap scheduler; set specV2: true to overlap scheduling and drafting")
    wide = checked(model__path="meta-llama/Llama-3.1-8B-Instruct", speculative__algorithm="EAGLE3",
                   speculative__draftModelPath="jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
                   speculative__specV2=False, speculative__eagleTopk=8, speculative__numDraftTokens=16,
                   parallelism__tensor=1, memory__mambaSchedulerStrategy=None, memory__mambaFullMemoryRatio=None)
    assert wide.errors == []
    [overlap] = [w for w in wide.warnings if w.startswith("spec.speculative.specV2 is false")]  # issue 19: EAGLE3, 8
    assert "spec v2 overlaps scheduling and drafting with eagleTopk 1 only" in overlap and "eagleTopk is 8" in overlap
    assert "keep eagleTopk 8 without overlap" in overlap and "(eagleTopk 1)" not in overlap
    draft = checked(model__path="deepseek-ai/DeepSeek-V3", speculative__draftModelPath="deepseek-ai/DeepSeek-V3",
                    memory__mambaSchedulerStrategy=None, memory__mambaFullMemoryRatio=None)
    assert any(w.startswith("spec.speculative.draftModelPath deepseek-ai/DeepSeek-V3 is not needed")
               for w in draft.warnings), draft.warnings


def test_an_extra_arg_sglang_turns_off_is_named() -> None:
    result = checked(extraArgs=["--enable-mixed-chunk"])
    assert "spec.extraArgs --enable-mixed-chunk has no effect with speculative decoding (SGLang turns it off); "\
           "remove it" in result.warnings


def test_forced_acceptance_is_a_warning_naming_the_variables() -> None:
    result = checked(env=[{"name": "SGLANG_SIMULATE_ACC_LEN", "value": "3.5"},
                          {"name": "SGLANG_SIMULATE_ACC_METHOD", "value": "multinomial"}, {"name": "X", "value": "1"}])
    assert result.errors == []
    [warning] = [w for w in result.warnings if "SIMULATE_ACC" in w]
    assert warning.startswith("spec.env SGLANG_SIMULATE_ACC_LEN, SGLANG_SIMULATE_ACC_METHOD: SGLang's forced-")
    assert "accept length and tok/s are made up" in warning
    assert not any("SIMULATE" in w for w in checked(env=[{"name": "SGLANG_SIMULATE", "value": "1"}]).warnings)
