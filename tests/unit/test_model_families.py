"""Every model family the planner models (issue 9), against what SGLang 0.5.15.post1's code allocates.

Parameter counts are the model cards' published totals (an independent figure: the planner sums the
tensors SGLang creates, the card counts the checkpoint's). KV cell sizes are the pool configurator's
formulas (model_executor/pool_configurator.py) evaluated by hand. What the planner does not model is
refused with exit 21, never priced.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest

from vramkit import catalog
from vramkit.core.memory.weight_load import replay_load
from vramkit.core.model import arch
from vramkit.core.plan.planner import (
    Knobs,
    Target,
    decode_read_bytes,
    kv_bytes_per_token,
    kv_layout,
    plan,
    weight_components,
)
from vramkit.core.render.sglang import compose_yaml, model_path_for, sglang_args, shell_line
from vramkit.errors import Exit, VramkitError
from vramkit.hf_config import parse_config, read_model_config
from vramkit.units import GiB


@pytest.fixture(scope="module")
def engine():
    return catalog.engine()


def _params(name: str) -> float:
    m = catalog.model(name)
    return sum(weight_components(m).values()) / m.dtype_bytes


# ----------------------------------------------------------------------------------------------
# the catalog: each family parses, sizes match the model cards
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, family, quant", [
    ("qwen3-coder-30b-a3b-instruct", "moe", None),
    ("qwen3-30b-a3b-gptq-int4", "moe", "gptq"),
    ("qwen1.5-moe-a2.7b-chat-gptq-int4", "moe", "gptq"),
    ("deepseek-v2-lite-chat", "moe+mla", None),
    ("gpt-oss-20b", "moe+sliding-window", "mxfp4"),
    ("gemma-2-9b-it", "sliding-window", None),
    ("qwen3-8b", "dense", None),
])
def test_catalogued_family(name, family, quant):
    m = catalog.model(name)
    assert m.family == family
    assert (m.quantization.method if m.quantization else None) == quant


@pytest.mark.parametrize("name, card_params", [
    ("qwen3-coder-30b-a3b-instruct", 30.5e9),   # "30.5B in total and 3.3B activated"
    ("deepseek-v2-lite-chat", 15.7e9),          # DeepSeek-V2-Lite: 15.7B total, 2.4B active
    ("gemma-2-9b-it", 9.24e9),
    ("qwen3-8b", 8.2e9),
])
def test_16bit_weights_match_the_card(name, card_params):
    assert abs(_params(name) - card_params) / card_params < 0.01, _params(name)


def test_moe_is_not_priced_as_its_active_part():
    # issue 9: main said 6.07 GiB FITS for Qwen3-Coder-30B-A3B; SGLang allocates about 57 GiB
    m = catalog.model("qwen3-coder-30b-a3b-instruct")
    c = weight_components(m)
    assert 56 * GiB < sum(c.values()) < 58 * GiB
    assert c["experts"] == 48 * 2 * (128 * 2 * 768 * 2048 + 128 * 2048 * 768)    # w13 + w2, bf16
    assert c["router"] == 48 * 128 * 2048 * 2 and c["shared_experts"] == 0
    p = plan(m, Target(gpu=catalog.gpu("rtx-5060-ti-16gb")), Knobs(context=8192), catalog.engine(),
             with_alternatives=False)
    assert not p.fits


def test_gpt_oss_mxfp4_experts_and_16bit_rest():
    m = catalog.model("gpt-oss-20b")
    c = weight_components(m)
    # Mxfp4MoEMethod: w13 [32, 5760, 1440] u8 + scales [32, 5760, 90] + bias bf16, w2 likewise
    per_layer = 32 * 5760 * 1440 + 32 * 5760 * 90 + 32 * 5760 * 2 + 32 * 2880 * 1440 + 32 * 2880 * 90 + 32 * 2880 * 2
    assert c["experts"] == 24 * per_layer
    assert 12.5 * GiB < sum(c.values()) < 13.3 * GiB       # the published checkpoint is 13.8 GB
    assert m.dtype == "bfloat16" and m.attention_sinks and m.o_bias


def test_gpt_oss_experts_follow_the_cards_moe_runner(engine):
    """SGLang lays MXFP4 experts out per MoE runner, and picks the runner by the card (arg_groups/overrides.py):
    marlin on SM120 pads the intermediate 2880 to 2944 and the hidden 2880 to 3072 (measured through the marlin
    runner on the H100: benchmarks/calibration/gptoss-marlin-24g.json), triton_kernels on Hopper pads neither."""
    m = catalog.model("gpt-oss-20b")
    assert arch.mxfp4_backend_for((12, 0)) == "marlin" and arch.mxfp4_backend_for((9, 0)) == "triton_kernels"
    assert arch.mxfp4_backend_for((10, 0)) == "flashinfer" and arch.mxfp4_backend_for(None) == "triton_kernels"
    marlin = weight_components(m, 1, "marlin")["experts"]
    per_layer = 32 * (2 * 2944 * 3072 // 2 + 2 * 2944 * 3072 // 32 + 2 * 2944 * 2
                      + 3072 * 2944 // 2 + 3072 * 2944 // 32 + 3072 * 2)
    assert marlin == 24 * per_layer
    knobs = Knobs(context=8192, mem_fraction=0.85, max_running=8)
    rtx50 = plan(m, Target(gpu=catalog.gpu("rtx-5090-32gb")), knobs, engine, with_alternatives=False)
    hopper = plan(m, Target(gpu=catalog.gpu("h100-80gb")), knobs, engine, with_alternatives=False)
    assert rtx50.weights_by_component["experts"] == marlin > hopper.weights_by_component["experts"]
    assert any("laid out for marlin" in n for n in rtx50.notes)
    # the kit's default card: the marlin layout does not leave room for a pool on 16 GB
    assert not plan(m, Target(gpu=catalog.gpu("rtx-5060-ti-16gb")), knobs, engine, with_alternatives=False).fits
    # a card of unknown compute capability: the layout would be a guess, so the plan is refused (exit 21)
    unknown = replace(catalog.gpu("rtx-5090-32gb"), name="nvml:NVIDIA RTX PRO 6000", compute_capability=None)
    with pytest.raises(VramkitError) as e:
        plan(m, Target(gpu=unknown), knobs, engine, with_alternatives=False)
    assert e.value.code == Exit.UNSUPPORTED_MODEL and "compute capability" in e.value.what
    assert plan(catalog.model("qwen3-8b"), Target(gpu=unknown), knobs, engine, with_alternatives=False)  # others plan


def test_qwen2_moe_shared_expert_and_gate_are_16bit_router_side():
    m = catalog.model("qwen1.5-moe-a2.7b-chat-gptq-int4")
    layer = arch.weight_layout(m, 1, 1).layers[m.moe.moe_layers.index(True)]
    e = {role: sum(p.nbytes for p in layer if p.role == role) for role in ("router", "shared")}
    # router [60, 2048] + shared_expert_gate [1, 2048], fp16, never quantized (quant_config=None)
    assert e["router"] == (60 + 1) * 2048 * 2
    # the shared expert (5632) is a GPTQ MLP: 4-bit qweight + scales + zeros + g_idx
    assert 2048 * 2 * 5632 // 2 < e["shared"] < 2048 * 2 * 5632


def test_gptq_moe_load_frees_g_idx_and_keeps_repacked_weights():
    m = catalog.model("qwen3-30b-a3b-gptq-int4")
    layout = arch.weight_layout(m, 1, 4096)
    r = replay_load(layout)
    checkpoint = sum(p.nbytes for layer in layout.layers for p in layer)
    g_idx = sum(p.nbytes for layer in layout.layers for p in layer if "g_idx" in p.name)
    assert g_idx > 0
    on_gpu_layers = r.gpu_tensor_bytes - sum(p.nbytes for p in (*layout.head, *layout.tail)) - layout.rope_first_layer
    assert abs(on_gpu_layers - (checkpoint - g_idx)) < 64 << 20     # + marlin workspaces
    assert r.gpu_reserved_bytes >= r.gpu_tensor_bytes


def test_float32_config_is_served_in_16bit():
    m = catalog.model("qwen3-8b")
    assert m.checkpoint_dtype == "float32" and m.dtype == "float16" and m.dtype_bytes == 2
    assert any("float16" in n for n in m.notes)


def test_gemma2_ties_embeddings_when_the_config_is_silent():
    m = catalog.model("gemma-2-9b-it")
    assert m.tie_word_embeddings and weight_components(m)["lm_head"] == 0
    assert m.norms_per_layer == 4


def test_head_dim_given_or_derived():
    base = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
            "num_hidden_layers": 2, "vocab_size": 1000, "intermediate_size": 8}
    assert parse_config(base, name="x").head_dim == 128
    assert parse_config(base | {"head_dim": 160}, name="x").head_dim == 160


def test_nested_text_config_is_read():
    cfg = {"architectures": ["MistralForCausalLM"], "torch_dtype": "bfloat16",
           "text_config": {"hidden_size": 5120, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                           "num_hidden_layers": 40, "vocab_size": 131072, "intermediate_size": 32768,
                           "rope_parameters": {"rope_theta": 1e9}}}
    m = parse_config(cfg, name="nested")
    assert (m.hidden_size, m.num_layers, m.head_dim, m.rope_theta) == (5120, 40, 128, 1e9)


# ----------------------------------------------------------------------------------------------
# KV pools
# ----------------------------------------------------------------------------------------------
def test_mla_kv_is_the_latent_not_the_heads():
    m = catalog.model("deepseek-v2-lite-chat")
    # (kv_lora_rank + qk_rope_head_dim) x layers x 2 B; not split by tp (MLA keeps one latent per token)
    assert kv_bytes_per_token(m, "auto") == (512 + 64) * 27 * 2
    assert kv_bytes_per_token(m, "fp8_e4m3") == (512 + 64) * 27
    assert kv_bytes_per_token(m, "auto", tp=2) == (512 + 64) * 27 * 2


def test_gpt_oss_hybrid_swa_pool():
    m = catalog.model("gpt-oss-20b")
    kv = kv_layout(m, "auto")
    per_layer = 8 * 2 * 64 * 2
    assert (kv.full_layers, kv.swa_layers, kv.full_per_token) == (12, 12, per_layer)
    assert kv.cell == 12 * per_layer + 0.8 * 12 * per_layer
    assert kv.pool_bytes(1000) == 1000 * 12 * per_layer + 800 * 12 * per_layer


def test_gemma2_gets_one_full_pool_and_says_so(engine):
    m = catalog.model("gemma-2-9b-it")
    assert kv_bytes_per_token(m, "auto") == 8 * 2 * 256 * 42 * 2
    p = plan(m, Target(gpu=catalog.gpu("rtx-4090-24gb")), Knobs(context=8192, mem_fraction=0.85), engine,
             with_alternatives=False)
    assert any("disables its hybrid sliding-window pool" in n for n in p.notes)


# ----------------------------------------------------------------------------------------------
# decode ceilings follow the bytes
# ----------------------------------------------------------------------------------------------
def test_expected_distinct_experts():
    assert arch.expected_distinct_experts(128, 8, 1) == pytest.approx(8)
    assert arch.expected_distinct_experts(128, 8, 2) == pytest.approx(128 * (1 - (120 / 128) ** 2))
    assert arch.expected_distinct_experts(128, 8, 1000) == pytest.approx(128, rel=1e-3)
    assert arch.expected_distinct_experts(128, 8, 0) == 0


def test_batch1_reads_only_the_active_experts():
    # issue 9: Qwen3-Coder-30B-A3B reads ~5.7 GiB per token at batch 1, not 57
    m = catalog.model("qwen3-coder-30b-a3b-instruct")
    r = replay_load(arch.weight_layout(m, 1, 32768))
    one = decode_read_bytes(m, r.live_by_role, 1)
    assert 5.4 * GiB < one < 6.0 * GiB
    many = decode_read_bytes(m, r.live_by_role, 64)
    assert one < many < r.gpu_tensor_bytes


def test_offloaded_moe_weights_keep_their_pcie_term(engine):
    m = catalog.model("qwen3-coder-30b-a3b-instruct")
    gpu = catalog.gpu("rtx-4090-24gb")
    base = Knobs(context=8192, kv_dtype="fp8_e5m2", mem_fraction=0.85, max_running=8)
    p = plan(m, Target(gpu=gpu, host_ram_available_bytes=128 * GiB), replace(base, cpu_offload_gib=40), engine,
             with_alternatives=False)
    assert p.weights_offloaded_bytes >= 40 * GiB
    assert p.decode_tok_s_ceiling < gpu.pcie_bytes_s / p.weights_offloaded_bytes


# ----------------------------------------------------------------------------------------------
# the gate: refused with a named reason and exit 21, never a number
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg, says", [
    ({"architectures": ["FalconForCausalLM"]}, "FalconForCausalLM"),
    ({"architectures": ["Gemma3ForConditionalGeneration"], "text_config": {}}, "vision tower"),
    ({"architectures": ["Mistral3ForConditionalGeneration"], "text_config": {}}, "vision tower"),
    ({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
      "vocab_size": 10, "intermediate_size": 8, "quantization_config": {"quant_method": "bitsandbytes"}},
     "bitsandbytes"),
    ({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
      "vocab_size": 10, "intermediate_size": 8, "quantization_config": {"quant_method": "mxfp4"}}, "mxfp4"),
    ({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
      "vocab_size": 10, "intermediate_size": 8, "quantization_config": {"quant_method": "awq", "bits": 8}}, "8-bit"),
    ({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
      "vocab_size": 10, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
      "mlp_only_layers": [0]}, "mlp_only_layers"),
])
def test_unmodelled_is_refused_with_exit_21(tmp_path, cfg, says):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(VramkitError) as e:
        read_model_config(tmp_path)
    assert e.value.code == Exit.UNSUPPORTED_MODEL == 21
    assert says in e.value.what


def test_missing_architectures_is_a_bad_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 896}))
    with pytest.raises(VramkitError) as e:
        read_model_config(tmp_path)
    assert e.value.code == Exit.BAD_FILE


# ----------------------------------------------------------------------------------------------
# inputs and rendering (issue 9 items 5 and 6)
# ----------------------------------------------------------------------------------------------
def test_chunked_prefill_minus_one_is_one_step_of_the_whole_request(engine):
    m = catalog.model("qwen2.5-coder-14b-instruct-gptq-int4")
    target = Target(gpu=catalog.gpu("rtx-4090-24gb"))
    k = Knobs(context=32768, kv_dtype="fp8_e5m2", mem_fraction=0.8, max_running=2)
    chunked = plan(m, target, replace(k, chunked_prefill=2048), engine, with_alternatives=False)
    whole = plan(m, target, replace(k, chunked_prefill=-1), engine, with_alternatives=False)
    assert whole.activation_bytes == pytest.approx(chunked.activation_bytes * 16, rel=1e-6)
    assert whole.activation_bytes > 4 * GiB                    # issue 9: "one 32K step needs 4.2 GiB"
    assert whole.knobs.chunked_prefill == -1
    assert sglang_args(m, whole, model_path="x", port=30000)[sglang_args(m, whole, model_path="x", port=30000).index(
        "--chunked-prefill-size") + 1] == "-1"


def test_every_alternative_names_every_setting_it_changes(engine):
    m = catalog.model("qwen2.5-coder-14b-instruct-gptq-int4")
    p = plan(m, Target(gpu=catalog.gpu("rtx-5060-ti-16gb")), Knobs(context=32768), engine)
    assert p.alternatives
    flags = {"kv_dtype": "--kv-cache-dtype", "mem_fraction": "--mem-fraction-static",
             "cpu_offload_gib": "--cpu-offload-gb",
             "tp": "--tp-size", "context": "context", "concurrency": "at once", "max_running": "--max-running-requests",
             "kt_embed_host": "--kt-embed-host"}
    for a in p.alternatives:
        for key in a.knobs:
            if key != "model":
                assert flags[key] in a.change, (a.change, a.knobs)
    fraction_only = [a for a in p.alternatives if set(a.knobs) == {"mem_fraction"}]
    assert all("kv-cache-dtype" not in a.change for a in fraction_only)


def test_arguments_line_is_shell_safe(engine):
    m = catalog.model("qwen2.5-coder-7b-instruct-gptq-int4")
    p = plan(m, Target(gpu=catalog.gpu("rtx-5060-ti-16gb")), Knobs(context=131072, kv_dtype="fp8_e5m2"), engine,
             with_alternatives=False)
    argv = sglang_args(m, p, model_path=model_path_for(m), port=30000)
    assert any(a.startswith("{") for a in argv)                 # the YaRN JSON override
    assert shlex.split(shell_line(argv)) == argv


def test_folder_model_renders_its_folder_everywhere(tmp_path, engine):
    src = catalog.CONFIG_DIR / "models" / "qwen2.5-0.5b-instruct" / "config.json"
    (tmp_path / "config.json").write_text(src.read_text())
    m = catalog.model(str(tmp_path))
    assert m.hf_id == "" and model_path_for(m) == str(tmp_path.resolve())
    p = plan(m, Target(gpu=catalog.gpu("rtx-4090-24gb")), Knobs(context=8192), engine, with_alternatives=False)
    argv = sglang_args(m, p, model_path=model_path_for(m), port=30000)
    assert argv[:2] == ["--model-path", str(tmp_path.resolve())]
    text = compose_yaml(project="p", preset="x", model=m, gpu_name="g", p=p, image="i",
                        argv=["--model-path", f"/models/{tmp_path.name}"], gpu_ids=[0], source_note="n", port=30000,
                        model_mount=(str(tmp_path.resolve()), f"/models/{tmp_path.name}"))
    assert f'"{tmp_path.resolve()}:/models/{tmp_path.name}:ro"' in text


def test_up_starts_a_folder_model_from_its_folder(tmp_path):
    """`vramkit up --model <folder>`: native runs SGLang on the folder, the compose file mounts it read-only."""
    import argparse

    from vramkit.commands.plan import add_plan_arguments, request_from_args
    from vramkit.launch import steps
    from vramkit.launch.resolve import resolve

    src = catalog.CONFIG_DIR / "models" / "qwen2.5-0.5b-instruct" / "config.json"
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(src.read_text())
    ap = argparse.ArgumentParser()
    add_plan_arguments(ap)
    r = resolve(request_from_args(ap.parse_args(["--model", str(folder), "--gpu", "rtx-4090-24gb", "--context",
                                                 "8192", "--host-ram-gib", "64"])))
    native, _ = steps.build(r, steps.LaunchSpec(name="t", runtime="native"))
    assert native[native.index("--model-path") + 1] == str(folder.resolve())
    docker_argv, compose = steps.build(r, steps.LaunchSpec(name="t", runtime="docker"))
    assert "/models/my-model" in compose and f'"{folder.resolve()}:/models/my-model:ro"' in compose
    assert docker_argv[docker_argv.index("--model-path") + 1] == "/models/my-model"


def test_qwen2_moe_has_qkv_biases():
    # qwen2_moe.py: qkv_bias = getattr(config, "qkv_bias", True); the config has no such key
    m = catalog.model("qwen1.5-moe-a2.7b-chat-gptq-int4")
    assert m.attention_bias
    assert not catalog.model("qwen3-coder-30b-a3b-instruct").attention_bias


def test_fp8_checkpoint_is_not_priced_as_bf16(engine):
    """issue 9: Qwen3-14B-FP8 was refused on a 24 GB card where it fits. The shape is Qwen3-14B's published
    config (40 layers, 5120 hidden, 17408 intermediate, GQA 40/8, head_dim 128) with the block-FP8
    quantization_config Qwen's -FP8 releases carry; an inline fixture, not a catalogued model."""
    cfg = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120, "intermediate_size": 17408,
           "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
           "vocab_size": 151936, "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
           "tie_word_embeddings": False,
           "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                   "weight_block_size": [128, 128]}}
    m = parse_config(cfg, name="qwen3-14b-fp8-shape")
    c = weight_components(m)
    # linears at 1 byte (+ fp32 block scales), embeddings and lm_head at 2
    assert 15.2 * GiB < sum(c.values()) < 15.5 * GiB
    p = plan(m, Target(gpu=catalog.gpu("rtx-4090-24gb")), Knobs(context=32768, kv_dtype="fp8_e5m2"), engine,
             with_alternatives=False)
    assert p.fits and 50_000 < p.kv_pool_tokens < 56_000


