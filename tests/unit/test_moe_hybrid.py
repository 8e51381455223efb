"""Issue 12: the random-checkpoint layout, the hybrid MoE plan (experts split GPU / host RAM through SGLang's
KTransformers path) and its checks, against the real Qwen3-Coder-30B-A3B config and the H100-host runs."""
from __future__ import annotations

import json

import pytest

from vramkit import catalog
from vramkit.cli import main
from vramkit.core.model import checkpoint as cl
from vramkit.core.plan import kt_hybrid as mo

ROOT = catalog.CONFIG_DIR.parent
CFG = json.loads((ROOT / "config/models/qwen3-coder-30b-a3b-instruct/config.json").read_text())
RUNS = ROOT / "benchmarks/results/gpu/moe"
GiB = 2**30


# --- checkpoint layout -----------------------------------------------------------------------------
def test_fp8_layout_has_qwen3_moe_names_shapes_and_block_scales():
    t = {s.name: s for s in cl.checkpoint_tensors(CFG, "fp8")}
    assert t["model.embed_tokens.weight"].shape == (151936, 2048) and t["lm_head.weight"].dtype == "bf16"
    assert t["model.layers.0.self_attn.q_proj.weight"].shape == (4096, 2048)          # 32 heads x head_dim 128
    assert t["model.layers.0.self_attn.k_proj.weight"].shape == (512, 2048)
    assert t["model.layers.0.self_attn.q_norm.weight"].shape == (128,)
    assert t["model.layers.47.mlp.gate.weight"] == cl.TensorSpec("model.layers.47.mlp.gate.weight", (128, 2048),
                                                                 "bf16", "router")
    e = "model.layers.3.mlp.experts.127"
    assert t[f"{e}.gate_proj.weight"].shape == (768, 2048) and t[f"{e}.gate_proj.weight"].dtype == "fp8_e4m3"
    assert t[f"{e}.down_proj.weight"].shape == (2048, 768)
    assert t[f"{e}.down_proj.weight_scale_inv"].shape == (16, 6) and t[f"{e}.down_proj.weight_scale_inv"].dtype == "f32"
    assert "model.layers.0.self_attn.q_proj.bias" not in t                              # qkv_bias false
    assert len([n for n in t if n.endswith(".gate_proj.weight")]) == 48 * 128
    total = sum(s.nbytes for s in t.values())
    assert total == 31_174_545_408          # what the writer put on the GPU host's disk (moe/checkpoint-fp8.json)
    assert json.loads((RUNS / "checkpoint-fp8.json").read_text())["bytes"] == total


def test_bf16_layout_is_the_released_size():
    total = sum(s.nbytes for s in cl.checkpoint_tensors(CFG, "bf16"))
    assert 30.4e9 < total / 2 < 30.6e9       # "30.5B in total" (the model card)


def test_shards_keep_order_and_bound_size():
    specs = cl.checkpoint_tensors(CFG | {"num_hidden_layers": 2}, "fp8")
    shards = cl.shard(specs, 1 << 30)
    assert [s for g in shards for s in g] == specs
    assert all(sum(s.nbytes for s in g) <= 1 << 30 or len(g) == 1 for g in shards)
    assert cl.shard_name(0, 3) == "model-00001-of-00003.safetensors"


def test_writer_writes_what_the_layout_says(tmp_path):
    torch = pytest.importorskip("torch")
    import sys

    from safetensors import safe_open
    sys.path.insert(0, str(ROOT / "tools"))
    from make_random_checkpoint import write
    small = tmp_path / "cfg"
    small.mkdir()
    (small / "config.json").write_text(json.dumps(CFG | {"num_experts": 4, "vocab_size": 256}))
    info = write(small, tmp_path / "ck", "fp8", layers=1, jobs=1)
    cfg = json.loads((tmp_path / "ck/config.json").read_text())
    assert cfg["quantization_config"]["weight_block_size"] == [128, 128] and cfg["num_hidden_layers"] == 1
    index = json.loads((tmp_path / "ck/model.safetensors.index.json").read_text())["weight_map"]
    expect = {s.name: s for s in cl.checkpoint_tensors(cfg, "fp8")}
    assert set(index) == set(expect) and info["tensors"] == len(expect)
    dt = {"bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn, "f32": torch.float32}
    with safe_open(str(tmp_path / "ck" / index["lm_head.weight"]), "pt") as f:
        for name in f.keys():
            x = f.get_tensor(name)
            assert tuple(x.shape) == expect[name].shape and x.dtype == dt[expect[name].dtype], name
            assert torch.isfinite(x.float()).all(), name


def test_layout_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="format"):
        cl.checkpoint_tensors(CFG, "int3")
    with pytest.raises(ValueError, match="architecture"):
        cl.checkpoint_tensors(CFG | {"architectures": ["MambaForCausalLM"]}, "bf16")


