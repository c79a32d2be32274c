"""The CLI without a cluster: crd, render, import (with the systemd round trip of the published command line)."""

from __future__ import annotations

from pathlib import Path

import click
import typer.main
import yaml
from typer.testing import CliRunner

from sglang_operator.api.crd import all_crds_yaml, crd_yaml
from sglang_operator.entry.cli import app

ROOT = Path(__file__).resolve().parents[2]
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


def test_crd_prints_the_generated_crds() -> None:
    result = runner.invoke(app, ["crd"])
    assert result.exit_code == 0 and result.stdout == all_crds_yaml() and result.stdout.startswith(crd_yaml())
    one = runner.invoke(app, ["crd", "SGLangServer"])
    assert one.exit_code == 0 and one.stdout == crd_yaml()


def test_render_known_good_sample() -> None:
    result = runner.invoke(app, ["render", str(ROOT / "samples" / "qwen3.6-27b-known-good.yaml")])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    assert "SGLANG_ENABLE_SPEC_V2=1 sglang serve" in result.stdout
    assert _sglang_flags(docs[0]).items() >= PUBLISHED_FLAGS.items()


def test_render_prints_the_scaled_object_of_autoscaling(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    doc["spec"]["autoscaling"] = {"maxReplicas": 3, "target": 4}
    path = tmp_path / "autoscaled.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["render", str(path), "--prometheus-address", "http://prom:9090"])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "ScaledObject"]
    assert docs[2]["spec"]["triggers"][0]["metadata"]["serverAddress"] == "http://prom:9090"
    # without an address anywhere the operator reports it (a condition), render says so and prints the rest
    bare = runner.invoke(app, ["render", str(path)])
    assert bare.exit_code == 0, bare.output
    assert [d["kind"] for d in yaml.safe_load_all(bare.stdout) if d] == ["Deployment", "Service"]
    assert "# note: no ScaledObject: spec.autoscaling.prometheus.address is not set" in bare.stdout


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
    # HF_HOME becomes the weights cache (a hostPath at the same path), not a bare variable without a volume
    assert server["spec"]["model"]["cache"] == {"hostPath": "/data/hf", "mountPath": "/data/hf"}
    assert "env" not in server["spec"]
    assert "HF_HOME=/data/hf translated into spec.model.cache" in imported.stdout
    assert "# note: systemd settings not carried over: Restart=always" in imported.stdout
    assert "image lmsysorg/sglang:v0.5.10-cu129 (assumed: the input names none" in imported.stdout
    assert "render would refuse" not in imported.output
    # the hostPath cache is what the chart's default admission policy refuses: the import says so (its help promises)
    warning = ("# warning: the chart's default admission policy would refuse this: spec.model.cache.hostPath is "
               "/data/hf: ")
    assert warning in imported.stdout and "admissionPolicy.allowedHostPaths" in imported.stdout
    assert "import: warning: the chart's default admission policy" in imported.stderr
    spec_file = tmp_path / "server.yaml"
    spec_file.write_text(imported.stdout)
    refused = runner.invoke(app, ["render", str(spec_file)])  # the chart's admission policy: no hostPath by default
    assert refused.exit_code == 1
    assert "refused by the admission policy (baseline): spec.model.cache.hostPath is /data/hf: " in refused.stderr
    rendered = runner.invoke(app, ["render", str(spec_file), "--allowed-host-path", "/data"])
    assert rendered.exit_code == 0, rendered.output
    dep = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Deployment")
    original = UNIT.split("launch_server", 1)[1].replace("\\\n", " ").split("\nRestart")[0].split()
    want = {a: (original[i + 1] if i + 1 < len(original) and not original[i + 1].startswith("--") else None)
            for i, a in enumerate(original) if a.startswith("--")}
    got = _sglang_flags(dep)
    assert got == {**want, "--enable-metrics": None}
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SGLANG_ENABLE_SPEC_V2"] == "1" and env["HF_HOME"] == "/data/hf"
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["model-cache"]["hostPath"]["path"] == "/data/hf"


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
    assert "()" not in result.stderr  # the issue: "unknown option for SGLang 0.5.10 ()"
    assert "SGLang 0.5.10" in result.stderr and "--image" in result.stderr


# --- issue 11: a first day with the CLI ------------------------------------------------------------------------

def test_missing_files_are_clean_errors_not_tracebacks() -> None:
    for command in (["render", "/nope.yaml"], ["import", "/nope.service"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1, result.output
        assert f"cannot read {command[1]}: No such file or directory" in result.stderr
        assert "Traceback" not in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)  # no uncaught exception


def test_bad_yaml_and_usage_errors_have_their_exit_codes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed\n")
    result = runner.invoke(app, ["render", str(bad)])
    assert result.exit_code == 1 and "is not valid YAML" in result.stderr
    assert runner.invoke(app, ["render", "--no-such-option", str(bad)]).exit_code == 2
    assert runner.invoke(app, ["run", "--pod-monitors", "sometimes"]).exit_code == 2


def test_render_skips_other_kinds_with_a_note(tmp_path: Path) -> None:
    sample = (ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text()
    config = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                             "data": {"a": "b"}})
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(config + "---\n" + sample)
    result = runner.invoke(app, ["render", str(mixed)])
    assert result.exit_code == 0, result.output
    assert "skipped document 1 (ConfigMap settings): not an SGLangServer" in result.stderr
    assert [d["kind"] for d in yaml.safe_load_all(result.stdout) if d] == ["Deployment", "Service"]
    only_config = tmp_path / "config.yaml"
    only_config.write_text(config)
    result = runner.invoke(app, ["render", str(only_config)])
    assert result.exit_code == 1 and "holds no SGLangServer" in result.stderr


def test_render_shows_sglang_info_lines_as_notes_not_warnings() -> None:
    result = runner.invoke(app, ["render", str(ROOT / "samples" / "qwen3.6-27b-known-good.yaml")])
    assert "# warning:" not in result.stdout  # the recommended sample gets no warning
    assert "# note: SGLang 0.5.10 will log: Spec v2 is enabled" in result.stdout


def test_version_names_the_package_and_the_newest_sglang_release() -> None:
    from sglang_operator import __version__
    from sglang_operator.sglang.versions import SUPPORTED

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"sglang-operator {__version__} (SGLang releases known up to {max(SUPPORTED)})"


def _commands() -> list[tuple[list[str], click.Command]]:
    root = typer.main.get_command(app)
    out: list[tuple[list[str], click.Command]] = [([], root)]
    out += [([name], sub) for name, sub in getattr(root, "commands", {}).items()]
    return out


def test_help_is_plain_text_and_every_option_is_documented() -> None:
    commands = _commands()
    assert len(commands) >= 6
    for path, command in commands:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "``" not in result.stdout, path
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, (path, param.opts)
    assert "log at DEBUG" in runner.invoke(app, ["run", "--help"]).stdout


def test_run_help_shows_every_option_name_whole_at_80_columns() -> None:
    """Issue 19: rich's help panels cut names such as --metrics-write-timeout to "--metrics-write…" at 80 columns."""
    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    text = runner.invoke(app, ["run", "--help"], terminal_width=80, env={"COLUMNS": "80"}).stdout
    assert "…" not in text
    for param in run.params:
        for opt in param.opts if isinstance(param, click.Option) else ():
            assert opt in text, opt
    assert max(len(line) for line in text.splitlines()) <= 80


def test_import_notes_every_assumption_and_dropped_item(tmp_path: Path) -> None:
    unit = tmp_path / "sglang.service"
    unit.write_text(UNIT.replace('Environment="SGLANG_ENABLE_SPEC_V2=1"', 'Environment="SGLANG_ENABLE_SPEC_V2=1"\n'
                                 "EnvironmentFile=/etc/sglang/env\nEnvironment=CUDA_VISIBLE_DEVICES=0,1"))
    result = runner.invoke(app, ["import", str(unit)])
    assert result.exit_code == 0, result.output
    assert "# note: EnvironmentFile=/etc/sglang/env dropped: the operator cannot read that file" in result.stdout
    assert "# note: CUDA_VISIBLE_DEVICES dropped" in result.stdout
    explicit = runner.invoke(app, ["import", str(unit), "--image", "lmsysorg/sglang:v0.5.12-cu129"])
    assert "image lmsysorg/sglang:v0.5.12-cu129 (given with --image); flags read as SGLang 0.5.12" in explicit.stdout
    renamed = runner.invoke(app, ["import", str(unit), "--image", "lmsysorg/sglang:v0.5.23-cu130"])
    assert renamed.exit_code == 1 and "--mamba-scheduler-strategy" in renamed.stderr  # renamed in 0.5.20


def test_import_warns_when_render_would_refuse_the_result() -> None:
    # the published regressed command line without --mamba-scheduler-strategy: SGLang 0.5.10 resolves auto to
    # no_buffer, which it refuses with speculative decoding on a hybrid model with radix cache
    line = ("python -m sglang.launch_server --model-path Qwen/Qwen3.6-27B --tp-size 2 --speculative-algorithm NEXTN "
            "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
    result = runner.invoke(app, ["import", "-"], input=line)
    assert result.exit_code == 0, result.output
    assert "import: warning: sglang-operator render would refuse the result: " in result.stderr
    assert "spec.memory.mambaSchedulerStrategy (unset)" in result.stderr
    assert "# warning: sglang-operator render would refuse this:" in result.stdout
    yaml.safe_load(result.stdout)  # still a valid YAML document to fix


def test_run_passes_every_read_limit_to_the_runner_with_its_default(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from sglang_operator.decisions.sampling.limits import PARSE_WORKERS, ProbeLimits, ScrapeLimits

    calls: list[dict] = []
    monkeypatch.setattr("sglang_operator.entry.runner.run", lambda **kw: calls.append(kw))
    assert runner.invoke(app, ["run"]).exit_code == 0
    assert calls[-1]["scrape_limits"] == ScrapeLimits(parse_workers=PARSE_WORKERS)  # the dataclass: on the loop
    assert calls[-1]["probe_limits"] == ProbeLimits()
    result = runner.invoke(app, ["run", "--scrape-body-limit", "1000", "--scrape-sample-limit", "7",
                                 "--scrape-label-limit", "3", "--scrape-label-value-length-limit", "40",
                                 "--scrape-cache-bytes", "5000", "--probe-body-limit", "2000",
                                 "--probe-line-limit", "99", "--probe-chunk-limit", "12"])
    assert result.exit_code == 0, result.output
    assert calls[-1]["scrape_limits"] == ScrapeLimits(1000, 7, 3, 40, 5000, parse_workers=PARSE_WORKERS)
    assert calls[-1]["probe_limits"] == ProbeLimits(2000, 99, 12)
    assert runner.invoke(app, ["run", "--probe-chunk-limit", "0"]).exit_code == 2
    result = runner.invoke(app, ["run", "--scrape-parse-workers", "0", "--scrape-cpu-budget-seconds", "0.5",
                                 "--min-sample-interval", "5"])  # issue 42
    assert result.exit_code == 0, result.output
    assert calls[-1]["scrape_limits"] == ScrapeLimits(cpu_budget_seconds=0.5, parse_workers=0, min_interval_seconds=5)
    assert runner.invoke(app, ["run", "--min-sample-interval", "0.5"]).exit_code == 2


def test_run_passes_the_metrics_server_settings_with_their_defaults(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from sglang_operator.process.metrics_http import MetricsServerConfig

    calls: list[dict] = []
    monkeypatch.setattr("sglang_operator.entry.runner.run", lambda **kw: calls.append(kw))
    assert runner.invoke(app, ["run"]).exit_code == 0
    assert calls[-1]["metrics_server"] == MetricsServerConfig() and not MetricsServerConfig().secure
    result = runner.invoke(app, ["run", "--metrics-read-timeout", "2.5", "--metrics-write-timeout", "7",
                                 "--metrics-max-connections", "9", "--metrics-secure"])
    assert result.exit_code == 0, result.output
    assert calls[-1]["metrics_server"] == MetricsServerConfig(2.5, 7.0, 9, True)
    result = runner.invoke(app, ["run", "--metrics-secure", "--metrics-cert-dir", "/certs"])
    assert result.exit_code == 0, result.output
    assert calls[-1]["metrics_server"] == MetricsServerConfig(secure=True, cert_dir="/certs")
    calls.clear()
    result = runner.invoke(app, ["run", "--metrics-cert-dir", "/certs"])  # TLS only with --metrics-secure
    assert result.exit_code == 2 and "needs secure metrics (--metrics-secure)" in result.stderr and not calls
    assert runner.invoke(app, ["run", "--metrics-max-connections", "0"]).exit_code == 2
    assert runner.invoke(app, ["run", "--metrics-read-timeout", "0"]).exit_code == 2


async def test_the_limits_reach_the_http_client_and_the_sampler_through_the_config() -> None:
    from sglang_operator.control.handlers import Config
    from sglang_operator.control.observer import Observer
    from sglang_operator.decisions.sampling.limits import ProbeLimits, ScrapeLimits

    config = Config(scrape_limits=ScrapeLimits(body_bytes=1234, samples=9), probe_limits=ProbeLimits(chunks=5))
    observer = Observer(5.0, scrape_limits=config.scrape_limits, probe_limits=config.probe_limits)
    try:
        assert observer.http.max_body_bytes == 1234
        assert observer.sampler.limits.samples == 9 and observer.sampler.probe_limits.chunks == 5
    finally:
        await observer.stop()


def test_render_holds_each_server_to_the_admission_policy(tmp_path: Path) -> None:
    from sglang_operator.builders import admission
    from sglang_operator.builders.admission_kinds import Params

    doc = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    doc["spec"]["securityContext"] = {"privileged": True}
    doc["spec"]["apiKeySecretRef"] = {"name": "api"}
    path = tmp_path / "privileged.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["render", str(path), "--namespace", "team-a"])
    assert result.exit_code == 1 and result.stdout == ""
    body = {**doc, "metadata": {**doc["metadata"], "namespace": "team-a"}}
    (expected,) = admission.check(body, Params()).refusals
    assert result.stderr == f"qwen36-27b: refused by the admission policy (baseline): {expected}\n"
    assert expected.startswith("spec.securityContext.privileged is true: ")
    off = runner.invoke(app, ["render", str(path), "--admission-level", "off"])
    assert off.exit_code == 0, off.output
    del doc["spec"]["securityContext"]
    path.write_text(yaml.safe_dump(doc))
    ok = runner.invoke(app, ["render", str(path), "--namespace", "team-a", "--admission-level", "restricted"])
    assert ok.exit_code == 1 and "spec.securityContext.runAsNonRoot is unset: " in ok.stderr
    ok = runner.invoke(app, ["render", str(path), "--namespace", "team-a"])
    assert ok.exit_code == 0, ok.output
    assert ("# note: admission policy: spec.apiKeySecretRef.name names Secret api in team-a: the user creating or "
            "updating this SGLangServer must be allowed to get it (RBAC: get secrets)") in ok.stdout
    bad = runner.invoke(app, ["render", str(path), "--admission-level", "lax"])
    assert bad.exit_code == 2
