"""spec → SGLang argv in the target release's dialect; every rendered argv is accepted by that release's parser."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator.api import parse
from sglang_operator.builders import check, render
from sglang_operator.builders.command import render_command
from sglang_operator.sglang.args import resolve_server_args
from sglang_operator.sglang.flags import load_table
from sglang_operator.sglang.versions import parse_version

ROOT = Path(__file__).resolve().parents[2]
KNOWN_GOOD = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
REGRESSED = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-regressed.yaml").read_text())
IMAGES = {"0.5.10": "lmsysorg/sglang:v0.5.10-cu129", "0.5.23": "lmsysorg/sglang:v0.5.23-cu130"}


def for_version(body: dict[str, Any], version: str) -> dict[str, Any]:
    out = copy.deepcopy(body)
    out["spec"]["sglang"]["image"] = IMAGES[version]
    return out


def flags_of(args: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, tok in enumerate(args):
        if tok.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            out[tok] = None if nxt is None or nxt.startswith("--") else nxt
    return out


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_known_good_speaks_each_release_dialect(version: str) -> None:
    cmd = render_command(parse(for_version(KNOWN_GOOD, version)).spec)
    flags = flags_of(cmd.args)
    table = load_table(parse_version(version))
    assert all(f in table for f in flags), [f for f in flags if f not in table]
    strategy = "--mamba-scheduler-strategy" if version == "0.5.10" else "--mamba-radix-cache-strategy"
    assert flags[strategy] == "extra_buffer"
    assert ("--mamba-radix-cache-strategy" in flags) == (version == "0.5.23")
    assert flags["--speculative-num-steps"] == "3" and flags["--speculative-eagle-topk"] == "1"
    assert flags["--speculative-num-draft-tokens"] == "4"
    assert flags["--host"] == "0.0.0.0" and flags["--port"] == "30000" and "--enable-metrics" in flags
    assert flags["--tp-size"] == "2" and flags["--mem-fraction-static"] == "0.88"
    assert flags["--context-length"] == "131072" and flags["--max-running-requests"] == "16"
    spec_v2 = {e["name"]: e.get("value") for e in cmd.env}.get("SGLANG_ENABLE_SPEC_V2")
    assert spec_v2 == ("1" if version == "0.5.10" else None)


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
@pytest.mark.parametrize("sample", [KNOWN_GOOD, REGRESSED], ids=["known-good", "regressed"])
def test_rendered_argv_is_accepted_by_the_release_parser(sample: dict[str, Any], version: str) -> None:
    cmd = render_command(parse(for_version(sample, version)).spec)
    resolved = resolve_server_args(cmd.args, cmd.version, cmd.literal_env)
    steps = sample["spec"]["speculative"]["numSteps"]
    assert resolved.values["speculative_num_steps"] == steps
    # nothing silently rewritten: the rendered draft tokens are what SGLang resolves
    assert resolved.values["speculative_num_draft_tokens"] == cmd.num_draft_tokens == steps + 1


def test_steps_1_topk_1_without_draft_tokens_renders_2() -> None:
    body = copy.deepcopy(KNOWN_GOOD)
    body["spec"]["speculative"] = {"algorithm": "NEXTN", "numSteps": 1, "eagleTopk": 1}
    cmd = render_command(parse(body).spec)
    assert flags_of(cmd.args)["--speculative-num-draft-tokens"] == "2" and cmd.num_draft_tokens == 2


def test_unset_max_running_requests_under_speculative_decoding_warns() -> None:
    result = check(parse(REGRESSED).spec)
    assert result.errors == []
    assert any("maxRunningRequests is unset" in w and "48" in w for w in result.warnings)
    assert not any("maxRunningRequests" in w for w in check(parse(KNOWN_GOOD).spec).warnings)


def test_spec_v2_on_a_release_that_ignores_it_is_a_warning_not_env() -> None:
    cmd = render_command(parse(for_version(KNOWN_GOOD, "0.5.23")).spec)
    assert any("specV2 has no effect on SGLang 0.5.23" in w for w in cmd.warnings)


def test_secrets_stay_out_of_the_command_line() -> None:
    body = copy.deepcopy(KNOWN_GOOD)
    body["spec"]["apiKeySecretRef"] = {"name": "sglang-key"}
    body["spec"]["model"]["tokenSecretRef"] = {"name": "hf"}
    out = render(parse(body))
    i = out.command.args.index("--api-key")
    assert out.command.args[i + 1] == "$(SGLANG_API_KEY)" and "$(SGLANG_API_KEY)" in out.command.command_line
    env = {e["name"]: e for e in out.deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SGLANG_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "sglang-key", "key": "api-key"}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "token"}
    assert "HF_TOKEN" not in out.command.command_line


def test_extra_args_are_appended_and_checked_by_sglang() -> None:
    body = copy.deepcopy(KNOWN_GOOD)
    body["spec"]["extraArgs"] = ["--page-size", "64"]
    assert render_command(parse(body).spec).args[-2:] == ["--page-size", "64"]
    body["spec"]["extraArgs"] = ["--page-size", "not-a-number"]
    errors = check(parse(body).spec).errors
    assert errors and "refuses the command line" in errors[0]


ALL_SECRETS = {"apiKeySecretRef": {"name": "sglang-key"}, "adminApiKeySecretRef": {"name": "sglang-admin"},
               "sslKeyfilePasswordSecretRef": {"name": "tls-pass", "key": "pw"}}


def test_every_secret_ref_renders_an_env_reference_and_a_placeholder() -> None:
    body = copy.deepcopy(KNOWN_GOOD)
    body["spec"].update(copy.deepcopy(ALL_SECRETS))
    body["spec"]["extraArgs"] = ["--ssl-keyfile", "/tls/key.pem", "--ssl-certfile", "/tls/cert.pem"]
    out = render(parse(body))
    args = out.command.args
    expected = {"--api-key": ("SGLANG_API_KEY", "sglang-key", "api-key"),
                "--admin-api-key": ("SGLANG_ADMIN_API_KEY", "sglang-admin", "admin-api-key"),
                "--ssl-keyfile-password": ("SGLANG_SSL_KEYFILE_PASSWORD", "tls-pass", "pw")}
    env = {e["name"]: e for e in out.deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    for flag, (var, secret, key) in expected.items():
        assert args[args.index(flag) + 1] == f"$({var})"
        assert f"{flag} '$({var})'" in out.command.command_line
        assert env[var] == {"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
    assert check(parse(body).spec).valid, check(parse(body).spec).errors
    assert not any("sslKeyfilePasswordSecretRef" in w for w in out.command.warnings)


def test_a_spec_without_the_new_refs_renders_as_before() -> None:
    """The argv and env of a spec with only apiKeySecretRef keep their order (no revision change on upgrade)."""
    body = copy.deepcopy(KNOWN_GOOD)
    body["spec"]["apiKeySecretRef"] = {"name": "sglang-key"}
    cmd = render_command(parse(body).spec)
    assert cmd.args[cmd.args.index("--enable-metrics") + 1: cmd.args.index("--enable-metrics") + 3] == [
        "--api-key", "$(SGLANG_API_KEY)"]
    assert [e["name"] for e in cmd.env] == ["SGLANG_API_KEY", "SGLANG_ENABLE_SPEC_V2"]


@pytest.mark.parametrize(("field", "flag", "image", "since"), [
    ("adminApiKeySecretRef", "--admin-api-key", "lmsysorg/sglang:v0.5.6", "0.5.8"),
    ("sslKeyfilePasswordSecretRef", "--ssl-keyfile-password", "lmsysorg/sglang:v0.5.9", "0.5.10"),
])
def test_a_secret_ref_is_refused_by_a_release_without_its_flag(field: str, flag: str, image: str,
                                                               since: str) -> None:
    body = copy.deepcopy(KNOWN_GOOD)
    body["spec"]["sglang"] = {"image": image}
    body["spec"]["speculative"]["specV2"] = False
    body["spec"][field] = copy.deepcopy(ALL_SECRETS[field])
    errors = check(parse(body).spec).errors
    assert any(e.startswith(f"spec.{field}: SGLang") and f"has no {flag}" in e and since in e for e in errors), errors


def test_a_keyfile_password_without_a_keyfile_is_a_warning() -> None:
    body = copy.deepcopy(KNOWN_GOOD)
    body["spec"]["sslKeyfilePasswordSecretRef"] = {"name": "tls-pass"}
    out = check(parse(body).spec)
    assert out.valid and any(w.startswith("spec.sslKeyfilePasswordSecretRef has no effect without --ssl-keyfile")
                             for w in out.warnings), out.warnings


@pytest.mark.parametrize(("version", "flag"), [
    ("0.5.13", "--cuda-graph-max-bs"),          # the only spelling up to 0.5.13
    ("0.5.19", "--cuda-graph-max-bs-decode"),   # 0.5.14–0.5.19: the old one is a deprecated alias of this
    ("0.5.20", "--cuda-graph-max-bs-decode"),   # 0.5.20 on: the old one is gone (ambiguous: -decode / -prefill)
    ("0.5.23", "--cuda-graph-max-bs-decode"),
])
def test_cuda_graph_max_bs_renders_under_the_release_name(version: str, flag: str) -> None:
    body = copy.deepcopy(KNOWN_GOOD)
    body["spec"]["sglang"] = {"image": f"lmsysorg/sglang:v{version}-cu129"}
    body["spec"]["speculative"]["specV2"] = False
    body["spec"]["memory"]["cudaGraphMaxBs"] = 24
    spec = parse(body).spec
    cmd = render_command(spec)
    flags = flags_of(cmd.args)
    assert flags[flag] == "24"
    assert [f for f in flags if f.startswith("--cuda-graph")] == [flag]
    assert flag in load_table(parse_version(version))
    resolved = resolve_server_args(cmd.args, cmd.version, cmd.literal_env)
    assert resolved.values["cuda_graph_max_bs" if flag == "--cuda-graph-max-bs" else "cuda_graph_max_bs_decode"] == 24
    assert check(spec).errors == []


def test_cuda_graph_max_bs_in_extra_args_is_refused_for_the_typed_field() -> None:
    body = copy.deepcopy(KNOWN_GOOD)
    body["spec"]["extraArgs"] = ["--cuda-graph-max-bs-decode", "24"]
    with pytest.raises(Exception, match=r"spec\.memory\.cudaGraphMaxBs"):
        parse(body)
