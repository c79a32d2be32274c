"""Versions, dialects, committed tables and argparse-style flag lookup."""

from __future__ import annotations

import re

import pytest

from sglang_operator.sglang import history
from sglang_operator.sglang.flags import MatchKind, load_table
from sglang_operator.sglang.versions import (
    SGLangVersion,
    SGLangVersionError,
    SpecV2,
    dialect,
    nearest_supported,
    parse_image_tag,
    parse_version,
    resolve,
)

V10, V23 = SGLangVersion(0, 5, 10), SGLangVersion(0, 5, 23)


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("lmsysorg/sglang:v0.5.10-cu129", V10),
        ("lmsysorg/sglang:v0.5.10.post1-cu129", SGLangVersion(0, 5, 10, 1)),
        ("registry.local:5000/lmsysorg/sglang:0.5.23-cu130@sha256:abc", V23),
    ],
)
def test_parse_image_tag(image: str, version: SGLangVersion) -> None:
    assert parse_image_tag(image) == version


@pytest.mark.parametrize("image", ["lmsysorg/sglang:latest", "lmsysorg/sglang", "registry:5000/sglang"])
def test_image_without_version_is_an_error(image: str) -> None:
    with pytest.raises(SGLangVersionError):
        parse_image_tag(image)


def test_every_known_release_stands_for_itself_and_newer_ones_for_the_newest() -> None:
    for v in ("0.4.6", "0.4.9.post6", "0.5.3", "0.5.16", "0.5.21"):
        assert nearest_supported(parse_version(v)) == parse_version(v)
    newer = resolve(SGLangVersion(0, 6, 0))
    assert newer.release.version == V23
    assert newer.warning == ("SGLang 0.6.0 is newer than 0.5.23, the newest release this operator knows: "
                             "flags checked against 0.5.23, unverified")
    post = resolve(parse_version("0.5.3.post9"))
    assert post.release.version == parse_version("0.5.3.post3") and "unverified" in (post.warning or "")


@pytest.mark.parametrize(("version", "message"), [
    ("0.4.5.post3", "SGLang 0.4.5.post3 is older than 0.4.6, the oldest release this operator supports"),
    ("0.3.6", "SGLang 0.3.6 is older than 0.4.6"),
    ("0.5.0", "SGLang 0.5.0 is not a release on PyPI (known releases around it: 0.4.10.post2 and 0.5.1)"),
])
def test_older_or_never_released_versions_are_refused(version: str, message: str) -> None:
    with pytest.raises(SGLangVersionError, match=re.escape(message)):
        nearest_supported(parse_version(version))


def test_dialects() -> None:
    old, new = dialect(V10), dialect(V23)
    assert (old.readiness_path, new.readiness_path) == ("/health_generate", "/ready")
    assert old.spec_v2 is SpecV2.OPT_IN and dialect(SGLangVersion(0, 5, 12)).spec_v2 is SpecV2.DEFAULT_ON
    assert new.spec_v2 is SpecV2.IGNORED and new.spec_v2_enabled("0")
    assert not old.spec_v2_enabled(None) and old.spec_v2_enabled("1") and not old.spec_v2_enabled("no")
    assert new.flag_for("--mamba-scheduler-strategy") == ("--mamba-radix-cache-strategy",)
    assert old.flag_for("--mamba-scheduler-strategy") == ("--mamba-scheduler-strategy",)
    alias_era = dialect(parse_version("0.5.17"))  # old spelling still parses there, but as a deprecated alias
    assert alias_era.flag_for("--mamba-scheduler-strategy") == ("--mamba-radix-cache-strategy",)


@pytest.mark.parametrize(("version", "entry", "prog", "info", "ready", "spec_v2"), [
    ("0.4.9.post6", ("python3", "-m", "sglang.launch_server"), "launch_server.py", "/get_server_info",
     "/health_generate", SpecV2.ABSENT),
    ("0.5.3", ("python3", "-m", "sglang.launch_server"), "launch_server.py", "/get_server_info", "/health_generate",
     SpecV2.ABSENT),
    ("0.5.6", ("python3", "-m", "sglang.launch_server"), "launch_server.py", "/server_info", "/health_generate",
     SpecV2.OPT_IN),
    ("0.5.10", ("sglang", "serve"), "sglang serve", "/server_info", "/health_generate", SpecV2.OPT_IN),
    ("0.5.17", ("sglang", "serve"), "sglang serve", "/server_info", "/health_generate", SpecV2.REMOVED_WARNS),
    ("0.5.20", ("sglang", "serve"), "sglang serve", "/server_info", "/ready", SpecV2.REMOVED_WARNS),
    ("0.5.21", ("sglang", "serve"), "sglang serve", "/server_info", "/ready", SpecV2.IGNORED),
])
def test_dialect_of_each_era_comes_from_its_wheel(version: str, entry: tuple[str, ...], prog: str, info: str,
                                                  ready: str, spec_v2: SpecV2) -> None:
    d = dialect(parse_version(version))
    assert (d.entry_point, d.prog_for(d.entry_point), d.server_info_path, d.readiness_path, d.spec_v2) == (
        entry, prog, info, ready, spec_v2)
    assert d.serve_cli == (parse_version(version) >= parse_version("0.5.5"))


def test_renames_come_from_the_tables() -> None:
    h = history.history()["--mamba-scheduler-strategy"]
    assert h.successors == ("--mamba-radix-cache-strategy",)
    assert (str(h.first), str(h.deprecated_in), str(h.last), str(h.dropped_in)) == ("0.5.7", "0.5.14", "0.5.19",
                                                                                      "0.5.20")
    assert history.history()["--cuda-graph-max-bs"].successors == ("--cuda-graph-max-bs-decode",
                                                                   "--cuda-graph-max-bs-prefill")
    assert history.successors_in("--enable-flashmla", V23) == ("--attention-backend",)
    for h in history.renames():
        for v in (h.dropped_in, h.deprecated_in):
            if v is not None:
                assert history.successors_in(h.option, v), (h.option, v)


def test_abbreviation_lookup() -> None:
    old, new = load_table(V10), load_table(V23)
    tp = new.match("--tp")
    assert tp.kind is MatchKind.ABBREVIATION and tp.flag is not None and tp.flag.dest == "tp_size"
    assert new.match("--tp-size=2").kind is MatchKind.EXACT
    amb = new.match("--cuda-graph-max-bs")
    assert amb.kind is MatchKind.AMBIGUOUS
    assert amb.options == ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill")
    assert old.match("--cuda-graph-max-bs").kind is MatchKind.EXACT
    assert new.match("--mamba-scheduler-strategy").kind is MatchKind.UNKNOWN
    spec = old.get("--speculative-algorithm")
    assert spec is not None and spec.choices == ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
    new_spec = new.get("--speculative-algorithm")
    assert new_spec is not None and new_spec.choices is None


def test_metric_tables() -> None:
    from sglang_operator.sglang.metrics import load_metrics

    old, new = load_metrics(V10), load_metrics(V23)
    assert old["sglang:spec_accept_length"].type == "gauge"
    assert "sglang:spec_num_draft_tokens" in new and "sglang:spec_num_draft_tokens" not in old
    gen = new["sglang:generation_tokens_total"]
    assert (gen.family, gen.type, gen.labels) == ("sglang:generation_tokens", "counter", ("is_streaming",))
    assert new["sglang:num_retracted_reqs"].multiprocess_mode == "all"
