"""Every known release renders and validates; refused flags come with guidance (issue 9 items 1–3).

- a minimal spec (model, TP) renders for every release 0.4.6 … 0.5.23 with each flag spelled as that release's
  own table declares it, and SGLang's parser + rules of that release accept the command line;
- the images people run render (``v0.5.3``, ``v0.5.17``, ``v0.4.9.post6``); ``v0.6.0`` renders against the newest
  table with the unverified warning; releases older than the oldest are refused naming it;
- ``extraArgs: ["--tool_call_parser", "x"]`` on 0.5.12 is refused naming ``--tool-call-parser``;
- every rename the tables hold, on every release: where the old spelling no longer parses it is refused naming
  the successor(s) (and the typed field where one owns it); where it parses it passes (typed-owned flags and the
  deprecated flags SGLang itself refuses excepted).
"""

from __future__ import annotations

from typing import Any

import pytest

from sglang_operator.api import parse
from sglang_operator.api.server import SpecError
from sglang_operator.api.spec import OWNED
from sglang_operator.builders import check
from sglang_operator.sglang import catalog, history
from sglang_operator.sglang.args import resolve_server_args
from sglang_operator.sglang.flags import FlagSpec, load_table
from sglang_operator.sglang.versions import SGLangVersion, parse_version

RELEASES = [str(r.version) for r in catalog.releases()]


def server(image: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"sglang": {"image": image}, "model": {"path": "Qwen/Qwen3-8B"},
                            "parallelism": {"tensor": 2}}
    body.update(spec)
    return {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "metadata": {"name": "s"},
            "spec": body}


@pytest.mark.parametrize("version", RELEASES)
def test_minimal_spec_renders_in_every_release_with_that_release_s_own_spelling(version: str) -> None:
    result = check(parse(server(f"lmsysorg/sglang:v{version}-cu126")).spec)
    assert result.errors == [], result.errors
    cmd = result.command
    assert cmd is not None and str(cmd.version) == version
    table = load_table(parse_version(version))
    flags = [a for a in cmd.args if a.startswith("--")]
    assert flags and all(f in table for f in flags), [f for f in flags if f not in table]
    resolved = resolve_server_args(cmd.args, cmd.version, cmd.literal_env)
    assert (resolved["tp_size"], resolved["model_path"], resolved["port"]) == (2, "Qwen/Qwen3-8B", 30000)
    assert not any("unverified" in w for w in result.warnings)


@pytest.mark.parametrize(("tag", "entry", "strategy"), [
    ("v0.5.3-cu126", ["python3", "-m", "sglang.launch_server"], None),
    ("v0.5.17-cu129", ["sglang", "serve"], "--mamba-radix-cache-strategy"),  # alias era: the new spelling
    ("v0.4.9.post6-cu126", ["python3", "-m", "sglang.launch_server"], None),
    ("v0.5.10-cu129", ["sglang", "serve"], "--mamba-scheduler-strategy"),
])
def test_the_images_people_run_render(tag: str, entry: list[str], strategy: str | None) -> None:
    memory = {"mambaSchedulerStrategy": "extra_buffer"} if strategy else {}
    model = {"path": "Qwen/Qwen3.6-27B"} if strategy else {"path": "Qwen/Qwen3-8B"}  # hybrid GDN model
    result = check(parse(server(f"lmsysorg/sglang:{tag}", memory=memory, model=model)).spec)
    assert result.errors == [] and result.command is not None
    assert result.command.command == entry
    if strategy:
        assert strategy in result.command.args


def test_a_newer_release_renders_against_the_newest_table_with_a_warning() -> None:
    result = check(parse(server("lmsysorg/sglang:v0.6.0-cu130")).spec)
    assert result.errors == [] and result.command is not None
    assert ("SGLang 0.6.0 is newer than 0.5.23, the newest release this operator knows: flags checked against "
            "0.5.23, unverified") in result.warnings
    assert str(result.command.version) == "0.6.0" and result.command.command == ["sglang", "serve"]


def test_an_older_release_is_refused_naming_the_oldest_supported() -> None:
    result = check(parse(server("lmsysorg/sglang:v0.4.5.post3-cu124")).spec)
    assert result.command is None
    assert result.errors == ["spec.sglang.image: SGLang 0.4.5.post3 is older than 0.4.6, the oldest release this "
                             "operator supports (supported: 0.4.6 to 0.5.23 and newer)"]


