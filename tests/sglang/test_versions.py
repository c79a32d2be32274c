"""Versions, dialects, committed tables and argparse-style flag lookup."""

from __future__ import annotations

import pytest

from sglang_operator.sglang.flags import MatchKind, load_table
from sglang_operator.sglang.versions import (
    RENAMES,
    SGLangVersion,
    SGLangVersionError,
    SpecV2,
    dialect,
    nearest_supported,
    parse_image_tag,
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


def test_eras() -> None:
    assert nearest_supported(SGLangVersion(0, 5, 13)) == V10
    assert nearest_supported(SGLangVersion(0, 5, 21)) == V23
    for bad in (SGLangVersion(0, 5, 9), SGLangVersion(0, 5, 16), SGLangVersion(0, 5, 24)):
        with pytest.raises(SGLangVersionError, match="not supported"):
            nearest_supported(bad)


def test_dialects() -> None:
    old, new = dialect(V10), dialect(V23)
    assert (old.readiness_path, new.readiness_path) == ("/health_generate", "/ready")
    assert old.spec_v2 is SpecV2.OPT_IN and dialect(SGLangVersion(0, 5, 12)).spec_v2 is SpecV2.DEFAULT_ON
    assert new.spec_v2 is SpecV2.IGNORED and new.spec_v2_enabled("0")
    assert not old.spec_v2_enabled(None) and old.spec_v2_enabled("1") and not old.spec_v2_enabled("no")
    assert new.flag_for("--mamba-scheduler-strategy") == ("--mamba-radix-cache-strategy",)
    assert old.flag_for("--mamba-scheduler-strategy") == ("--mamba-scheduler-strategy",)


def test_renames_agree_with_tables() -> None:
    old, new = load_table(V10), load_table(V23)
    for before, after in RENAMES.items():
        assert before in old and before not in new
        assert all(a in new and a not in old for a in after)


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