# ----------------------------------------------------------------------------------------------
# --cpu-offload-gb as SGLang 0.5.15.post1 + PyTorch do it (GPU session 2026-11-24)
# ----------------------------------------------------------------------------------------------
def test_offloaded_weights_pin_power_of_two_blocks(engine):
    """PyTorch's pinned host allocator rounds each tensor up to a power of two: Qwen3-MoE's 0.75 GiB w13 pins
    1 GiB, so 40 GiB of experts pin about a third more host RAM than their bytes, and the host check uses that."""
    from vramkit.core.memory.weight_load import pinned_size
    assert [pinned_size(n) for n in (1, 1024, 1025, 805_306_368)] == [1, 1024, 2048, GiB]
    m = catalog.model("qwen3-coder-30b-a3b-instruct")
    knobs = Knobs(context=8192, kv_dtype="fp8_e5m2", mem_fraction=0.85, max_running=4, cpu_offload_gib=40)
    p = plan(m, Target(gpu=catalog.gpu("rtx-4090-24gb"), host_ram_available_bytes=128 * GiB), knobs, engine,
             with_alternatives=False)
    assert 1.30 < p.weights_pinned_host_bytes / p.weights_offloaded_bytes < 1.36
    assert p.host_ram_bytes == p.weights_pinned_host_bytes
    # 48 GiB of RAM holds the 40 GiB of weights but not what they pin
    short = plan(m, Target(gpu=catalog.gpu("rtx-4090-24gb"), host_ram_available_bytes=48 * GiB), knobs, engine,
                 with_alternatives=False)
    assert not short.fits and [r.kind for r in short.reasons] == ["host_ram"]
    assert "power of two" in short.reasons[0]