def test_misspelt_flag_is_refused_naming_the_real_one() -> None:
    result = check(parse(server("lmsysorg/sglang:v0.5.12-cu129", extraArgs=["--tool_call_parser", "x"])).spec)
    assert len(result.errors) == 1
    assert "--tool_call_parser is not a launch flag of SGLang 0.5.12" in result.errors[0]
    assert "did you mean --tool-call-parser?" in result.errors[0]
    assert '"unrecognized arguments: --tool_call_parser x"' in result.errors[0]  # argparse's own wording


@pytest.mark.parametrize(("version", "flag", "expected"), [
    ("0.5.23", "--spec-num-steps", "--speculative-num-steps"),  # per-word abbreviation
    ("0.5.23", "--TOOL-CALL-PARSER", "--tool-call-parser"),  # case
    ("0.5.23", "--reasoning-parsr", "--reasoning-parser"),  # edit distance
    ("0.4.6", "--context_length", "--context-length"),
])
def test_unknown_flags_get_the_closest_flags_of_that_release(version: str, flag: str, expected: str) -> None:
    from sglang_operator.sglang.guidance import AdviceKind, advise

    advice = advise(parse_version(version), flag)
    assert advice.kind is AdviceKind.UNKNOWN and advice.suggestions[0] == expected


def _value(spec: FlagSpec) -> list[str]:
    """A value the flag's own type and choices accept (none for flags that take no value)."""
    if not spec.takes_value:
        return []
    if spec.choices:
        return [str(spec.choices[0])]
    return {"int": ["1"], "float": ["0.5"], "human_readable_int": ["1"], "json_list_type": ["[1]"],
            "loads": ["{}"]}.get(spec.type or "", ["x"])


def _rename_cases() -> list[tuple[str, str]]:
    out = []
    for h in history.renames():
        for r in catalog.releases():
            if r.version >= h.first:
                out.append((h.option, str(r.version)))
    return out


def _owned(flag: str) -> str | None:
    return OWNED.get(flag)


@pytest.mark.parametrize(("option", "version"), _rename_cases())
def test_every_rename_in_every_release(option: str, version: str) -> None:
    v: SGLangVersion = parse_version(version)
    h = history.history()[option]
    table = load_table(v)
    if h.parses_in(v):
        spec = table.get(option)
        assert spec is not None
        args = [option, *_value(spec)]
    else:
        newest = load_table(h.last).get(option)
        assert newest is not None
        args = [option, *_value(newest)]
    successors = history.successors_in(option, v) or h.successors
    field = _owned(option)
    if field is not None:  # a typed field owns it: the API refuses it naming the field and every spelling
        with pytest.raises(SpecError) as err:
            parse(server(f"lmsysorg/sglang:v{version}", extraArgs=args))
        assert field in str(err.value) and all(s in str(err.value) for s in successors), str(err.value)
        return
    result = check(parse(server(f"lmsysorg/sglang:v{version}", extraArgs=args)).spec)
    text = " | ".join(result.errors)
    if not h.parses_in(v):  # dropped: refused naming the successor(s) present in that release
        assert len(result.errors) == 1 and f"{option} is not a launch flag of SGLang {version}" in text
        assert f"(dropped in {h.dropped_in}" in text or f"removed in {h.dropped_in}" in text, text
        assert all(s in text for s in successors), text
        if not history.successors_in(option, v):  # the successor went away as well: both removals named
            assert "itself removed" in text, text
        fields = {_owned(s) for s in successors} - {None}
        assert all(f in text for f in fields if f), text
    elif spec.action_kwargs.get("raises") or spec.action_kwargs.get("error_message"):
        assert result.errors and any(str(spec.action_kwargs.get("raises") or spec.action_kwargs["error_message"])
                                     in e for e in result.errors), text  # SGLang's own refusal text
    else:
        assert result.errors == [], text  # still parses: accepted (SGLang logs its deprecation warning)


def test_a_post_release_can_be_named_when_the_tag_holds_no_version() -> None:
    body = server("registry.local/sglang:prod")
    body["spec"]["sglang"]["version"] = "0.4.9.post6"
    result = check(parse(body).spec)
    assert result.errors == [] and result.command is not None
    assert str(result.command.version) == "0.4.9.post6"
    assert result.command.command == ["python3", "-m", "sglang.launch_server"]
