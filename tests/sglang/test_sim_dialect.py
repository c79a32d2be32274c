"""The simulator starts (or refuses to start) like the release it emulates: entry points, argparse's program name
in SGLang's messages, the launch_server UserWarning (``sglang/launch_server.py``), routes per release."""

from __future__ import annotations

import pytest
from sglang_sim.__main__ import main
from sglang_sim.facts import version_facts

BAD = ["--model-path", "Qwen/Qwen3-8B", "--tool_call_parser", "y"]
LEGACY = ["python3", "-m", "sglang.launch_server"]


def run(version: str, argv: list[str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setenv("SGLANG_SIM_VERSION", version)
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("version", "entry", "line"), [
    ("0.5.3", LEGACY, "launch_server.py: error: unrecognized arguments: --tool_call_parser y"),
    ("0.5.5", ["sglang", "serve"], "sglang: error: unrecognized arguments: --tool_call_parser y"),
    ("0.5.10", LEGACY, "sglang serve: error: unrecognized arguments: --tool_call_parser y"),
    ("0.5.23", ["sglang", "serve"], "sglang serve: error: unrecognized arguments: --tool_call_parser y"),
])
def test_argparse_refusals_name_the_program_as_the_release_does(
    version: str, entry: list[str], line: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, err = run(version, [*entry, *BAD], capsys, monkeypatch)
    assert code == 2 and line in err
    assert ("'sglang serve' is the recommended entrypoint" in err) == (entry == LEGACY and version == "0.5.10")


def test_sglang_serve_does_not_exist_before_0_5_5(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = run("0.5.3", ["sglang", "serve", "--model-path", "Qwen/Qwen3-8B"], capsys, monkeypatch)
    assert code == 127 and "sglang: not found" in err


def test_a_deprecated_flag_that_raised_in_old_releases_exits_with_sglang_s_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, err = run("0.5.3", [*LEGACY, "--model-path", "m", "--enable-ep-moe"], capsys, monkeypatch)
    assert code == 1
    assert "ValueError: NOTE: --enable-ep-moe is deprecated. Please set `--ep-size` to the same value as " \
           "`--tp-size` instead." in err


@pytest.mark.parametrize(("version", "routes"), [
    ("0.4.9.post6", {"/get_server_info", "/get_model_info", "/health", "/health_generate"}),
    ("0.5.6", {"/server_info", "/get_server_info", "/model_info", "/health_generate"}),
    ("0.5.20", {"/ready", "/server_info"}),
])
def test_routes_follow_the_release(version: str, routes: set[str]) -> None:
    facts = version_facts(version)
    assert routes <= facts.routes
    assert ("/ready" in facts.routes) == facts.has_ready == (version == "0.5.20")
    assert ("/server_info" in facts.routes) == (version != "0.4.9.post6")