# --- the hybrid plan against the H100-host runs -------------------------------------------------------
def _run(name: str) -> dict:
    return json.loads((RUNS / f"{name}.json").read_text())


def _probe(name: str) -> dict:
    return json.loads((RUNS / f"{name}.probe.json").read_text())


def _h100_plan(method: str, n_gpu=None) -> mo.HybridPlan:
    s = mo.sizes(CFG, "fp8", method, 1)
    return mo.plan_hybrid(s, kt_method=method, free_at_start_bytes=int(15.31 * GiB), mem_fraction=0.85,
                          context=32768, concurrency=1, gpu_bandwidth_bytes_s=3.35e12, pcie_bytes_s=50e9,
                          host_read_bytes_s=93.0e9, host_ram_available_bytes=100 * GiB, server_physical_cores=16,
                          chunked_prefill=4096, hidden_size=2048, num_gpu_experts=n_gpu)


@pytest.mark.parametrize("run, method", [("moe-16g-int4-amx", "AMXINT4"), ("moe-16g-fp8-amx", "FP8"),
                                         ("moe-16g-fp8-avx512", "FP8")])
def test_plan_matches_the_measured_runs(run, method):
    hp = _h100_plan(method)
    m = _run(run)
    assert hp.num_gpu_experts == 43 and hp.cpuinfer_threads == 14      # what the kit chose there
    assert abs(hp.gpu_weights_bytes / GiB - m["log_figures_gib"]["weights"]) < 0.05
    assert abs(hp.kv_pool_tokens / m["log_figures_gib"]["kv_tokens"] - 1) < 0.02
    measured = _probe(run)["decode"][0]["per_stream_tok_s"]
    assert abs(hp.decode_tok_s / measured - 1) < 0.25                   # the bar for the estimate


def test_plan_against_the_run_not_used_in_the_fit():
    # session 1: FP8, 32 GPU experts, SGLang started by hand: 27.9 tok/s, 9.01 GiB of weights
    hp = _h100_plan("FP8", 32)
    probe = json.loads((RUNS / "probe-session1/kt-amx-g32.probe.json").read_text())
    assert abs(hp.decode_tok_s / probe["decode"][0]["per_stream_tok_s"] - 1) < 0.25
    assert abs(hp.gpu_weights_bytes / GiB - 9.01) < 0.05


def test_hybrid_beats_layer_offload_15x_and_int4_is_the_preset():
    int4, fp8 = _h100_plan("AMXINT4"), _h100_plan("FP8")
    assert int4.decode_tok_s > fp8.decode_tok_s
    assert int4.decode_tok_s / int4.offload_decode_tok_s > 15
    assert catalog.presets()["moe"].knobs["kt_method"] == "AMXINT4"
    assert _probe("moe-16g-int4-amx")["decode"][0]["per_stream_tok_s"] >= 25       # the target, measured


def test_host_ram_is_the_cpu_experts_in_the_method_layout():
    hp = _h100_plan("AMXINT4")
    assert hp.host_ram_bytes == (128 - 43) * 48 * mo.kt_expert_bytes(CFG, "AMXINT4")
    layout = json.loads((RUNS / "kt-int4-layout.json").read_text())["bytes"]
    assert layout == 128 * 48 * mo.kt_expert_bytes(CFG, "AMXINT4")      # KT's own writer, on the GPU host
    assert _run("moe-16g-int4-amx")["host_rss_peak_bytes"] > hp.host_ram_bytes


def test_no_room_for_the_context_says_why():
    s = mo.sizes(CFG, "fp8", "AMXINT4", 1)
    hp = mo.plan_hybrid(s, kt_method="AMXINT4", free_at_start_bytes=4 * GiB, mem_fraction=0.85, context=32768,
                        concurrency=1, gpu_bandwidth_bytes_s=448e9, pcie_bytes_s=31.5e9, host_read_bytes_s=60e9,
                        host_ram_available_bytes=8 * GiB, server_physical_cores=8, chunked_prefill=4096,
                        hidden_size=2048)
    assert not hp.fits and hp.num_gpu_experts == 0
    assert any("KV pool" in r for r in hp.reasons) and any("host RAM" in r for r in hp.reasons)


