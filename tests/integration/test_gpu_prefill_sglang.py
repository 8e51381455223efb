"""The kit's GPU prompt path (kt_gpu_prefill, services/sglang-kt/kt_compat/vramkit_gpu_prefill.py) against the pinned
SGLang's own code, in the shared checker (.venv-sglang): a dummy layer added through SGLang's GPTQ marlin repack, and
one forward handed to SGLang's marlin MoE entry with SGLang's MarlinMoeQuantInfo, which must pass fused_marlin_moe's
shape checks (the GPU host's first run failed there: the dummy layer skipped the repack's layout). Only the kernels
are stood in for; they run on the GPU host (benchmarks/gpu/gpu_prefill_bench.py)."""
from __future__ import annotations

from pathlib import Path

from vramkit.adapters import sglang_check

ADAPTER = Path(__file__).resolve().parents[2] / "services" / "sglang-kt" / "kt_compat" / "vramkit_gpu_prefill.py"


def test_the_prompt_path_hands_sglang_its_own_marlin_payload_in_marlin_s_shapes():
    got = sglang_check.gpu_prefill_call(ADAPTER)
    assert got["outcome"] == "past_shape_checks"          # fused_marlin_moe accepted every tensor it checks
    assert got["quant_info"] == "sglang.srt.layers.moe.moe_runner.marlin.MarlinMoeQuantInfo"
    assert got["weight_bits"] == 4 and got["global_num_experts"] == 4 and got["g_idx_shape"] == [4, 0]
    assert got["staged_is_passed"] and got["runner_config"] == "MoeRunnerConfig"
    # hidden 256, intermediate 128: marlin's qweights are [E, K / 16, 2 N] after the repack, the scales as loaded
    assert got["shapes"] == {"w13_qweight": [4, 16, 512], "w2_qweight": [4, 8, 512],
                             "w13_scales": [4, 8, 256], "w2_scales": [4, 4, 256]}
    assert got["bytes"] == got["planned_bytes"]           # the repack keeps each size: the planner's figures hold
    assert got["wants"] == [True, False, False]           # 16 tokens of an added layer; 7 tokens; a layer not added


def test_the_fp8_path_hands_sglang_its_triton_payload_not_in_place():
    """The moe preset's block-FP8 checkpoint: the layer as SGLang's GPU layers hold it (no repack) reaches the triton
    MoE entry with SGLang's TritonMoeQuantInfo (FP8 weights and activations, 128x128 blocks), passes
    fused_experts_impl's checks, and runs out of place (the input stays for kt-kernel if the path fails)."""
    got = sglang_check.gpu_prefill_call(ADAPTER, fmt="fp8")
    assert got["outcome"] == "past_shape_checks"
    assert got["quant_info"] == "sglang.srt.layers.moe.moe_runner.triton.TritonMoeQuantInfo"
    assert got["use_fp8_w8a8"] and got["block_shape"] == [128, 128] and got["staged_is_passed"]
    assert got["op"] == "outplace_fused_experts" and got["inplace"] is False
    assert got["dtypes"]["w13_weight"] == "torch.float8_e4m3fn" and got["dtypes"]["w2_weight_scale_inv"] == "torch.float32"
    assert got["shapes"] == {"w13_weight": [4, 256, 256], "w2_weight": [4, 256, 128],
                             "w13_weight_scale_inv": [4, 2, 2], "w2_weight_scale_inv": [4, 2, 1]}
    assert got["bytes"] == got["planned_bytes"]
    assert got["wants"] == [True, False, False]


def test_the_fp8_path_as_int8_hands_sglang_moe_wna16_s_8_bit_payload():
    """VRAMKIT_KT_PREFILL_FP8=int8: the FP8 layer requantized to int8 reaches the same triton MoE entry as SGLang's
    moe_wna16 8-bit layers call it (use_int8_w8a16, groups of 128 along the input, bf16 inputs), in the shapes and
    dtypes MoeWNA16Method.create_weights allocates for such a layer, and passes fused_experts_impl's checks."""
    got = sglang_check.gpu_prefill_call(ADAPTER, fmt="fp8-int8")
    assert got["outcome"] == "past_shape_checks"
    assert got["use_int8_w8a16"] and not got["use_fp8_w8a8"] and got["block_shape"] == [0, 128]
    assert got["staged_is_passed"] and got["op"] == "outplace_fused_experts" and got["inplace"] is False
    assert {n: [shape, got["dtypes"][n]] for n, shape in got["shapes"].items()} == got["sglang_8bit"]
    assert got["bytes"] == got["planned_bytes"] and got["wants"] == [True, False, False]


def test_the_fp8_path_s_numbers_through_sglang_s_triton_kernels():
    """The path's output through SGLang's own triton MoE kernels (Triton's interpreter on the CPU, float16 tokens)
    against float32 on the layer's FP8 values: int8 (the values requantized per 128 inputs; no FP8 step at run time)
    within 2 % (1.1 % when written). w8a8 (FP8 activations too) reads 10.0 % here, but the interpreter does not
    compute FP8 as the GPU does: the bench's own layer and inputs (gpu_prefill_bench.py --format fp8), interpreted
    on the dev host, read 10.0 % where the GPU measured 5.10 % (fp8-bench/c). The cause, probed here: its float32 ->
    e4m3 cast halves a value whose mantissa rounds up into the next power of two (31.4 -> 16 where torch gives 32),
    and rounds ties up where torch rounds them to even.
    So only w8a8's being further off than int8 is asserted; the GPU's figures are the bench's. The day the probe
    finds the cast right, this test fails: the interpreted w8a8 figures are then usable."""
    got = sglang_check.gpu_prefill_numbers(ADAPTER)
    assert got["interpreter"]
    cast, torch_cast = got["fp8_cast"]["interpreter"], got["fp8_cast"]["torch"]
    assert torch_cast[:3] == [8.0, -32.0, 128.0] and cast[:3] == [4.0, -16.0, 64.0]     # the carry lost: halved
    assert cast[3:5] == torch_cast[3:5] and cast[6] == torch_cast[6]                    # 3.0, 0.3, -1.5 agree
    assert (cast[5], cast[7]) == (104.0, 208.0) and (torch_cast[5], torch_cast[7]) == (96.0, 192.0)  # ties: up, even
    assert got["int8"]["dtype"] == got["w8a8"]["dtype"] == "torch.float16"
    assert got["int8"]["rel_l2"] < 0.02 and 5 * got["int8"]["rel_l2"] < got["w8a8"]["rel_l2"] < 0.2
