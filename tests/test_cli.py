"""The CLI without a cluster: crd, render, import (with the systemd round trip of the published command line)."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from sglang_operator.api.crd import crd_yaml
from sglang_operator.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

# The published known-good command line as a team would have it in a systemd unit (the figures of
# ../shared/published-case.yaml, written out here: tests do not read ../shared).
UNIT = """\
[Unit]
Description=SGLang Qwen3.6-27B (MTP)
After=network-online.target

[Service]
Environment="SGLANG_ENABLE_SPEC_V2=1"
Environment=HF_HOME=/data/hf
ExecStart=/opt/sglang/bin/python3 -m sglang.launch_server --model-path Qwen/Qwen3.6-27B \\
    --host 0.0.0.0 --port 30000 --tp-size 2 \\
    --speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 \\
    --speculative-num-draft-tokens 4 --mem-fraction-static 0.88 --context-length 131072 \\
    --max-running-requests 16 --mamba-full-memory-ratio 0.5 --mamba-scheduler-strategy extra_buffer
Restart=always

[Install]
WantedBy=multi-user.target
"""
PUBLISHED_FLAGS = {
    "--tp-size": "2", "--speculative-algorithm": "NEXTN", "--speculative-num-steps": "3",
    "--speculative-eagle-topk": "1", "--speculative-num-draft-tokens": "4", "--mem-fraction-static": "0.88",
    "--context-length": "131072", "--max-running-requests": "16", "--mamba-full-memory-ratio": "0.5",
    "--mamba-scheduler-strategy": "extra_buffer", "--model-path": "Qwen/Qwen3.6-27B",
}


def _sglang_flags(deployment: dict) -> dict[str, str | None]:
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return {a: (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None)
            for i, a in enumerate(args) if a.startswith("--")}


def test_crd_prints_the_generated_crd() -> None:
    result = runner.invoke(app, ["crd"])
    assert result.exit_code == 0 and result.stdout == crd_yaml()


def test_render_known_good_sample() -> None:
    result = runner.invoke(app, ["render", str(ROOT / "samples" / "qwen3.6-27b-known-good.yaml")])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    assert "SGLANG_ENABLE_SPEC_V2=1 sglang serve" in result.stdout
    assert _sglang_flags(docs[0]).items() >= PUBLISHED_FLAGS.items()


def test_render_refuses_an_invalid_spec(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    doc["spec"]["speculative"]["numSteps"] = 1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["render", str(path)])
    assert result.exit_code == 1
    assert "spec.speculative.numDraftTokens is 4 but must equal numSteps + 1 = 2" in result.stderr


def test_import_systemd_unit_round_trips_through_render(tmp_path: Path) -> None:
    unit = tmp_path / "sglang.service"
    unit.write_text(UNIT)
    imported = runner.invoke(app, ["import", str(unit)])
    assert imported.exit_code == 0, imported.output
    server = yaml.safe_load(imported.stdout)
    assert server["spec"]["speculative"]["specV2"] is True
    assert server["spec"]["env"] == [{"name": "HF_HOME", "value": "/data/hf"}]
    spec_file = tmp_path / "server.yaml"
    spec_file.write_text(imported.stdout)
    rendered = runner.invoke(app, ["render", str(spec_file)])
    assert rendered.exit_code == 0, rendered.output
    dep = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Deployment")
    original = UNIT.split("launch_server", 1)[1].replace("\\\n", " ").split("\nRestart")[0].split()
    want = {a: (original[i + 1] if i + 1 < len(original) and not original[i + 1].startswith("--") else None)
            for i, a in enumerate(original) if a.startswith("--")}
    got = _sglang_flags(dep)
    assert got == {**want, "--enable-metrics": None}
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SGLANG_ENABLE_SPEC_V2"] == "1"


def test_import_reads_stdin_and_resolves_abbreviations() -> None:
    line = "python -m sglang.launch_server --model Qwen/Qwen3.6-27B --tp 2 --speculative-algorithm NEXTN " \
           "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --page-size 64"
    result = runner.invoke(app, ["import", "-"], input=line)
    assert result.exit_code == 0, result.output
    spec = yaml.safe_load(result.stdout)["spec"]
    assert spec["parallelism"] == {"tensor": 2} and spec["extraArgs"] == ["--page-size", "64"]
    assert spec["speculative"]["numDraftTokens"] == 2  # what SGLang ran with, not the 4 it ignored
    assert "SGLang ran with 2" in result.stdout


def test_import_refuses_unknown_flags() -> None:
    result = runner.invoke(app, ["import", "-"], input="sglang serve --model-path m --no-such-flag 1")
    assert result.exit_code == 1 and "--no-such-flag" in result.stderr
