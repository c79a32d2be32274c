"""A render resolves the image's SGLang release once (issue 15, item 11) and hands the one value down: the command
builder, the validation and SGLang's argument resolution look nothing up by version again."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator import builders
from sglang_operator.api.server import parse
from sglang_operator.builders import command, dialect
from sglang_operator.sglang import flags, versions

validate = importlib.import_module("sglang_operator.builders.validate")  # builders.validate is also a function
SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())


@pytest.mark.parametrize("image", ["lmsysorg/sglang:v0.5.10-cu129", "lmsysorg/sglang:v0.5.14",
                                   "lmsysorg/sglang:v0.5.23"])
def test_one_release_per_render_and_no_lookup_by_version(monkeypatch: pytest.MonkeyPatch, image: str) -> None:
    body = copy.deepcopy(SAMPLE)
    body["metadata"]["namespace"] = "ns"
    body["spec"]["sglang"] = {"image": image}
    server = parse(body)
    builders.render(server)  # warm the caches
    resolved: list[dialect.Release] = []
    real = dialect.resolve_release

    def counting(sglang: Any) -> dialect.Release:
        resolved.append(real(sglang))
        return resolved[-1]

    def no_lookup(*_: Any) -> Any:
        raise AssertionError("resolved again")

    calls: list[str] = []

    def counted(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(validate, "resolve_release", counting)
    monkeypatch.setattr(command, "resolve_release", no_lookup)
    monkeypatch.setattr(versions, "dialect", counted("dialect", versions.dialect))
    monkeypatch.setattr(flags, "load_table", counted("load_table", flags.load_table))
    args_mod = importlib.import_module("sglang_operator.sglang.args")
    resolve = args_mod.resolve_server_args
    handed: list[Any] = []
    monkeypatch.setattr(args_mod, "resolve_server_args", lambda argv, v, *a, **k: handed.append(v) or resolve(
        argv, v, *a, **k))
    rendered = builders.render(server)
    assert len(resolved) == 1 and rendered.command.release is resolved[0]
    assert calls == ["dialect"]  # the one resolution's; the flag table comes with the release's facts
    assert handed == [resolved[0].facts]  # SGLang's argument resolution gets the release, not a version
    assert rendered.command.version == resolved[0].version == resolved[0].facts.version
    assert resolved[0].facts.flags.get("--speculative-num-steps") is not None
    assert "sglang:num_running_reqs" in resolved[0].facts.metrics
