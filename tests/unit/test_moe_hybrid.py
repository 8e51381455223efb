"""Issues 12, 17, 18: the random-checkpoint layout, the hybrid MoE plan (experts split GPU / host RAM through
SGLang's KTransformers path) planned by the core planner, and its checks, against the real Qwen3-Coder-30B-A3B
config and the H100-host runs."""
from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from vramkit import catalog
from vramkit.cli import main
from vramkit.core.model import checkpoint as cl
from vramkit.core.plan import kt_hybrid as kt
from vramkit.core.plan.planner import Knobs, Target, plan
from vramkit.core.render.sglang import sglang_args
from vramkit.errors import Exit, VramkitError

ROOT = catalog.CONFIG_DIR.parent
CFG = json.loads((ROOT / "config/models/qwen3-coder-30b-a3b-instruct/config.json").read_text())
RUNS = ROOT / "benchmarks/results/gpu/moe"
GiB = 2**30


def one_stream_tok_s(probe: dict) -> float:
    """A committed probe's single-stream decode (moe_probe.py: the median round's per-stream rate)."""
    return next(d["per_stream_tok_s"] for d in probe["decode"] if d["streams"] == 1)


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


@pytest.mark.parametrize("name, fmt", [("qwen3-coder-30b-a3b-instruct", "bf16"),
                                       ("qwen3-coder-30b-a3b-instruct-fp8", "fp8"),
                                       ("qwen2.5-14b-instruct", "bf16"), ("qwen3-8b", "bf16")])
def test_writer_and_planner_agree_on_every_byte(name, fmt):
    """The random-checkpoint writer (checkpoint names) and the planner's weight layout (SGLang's fused
    parameters) are two lists of one model: their totals must match to the byte, or one of them is wrong."""
    from vramkit.core.model import arch
    cfg = json.loads((ROOT / f"config/models/{name}/config.json").read_text())
    written = sum(s.nbytes for s in cl.checkpoint_tensors(cfg, fmt))
    roles = arch.bytes_by_role(arch.weight_layout(catalog.model(name), 1, 1))
    assert written == sum(v for r, v in roles.items() if r != "rope")


def test_gptq_layout_has_the_release_s_names_shapes_and_packing():
    """Qwen's GPTQ-Int4 releases (AutoGPTQ's format): each Linear as qweight int32 [in / 8, out], qzeros int32 [in /
    group, out / 8], scales float16 [in / group, out], g_idx int32 [in]; the router, norms and embeddings float16. The
    group is the config's; a GPTQ the writer cannot make is refused."""
    cfg = json.loads((ROOT / "config/models/qwen3-30b-a3b-gptq-int4/config.json").read_text())
    t = {s.name: s for s in cl.checkpoint_tensors(cfg, "gptq")}
    e = "model.layers.47.mlp.experts.127"
    assert t[f"{e}.gate_proj.qweight"] == cl.TensorSpec(f"{e}.gate_proj.qweight", (256, 768), "i32", "expert")
    assert t[f"{e}.down_proj.qweight"].shape == (96, 2048) and t[f"{e}.down_proj.scales"].shape == (6, 2048)
    assert t[f"{e}.up_proj.qzeros"].shape == (16, 96) and t[f"{e}.up_proj.g_idx"].shape == (2048,)
    assert t["model.layers.0.self_attn.o_proj.qweight"].shape == (512, 2048)
    assert t["model.layers.0.mlp.gate.weight"].dtype == t["lm_head.weight"].dtype == "f16"
    assert cl.quantization_config("gptq", 64)["group_size"] == 64 and cl.gptq_group(cfg) == 128
    for bad in ({"desc_act": True}, {"sym": False}, {"bits": 8}):
        odd = cfg | {"quantization_config": cfg["quantization_config"] | bad}
        with pytest.raises(ValueError, match="4-bit symmetric GPTQ without act-order"):
            cl.checkpoint_tensors(odd, "gptq")
        assert cl.checkpoint_tensors(odd, "fp8") == cl.checkpoint_tensors(cfg, "fp8")   # FP8 does not read it