def test_pinned_memory_costs_gpu_page_tables(engine):
    """The weight load's GPU figure grows with what is pinned (config/engine.toml pinned_gpu_map_mib_per_gib):
    removing it brings back the 4.6 % KV error the 40 GiB offload point showed."""
    m = catalog.model("qwen3-coder-30b-a3b-instruct")
    knobs = Knobs(context=8192, kv_dtype="fp8_e5m2", mem_fraction=0.85, max_running=4, cpu_offload_gib=40)
    target = Target(gpu=None, gpu_free_bytes=int(23.31 * GiB))
    with_map = plan(m, target, knobs, engine, with_alternatives=False)
    without = plan(m, target, knobs, replace(engine, pinned_gpu_map_per_gib=0), with_alternatives=False)
    assert with_map.weights_bytes - without.weights_bytes == with_map.weights_pinned_host_bytes * 2 // 1024
    assert with_map.kv_pool_tokens < without.kv_pool_tokens


def test_mla_with_weight_offload_is_refused_and_never_offered(engine):
    """SGLang keeps MLA's w_kc/w_vc beside an offloaded kv_b_proj, in host RAM; the server then dies at its
    first forward (benchmarks/results/gpu/diag-mla-offload.txt). The plan says so; no alternative offers it."""
    m = catalog.model("deepseek-v2-lite-chat")
    gpu = catalog.gpu("rtx-4090-24gb")
    target = Target(gpu=gpu, host_ram_available_bytes=128 * GiB)
    p = plan(m, target, Knobs(context=16384, mem_fraction=0.85, max_running=8, cpu_offload_gib=10), engine)
    assert not p.fits and "sglang" in [r.kind for r in p.reasons]
    too_big = plan(m, target, Knobs(context=131072, concurrency=4, mem_fraction=0.85, max_running=8), engine)
    assert not too_big.fits
    assert too_big.alternatives and not any("cpu_offload_gib" in a.knobs for a in too_big.alternatives)


