"""Every ``extraArgs`` problem in one message (issue 19 item 7): a flag a typed field owns (a CEL rule, checked
before the release is known) is reported together with the flags the release does not know, so one round of fixes
is enough; every broken CEL rule of a model is reported, not only the first."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator.api.server import SpecError, parse
from sglang_operator.builders import refusals
from sglang_operator.plugin.importer import refusals as import_refusals

ROOT = Path(__file__).resolve().parents[2]
GOOD: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())


def body(extra_args: list[str], **spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(GOOD)
    out["spec"]["extraArgs"] = extra_args
    out["spec"].update(spec)
    return out


def test_owned_unknown_and_abbreviated_flags_come_in_one_message() -> None:
    got = refusals(body(["--tp-size", "2", "--context-length", "4096", "--no-such-flag", "--page", "64"]))
    assert len(got) == 1, got
    message = got[0]
    assert message.startswith("spec.extraArgs: 4 problems: --tp-size is rendered from spec.parallelism.tensor")
    for part in ("--context-length is rendered from spec.memory.contextLength",
                 "--no-such-flag is not a launch flag of SGLang 0.5.10",
                 "--page is not a launch flag of SGLang 0.5.10 (full flag names only): it abbreviates --page-size"):
        assert part in message, message
    assert import_refusals(body(["--tp-size", "2", "--no-such-flag"]))[0].startswith("spec.extraArgs: 2 problems: ")


def test_one_problem_reads_as_before_and_other_refusals_stay_apart() -> None:
    got = refusals(body(["--no-such-flag"]))
    assert got == ['spec.extraArgs: --no-such-flag is not a launch flag of SGLang 0.5.10 (SGLang would exit with '
                   '"unrecognized arguments: --no-such-flag")']
    got = refusals(body(["--tp-size", "2", "--no-such-flag"], resources={"gpu": 1}))
    assert len(got) == 2, got
    assert sorted(m[:27] for m in got) == ["spec.extraArgs: 2 problems:", "spec.resources.gpu is 1 but"]


def test_every_broken_cel_rule_of_a_model_is_reported() -> None:
    with pytest.raises(SpecError) as err:
        parse(body([], rollback={"verifySeconds": 10, "probe": {"timeoutSeconds": 40}}))
    messages = err.value.messages
    assert len(messages) == 2, messages
    assert messages[0].startswith("spec.rollback.verifySeconds is 10") and messages[1].startswith(
        "spec.rollback.probe.timeoutSeconds is 40")
    with pytest.raises(SpecError) as err:
        parse(body(["--tp-size", "2", "--context-length", "4096"]))
    assert [m.split(" is rendered")[0] for m in err.value.messages] == [
        "spec.extraArgs: --tp-size", "spec.extraArgs: --context-length"]


def test_render_prints_them_together(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(body(["--tp-size", "2", "--no-such-flag"])))
    proc = subprocess.run([sys.executable, "-m", "sglang_operator.entry.cli", "render", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qwen36-27b: invalid: spec.extraArgs: 2 problems: --tp-size")