@pytest.mark.parametrize("name", ["qwen2.5-coder-14b-instruct-gptq-int4", "qwen3-30b-a3b-gptq-int4"])
def test_gptq_writer_and_planner_differ_by_what_sglang_makes_of_the_files(name):
    """The GPTQ checkpoint's bytes against the planner's layout of SGLang's parameters (its GPTQ linear and marlin MoE
    create_weights) differ by exactly what SGLang does with the files, derived from its code: a fused linear keeps one
    g_idx for its shards (q, k, v: two dropped; gate, up: one), a marlin MoE layer keeps one w13 g_idx an expert (up's
    dropped), holds its qzeros in float16 (half the file's int32) and adds the act-order sort indices (one int32 an
    input of w13 and w2). Anything else would be a name or a shape one of the two has wrong."""
    from vramkit.core.model import arch
    cfg = json.loads((ROOT / f"config/models/{name}/config.json").read_text())
    written = sum(s.nbytes for s in cl.checkpoint_tensors(cfg, "gptq"))
    roles = arch.bytes_by_role(arch.weight_layout(catalog.model(name), 1, 1))
    planned = sum(v for r, v in roles.items() if r != "rope")
    h, layers, g = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), cl.gptq_group(cfg)
    per_layer = 2 * h * 4                                     # q, k, v -> qkv_proj: two g_idx of [h]
    if cfg.get("num_experts"):
        e, inter = int(cfg["num_experts"]), int(cfg["moe_intermediate_size"])
        zeros_file = (2 * (h // g) * (inter // 8) + (inter // g) * (h // 8)) * 4
        per_layer += e * (h * 4 + zeros_file // 2 - (h + inter) * 4)
    else:
        per_layer += h * 4                                    # gate, up -> gate_up_proj: one g_idx of [h]
    assert written - planned == layers * per_layer


def test_shards_keep_order_and_bound_size():
    specs = cl.checkpoint_tensors(CFG | {"num_hidden_layers": 2}, "fp8")
    shards = cl.shard(specs, 1 << 30)
    assert [s for g in shards for s in g] == specs
    assert all(sum(s.nbytes for s in g) <= 1 << 30 or len(g) == 1 for g in shards)
    assert cl.shard_name(0, 3) == "model-00001-of-00003.safetensors"


def test_layout_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="format"):
        cl.checkpoint_tensors(CFG, "int3")
    with pytest.raises(ValueError, match="architecture"):
        cl.checkpoint_tensors(CFG | {"architectures": ["MambaForCausalLM"]}, "bf16")


# --- the hybrid plan, from the core planner, against the H100-host runs ----------------------------------------
MEMBW = tuple((r["threads"], float(r["bytes_per_s"])) for r in json.loads((RUNS / "membw-h100-host.json").read_text()))
H100_HOST = kt.HostCpu(isa="amx", isa_source="the H100 host", read_bytes_s=MEMBW, read_source="measured",
                       physical_cores=16, kt_kernel="0.5.1")      # what the 2026-11-23 runs ran
FP8_MODEL = "qwen3-coder-30b-a3b-instruct-fp8"


def _run(name: str) -> dict:
    return json.loads((RUNS / f"{name}.json").read_text())


def _probe(name: str) -> dict:
    return json.loads((RUNS / f"{name}.probe.json").read_text())


def _h100_plan(method: str, n_gpu="auto", host: kt.HostCpu = H100_HOST, **knobs):
    # the preset as those runs ran (0.90, whole layers since, the token embeddings in host RAM since)
    knobs = {"mem_fraction": 0.85, "kt_gpu_layers": "off", "kt_embed_host": "off"} | knobs
    k = Knobs(**(catalog.presets()["moe"].knobs | {"kt_method": method, "kt_num_gpu_experts": n_gpu} | knobs))
    t = Target(gpu=catalog.gpu("h100-80gb"), gpu_free_bytes=int(15.31 * GiB), host=host,
               host_ram_available_bytes=100 * GiB)
    return plan(catalog.model(FP8_MODEL), t, k, catalog.engine(), with_alternatives=False)


@pytest.mark.parametrize("run, method", [("moe-16g-int4-amx", "AMXINT4"), ("moe-16g-fp8-amx", "FP8"),
                                         ("moe-16g-fp8-avx512", "FP8")])
def test_core_plan_matches_the_measured_runs(run, method):
    p = _h100_plan(method, kt_cpuinfer=14)      # the threads those runs had (the plan's rule then: 16 cores - 2)
    h, m = p.hybrid, _run(run)
    assert h.num_gpu_experts == 43 and h.cpuinfer_threads == 14      # what the kit chose there
    assert p.knobs.kt_num_gpu_experts == 43 and p.knobs.kt_cpuinfer == 14     # resolved: no "auto" left
    assert _h100_plan(method).hybrid.cpuinfer_threads == 12          # the rule now (kt_hybrid.cpuinfer_threads)
    assert abs(p.weights_bytes / GiB / m["log_figures_gib"]["weights"] - 1) < 0.03          # the 3 %
    assert abs(p.kv_pool_tokens / m["log_figures_gib"]["kv_tokens"] - 1) < 0.02              # and 2 %
    assert abs(h.host_rss_bytes / m["host_rss_after_start_bytes"] - 1) < 0.10                # and 10 % of RSS


def test_weights_at_32_gpu_experts_come_from_the_allocator_replay():
    # session 1: FP8, 32 GPU experts, SGLang's log "Load weight end ... mem usage=9.01 GB"; no fitted factor
    assert abs(_h100_plan("FP8", 32).weights_bytes / GiB - 9.01) < 0.03


def test_the_hybrid_plan_is_built_without_launch():
    code = ("import sys, json; sys.path.insert(0, '.');"
            "from tests.unit.test_moe_hybrid import _h100_plan;"
            "p = _h100_plan('AMXINT4'); assert p.hybrid.num_gpu_experts == 43;"
            "bad = [m for m in sys.modules if m.startswith(('vramkit.launch', 'vramkit.commands'))];"
            "print(json.dumps(bad))")
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def fp8_plan_notes(k: Knobs, t) -> tuple[str, ...]:
    return plan(catalog.model(FP8_MODEL), t("rtx-5060-ti-16gb"), k, catalog.engine(), with_alternatives=False).notes


def test_a_card_that_holds_every_expert_gets_no_hybrid_mode():
    """GPTQ-Int4 experts (14 GiB) fit a 24 GB card beside the pool: the moe preset's --kt-method is dropped there
    (kt-kernel would hold every expert in host RAM and SGLang would wait on the CPU once per layer for none);
    on a 16 GB card the same model is split. An asked --kt-num-gpu-experts keeps the mode."""
    model = catalog.model("qwen3-30b-a3b-gptq-int4")
    k = Knobs(**catalog.presets()["moe"].knobs)
    t = lambda gpu: Target(gpu=catalog.gpu(gpu), host=H100_HOST, host_ram_available_bytes=100 * GiB)  # noqa: E731
    p24 = plan(model, t("rtx-4090-24gb"), k, catalog.engine(), with_alternatives=False)
    assert p24.fits and p24.hybrid is None and p24.knobs.kt_method is None
    assert p24.knobs.kt_num_gpu_experts == 128 and p24.knobs.kt_cpuinfer == 0
    assert any("every expert fits on the GPU" in n and "--kt-method AMXINT8 dropped" in n for n in p24.notes)
    assert p24.decode_tok_s_ceiling and p24.decode_tok_s == p24.decode_tok_s_ceiling
    assert p24.knobs.moe_kernel == "marlin" and "--quantization" not in sglang_args(model, p24, model_path="m", port=1)
    # with N experts in every layer (the split) ...
    ks = replace(k, kt_gpu_layers="off")
    p16 = plan(model, t("rtx-5060-ti-16gb"), ks, catalog.engine(), with_alternatives=False)
    assert p16.hybrid is not None and 0 < p16.hybrid.num_gpu_experts < 128
    # ... which SGLang's marlin MoE kernel cannot run (moe-vs-llamacpp-gptq/k16-gptq.evidence.txt): the split
    # layers run on moe_wna16's triton kernel, which skips the CPU experts' masked ids
    assert p16.fits and p16.knobs.moe_kernel == "wna16"
    assert any("moe_wna16" in n and "marlin MoE cannot run" in n for n in p16.notes)
    # its AMXINT8 CPU experts are converted from int4, not from the FP8 the accuracy table measured: said so
    assert any("AMXINT8 is lossy" in n and "this checkpoint is gptq_int4" in n for n in p16.notes)
    assert not any("this checkpoint is" in n for n in fp8_plan_notes(k, t))
    args = sglang_args(model, p16, model_path="m", port=1)
    assert args[args.index("--quantization") + 1] == "moe_wna16"
    marlin = plan(model, t("rtx-5060-ti-16gb"), replace(ks, moe_kernel="marlin"), catalog.engine(),
                  with_alternatives=False)
    assert not marlin.fits and [r.kind for r in marlin.reasons] == ["sglang"] and "--moe-kernel wna16" in \
        marlin.reasons[0]
    # moe_wna16 keeps the checkpoint's packing (no marlin repack): the same experts, not more bytes
    same_n = plan(model, t("rtx-5060-ti-16gb"), replace(ks, moe_kernel="marlin",
                                                       kt_num_gpu_experts=p16.hybrid.num_gpu_experts),
                  catalog.engine(), with_alternatives=False)
    assert p16.weights_by_component["experts"] <= same_n.weights_by_component["experts"]
    # the preset's whole layers split no layer: marlin (it decoded 1.05x moe_wna16 there, moe-budget/marlin), and
    # an asked marlin is not refused
    whole = plan(model, t("rtx-5060-ti-16gb"), k, catalog.engine(), with_alternatives=False)
    assert whole.fits and whole.hybrid.gpu_layers > 0 and whole.knobs.moe_kernel == "marlin"
    assert "--quantization" not in sglang_args(model, whole, model_path="m", port=1)
    assert not any("moe_wna16" in n for n in whole.notes)
    assert plan(model, t("rtx-5060-ti-16gb"), replace(k, moe_kernel="marlin"), catalog.engine(),
                with_alternatives=False).fits
    fp8 = plan(catalog.model(FP8_MODEL), t("rtx-5060-ti-16gb"), k, catalog.engine(), with_alternatives=False)
    assert fp8.fits and fp8.hybrid is not None and fp8.knobs.moe_kernel is None   # SGLang has no choice there
    with pytest.raises(VramkitError, match="moe_wna16.*GPTQ/AWQ"):
        plan(catalog.model(FP8_MODEL), t("rtx-5060-ti-16gb"), replace(k, moe_kernel="wna16"), catalog.engine())
    asked = plan(model, t("rtx-4090-24gb"), replace(k, kt_num_gpu_experts=128), catalog.engine(),
                 with_alternatives=False)
    assert asked.hybrid is not None and asked.hybrid.num_gpu_experts == 128


def test_host_ram_is_every_expert_as_kt_kernel_holds_it():
    h = _h100_plan("AMXINT4").hybrid
    layout = json.loads((RUNS / "kt-int4-layout.json").read_text())["bytes"]      # KT's own writer, on the GPU host
    assert h.host_experts_bytes == layout == 128 * 48 * kt.cpu_expert_bytes(catalog.model(FP8_MODEL), "AMXINT4")
    assert h.host_checkpoint_bytes == 0 and h.host_ram_bytes == h.host_rss_bytes
    fp8 = _h100_plan("FP8").hybrid              # FP8 reads the checkpoint: its pages are mapped too (reclaimable)
    assert fp8.host_checkpoint_bytes == json.loads((RUNS / "checkpoint-fp8.json").read_text())["bytes"] \
        or abs(fp8.host_checkpoint_bytes / json.loads((RUNS / "checkpoint-fp8.json").read_text())["bytes"] - 1) < 0.01


def test_whole_layers_map_only_the_cpu_layers_expert_files():
    """As whole layers, --kt-method FP8 maps the CPU layers' expert files only: the server held 17.4 GiB more shared
    RSS than the AMXINT8 preset beside it on one machine (moe-vs-llamacpp-q8/h200-fp8cpu/), the CPU layers' expert
    tensors as the plan counts them, not the whole 29 GiB checkpoint that the split maps."""
    run = ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-q8/h200-fp8cpu"
    fp8, i8 = (json.loads((run / f"{n}.json").read_text()) for n in ("k16-fp8cpu", "k16-int8-preset"))
    whole = _h100_plan("FP8", kt_gpu_layers="auto", mem_fraction=0.93).hybrid
    split = _h100_plan("FP8").hybrid
    assert whole.gpu_layers == 17 and whole.host_checkpoint_bytes == whole.host_experts_bytes   # 31 layers, as held
    assert split.gpu_layers == 0 and split.host_checkpoint_bytes > 1.5 * whole.host_checkpoint_bytes
    mapped = fp8["host_rss_after_start_shared_bytes"] - i8["host_rss_after_start_shared_bytes"]
    assert abs(mapped / whole.host_checkpoint_bytes - 1) < 0.01
    assert abs(whole.host_rss_bytes / fp8["host_rss_after_start_bytes"] - 1) < 0.03


@pytest.mark.parametrize("method, said", [("AMXINT8", True), ("FP8", True), ("AMXINT4", False)])
def test_a_plan_quotes_the_measured_pair_its_method_is_in(method, said):
    """AMXINT8 and FP8 were run side by side on the FP8 checkpoint: each one's plan quotes it (the speed the exact
    method costs, the accuracy the lossy one costs), another method's does not."""
    p = _h100_plan(method, kt_gpu_layers="auto", mem_fraction=0.93)
    quoted = [n for n in p.notes if "measured side by side" in n]
    assert quoted == ([f"AMXINT8 (lossy) against FP8 (read as is), measured side by side: "
                       f"{kt.MEASURED_PAIRS[('AMXINT8', 'FP8')]}"] if said else [])
    assert kt.pair_note("FP8", "bf16") == ""          # measured on the FP8 checkpoint only


def test_layer_offload_beside_it_uses_the_measured_pcie_figure():
    """Issue 18: the comparison uses the H100's measured pinned host-to-GPU copy (vramkit host), not a constant."""
    from vramkit.generated import _pinned_copy_gbs
    measured = _pinned_copy_gbs()
    assert measured and 40 < measured < 64
    k = Knobs(**(catalog.presets()["moe"].knobs | {"kt_method": "AMXINT4"}))
    t = Target(gpu=catalog.gpu("h100-80gb"), gpu_free_bytes=int(15.31 * GiB), host=H100_HOST,
               host_ram_available_bytes=100 * GiB, pcie_bytes_s=measured * 1e9)
    h = plan(catalog.model(FP8_MODEL), t, k, catalog.engine(), with_alternatives=False).hybrid
    assert h.layer_offload_decode_tok_s is not None and h.layer_offload_gib >= 17
    # 18+ GiB cross PCIe every token at 54.9 GB/s: under 3 tok/s, the measured AMXINT4 split decodes 38.4
    assert h.layer_offload_decode_tok_s < 3.0
    assert _probe("moe-16g-int4-amx")["decode"][0]["per_stream_tok_s"] / h.layer_offload_decode_tok_s > 12
    assert dict(h.decode_tok_s_by_context)[512] / h.layer_offload_decode_tok_s > 12


def test_no_room_for_the_context_says_why():
    k = Knobs(**(catalog.presets()["moe"].knobs | {"kt_method": "AMXINT4", "kt_embed_host": "off"}))
    t = Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), gpu_free_bytes=4 * GiB, host=H100_HOST,
               host_ram_available_bytes=8 * GiB)
    p = plan(catalog.model(FP8_MODEL), t, k, catalog.engine(), with_alternatives=False)
    assert not p.fits and p.hybrid.num_gpu_experts == 0
    assert {r.kind for r in p.reasons} >= {"kv", "host_ram"}


@pytest.mark.parametrize("flags, isa", [
    ({"amx_tile", "amx_bf16", "amx_int8", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512vbmi",
      "avx2", "fma"}, "amx"),
    ({"avx512f", "avx512bw", "avx512_vnni", "avx512vbmi", "avx512_bf16", "avx2", "fma"}, "avx512"),
    ({"avx512f", "avx512bw", "avx2", "fma"}, "avx2"),          # AVX-512 without BF16 (Ice Lake): the AVX2 build
    ({"avx2", "fma"}, "avx2"),
    ({"sse4_2"}, None),
])
def test_cpu_isa_from_flags(flags, isa):
    assert kt.isa_from_flags(flags) == isa


@pytest.mark.parametrize("isa, asked, release, planned", [
    ("amx", "AMXINT4", "0.5.1", "AMXINT4"), ("avx512", "AMXINT4", "0.5.1", "AMXINT4"),
    ("avx512", "FP8", "0.5.1", "FP8"), ("amx", "FP8", "0.6.3", "FP8"),   # a release not listed reads as 0.5.1
])
def test_the_cpu_and_the_kt_kernel_release_choose_the_method(isa, asked, release, planned):
    host = kt.HostCpu(isa=isa, isa_source="--cpu-isa", read_bytes_s=MEMBW, read_source="m", physical_cores=8,
                      kt_kernel=release)
    p = _h100_plan(asked, host=host)
    h = p.hybrid
    assert h.kt_method == planned and h.kt_variant == kt.KT_VARIANT[kt.build_for(planned, isa, release)]
    assert h.cpuinfer_threads == 6 and p.knobs.kt_method == planned
    assert (planned == asked) == (h.method_note.startswith(f"{asked} runs on"))


