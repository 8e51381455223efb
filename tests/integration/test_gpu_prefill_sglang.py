"""The kit's GPU prompt path (kt_gpu_prefill, services/sglang-kt/kt_compat/vramkit_gpu_prefill.py) against the pinned
SGLang's own classes, in the shared checker (.venv-sglang): the payload GpuPrefill.run hands SGLang's marlin MoE entry
is SGLang's MarlinMoeQuantInfo built with its fields, over the staging tensors the layer's copy filled. The kernel
itself runs on the GPU host only (benchmarks/gpu/gpu_prefill_bench.py), so its entry is recorded here, not run."""
from __future__ import annotations

from pathlib import Path

from vramkit.adapters import sglang_check

ADAPTER = Path(__file__).resolve().parents[2] / "services" / "sglang-kt" / "kt_compat" / "vramkit_gpu_prefill.py"


def test_the_prompt_path_hands_sglang_its_own_marlin_payload():
    got = sglang_check.gpu_prefill_call(ADAPTER)
    assert got["returned"] == "combined"                  # SGLang's entry's answer goes back to the layer as is
    assert got["quant_info"] == "sglang.srt.layers.moe.moe_runner.marlin.MarlinMoeQuantInfo"
    assert got["weight_bits"] == 4 and got["global_num_experts"] == 4 and got["g_idx_shape"] == [4, 0]
    assert got["copied"] and got["runner_config"] == "MoeRunnerConfig"
    assert got["wants"] == [True, False, False]           # 16 tokens of an added layer; 7 tokens; a layer not added
