"""Filtered parse of SGLang's exposition: only the wanted families, strictly; broken bodies are errors with a reason;
duplicates, NaN and missing buckets are handled as Prometheus handles them."""

from __future__ import annotations

import math

import pytest
from expo import LABELS, exposition

from sglang_operator.decisions.sampling.parse import LineFilter, ParseError, parse_text
from sglang_operator.decisions.sampling.roles import (
    DRAIN_ROLES,
    ROLE_NAMES,
    SAMPLER_ROLES,
    MetricTableError,
    Role,
    build_roles,
    roles_for,
)
from sglang_operator.sglang.metrics import load_metrics
from sglang_operator.sglang.versions import parse_version

R23 = roles_for(parse_version("0.5.23"))


def test_every_role_name_is_in_a_supported_release_table_with_its_type() -> None:
    tables = [load_metrics(parse_version(v)) for v in ("0.5.10", "0.5.23")]
    for role, (name, kind) in ROLE_NAMES.items():
        found = [t[name].type for t in tables if name in t]
        assert found and set(found) == {kind}, (role, name, found)
    assert set(R23.names) == SAMPLER_ROLES == set(Role) - {Role.E2E_REQUEST_LATENCY}  # 0.5.23 has every figure
    assert set(roles_for(parse_version("0.5.23"), DRAIN_ROLES).names) == DRAIN_ROLES
    with pytest.raises(MetricTableError, match="is a gauge"):
        build_roles({"sglang:generation_tokens_total": "gauge"})


def test_reads_the_wanted_series_and_skips_the_rest() -> None:
    p = parse_text(exposition(gen=512, verify=188, running=2, accept_length=2.7).encode(), R23)
    assert sum(p.counters[Role.GENERATION_TOKENS].values()) == 512
    assert list(p.counters[Role.SPEC_VERIFY_CALLS].values()) == [188]
    assert list(p.gauges[Role.RUNNING_REQUESTS].values()) == [2]
    assert Role.TIME_TO_FIRST_TOKEN in p.histograms and len(p.histograms) == 2  # e2e latency is not read
    [itl] = p.histograms[Role.INTER_TOKEN_LATENCY].values()
    assert itl.buckets[-1][0] == math.inf and itl.count == 0 and itl.sum == 0


def test_chunk_boundaries_do_not_matter() -> None:
    body = exposition(gen=77, verify=30, ttft=(1, 2, 3, 4, 5, 6, 7, 8), ttft_sum=9.5).encode()
    whole = parse_text(body, R23)
    f = LineFilter(R23)
    for i in range(0, len(body), 7):
        f.feed(body[i:i + 7])
    assert f.finish() == whole


@pytest.mark.parametrize(("body", "reason"), [
    (b"<html><body>502 Bad Gateway</body></html>\n", "parse"),
    (b'{"error": "not found"}\n', "parse"),
    (b"\x00\xff\xfe binary \x01\x02\n", "parse"),
    (exposition(gen=5).encode()[:-40], "truncated"),  # cut inside the last line: no final line feed
    (exposition(gen=5).replace("sglang:generation_tokens_total{", "sglang:generation_tokens_total{=").encode(),
     "parse"),
    (exposition(gen=5).replace(" 5\n", " five\n", 1).encode(), "parse"),
    (b"sglang:num_running_reqs{model_name=\"\xff\xfe\"} 1\n", "parse"),
])
def test_broken_bodies_are_errors_with_a_reason(body: bytes, reason: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_text(body, R23)
    assert err.value.reason == reason


def test_empty_body_and_comments_only_are_valid_and_empty() -> None:
    assert parse_text(b"", R23).counters == {}
    assert parse_text(b"# HELP x y\n# TYPE x gauge\n", R23).gauges == {}


def test_duplicate_series_keep_the_first_sample_like_prometheus() -> None:
    dup = f'sglang:generation_tokens_total{{{LABELS},is_streaming="true"}} 999\n'
    p = parse_text((exposition(gen=5) + dup).encode(), R23)
    assert p.duplicates == 1
    assert p.counters[Role.GENERATION_TOKENS]['engine_type="unified",is_streaming="true",'
                                              'model_name="Qwen/Qwen3.6-27B"'] == 5


def test_nan_and_inf_are_kept_as_values() -> None:
    text = exposition(gen=5).replace("sglang:spec_accept_rate{", "sglang:spec_accept_rate{x=\"1\",", 1)
    text += "\n".join(['sglang:spec_accept_rate{x="2"} NaN', 'sglang:token_usage{x="3"} +Inf', ""])
    p = parse_text(text.encode(), R23)
    rates = sorted(p.gauges[Role.ACCEPT_RATE].values(), key=str)
    assert any(math.isnan(v) for v in rates) and math.inf in p.gauges[Role.TOKEN_USAGE].values()


def test_histogram_with_missing_buckets_is_kept_as_it_is() -> None:
    lines = [ln for ln in exposition(ttft=(1, 1, 1, 1, 1, 1, 1, 1), ttft_sum=2.0).splitlines()
             if 'le="+Inf"' not in ln and 'le="0.4"' not in ln]
    p = parse_text(("\n".join(lines) + "\n").encode(), R23)
    [series] = p.histograms[Role.TIME_TO_FIRST_TOKEN].values()
    assert [le for le, _ in series.buckets] == [0.1, 0.2, 0.6, 0.8, 1.0, 2.0, 4.0]
    assert series.count == 8