@pytest.mark.parametrize("asked", ["AMXINT4", "FP8"])
def test_avx2_on_a_release_without_a_clean_avx2_build_refuses_and_names_the_release_that_runs(asked):
    """Issue 18 item 4: every avx2 build up to 0.6.4 carries AVX-512 code (benchmarks/results/gpu/kt-isa.md): a
    plan on such a release (here the AVX-512 pin) is made with LLAMAFILE_Q8_0, the method that meets the decode
    goal with AVX2 kernels, and refuses, naming the first release whose wheel runs it there, or a source build."""
    host = kt.HostCpu(isa="avx2", isa_source="--cpu-isa", read_bytes_s=MEMBW, read_source="m", physical_cores=8,
                      kt_kernel="0.5.1")
    p = _h100_plan(asked, host=host)
    assert not p.fits and [r.kind for r in p.reasons] == ["cpu"]
    assert p.hybrid.kt_method == "LLAMAFILE_Q8_0" and p.hybrid.kt_variant is None and p.hybrid.lossy
    assert "SIGILL" in p.reasons[0] and "kt-kernel >= 0.7.0's wheel runs LLAMAFILE_Q8_0" in p.reasons[0] \
        and "kt-kernel >= 0.5.1 from source" in p.reasons[0]
    assert kt.first_wheel("LLAMAFILE_Q8_0", "avx2") == catalog.versions().kt_kernel_avx2_pip
    assert p.hybrid.decode_cpu_time_factor == 1.0      # llamafile's kernels: no build factor
    assert p.hybrid.decode_tok_s > 0 and p.hybrid.host_experts_bytes == 128 * 48 * kt.cpu_expert_bytes(
        catalog.model(FP8_MODEL), "LLAMAFILE_Q8_0") == p.hybrid.host_checkpoint_bytes   # copies + the mapped GGUF


@pytest.mark.parametrize("asked", ["AMXINT8", "FP8"])
def test_avx2_gets_the_release_whose_avx2_build_runs_there(asked):
    """The kit's release for an AVX2-only CPU (config/versions.toml kt_kernel_avx2_pip): the plan fits, with
    LLAMAFILE_Q8_0 on its avx2 build where the preset's AMXINT8 has no kernels there, and FP8 (asked for: kt-kernel's
    own AVX2 kernels, with their measured build factor) as asked; the note says which of them the kit has run on that
    release in a server (LLAMAFILE_Q8_0, the committed run it names) and which not (FP8)."""
    v = catalog.versions()
    host = kt.HostCpu(isa="avx2", isa_source="--cpu-isa", read_bytes_s=MEMBW, read_source="m", physical_cores=8,
                      kt_kernel=v.kt_kernel_for("avx2"))
    p = _h100_plan(asked, host=host)
    h = p.hybrid
    assert p.fits and h.kt_kernel == v.kt_kernel_avx2_pip != v.kt_kernel_pip and h.kt_variant == "avx2"
    assert h.kt_method == ("LLAMAFILE_Q8_0" if asked == "AMXINT8" else "FP8")
    assert "kt-isa.md" in h.method_note
    if asked == "FP8":
        assert "has not yet run FP8 on it in a server" in h.method_note
    else:
        run = kt.KT_SERVER_RUNS[(v.kt_kernel_avx2_pip, "LLAMAFILE_Q8_0")]
        assert "ran LLAMAFILE_Q8_0 on it in a server on a GPU" in h.method_note and run in h.method_note
        assert (ROOT / f"{run}.json").is_file() and (ROOT / f"{run}.probe.json").is_file()
    assert h.decode_cpu_time_factor == (1.0 if asked == "AMXINT8" else catalog.engine().kt.cpu_time_factor("avx2"))
    assert v.kt_kernel_for("avx512") == v.kt_kernel_for("amx") == v.kt_kernel_pip


def test_the_avx2_method_has_a_committed_run_with_that_build_forced_at_the_decode_goal():
    """Issue 18's bar: the method `--cpu-isa avx2` plans, run through `vramkit up` on the H100 host with kt-kernel's
    avx2 build forced (KT_KERNEL_CPU_VARIANT=avx2) at 16 GiB, decoded >= 25 tok/s after a 512-token prompt."""
    host = kt.HostCpu(isa="avx2", isa_source="--cpu-isa", read_bytes_s=MEMBW, read_source="m", physical_cores=16,
                      kt_kernel=catalog.versions().kt_kernel_pip)
    method = _h100_plan("AMXINT8", host=host).hybrid.kt_method
    runs = sorted((ROOT / "benchmarks/results/gpu/kt-llamafile").glob("s*/k16-*avx2*.json"))
    runs = [r for r in runs if not r.name.endswith(".probe.json")]
    assert runs
    for run in runs:            # kt-kernel 0.5.1's avx2 build forced
        point = json.loads(run.read_text())
        args = point["vramkit_up_args"]
        assert args[args.index("--kt-method") + 1] == method and "KT_KERNEL_CPU_VARIANT=avx2" in point["env"]
        assert point["up_rc"] == 0 and point["log_figures_gib"]["load_begin_avail"] < 16.0
        probe = json.loads(run.with_name(run.name.replace(".json", ".probe.json")).read_text())
        one = next(d for d in probe["decode"] if d["streams"] == 1)
        assert one["requests"][0]["prompt_tokens"] == 512 and one["per_stream_tok_s"] >= 25.0, run


def test_the_release_an_avx2_cpu_gets_has_a_committed_server_run_at_the_decode_goal():
    """kt-kernel 0.7.0 (config/versions.toml kt_kernel_avx2_pip), whose avx2 build holds no AVX-512 code: started by
    `vramkit up --cpu-isa avx2` on the H100 host at 16 GiB with only that extension in the wheel
    (stage_kt_avx2.sh), the plan picked LLAMAFILE_Q8_0 on it and the server decoded >= 25 tok/s after 512 tokens."""
    v = catalog.versions()
    run = ROOT / f"{kt.KT_SERVER_RUNS[(v.kt_kernel_avx2_pip, 'LLAMAFILE_Q8_0')]}"
    point = json.loads(run.with_suffix(".json").read_text())
    args = point["vramkit_up_args"]
    assert args[args.index("--cpu-isa") + 1] == "avx2" and "--kt-method" not in args      # the plan's own choice
    assert point["up_rc"] == 0 and point["log_figures_gib"]["load_begin_avail"] < 16.0
    up = run.with_suffix(".up.txt").read_text()
    assert f"kt-kernel {v.kt_kernel_avx2_pip}" in up and "LLAMAFILE_Q8_0 on kt-kernel" in up and "avx2 build" in up
    probe = json.loads(run.with_suffix(".probe.json").read_text())
    one = next(d for d in probe["decode"] if d["streams"] == 1)
    assert one["requests"][0]["prompt_tokens"] == 512 and one["per_stream_tok_s"] >= 25.0


def test_the_clean_avx2_build_is_not_slower_at_llamafiles_work_than_the_build_the_server_runs_forced():
    """The plan gives LLAMAFILE_Q8_0 on kt-kernel 0.7.0's avx2 build no build factor and carries over the server runs
    made on 0.5.1's avx2 build (which carries AVX-512 code): that stands on the committed kernel-level runs
    (benchmarks/results/gpu/kt-avx2/), where every round of 0.7.0's avx2 build was no slower than 0.5.1's."""
    d = ROOT / "benchmarks/results/gpu/kt-avx2"

    def medians(stem: str) -> list[float]:
        return [r["cpu_ms_per_token_median"] for f in sorted(d.glob(f"{stem}-r*.json"))
                for r in json.loads(f.read_text())["runs"] if r["method"] == "LLAMAFILE_Q8_0" and "error" not in r]
    clean, forced = medians("kt070-avx2"), medians("kt051-avx2")
    assert len(clean) >= 2 and len(forced) >= 2
    assert max(clean) <= min(forced) * 1.05
    v = catalog.versions()
    host = kt.HostCpu(isa="avx2", isa_source="--cpu-isa", read_bytes_s=MEMBW, read_source="m", physical_cores=8,
                      kt_kernel=v.kt_kernel_for("avx2"))
    assert _h100_plan("AMXINT8", host=host).hybrid.decode_cpu_time_factor == 1.0


def test_the_avx2_releases_kernels_compute_what_the_accuracy_note_was_measured_on():
    """The plan's accuracy words for LLAMAFILE_Q8_0 (and FP8) come from 0.5.1's avx512_bf16 build; on an AVX2-only CPU
    they run on 0.7.0's avx2 build. The same proxy, seed and positions through that build
    (benchmarks/results/gpu/kt-avx2/accuracy-070-avx2.json) gives each MoE layer's error within 0.1 % of it."""
    new = json.loads((ROOT / "benchmarks/results/gpu/kt-avx2/accuracy-070-avx2.json").read_text())
    old = json.loads((ROOT / "benchmarks/results/gpu/kt-llamafile/accuracy-cpu.json").read_text())
    assert new["kt_kernel"] == catalog.versions().kt_kernel_avx2_pip and new["kt_variant"] == "avx2"
    for m in ("LLAMAFILE_Q8_0", "LLAMAFILE_Q8_0<-FP8", "FP8"):
        a, b = new["methods"][m]["moe_layer_rel_l2_prefill"], old["methods"][m]["moe_layer_rel_l2_prefill"]
        assert len(a) == len(b) and all(x == pytest.approx(y, rel=1e-3) for x, y in zip(a, b, strict=True)), m


def test_the_isa_evidence_backs_the_build_table():
    """KT_BUILDS lists an avx2 build only where the committed evidence says it runs on an AVX2-only CPU: no AVX-512
    instruction in it (objdump scan) and every listed method's forward passed under QEMU's Haswell CPU. Every avx2
    build that holds AVX-512 code and was run there died with SIGILL."""
    d = json.loads((ROOT / "benchmarks/results/gpu/kt-isa.json").read_text())

    def release(name: str) -> str:
        return re.search(r"(\d+\.\d+\.\d+)", name).group(1)
    scan = {release(b["wheel"]): b for b in d["builds"] if b["build"].endswith("_avx2")}
    runs = {}
    for r in d["avx2_only_cpu"]:
        if r["build"].endswith("_avx2"):
            runs.setdefault(release(r["wheel"]), []).append(r)
    for v, b in scan.items():
        clean = b["zmm (AVX-512)"] == 0 and b["k-mask (AVX-512)"] == 0
        assert clean or all(r["sigill"] for r in runs.get(v, [])), v
    listed = {v: [m for m, isas in t.items() if "avx2" in isas] for v, t in kt.KT_BUILDS.items()}
    for v, methods in listed.items():
        if not methods:
            continue
        b = scan[v]
        assert b["zmm (AVX-512)"] == 0 and b["k-mask (AVX-512)"] == 0 and runs[v]
        probe = {"LLAMAFILE_Q8_0": "LLAMAFILE"}
        for r in runs[v]:
            assert not r["sigill"] and r["rc"] == 0
            assert all(f"{probe.get(m, m)} forward" in r["steps_passed"] for m in methods), (v, r["steps_passed"])
    assert listed[catalog.versions().kt_kernel_avx2_pip]