@pytest.mark.parametrize("flags, method, variant", [
    ({"amx_tile", "amx_bf16", "amx_int8", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"}, "AMXINT4", "amx"),
    ({"avx512f", "avx512bw", "avx512_vnni", "avx512vbmi", "avx512_bf16"}, "FP8", "avx512_bf16"),
    ({"avx2", "fma"}, "AMXINT4", None),
    ({"avx2", "fma"}, "LLAMAFILE", "avx2"),
])
def test_cpu_isa_per_method(flags, method, variant):
    got, why = mo.isa_check(method, flags)
    assert got == variant
    if variant is None:
        assert "needs AMX or AVX512-BF16" in why


def test_cpuinfer_leaves_cores_to_sglang():
    assert mo.cpuinfer_threads(16) == 14 and mo.cpuinfer_threads(8) == 6 and mo.cpuinfer_threads(2) == 1


# --- the CLI -------------------------------------------------------------------------------------------
def test_plan_preset_moe_fits_a_5060_ti_and_prints_both_speeds(capsys):
    assert main(["plan", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--host-read-gbs", "60", "--host-ram-gib", "64"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "FITS" in out and "experts/layer on the GPU" in out
    assert "tok/s (derived" in out and "with layer offload" in out
    assert "--kt-method AMXINT4" in out and "--kt-num-gpu-experts 41" in out


def test_plan_json_has_the_hybrid_figures(capsys):
    assert main(["plan", "--json", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--host-read-gbs", "60",
                 "--host-ram-gib", "64"]) == 0
    d = json.loads(capsys.readouterr().out)
    h = d["hybrid"]
    assert d["fits"] and h["num_gpu_experts"] == 41 and h["kt_method"] == "AMXINT4"
    assert h["decode_tok_s"] > 15 * h["offload_decode_tok_s"]
    assert d["weights_bytes"] == h["gpu_weights_bytes"] and d["kv_pool_tokens"] >= 32768
    assert h["host_read_source"] == "--host-read-gbs"


def test_kt_method_on_a_dense_model_is_refused(capsys):
    rc = main(["plan", "--model", "qwen2.5-coder-7b-instruct", "--kt-method", "FP8", "--gpu", "rtx-5060-ti-16gb"])
    assert rc == 64 and "has no experts" in capsys.readouterr().err


def test_fp8_method_needs_the_fp8_checkpoint(capsys):
    rc = main(["plan", "--preset", "moe", "--model", "qwen3-coder-30b-a3b-instruct-fp8", "--kt-method", "BF16",
               "--gpu", "rtx-5060-ti-16gb"])
    assert rc == 64 and "reads a bf16 checkpoint" in capsys.readouterr().err


def test_up_refuses_amxint4_without_the_converted_experts(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("VRAMKIT_KT_WEIGHT_PATH", raising=False)
    rc = main(["up", "--preset", "moe", "--runtime", "native", "--dry-run", "--gpu", "rtx-5060-ti-16gb",
               "--kt-weight-path", str(tmp_path / "missing")])
    out = " ".join(capsys.readouterr().out.split())
    assert "kt-weights" in out and "convert with tools/make_random_checkpoint.py" in out
    assert rc != 0 or "would stop at" in out


def test_a_moe_that_does_not_fit_is_offered_the_hybrid_mode_first(capsys):
    rc = main(["plan", "--json", "--model", "qwen3-coder-30b-a3b-instruct-fp8", "--gpu", "rtx-5060-ti-16gb",
               "--kv-dtype", "fp8_e5m2", "--mem-fraction", "0.85", "--host-read-gbs", "60", "--host-ram-gib", "64"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 10 and not d["fits"] and d["hybrid"] is None
    assert d["alternatives"][0]["knobs"].get("kt_method"), "the hybrid mode ranks above what does not fit"
    alt = d["alternatives"][0]
    assert alt["knobs"]["kt_method"] == "FP8" and alt["fits"]
    assert "layer offload" in alt["cost"] and alt["decode_tok_s_ceiling"] > 15


def test_host_ram_counts_sglang_beside_the_experts():
    s = mo.sizes(CFG, "fp8", "AMXINT4", 1)
    args = dict(kt_method="AMXINT4", free_at_start_bytes=int(14.79 * GiB), mem_fraction=0.85, context=32768,
                concurrency=1, gpu_bandwidth_bytes_s=448e9, pcie_bytes_s=31.5e9, host_read_bytes_s=60e9,
                server_physical_cores=8, chunked_prefill=4096, hidden_size=2048)
    need = mo.plan_hybrid(s, host_ram_available_bytes=None, **args).host_ram_bytes + mo.SGLANG_HOST_BASE
    assert mo.plan_hybrid(s, host_ram_available_bytes=need, **args).fits
    assert not mo.plan_hybrid(s, host_ram_available_bytes=need - GiB, **args).fits
