"""The simulator's HTTP surface against a live process: OpenAI client (streaming and not), SGLang's info
endpoints, API-key enforcement, per-version routes and /metrics families."""

from __future__ import annotations

import io

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sglang_sim.engine import SimRequest
from sglang_sim.facts import resolve, version_facts
from sglang_sim.launch import build
from sglang_sim.logfmt import SimLogger
from sglang_sim.metrics import metric_specs, render
from simproc import GPU, KNOWN_GOOD, REGRESSED, SPEC_V2_ENV, RunningSim, start_sim, to_0523

AUTH = {"Authorization": "Bearer sk-test"}


def test_openai_client_streaming_and_not(sim_0523: RunningSim) -> None:
    client = openai.OpenAI(base_url=sim_0523.base_url + "/v1", api_key="sk-test")
    model = client.models.list().data[0].id
    assert model == "Qwen/Qwen3.6-27B"
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "red-black tree"}],
                                          max_tokens=40)
    assert chat.choices[0].finish_reason == "length" and chat.choices[0].message.content
    assert chat.usage is not None and chat.usage.completion_tokens == 40
    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=30, stream=True, stream_options={"include_usage": True})
    pieces, usage, finish = [], None, None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    assert "".join(pieces) and finish == "length"
    assert usage is not None and usage.completion_tokens == 30
    comp = client.completions.create(model=model, prompt="def insert(", max_tokens=12)
    assert comp.choices[0].text and comp.usage is not None and comp.usage.completion_tokens == 12
    texts = [c.choices[0].text for c in client.completions.create(model=model, prompt="x", max_tokens=9, stream=True)]
    assert "".join(texts)


def test_api_key_enforced_except_health_and_metrics(sim_0523: RunningSim) -> None:
    base = sim_0523.base_url
    assert httpx.get(base + "/v1/models").status_code == 401
    assert httpx.get(base + "/v1/models").json() == {"error": "Unauthorized"}
    assert httpx.get(base + "/server_info", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(base + "/health").status_code == 200
    assert httpx.get(base + "/ready").status_code == 200
    assert httpx.get(base + "/metrics").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base + "/v1", api_key="nope").models.list()


def test_server_info_reports_resolved_args_and_accept_length(sim_0523: RunningSim) -> None:
    base = sim_0523.base_url
    r = httpx.post(base + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 200}},
                   headers=AUTH, timeout=30)
    meta = r.json()["meta_info"]
    assert meta["completion_tokens"] == 200 and meta["spec_verify_ct"] > 0
    info = httpx.get(base + "/server_info", headers=AUTH).json()
    assert info["speculative_algorithm"] == "EAGLE"  # NEXTN is reported as EAGLE
    assert info["speculative_num_draft_tokens"] == 4 and info["max_running_requests"] == 16
    assert info["version"] == "0.5.23"
    state = info["internal_states"][0]
    assert 2.0 < state["avg_spec_accept_length"] < 3.5
    assert httpx.get(base + "/get_server_info", headers=AUTH).json()["tp_size"] == 2
    model_info = httpx.get(base + "/model_info", headers=AUTH).json()
    assert model_info["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert httpx.get(base + "/v1/models", headers=AUTH).json()["data"][0]["max_model_len"] == 131072
    assert httpx.post(base + "/flush_cache", headers=AUTH).status_code == 200


def test_0510_routes_and_no_metrics_without_flag() -> None:
    sim = start_sim(REGRESSED, version="0.5.10", env=SPEC_V2_ENV)
    try:
        assert httpx.get(sim.base_url + "/ready").status_code == 404  # /ready exists from 0.5.20
        assert httpx.get(sim.base_url + "/health_generate").status_code == 200
        assert httpx.get(sim.base_url + "/metrics").status_code == 404  # no --enable-metrics
        info = httpx.get(sim.base_url + "/server_info").json()
        assert info["speculative_num_draft_tokens"] == 2 and info["max_running_requests"] == 48
    finally:
        sim.stop()


def test_metrics_endpoint_parses_and_families_are_the_versions(sim_0523: RunningSim) -> None:
    client = openai.OpenAI(base_url=sim_0523.base_url + "/v1", api_key="sk-test")
    for _ in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}], max_tokens=100,
                                            stream=True):
        pass
    text = httpx.get(sim_0523.base_url + "/metrics").text
    specs = metric_specs("0.5.23")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families and set(families) <= set(specs)
    for name, fam in families.items():
        assert fam.type == specs[name].type, name
    for name in ("sglang:spec_accept_length", "sglang:spec_accept_rate", "sglang:gen_throughput",
                 "sglang:num_running_reqs", "sglang:generation_tokens", "sglang:time_to_first_token_seconds",
                 "sglang:inter_token_latency_seconds", "sglang:spec_num_draft_tokens"):
        assert name in families, name
    gen = {s.labels.get("is_streaming"): s.value for s in families["sglang:generation_tokens"].samples
           if s.name.endswith("_total")}
    assert gen["true"] >= 100


@pytest.mark.parametrize(("version", "argv"), [("0.5.10", KNOWN_GOOD), ("0.5.23", to_0523(KNOWN_GOOD))])
def test_rendered_families_and_labels_follow_extracted_list(version: str, argv: list[str]) -> None:
    facts = version_facts(version)
    b = build(facts, resolve([*argv, "--enable-metrics"], facts, SPEC_V2_ENV), {"gpu": GPU}, SPEC_V2_ENV,
              SimLogger(io.StringIO()))
    for i in range(3):
        b.engine.submit(SimRequest(f"r{i}", 50, 60, i % 2 == 0))
    for _ in range(200):
        b.engine.step()
    specs = metric_specs(version)
    families = list(text_string_to_metric_families(render(b.engine.stats, b.metrics_ctx)))
    assert len(families) >= 20
    for fam in families:
        spec = specs[fam.name]
        assert fam.type == spec.type
        for s in fam.samples:
            extra = set(s.labels) - {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "le"}
            assert extra <= set(spec.labels), (fam.name, extra)
    names = {f.name for f in families}
    assert ("sglang:spec_num_steps" in names) == (version == "0.5.23")
    assert ("sglang:engine_load_weights_time" in names) == (version == "0.5.10")