@pytest.mark.parametrize("method", list(kt.KT_METHODS))
def test_a_lossy_method_says_so_and_points_at_the_numbers(method):
    note = kt.lossy_note(method)
    assert bool(note) == kt.KT_METHODS[method].lossy
    if note:
        table = kt.KT_METHODS[method].accuracy_table or kt.ACCURACY_TABLE
        assert "lossy" in note and table in note and (ROOT / table).is_file()


def test_llamafile_q8_0s_accuracy_note_is_its_measurement():
    """The plan's words on LLAMAFILE_Q8_0 are the numbers of its committed accuracy run (the same proxy as
    kt-accuracy.md, on the dev host's CPU): MoE-layer output error from the bf16 weights and converted from FP8,
    beside FP8 read as is and AMXINT8 converted from FP8 in the same run."""
    m = kt.KT_METHODS["LLAMAFILE_Q8_0"]
    res = json.loads((ROOT / m.accuracy_table).with_suffix(".json").read_text())["methods"]

    def err(row: str) -> float:
        v = res[row]["moe_layer_rel_l2_prefill"]
        return sum(v) / len(v)
    note = kt.lossy_note("LLAMAFILE_Q8_0")
    for row in ("LLAMAFILE_Q8_0", "LLAMAFILE_Q8_0<-FP8", "FP8", "AMXINT8<-FP8"):
        assert f"{err(row):.2%}" in note, (row, err(row), note)
    assert err("LLAMAFILE_Q8_0<-FP8") < err("AMXINT8<-FP8")       # closer to the checkpoint than the preset's


@pytest.mark.parametrize("method", [m for m, x in kt.KT_METHODS.items() if x.measured_from_fp8])
def test_the_measured_loss_a_plan_quotes_is_the_accuracy_tables(method):
    """The sizes lossy_note quotes are kt-accuracy.json's rows (converted from FP8, and FP8 as is)."""
    acc = json.loads((ROOT / "benchmarks/results/gpu/kt-accuracy.json").read_text())["methods"]
    for row, (err, top1) in ((acc[f"{method}<-FP8"], kt.KT_METHODS[method].measured_from_fp8), (acc["FP8"], kt.FP8_MEASURED)):
        mean = sum(row["moe_layer_rel_l2_prefill"]) / len(row["moe_layer_rel_l2_prefill"])
        assert err == pytest.approx(mean, abs=5e-4) and top1 == pytest.approx(row["top1_agreement"], abs=5e-4)
    note = kt.lossy_note(method)
    assert f"{kt.KT_METHODS[method].measured_from_fp8[0]:.1%}" in note and "4.7%" in note


# The moe preset's server points at 16 GB, one per CPU method (H100 host, `vramkit up --preset moe`; the FP8
# one before AMXINT8 was measured, the AMXINT8 one in another session: moe-vs-llamacpp-levers.md, last section)
PRESET_POINTS = {"FP8": "moe/moe-16g-fp8-amx.probe.json", "AMXINT4": "moe-vs-llamacpp/k16.probe.json",
                 "AMXINT8": "moe-vs-llamacpp-int8/k16-int8.probe.json"}


def test_the_moe_preset_default_meets_the_speed_goal_and_is_the_most_accurate_bar_noise_with_a_usable_prefill():
    """Issue 18 item 3, with the prefill the FP8 point showed (TTFT 129.8 s for an 8K prompt): of the methods
    that serve the preset's checkpoint and decode >= 25 tok/s at 16 GB after ~512 tokens (committed server
    points), the most accurate on kt-kernel's own kernels (benchmarks/results/gpu/kt-accuracy.json: the
    converted form, `X<-FP8`, for a layout method; MoE-layer output error) -- unless one within the proxy's noise of it (top-1 within
    1 point, KL within 0.001 nats) answers an 8K prompt in under half its time. A lossy default says so."""
    acc = json.loads((ROOT / "benchmarks/results/gpu/kt-accuracy.json").read_text())["methods"]
    fmt = kt.checkpoint_format(catalog.model(catalog.presets()["moe"].model))
    res = ROOT / "benchmarks/results/gpu"
    speed, ttft8k = {}, {}
    for m, f in PRESET_POINTS.items():
        probe = json.loads((res / f).read_text())
        speed[m] = one_stream_tok_s(probe)
        ttft8k[m] = next(r["ttft_s"] for r in probe["ttft"] if r["prompt_tokens"] == 8192 and r["ok"])
    row = {}
    for name, r in acc.items():       # "AMXINT8<-FP8": converted from the FP8 checkpoint, what the preset does
        method, _, src = name.partition("<-")
        reads = kt.KT_METHODS[method].reads if method in kt.KT_METHODS else None
        if "error" not in r and (reads == fmt and not src or (reads is None and src.lower() == fmt)):
            row[method] = r
    fast = [m for m in row if speed.get(m, 0) >= 25]
    error = {m: sum(r["moe_layer_rel_l2_prefill"]) / len(r["moe_layer_rel_l2_prefill"]) for m, r in row.items()}
    best = min(fast, key=error.__getitem__)          # the MoE layer's output error: FP8 4.7 %, AMXINT8<-FP8 5.4 %
    near = [m for m in fast if abs(row[m]["top1_agreement"] - row[best]["top1_agreement"]) <= 0.01
            and abs(row[m]["kl_mean"] - row[best]["kl_mean"]) <= 0.001 and ttft8k[m] < ttft8k[best] / 2]
    chosen = min(near, key=ttft8k.__getitem__) if near else best
    default = catalog.presets()["moe"].knobs["kt_method"]
    assert set(fast) == {"FP8", "AMXINT8", "AMXINT4"} and best == "FP8" and chosen == default == "AMXINT8"
    assert "AMXINT4" not in near and row["AMXINT4"]["top1_agreement"] < row["FP8"]["top1_agreement"] - 0.1
    assert kt.KT_METHODS[default].lossy and "lossy" in kt.lossy_note(default)


def test_thread_term_fewer_threads_decode_slower():
    fast = _h100_plan("AMXINT4", kt_cpuinfer=14).hybrid
    slow = _h100_plan("AMXINT4", kt_cpuinfer=6).hybrid
    assert slow.host_read_bytes_s < fast.host_read_bytes_s and slow.decode_tok_s < 0.9 * fast.decode_tok_s


def test_context_term_longer_context_decodes_slower():
    h = _h100_plan("AMXINT4").hybrid
    by = dict(h.decode_tok_s_by_context)
    assert by[512] > by[8192] > h.decode_tok_s and h.decode_context_tokens == 32768


def test_cpuinfer_leaves_cores_to_sglang():
    """A quarter of the physical cores, at least 2: 12 of 16 (measured faster than 14 there), 6 of 8, 1 of 2."""
    assert kt.cpuinfer_threads(16, 2) == 12 and kt.cpuinfer_threads(8, 2) == 6 and kt.cpuinfer_threads(2, 2) == 1
    assert kt.cpuinfer_threads(12, 2) == 9 and kt.cpuinfer_threads(32, 2) == 24 and kt.cpuinfer_threads(16, 5) == 11


