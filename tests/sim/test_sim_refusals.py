"""What the simulator refuses as a real server would (issue 40 item 5): weights larger than the GPUs end the start-up
with PyTorch's out-of-memory error (exit 1, the pod crash-loops); a model without a profile is sized from its config
(a ``sized`` entry of ``models.yaml`` or a local directory's ``config.json``) or refused before anything loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_sim.launch import spec_shape
from sglang_sim.memory import StartupError, check_weights, format_size, plan_memory
from sglang_sim.profiles import UnknownModel, load_gpu_profile, load_model_profile, size_from_config, sized_models
from simproc import GPU, free_port

DSV3 = "deepseek-ai/DeepSeek-V3"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "


def _run(argv: list[str], gpu: str = GPU) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "sglang_sim", "sglang", "serve", *argv, "--port", str(free_port()),
           "--sim-sglang-version", "0.5.23", "--sim-gpu", gpu, "--sim-load-seconds", "30"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ))


def test_deepseek_v3_is_sized_from_its_config() -> None:
    """671B parameters, 37B active (its model card), FP8: 625 GiB of weights, the NextN layer 11 GiB; MLA's latent
    cache (61 layers × (512 + 64) × 2 bytes), on every TP rank whole."""
    [entry] = [s for s in sized_models() if s.name == "deepseek-v3"]
    size = size_from_config(entry.config)
    assert round(size.parameters / 1e9) == 671 and round(size.active_parameters / 1e9) == 37
    assert size.bytes_per_parameter == 1.0 and size.kv_bytes_per_token == 61 * 576 * 2 and size.kv_latent
    model = load_model_profile(DSV3)
    assert model.architecture == "DeepseekV3ForCausalLM" and model.draft_architecture == "DeepseekV3ForCausalLMNextN"
    assert 620 < model.weights_gib < 630 and 10 < model.draft_weights_gib < 12 and model.num_layers == 61
    assert model.context_length == 163840 and not model.hybrid_mamba
    assert load_model_profile("/models/deepseek-ai/DeepSeek-R1-0528").name == "deepseek-v3"


def test_a_profiled_model_keeps_its_profile() -> None:
    assert load_model_profile("Qwen/Qwen3.6-27B").name == "qwen3.6-27b"
    assert load_model_profile("meta-llama/Llama-3.1-8B-Instruct").num_layers == 32


def test_a_local_model_directory_is_sized_from_its_config_json(tmp_path: Path) -> None:
    """Llama-3.1-8B's config.json: 8.03B parameters in bfloat16, 128 KiB of KV cache per token."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = load_model_profile(str(tmp_path))
    assert model.architecture == "LlamaForCausalLM" and model.context_length == 131072
    assert round(size_from_config(config).parameters / 1e9, 2) == 8.03
    assert 14.9 < model.weights_gib < 15.0 and model.kv_bytes_per_token == 131072 and not model.kv_latent
    del config["hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnknownModel, match=r"its config\.json has no 'hidden_size'"):
        load_model_profile(str(tmp_path))


def test_a_model_without_profile_or_config_is_refused_before_loading() -> None:
    with pytest.raises(UnknownModel, match=r"no profile for model 'org/unknown-7b' and no config.json"):
        load_model_profile("org/unknown-7b")
    proc = _run(["--model-path", "org/unknown-7b"])
    assert proc.returncode == 1
    assert "sglang-sim: no profile for model 'org/unknown-7b'" in proc.stderr and "deepseek-v3" in proc.stderr
    assert "Load weight begin" not in proc.stderr


def test_weights_larger_than_the_gpus_fail_with_pytorchs_out_of_memory_error() -> None:
    """DeepSeek-V3 on 2 × RTX A6000: 312 GiB per GPU of 47.3 free; the layer that does not fit is refused."""
    model, gpu = load_model_profile(DSV3), load_gpu_profile(GPU)
    with pytest.raises(StartupError) as err:
        check_weights(model, gpu, 2, False)
    msg = str(err.value)
    layer = model.weights_gib / 2 / 61
    assert msg.startswith(f"{OOM}{format_size(layer)}. GPU 0 has a total capacity of 47.99 GiB of which ")
    allocated = int(gpu.avail_gib / layer) * layer
    assert f"{format_size(gpu.avail_gib - allocated)} is free." in msg
    assert f"Of the allocated memory {format_size(allocated)} is allocated by PyTorch" in msg
    assert msg.endswith("(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    with pytest.raises(StartupError, match="CUDA out of memory"):  # the memory plan checks it first
        plan_memory(model, gpu, {"tp_size": 2}, None, {})
    check_weights(model, load_gpu_profile("NVIDIA H100 80GB HBM3"), 16, True)  # fits 16 × H100: no error
    # 16 × RTX A6000 hold the weights, but not at the automatic fraction: SGLang's own message
    with pytest.raises(StartupError, match=r"^RuntimeError: Not enough memory\. Please try to increase"):
        plan_memory(model, gpu, {"tp_size": 16}, None, {})
    args = {"tp_size": 16, "mem_fraction_static": 0.9, "max_running_requests": 16, "context_length": 32768,
            "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4}
    plan = plan_memory(model, gpu, args, spec_shape(args), {})
    assert plan.max_total_num_tokens > 32768  # the latent cache is not split over the 16 ranks: 140 KiB a token


def test_a_server_whose_weights_do_not_fit_exits_1_at_once() -> None:
    """The parameters are allocated as the model is built: the error comes right after ``Load weight begin``,
    not after the (here 30 s) load."""
    proc = _run(["--model-path", DSV3, "--tp-size", "2"])
    assert proc.returncode == 1
    err = proc.stderr
    assert " TP1] Load weight begin. avail mem=47.30 GB" in err
    assert " TP0] Scheduler hit an exception: Traceback (most recent call last):\n" + OOM in err
    assert err.rstrip().splitlines()[-1].startswith(OOM) and "Load weight end" not in err


def test_a_worker_node_whose_weights_do_not_fit_exits_1() -> None:
    proc = _run(["--model-path", DSV3, "--tp-size", "4", "--nnodes", "2", "--node-rank", "1",
                 "--dist-init-addr", "dsv3-0.dsv3-0.ml:20000"])
    assert proc.returncode == 1
    assert " TP3] Load weight begin." in proc.stderr and " TP2] Scheduler hit an exception:" in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1].startswith(OOM)