def test_mla_absorbed_copies_follow_an_offloaded_kv_b_proj():
    """w_kc/w_vc are made on kv_b_proj's device: an offloaded layer keeps none of them on the GPU."""
    m = catalog.model("deepseek-v2-lite-chat")
    layout = arch.weight_layout(m, 1, 4096)
    kv_b = 512 * 16 * (128 + 128) * 2
    whole = replay_load(layout)
    first = replay_load(layout, sum(p.nbytes for p in layout.layers[0]))   # exactly the first layer offloaded
    assert whole.live_by_role["attention"] - first.live_by_role["attention"] == \
        sum(p.nbytes for p in layout.layers[0] if p.role == "attention") + kv_b


def test_gemma3_builds_two_rotary_caches():
    """gemma3_causal.py: sliding layers use rope_local_base_freq, the others rope_theta; get_rope caches one
    RotaryEmbedding per base, so two cos/sin caches (the 1B's weights were 25 MiB short without the second)."""
    m = catalog.model("gemma-3-1b-it")
    assert m.sliding.local_rope_theta == 10000.0 and m.rope_theta == 1e6
    layout = arch.weight_layout(m, 1, 32768)
    assert layout.rope_second == (5, 32768 * 256 * 4)
    assert replay_load(layout).live_by_role["rope"] == 2 * 32768 * 256 * 4
    g2 = arch.weight_layout(catalog.model("gemma-2-9b-it"), 1, 8192)
    assert g2.rope_second == (0, 0)


def test_mla_offload_alternatives_drop_the_offload_and_say_so(engine):
    m = catalog.model("deepseek-v2-lite-chat")
    p = plan(m, Target(gpu=catalog.gpu("rtx-4090-24gb"), host_ram_available_bytes=128 * GiB),
             Knobs(context=8192, mem_fraction=0.85, cpu_offload_gib=10), engine)
    assert p.alternatives
    for a in p.alternatives:
        assert a.knobs.get("cpu_offload_gib") == 0 and "--cpu-offload-gb 0" in a.change
        assert "{" not in a.cost            # every cost is formatted (the max-running one once was not)
    assert any(a.fits and a.knobs.get("tp") == 2 for a in p.alternatives)