@pytest.mark.parametrize("threads", [16, 20])
def test_kt_threads_on_every_physical_core_are_refused(threads, capsys):
    """Measured on the H100 host (moe-vs-llamacpp-q8/k16-int8-t16): 16 KT threads on 16 physical cores decoded 1.7
    tok/s against 36.1 at 14. The estimate cannot price that collapse, so the plan refuses instead of guessing."""
    d = ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-q8"           # the figures the refusal quotes are the data's
    rate = {n: one_stream_tok_s(json.loads((d / f"{n}.probe.json").read_text())) for n in ("k16-int8-t16", "k16-int8")}
    assert f"decoded {rate['k16-int8-t16']:.1f} tok/s against {rate['k16-int8']:.1f} at 14" in kt.oversubscribed(16, 16)
    assert _h100_plan("AMXINT8", kt_cpuinfer=15).hybrid.cpuinfer_threads == 15      # one core left: planned
    with pytest.raises(VramkitError) as e:
        _h100_plan("AMXINT8", kt_cpuinfer=threads)
    assert e.value.code == Exit.BAD_INPUT and "--kt-cpuinfer 12" in e.value.todo and f"{threads} leaves none" in e.value.what
    rc = main(["plan", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--host-read-gbs", "60", "--host-ram-gib", "64",
               "--cpu-isa", "amx", "--host-cores", "16", "--kt-cpuinfer", str(threads)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == int(Exit.BAD_INPUT) and len(err) == 1 and "to SGLang's own processes" in err[0]


# --- the CLI -------------------------------------------------------------------------------------------
def test_plan_preset_moe_fits_a_5060_ti_and_prints_both_speeds(capsys):
    assert main(["plan", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--host-read-gbs", "60", "--host-ram-gib", "64",
                 "--cpu-isa", "amx", "--host-cores", "16", "--kt-cpuinfer", "14"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "FITS" in out and "hybrid MoE: whole layers, the last 17 of 48 MoE layers' experts on the GPU" in out
    assert "an estimate (derived terms, fitted constants" in out and "with layer offload" in out
    assert "bandwidth ceiling" not in out
    # at the preset's 0.93: 17 whole layers beside the GPU prompt path's staging set (64 GiB of host RAM hold its
    # pinned copies) with the token embeddings in host RAM, rendered as the largest N the adapter turns into 17
    # (47 x 48 // 128)
    assert "--kt-method AMXINT8" in out and "--kt-num-gpu-experts 47" in out
    assert ("in the server's environment: VRAMKIT_KT_GPU_LAYERS=auto VRAMKIT_KT_GPU_PREFILL=1024 "
            "VRAMKIT_KT_PREFILL_PIN=register VRAMKIT_KT_EMBED_HOST=on") in out
    assert "AMXINT8 is lossy" in out and "kt-accuracy.md" in out     # the converted default says so


def test_plan_json_has_the_hybrid_figures(capsys):
    assert main(["plan", "--json", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--host-read-gbs", "60",
                 "--host-ram-gib", "64", "--cpu-isa", "amx"]) == 0
    d = json.loads(capsys.readouterr().out)
    h = d["hybrid"]
    assert d["fits"] and h["num_gpu_experts"] == 47 and h["gpu_layers"] == 17 and h["kt_method"] == "AMXINT8"
    assert h["lossy"] and d["knobs"]["kt_num_gpu_experts"] == 47 and d["knobs"]["kt_cpuinfer"] != "auto"
    assert d["server_env"] == {"VRAMKIT_KT_GPU_LAYERS": "auto", "VRAMKIT_KT_GPU_PREFILL": "1024",
                               "VRAMKIT_KT_PREFILL_PIN": "register", "VRAMKIT_KT_EMBED_HOST": "on"}
    assert h["decode_tok_s"] > 10 * h["layer_offload_decode_tok_s"]
    assert d["decode_tok_s_ceiling"] is None       # a fitted estimate is not a bandwidth ceiling
    assert h["host_read_source"] == "--host-read-gbs" and h["cpu_isa_source"] == "--cpu-isa"
    assert h["host_ram_bytes"] == h["host_experts_bytes"] + h["host_sglang_bytes"] + h["host_pinned_bytes"] \
        + h["host_prefill_bytes"] + h["host_embed_bytes"] and h["host_prefill_bytes"] > 0   # 64 GiB hold the copies
    assert h["host_embed_bytes"] == GiB          # the token embeddings' 0.58 GiB, pinned as a power of two


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_plan_preset_moe_for_a_desktop_cpu(capsys, isa):
    """With the kt-kernel release the kit installs on that CPU (config/versions.toml): avx512: the preset's AMXINT8
    on 0.5.1's avx512_bf16 build, which has its kernels; avx2: LLAMAFILE_Q8_0 (a Q8_0 GGUF) on the avx2 release's
    avx2 build, the one AVX2 method at the decode goal, lossy and said so."""
    v = catalog.versions()
    rc = main(["plan", "--json", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--cpu-isa", isa,
               "--host-read-gbs", "60", "--host-ram-gib", "64"])
    d = json.loads(capsys.readouterr().out)
    h = d["hybrid"]
    assert rc == 0 and h["cpu_isa"] == isa and h["kt_kernel"] == v.kt_kernel_for(isa)
    assert h["kt_method"] == ("AMXINT8" if isa == "avx512" else "LLAMAFILE_Q8_0")
    assert h["kt_variant"] == ("avx512_bf16" if isa == "avx512" else "avx2") and h["lossy"]
    # the preset's whole layers ran with AMXINT8, not with LLAMAFILE_Q8_0: the avx2 plan says so and names the split
    unmeasured = [n for n in d["notes"] if n.startswith("whole layers with")]
    assert unmeasured == ([] if isa == "avx512" else ["whole layers with LLAMAFILE_Q8_0 were not run on a GPU (AMXINT4, "
                          "AMXINT8, FP8 and RAWINT4 were: benchmarks/results/gpu/kt-estimate.md); --kt-gpu-layers off gives the "
                          "split, as LLAMAFILE_Q8_0 was measured"])


def test_deepseek_v2_lite_plans_with_bf16_cpu_experts(capsys):
    """Issue 17: a model with experts is never told it has none (MLA + shared experts + a dense first layer)."""
    assert main(["plan", "--json", "--model", "deepseek-v2-lite-chat", "--kt-method", "BF16", "--gpu",
                 "rtx-5060-ti-16gb", "--cpu-isa", "avx512", "--host-read-gbs", "60", "--host-ram-gib", "64"]) == 0
    d = json.loads(capsys.readouterr().out)
    h = d["hybrid"]
    m = catalog.model("deepseek-v2-lite-chat")
    assert h["moe_layers"] == m.moe.num_moe_layers == 26 and h["num_experts"] == 64
    assert 0 < h["num_gpu_experts"] < 64 and d["kv_pool_tokens"] >= d["knobs"]["context"]
    assert h["layer_offload_decode_tok_s"] is None        # SGLang cannot offload MLA layers: no comparison


def test_gpt_oss_is_refused_for_a_real_reason(capsys):
    rc = main(["plan", "--model", "gpt-oss-20b", "--kt-method", "BF16", "--gpu", "rtx-5060-ti-16gb"])
    err = capsys.readouterr().err
    assert rc == 21 and "MXFP4" in err and "has no experts" not in err


def test_kt_method_on_a_dense_model_is_refused(capsys):
    rc = main(["plan", "--model", "qwen2.5-coder-7b-instruct", "--kt-method", "FP8", "--gpu", "rtx-5060-ti-16gb"])
    assert rc == 64 and "dense model" in capsys.readouterr().err


def test_fp8_method_needs_the_fp8_checkpoint(capsys):
    rc = main(["plan", "--preset", "moe", "--model", "qwen3-coder-30b-a3b-instruct-fp8", "--kt-method", "BF16",
               "--gpu", "rtx-5060-ti-16gb"])
    assert rc == 64 and "reads a bf16 checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["--cpu-isa", "sse"], "--cpu-isa 'sse' is not one of"),
    (["--host-read-gbs", "fast"], "is not a bandwidth in GB/s"),
    (["--host-read-gbs", "4:50,4:60"], "names a thread count twice"),
])
def test_bad_cpu_inputs_are_one_line_and_exit_64(capsys, argv, says):
    rc = main(["plan", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", *argv])
    err = capsys.readouterr().err
    assert rc == 64 and says in err and "Traceback" not in err


def test_up_refuses_amxint4_without_the_converted_experts(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("VRAMKIT_KT_WEIGHT_PATH", raising=False)
    rc = main(["up", "--preset", "moe", "--kt-method", "AMXINT4", "--runtime", "native", "--dry-run", "--gpu",
               "rtx-5060-ti-16gb", "--cpu-isa", "amx", "--kt-weight-path", str(tmp_path / "missing")])
    out = " ".join(capsys.readouterr().out.split())
    assert "kt-weights" in out and "convert with tools/make_random_checkpoint.py" in out
    assert f"none at {tmp_path / 'missing'}" in out
    assert rc != 0 or "would stop at" in out
    main(["up", "--preset", "moe", "--kt-method", "AMXINT4", "--runtime", "native", "--dry-run", "--gpu",
          "rtx-5060-ti-16gb", "--cpu-isa", "amx"])            # no folder at all: said so, not "none at None"
    out = " ".join(capsys.readouterr().out.split())
    assert "converted layout: no --kt-weight-path given ->" in out and "None" not in out


def test_up_refuses_llamafile_without_a_gguf_and_takes_a_file_or_a_folder_of_them(capsys, tmp_path, monkeypatch):
    """LLAMAFILE_Q8_0 reads a GGUF (kt-kernel's GGUFLoader: a .gguf file or a folder of them): `up` names what to give
    when none is there, and renders SGLang's own method name."""
    from vramkit.launch.hybrid import gguf_given
    monkeypatch.delenv("VRAMKIT_KT_WEIGHT_PATH", raising=False)
    rc = main(["up", "--preset", "moe", "--kt-method", "LLAMAFILE_Q8_0", "--runtime", "native", "--dry-run", "--gpu",
               "rtx-5060-ti-16gb", "--cpu-isa", "amx", "--kt-weight-path", str(tmp_path / "missing.gguf")])
    out = " ".join(capsys.readouterr().out.split())
    assert "kt-weights" in out and "reads a Q8_0 GGUF" in out and "--kt-method LLAMAFILE " in out
    assert rc != 0 or "would stop at" in out
    (tmp_path / "d").mkdir()
    assert not gguf_given(str(tmp_path / "d")) and not gguf_given(None)
    (tmp_path / "d" / "m-00001-of-00002.gguf").write_bytes(b"GGUF")
    (tmp_path / "m.safetensors").write_bytes(b"")
    assert gguf_given(str(tmp_path / "d")) and gguf_given(str(tmp_path / "d" / "m-00001-of-00002.gguf"))
    assert not gguf_given(str(tmp_path / "m.safetensors"))


def test_compose_mounts_a_gguf_file_under_its_own_name():
    """kt-kernel's GGUFLoader opens a file only when its name ends in .gguf: a file is mounted under its name."""
    from vramkit.launch.hybrid import KT_CONTAINER_DIR, for_plan
    p = _h100_plan("LLAMAFILE_Q8_0")
    parts = for_plan(p, "/models/q8/Qwen3-Coder-30B-A3B-Q8_0.gguf").compose_parts(".")
    inside = f"{KT_CONTAINER_DIR}/Qwen3-Coder-30B-A3B-Q8_0.gguf"
    assert parts["args"] == ["--kt-weight-path", inside]
    assert parts["extra_volumes"][0].startswith(f"/models/q8/Qwen3-Coder-30B-A3B-Q8_0.gguf:{inside}:ro")
    assert for_plan(p, "/models/q8").compose_parts(".")["args"] == ["--kt-weight-path", KT_CONTAINER_DIR]


def test_llamafile_refuses_an_expert_width_its_blocks_do_not_divide():
    """kt-kernel's LLAMAFILE wrapper splits each expert in 256-wide blocks (deepseek-v2-lite: 1408)."""
    with pytest.raises(VramkitError) as e:
        kt.check_model(catalog.model("deepseek-v2-lite-chat"), "LLAMAFILE_Q8_0")
    assert e.value.code == Exit.UNSUPPORTED_MODEL and "1408" in e.value.what and "BF16" in e.value.todo


def test_a_moe_that_does_not_fit_is_offered_the_hybrid_mode_first(capsys):
    rc = main(["plan", "--json", "--model", "qwen3-coder-30b-a3b-instruct-fp8", "--gpu", "rtx-5060-ti-16gb",
               "--kv-dtype", "fp8_e5m2", "--mem-fraction", "0.85", "--host-read-gbs", "60", "--host-ram-gib", "64",
               "--cpu-isa", "amx", "--host-cores", "8", "--kt-cpuinfer", "6"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 10 and not d["fits"] and d["hybrid"] is None
    alt = d["alternatives"][0]
    assert alt["knobs"]["kt_method"] == "FP8" and alt["fits"], "the hybrid mode ranks above what does not fit"
    assert alt["decode_tok_s_estimate"] > 5 and alt["decode_tok_s_ceiling"] is None and "estimate" in alt["cost"]


def test_host_ram_counts_sglang_beside_the_experts():
    k = Knobs(**(catalog.presets()["moe"].knobs | {"kt_method": "AMXINT4", "kt_gpu_layers": "off",     # the split,
                                                   "kt_embed_host": "off"}))     # nothing pinned beside kt-kernel
    model = catalog.model(FP8_MODEL)

    def fits(avail: int) -> bool:
        t = Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host=H100_HOST, host_ram_available_bytes=avail)
        return plan(model, t, k, catalog.engine(), with_alternatives=False).fits

    t = Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host=H100_HOST)
    need = plan(model, t, k, catalog.engine(), with_alternatives=False).hybrid.host_ram_bytes
    assert need > 128 * 48 * kt.cpu_expert_bytes(model, "AMXINT4") + 8 * GiB
    assert fits(need) and not fits(need - GiB)


# --- the host's read bandwidth per thread count (`vramkit host --bandwidth --write` -> .env -> the planner) -------
def test_bandwidth_sweep_round_trips_through_env_text():
    from vramkit.launch.hybrid import format_read_gbs
    runs = json.loads((RUNS / "membw-h100-host.json").read_text())
    text = format_read_gbs(runs)
    assert text == "1:11.2,2:27.3,4:49.1,8:72.3,16:93.0"
    assert kt.parse_read_gbs(text, "x") == ((1, 11.2), (2, 27.3), (4, 49.1), (8, 72.3), (16, 93.0))
    assert kt.parse_read_gbs("60", "x") == ((1, 60.0),)          # the old one-figure form still reads


def test_read_at_interpolates_the_sweep():
    h = kt.HostCpu(isa="amx", isa_source="", read_bytes_s=((1, 11e9), (4, 49e9), (8, 72e9), (16, 93e9)),
                   read_source="", physical_cores=16, kt_kernel="0.5.1")
    assert h.read_at(4) == 49e9 and h.read_at(6) == pytest.approx(60.5e9) and h.read_at(32) == 93e9
    assert h.read_at(14) == pytest.approx(72e9 + 21e9 * 6 / 8)
    flat = kt.HostCpu(isa="amx", isa_source="", read_bytes_s=((1, 60e9),), read_source="", physical_cores=8,
                      kt_kernel="0.5.1")
    assert flat.read_at(1) == flat.read_at(6) == 60e9


def test_plan_reads_the_sweep_at_its_thread_count(capsys):
    sweep = "1:11.2,2:27.3,4:49.1,8:72.3,16:93.0"
    rates = []
    for threads in ("6", "14"):
        assert main(["plan", "--json", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--cpu-isa", "amx",
                     "--host-read-gbs", sweep, "--host-cores", "16", "--kt-cpuinfer", threads, "--host-ram-gib", "64"]) == 0
        h = json.loads(capsys.readouterr().out)["hybrid"]
        rates.append((h["host_read_bytes_s"], h["decode_tok_s"]))
    assert rates[0][0] == pytest.approx(60.7e9) and rates[1][0] == pytest.approx(87.825e9)
    assert rates[0][1] < rates[1][1]


def test_up_on_an_avx2_only_host_runs_its_release_and_refuses_the_avx512_one_naming_it():
    """Issue 18 item 4: `vramkit up` refuses only where no method runs: on an AVX2-only CPU with kt-kernel 0.5.1
    (its avx2 build dies there), naming the release whose wheel runs LLAMAFILE_Q8_0 and the source build; with the
    release the kit installs there it runs; on AVX-512 it runs 0.5.1."""
    from vramkit.launch.hybrid import for_plan
    v = catalog.versions()

    def check(isa: str, release: str, method: str = "FP8") -> tuple[bool, str]:
        host = kt.HostCpu(isa=isa, isa_source="--cpu-isa", read_bytes_s=MEMBW, read_source="m", physical_cores=8,
                          kt_kernel=release)
        checks = {n: (ok, d) for n, ok, d in for_plan(_h100_plan(method, host=host), None, here_isa=isa)
                  .checks(100 * GiB)}
        return checks["cpu-isa"]
    ok, detail = check("avx2", v.kt_kernel_pip)
    assert not ok and f"kt-kernel >= {v.kt_kernel_avx2_pip}'s wheel runs LLAMAFILE_Q8_0" in detail \
        and "from source" in detail and "SIGILL" in detail
    ok2, detail2 = check("avx2", v.kt_kernel_for("avx2"), "AMXINT8")
    assert ok2 and f"--kt-method LLAMAFILE_Q8_0 on kt-kernel {v.kt_kernel_avx2_pip}'s avx2 build" in detail2
    ok512, detail512 = check("avx512", v.kt_kernel_for("avx512"))
    assert ok512 and "avx512_bf16" in detail512


@pytest.mark.parametrize("method", ["FP8", "AMXINT4"])
def test_the_thread_term_matches_kt_kernels_own_time_at_6_and_14_threads(method):
    """Issue 18 item 5, the thread term held out at the kernel level: kt-kernel 0.5.1's CPU-expert time per token
    at 6 and 14 threads on the H100 host (benchmarks/results/gpu/kt-accuracy.json, kt_decode_bench.py, not a
    server run) against the estimate's CPU-expert term at those thread counts (host read interpolated from the
    same host's `vramkit host --bandwidth` sweep): the slowdown agrees within 10 %."""
    runs = json.loads((ROOT / "benchmarks/results/gpu/kt-accuracy.json").read_text())["cpu_expert_time"]
    ms = {r["threads"]: r["cpu_ms_per_token_median"] for b in runs.values() for r in b["runs"]
          if r["method"] == method and r["variant"] == "amx" and "error" not in r}
    est = {t: _h100_plan(method, kt_cpuinfer=t).hybrid.decode_cpu_experts_s for t in (6, 14)}
    measured, planned = ms[6] / ms[14], est[6] / est[14]
    assert measured > 1.3 and abs(planned / measured - 1) < 0.10


def test_a_lesser_build_is_slower_by_its_measured_cpu_time():
    """config/engine.toml kt_build_cpu_time_* equal kt-kernel's own CPU-expert time per build on the H100 host
    (kt-accuracy.json, FP8, 14 threads) over the AMX build's; the estimate's CPU term carries it, so the one
    committed server run on the avx512_bf16 build is now within 4 % (it was +8 % without)."""
    runs = json.loads((ROOT / "benchmarks/results/gpu/kt-accuracy.json").read_text())["cpu_expert_time"]
    ms = {r["variant"]: r["cpu_ms_per_token_median"] for b in runs.values() for r in b["runs"]
          if r["method"] == "FP8" and r["threads"] == 14 and "error" not in r}
    k = catalog.engine().kt
    assert k is not None
    assert k.cpu_time_factor("avx512") == round(ms["avx512_bf16"] / ms["amx"], 2)
    assert k.cpu_time_factor("avx2") == round(ms["avx2"] / ms["amx"], 2) and k.cpu_time_factor("amx") == 1.0
    h512 = _h100_plan("FP8", host=replace(H100_HOST, isa="avx512")).hybrid
    h_amx = _h100_plan("FP8").hybrid
    assert h512.decode_cpu_time_factor == k.cpu_time_factor("avx512")
    assert abs(h512.decode_cpu_experts_s / h_amx.decode_cpu_experts_s - k.cpu_time_factor("avx512")) < 1e-9
    est = json.loads((ROOT / "benchmarks/results/gpu/kt-estimate.json").read_text())
    row = next(m for m in est["measurements"] if m["point"] == "fp8-avx512-16g")
    assert abs(row["error"]) < 0.04


def test_a_method_s_pace_per_byte_is_its_measured_cpu_time():
    """config/engine.toml kt_method_cpu_time_* equal kt-kernel's own CPU-expert time per byte on the H100 host's AMX
    build (kt-accuracy.json, bench-051-amx: one run, 14 threads) over FP8's, the bytes each method holds an expert in
    (kt.cpu_expert_bytes); the estimate's CPU term carries it on the AMX build only, and a lesser build its own
    factor. With it the held-out AMXINT8 split servers decode 1.11x the estimate on average (1.27x before it), the
    whole-layer ones on the H100 host 1.01x. On the H200 machines the whole-layer AMXINT8 servers decode 1.07x it on
    average (20 servers on 15 machines, 0.77-1.40x; 1.16x before the estimate read each session's best host-read
    reading: the machines, not the pace), which is why they are held to the issue's 20 % only. The pace itself is the same on the H200 machines' CPU: kt-pace/h200/ (kernel level, 43 GPU
    experts) gave AMXINT8 0.78x FP8's time at 14 threads and 0.82x at 12, within 5 % of 0.81."""
    run = json.loads((ROOT / "benchmarks/results/gpu/kt-accuracy.json").read_text())["cpu_expert_time"]["bench-051-amx"]
    ms = {r["method"]: r["cpu_ms_per_token_median"] for r in run["runs"] if r["threads"] == 14}
    model = catalog.model("qwen3-coder-30b-a3b-instruct-fp8")
    pace = {m: ms[m] / kt.cpu_expert_bytes(model, m) / (ms["FP8"] / kt.cpu_expert_bytes(model, "FP8"))
            for m in ("AMXINT8", "AMXINT4")}
    k = catalog.engine().kt
    for m, v in pace.items():
        assert k.cpu_time_factor("amx", m) == round(v, 2) and k.cpu_time_factor(None, m) == round(v, 2)
    assert k.cpu_time_factor("amx", "FP8") == k.cpu_time_factor("amx", "LLAMAFILE_Q8_0") == 1.0
    assert k.cpu_time_factor("avx512", "AMXINT8") == k.cpu_time_factor("avx512")       # other kernels there
    h8, hf = _h100_plan("AMXINT8").hybrid, _h100_plan("FP8").hybrid
    assert h8.decode_cpu_time_factor == round(pace["AMXINT8"], 2) and hf.decode_cpu_time_factor == 1.0
    est = json.loads((ROOT / "benchmarks/results/gpu/kt-estimate.json").read_text())
    h200 = json.loads((ROOT / "benchmarks/results/gpu/kt-pace/h200/kt-pace-g43.json").read_text())
    for t in (12, 14):
        at = {r["method"]: r["cpu_ms_per_token_median"] for r in h200["runs"] if r["threads"] == t}
        other = at["AMXINT8"] / kt.cpu_expert_bytes(model, "AMXINT8") / (at["FP8"] / kt.cpu_expert_bytes(model, "FP8"))
        assert abs(other / k.cpu_time_factor("amx", "AMXINT8") - 1) < 0.05, (t, other)
    mean: dict[str, float] = {}
    spread: dict[str, tuple[float, float]] = {}
    for prefix, card, bar, least in (("int8-amx", "", 0.12, 50), ("layers-int8-amx", "h100", 0.05, 50),
                                     ("layers-int8-amx", "h200", 0.20, 25)):
        ratios = [1 / (1 + m["error"]) for m in est["measurements"] if m["role"] == "held-out"
                  and m["point"].startswith(prefix) and (card != "h100" or "h200" not in m["point"])
                  and (card != "h200" or "h200" in m["point"])]
        assert len(ratios) > least and abs(sum(ratios) / len(ratios) - 1) < bar, (prefix, card)
        if card:
            mean[card] = sum(ratios) / len(ratios)
            spread[card] = (min(ratios), max(ratios))
    readme = " ".join((ROOT / "README.md").read_text().split())
    h200 = {m["point"] for m in est["measurements"] if m["role"] == "held-out" and "h200" in m["point"]
            and m["point"].startswith("layers-int8-amx")}
    assert (f"decode {mean['h100']:.2f}x the estimate on average on the H100 host and {mean['h200']:.2f}x on the H200 "
            f"machines ({len(h200)} servers on 15 machines, {spread['h200'][0]:.2f}-{spread['h200'][1]:.2f}x)") in readme


@pytest.mark.parametrize("method, chunk, refused", [("AMXINT4", 1000, True), ("AMXINT8", 3000, True),
                                                     ("AMXINT4", 4096, False), ("FP8", 1000, False)])
def test_a_chunk_kt_kernels_amx_classes_abort_on_is_refused(method, chunk, refused):
    """kt-kernel's AMXINT4/8 classes abort the server at load when the chunked prefill (their max_len) is not a
    multiple of 32 (found calling them directly: benchmarks/gpu/kt_accuracy.py); the plan refuses it and names
    the size that works, instead of a server that dies with SIGABRT."""
    p = _h100_plan(method, chunked_prefill=chunk)
    bad = [r for r in p.reasons if "multiple of 32" in r]
    assert bool(bad) == refused
    if refused:
        assert not p.fits and bad[0].kind == "sglang" and f"--chunked-prefill {chunk // 32 * 32}" in bad[0]


# --- whole layers on the GPU (kt_gpu_layers = "auto", the kit's adapter) -----------------------------------------
def test_whole_layers_hold_only_the_cpu_layers_in_host_ram_and_sync_only_there():
    """The same GPU experts as whole layers: kt-kernel holds the CPU's layers only (the H100-host RSS: 13 GB against
    34, moe-budget.md), so a 30 GiB desktop that cannot hold every layer's experts fits; the estimate syncs on the
    CPU's layers and adds the fitted whole-layer step; the split plan offers it as an alternative."""
    t = Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host=H100_HOST, host_ram_available_bytes=30 * GiB)
    # the embeddings on the GPU in both: auto would move them beside the split only (30 GiB: test_host_embed.py)
    k = Knobs(**(catalog.presets()["moe"].knobs | {"kt_gpu_layers": "off", "kt_embed_host": "off"}))
    m, e = catalog.model(FP8_MODEL), catalog.engine()
    split = plan(m, t, k, e)
    whole = plan(m, t, replace(k, kt_gpu_layers="auto"), e, with_alternatives=False)
    assert catalog.presets()["moe"].knobs["kt_gpu_layers"] == "auto"      # the preset's own placement
    hs, hw = split.hybrid, whole.hybrid
    assert hs is not None and hw is not None and hs.gpu_layers == 0
    # planned as the adapter loads them (all of a GPU layer's experts, none of a CPU layer's), at least the split's
    # share as whole layers, rendered as the N the adapter turns into that many
    assert hw.gpu_layers == hw.num_gpu_experts * 48 // 128 >= hs.num_gpu_experts * 48 // 128 > 0
    assert hw.host_experts_bytes * 48 == hs.host_experts_bytes * (48 - hw.gpu_layers)
    assert not split.fits and [r.kind for r in split.reasons] == ["host_ram"] and whole.fits
    assert hw.decode_sync_s == pytest.approx((48 - hw.gpu_layers) * e.kt.layer_sync_s)
    seconds = (hw.decode_gpu_s + hw.decode_context_s + hw.decode_gpu_experts_s + hw.decode_cpu_experts_s
               + hw.decode_sync_s + e.kt.whole_layer_step_s)      # nothing on the GPU overlaps a CPU layer
    assert hw.decode_tok_s == pytest.approx(1 / seconds)
    assert any("whole layers, the last" in n and kt.WHOLE_LAYER_SPREAD_NOTE in n for n in whole.notes)
    alt = [a for a in split.alternatives if a.knobs == {"kt_gpu_layers": "auto"}]
    assert len(alt) == 1 and alt[0].fits and kt.WHOLE_LAYER_SPEED in alt[0].cost
    # and the way back: a whole-layer plan names the split with its host RAM (the split plan's own) and its cost
    back = [n for n in whole.notes if n.startswith("--kt-gpu-layers off:")]
    assert len(back) == 1 and kt.SPLIT_SPEED in back[0] and f"host RAM {hs.host_ram_bytes / GiB:.2f} GiB" in back[0]
    assert not any("--kt-gpu-layers off" in n for n in split.notes)


def test_whole_layers_reach_the_server_only_where_planned():
    from vramkit.launch import hybrid
    t = Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host=H100_HOST, host_ram_available_bytes=64 * GiB)
    k = Knobs(**(catalog.presets()["moe"].knobs | {"kt_embed_host": "off"}))      # the embeddings: test_host_embed.py
    # split layers cannot take the GPU prompt path (its auto stays off); whole layers take it where host RAM allows
    for layers, env in (("off", {}), ("auto", {"VRAMKIT_KT_GPU_LAYERS": "auto", "VRAMKIT_KT_GPU_PREFILL": "1024",
                                         "VRAMKIT_KT_PREFILL_PIN": "register"})):
        hy = hybrid.for_plan(plan(catalog.model(FP8_MODEL), t, replace(k, kt_gpu_layers=layers), catalog.engine(),
                                  with_alternatives=False))
        assert hy is not None and hy.adapter_env() == env
        assert {k_: v for k_, v in hy.native_env().items() if k_.startswith("VRAMKIT_")} == env
        assert len(hy.compose_parts("services/sglang-kt")["extra_env"]) == len(env)


def test_the_host_ram_check_names_whole_layers_where_they_would_fit():
    """`vramkit up`'s kt-host-ram check on a split that does not fit the host's RAM: where the same GPU experts as
    whole layers would, it says so with their need, which is the whole-layer plan's own host RAM."""
    from vramkit.launch import hybrid
    t = Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host=H100_HOST, host_ram_available_bytes=64 * GiB)
    k = Knobs(**(catalog.presets()["moe"].knobs | {"kt_gpu_layers": "off"}))
    split = plan(catalog.model(FP8_MODEL), t, k, catalog.engine(), with_alternatives=False)
    # the whole-layer plan the check names: without the GPU prompt path, whose pinned copies 30 GiB would not hold
    whole = plan(catalog.model(FP8_MODEL), t, replace(k, kt_gpu_layers="auto", kt_gpu_prefill=0), catalog.engine(),
                 with_alternatives=False)
    hy = hybrid.for_plan(split)
    assert hy is not None and split.hybrid is not None and whole.hybrid is not None
    ram = {n: (ok, text) for n, ok, text in hy.checks(30 * GiB)}["kt-host-ram"]
    assert not ram[0] and f"--kt-gpu-layers auto ({whole.hybrid.gpu_layers} whole layers on the GPU) needs " \
        f"{whole.hybrid.host_ram_bytes / GiB:.1f} GiB" in ram[1]
    too_small = {n: text for n, _, text in hy.checks(20 * GiB)}["kt-host-ram"]     # neither fits: no way out named
    assert "--kt-gpu-layers" not in too_small


def test_whole_layers_are_planned_as_the_adapter_loads_them():
    """kt.gpu_expert_counts: every expert of the last N x layers // experts decoder layers, none of the others (the
    adapter's auto), which weight_layout sums as it sums N in every layer; the split keeps N."""
    from vramkit.core.memory.costs import weight_components
    m = catalog.model(FP8_MODEL)
    counts = kt.gpu_expert_counts(m, 45, True)
    assert counts == (0,) * 32 + (128,) * 16 and kt.gpu_expert_counts(m, 45, False) == 45
    assert kt.whole_moe_layers(m, 45) == 16
    one = weight_components(m, gpu_experts=1)["experts"]           # one expert in each of the 48 layers
    assert weight_components(m, gpu_experts=counts)["experts"] == 16 * 128 * one // 48


# --- RAWINT4: the GPTQ checkpoint's own int4 values on the CPU (benchmarks/results/gpu/kt-rawint4/) --------------------
RAW4 = ROOT / "benchmarks/results/gpu/kt-rawint4"


def test_rawint4_is_made_from_a_gptq_checkpoint_only(capsys):
    rc = main(["plan", "--preset", "moe", "--kt-method", "RAWINT4", "--gpu", "rtx-5060-ti-16gb", "--cpu-isa", "amx"])
    err = capsys.readouterr().err
    assert rc == 64 and "made from a gptq_int4 checkpoint" in err and "Traceback" not in err
    gptq = catalog.model("qwen3-30b-a3b-gptq-int4")
    q = gptq.quantization
    for bad in (replace(q, desc_act=True), replace(q, sym=False), replace(q, group_size=48)):
        with pytest.raises(VramkitError) as e:
            kt.check_model(replace(gptq, quantization=bad), "RAWINT4")
        assert e.value.code == Exit.UNSUPPORTED_MODEL and "no RAWINT4 form" in e.value.what
    kt.check_model(gptq, "RAWINT4")


def test_rawint4_holds_4_5_bits_a_weight_in_host_ram():
    m = catalog.model("qwen3-30b-a3b-gptq-int4")
    params = 3 * m.hidden_size * m.moe.expert_intermediate
    assert kt.cpu_expert_bytes(m, "RAWINT4") * 8 == params * 4.5
    assert kt.cpu_expert_bytes(m, "RAWINT4") < 0.6 * kt.cpu_expert_bytes(m, "AMXINT8")


def test_rawint4s_plan_quotes_its_run_and_its_loss(capsys):
    """The plan's words on RAWINT4 are the committed figures: the server's decode and first tokens (run1/), the
    AMXINT8 whole-layer servers it is set beside (moe-budget best16 and marlin), the kernel check's loss."""
    rc = main(["plan", "--preset", "moe", "--model", "qwen3-30b-a3b-gptq-int4", "--kt-method", "RAWINT4",
               "--gpu", "rtx-5060-ti-16gb", "--cpu-isa", "amx", "--host-cores", "16"])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0 and "RAWINT4 is lossy" in out and "prefills ~15x slower" in out
    note = kt.KT_METHODS["RAWINT4"].speed_note
    probe = json.loads((RAW4 / "run1/k16-marlin-layers-raw4-t12.probe.json").read_text())
    assert f"{one_stream_tok_s(probe):.1f} tok/s" in note
    ttft = {t["prompt_tokens"]: t["ttft_s"] for t in probe["ttft"]}
    assert f"{ttft[512]:.2f} s after 512" in note and f"{ttft[8192]:.1f} s after 8K" in note
    amx = {n: json.loads((ROOT / f"benchmarks/results/gpu/moe-budget/{n}.probe.json").read_text())
           for n in ("best16/k16-wna16-layers-t12", "marlin/k16-marlin-layers-t12")}
    decodes = sorted(one_stream_tok_s(p) for p in amx.values())
    assert f"{decodes[0]:.1f}-{decodes[1]:.1f}" in note
    best = {t["prompt_tokens"]: t["ttft_s"] for t in amx["best16/k16-wna16-layers-t12"]["ttft"]}
    assert f"{best[512]:.2f} s and {best[8192]:.1f} s" in note
    assert ttft[8192] / best[8192] > 14            # "~15x"
    check = json.loads((RAW4 / "rawint4-check-avx512-dev-host.json").read_text())["cases"]
    acc = kt.KT_METHODS["RAWINT4"].accuracy
    assert f"{check['kit_repack/group32']['repack_only']['batch_64']:.1%}" in acc
    assert f"{check['kit_repack/group32']['share_raised_to_minus_7']:.2%}" in acc
    assert f"{check['nibble0_kept/group32']['kernel_vs_gptq']['batch_64']:.0%}" in acc
    amx_check = json.loads((RAW4 / "rawint4-check-amx.json").read_text())["rel_l2"]
    assert amx_check["as_quantized/group32"]["batch_64"] > 0.5 > amx_check["nibble0_clamped/group32"]["batch_64"]


def test_rawint4_on_a_cpu_whose_build_was_not_run_is_replaced():
    """Only the AMX build ran RAWINT4 in a server: on an AVX-512 CPU the plan takes another method, saying why."""
    m, why = kt.resolve_method(catalog.model("qwen3-30b-a3b-gptq-int4"), "RAWINT4", "avx512", "0.5.1")
    assert m != "RAWINT4" and "RAWINT4 has no kernels" in why
    assert kt.resolve_method(catalog.model("qwen3-30b-a3b-gptq-int4"), "RAWINT4", "amx", "0.5.1")[0] == "RAWINT4"


def test_the_rawint4_kernel_table_is_the_benchs():
    """kt-rawint4/README.md's kernel table (and the main README's figures) are kernel-bench-t12.json's runs."""
    runs = {r["method"]: r for r in json.loads((RAW4 / "kernel-bench-t12.json").read_text())["runs"]}
    table = (RAW4 / "README.md").read_text()
    readme = " ".join((ROOT / "README.md").read_text().split())
    m = catalog.model("qwen3-30b-a3b-gptq-int4")
    for method in ("AMXINT8", "RAWINT4"):
        r = runs[method]
        ms, layer = r["cpu_ms_per_token_median"], r["cpu_ms_per_token_median"] / 48
        read = 8 * kt.cpu_expert_bytes(m, method) / (layer / 1e3) / 1e9
        row = f"| {method} | {8 * kt.cpu_expert_bytes(m, method) / 1e6:.1f} MB | {ms:.1f} | {layer:.2f} ms | " \
              f"{read:.0f} GB/s | {r['prefill_tok_s']:.0f} tok/s |"
        assert row in table, row
        assert f"{layer:.2f} ms in {method}" in readme and f"{read:.0f}" in readme
    speedup = runs["AMXINT8"]["cpu_ms_per_token_median"] / runs["RAWINT4"]["cpu_ms_per_token_median"]
    assert f"{speedup:.2f}x" in table and f"{speedup:.2f}x" in readme


def test_the_q4k_check_the_readme_quotes():
    res = json.loads((ROOT / "benchmarks/results/gpu/kt-llamafile/q4k-check-dev-host.json").read_text())["rel_l2"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"a layer {res['LLAMAFILE_Q4_K']:.1%} from the values they decode to, its Q8_0 {res['LLAMAFILE_Q8_0']:.1%}" \
        .replace("%", " %") in readme
    assert res["LLAMAFILE_Q4_K"] < 0.03          # the kernel computes the blocks (the format's error left out)


def test_the_q4k_kernel_bench_the_readmes_quote():
    """kt-llamafile/README.md's Q4_K table and the main README's figures are the two kernel-bench JSONs' runs."""
    lf = ROOT / "benchmarks/results/gpu/kt-llamafile"
    table = (lf / "README.md").read_text()
    readme = " ".join((ROOT / "README.md").read_text().split())
    m = catalog.model("qwen3-30b-a3b-gptq-int4")
    q4k_bytes = 3 * m.hidden_size * m.moe.expert_intermediate * 144 // 256       # block_q4_K: 144 B a 256 weights
    per_layer = {}
    for f, method, n_bytes in (("kernel-bench-amxint8-t12.json", "AMXINT8", kt.cpu_expert_bytes(m, "AMXINT8")),
                               ("kernel-bench-q4k-t12.json", "LLAMAFILE_Q4_K", q4k_bytes)):
        res = json.loads((lf / f).read_text())
        r = next(r for r in res["runs"] if r["method"] == method)
        assert r["threads"] == 12 and r["variant"] == "amx" and res["gpu_experts"] == 0
        ms = r["cpu_ms_per_token_median"]
        per_layer[method] = layer = ms / 48
        held = res["layers"] * 128 * n_bytes / 1e9
        row = f"| `{f}` | {method} | {res['layers']} ({held:.1f} GB) | {8 * n_bytes / 1e6:.1f} MB | {ms:.1f} | " \
              f"{layer:.2f} ms | {8 * n_bytes / (layer / 1e3) / 1e9:.0f} GB/s | {r['prefill_tok_s']:.0f} tok/s |"
        assert row in table, row
        assert f"{r['prefill_tok_s']:.0f}" in readme
    q4k, int8 = per_layer["LLAMAFILE_Q4_K"], per_layer["AMXINT8"]
    assert f"a Q4_K layer took {q4k:.2f} ms against AMXINT8's {int8:.2f} ms there, {q4k / 0.41:.1f}x llama.cpp's 0.41" \
        in readme
    assert q4k > 0.41 * 1.3      # the README's verdict: no kt-kernel path at llama.cpp's per-layer time


def test_the_16g_token_budget_the_readme_derives():
    """README: the kit's 16 GiB token ~ llama.cpp's all-GPU step + its CPU layers at the kernel bench's AMXINT8 time,
    against the measured whole-layer servers (best16 on moe_wna16: 12 CPU layers; marlin: 13)."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    budget = (ROOT / "benchmarks/results/gpu/moe-budget.md").read_text()
    assert "3.9 ms with every expert on the GPU" in budget and "0.41 ms for each of the 11 layers" in budget
    layer = {r["method"]: r for r in json.loads((RAW4 / "kernel-bench-t12.json").read_text())["runs"]}["AMXINT8"]
    per_layer = layer["cpu_ms_per_token_median"] / 48
    lo, hi = 3.9 + 12 * per_layer, 3.9 + 13 * per_layer
    measured = [1000 / one_stream_tok_s(json.loads((ROOT / f"benchmarks/results/gpu/moe-budget/{n}.probe.json")
                                                   .read_text()))
                for n in ("best16/k16-wna16-layers-t12", "marlin/k16-marlin-layers-t12")]
    assert f"{lo:.1f}-{hi:.1f} ms, against {min(measured):.2f}-{max(measured):.1f} measured" in readme
    assert all(abs(m - d) / m < 0.06 for m, d in zip(sorted(measured), (lo, hi), strict=True))
    fast = 3.9 + 13 * 0.41
    assert f"~{fast:.1f} ms (~{1000 / fast:.0f} tok/s" in readme


def test_sglang_s_own_host_ram_follows_the_compile_workers_a_host_starts():
    """kt_hybrid.COMPILE_WORKER_BYTES is one torch compile worker's RSS as the per-process readings measured it (the
    16-CPU host's 16 workers right after start, gone by the probe's end), and a plan for a server with another CPU
    count moves SGLang's own host RAM by min(32, CPUs) - 16 of them; a host whose count is not known keeps the
    measured figure."""
    per_worker = []
    for rel in ("best16/k16-int8-split", "best16/k16-int8-whole", "best16/k16-wna16-layers-t12",
                "best16/k16-wna16-layers-t12-defer2", "marlin/k16-wna16-layers-t12"):
        d = json.loads((ROOT / f"benchmarks/results/gpu/moe-budget/{rel}.json").read_text())
        pool = [[r["rss"] for r in d[f"host_rss_{w}_by_process"] if "torch/_inductor/compile_worker" in r["cmdline"]]
                for w in ("after_start", "end")]
        assert len(pool[0]) - len(pool[1]) == kt.MEASURED_HOST_CPUS, rel      # min(32, 16) workers, then quiesced
        per_worker.append((sum(pool[0]) - sum(pool[1])) / kt.MEASURED_HOST_CPUS)
    assert kt.COMPILE_WORKER_BYTES == round(sum(per_worker) / len(per_worker), -6)
    w = kt.COMPILE_WORKER_BYTES / GiB
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"{16 * w:.1f} GiB right after start are torch inductor's compile workers, one per CPU the server may use "
            f"up to 32 (torch's rule; 16 of {w:.2f} GiB each") in readme
    assert f"a 32-thread desktop plans {16 * w:.1f} GiB more, an 8-thread one {8 * w:.1f} GiB less" in readme
    measured = _h100_plan("AMXINT8").hybrid
    assert measured.host_sglang_bytes == catalog.engine().kt.sglang_host_bytes
    assert measured.host_sglang_source == "measured"
    for cpus, workers in ((16, 0), (8, -8), (24, 8), (64, 16)):
        h = _h100_plan("AMXINT8", host=replace(H100_HOST, cpus=cpus)).hybrid
        assert h.host_sglang_bytes - measured.host_sglang_bytes == workers * kt.COMPILE_WORKER_BYTES, cpus
        assert h.host_ram_bytes - measured.host_ram_bytes == workers * kt.COMPILE_WORKER_BYTES
        assert (h.host_sglang_source == "measured") == (workers == 0)
        if workers:
            assert h.host_sglang_source == (f"measured on 16 CPUs, {'+' if workers > 0 else '-'}"
                                            f"{abs(workers) * kt.COMPILE_WORKER_BYTES / GiB:.1f} GiB of torch's "
                                            f"compile workers for {cpus} here, derived")


def test_this_host_s_plan_counts_its_server_cpus_and_another_host_s_does_not():
    """launch.hybrid.host_cpu: this machine's plan takes the server cpuset's CPUs (torch's count: the affinity);
    a plan for another host (--host-cores) leaves them unknown."""
    import os

    from vramkit.launch import hybrid
    assert hybrid.host_cpu(cpu_isa="avx2").cpus == len(os.sched_getaffinity(0))
    assert hybrid.host_cpu(cpu_isa="avx2", physical_cores=8).cpus is None
