"""The FP8 prompt path's error, derived on the CPU: what the arithmetic SGLang's triton MoE runs for block-FP8 experts
(fp8_w8a8, 128 x 128 weight blocks, activations quantized per token in groups of 128, float16 between the two GEMMs)
loses against float32 on the same FP8 weights, to set beside the kernel's own error measured on the GPU
(gpu_prefill_bench.py --format fp8, `check_64_tokens`, benchmarks/results/gpu/moe-gpu-prefill/fp8-bench/c/).

    python3 benchmarks/gpu/fp8_path_arithmetic.py [--out R.json]

The layer is the adapter's own dummy one (vramkit_gpu_prefill.GpuPrefill._fp8_layer: the codes the server copies)
with the bench's scales (uniform 1e-3..2.1e-2); 64 tokens, 8 of 128 experts each. Two input sizes: the bench's
(0.1 x N(0,1), whose float16 intermediates are subnormal) and 100 times larger, to show that the error is the FP8
activations', not float16's. Torch on the CPU, ~20 s, 2 GB of RAM. A derivation of the algorithm, not a measurement
of the kernel: the kernel's figure is the GPU run's.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHAPE = {"experts": 128, "hidden": 2048, "inter": 768, "top_k": 8, "tokens": 64, "block": 128}


def derive(seed: int = 0) -> dict:
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, str(ROOT / "services" / "sglang-kt" / "kt_compat"))
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    import vramkit_gpu_prefill as gp
    from gpu_prefill_bench import Fp8Experts, fp8_reference  # the GPU check's dequantization and float32 reference
    from kt_accuracy import fp8_act  # SGLang's per-token-group FP8 rounding of a GEMM's input, as the proxy uses

    e, h, i, k, t, b = (SHAPE[n] for n in ("experts", "hidden", "inter", "top_k", "tokens", "block"))
    hf = {"hidden_size": h, "moe_intermediate_size": i, "num_experts": e,
          "quantization_config": {"quant_method": "fp8", "weight_block_size": [b, b], "activation_scheme": "dynamic"}}
    raw = gp.GpuPrefill(1, hf, "", dummy=True)._fp8_layer(0, list(range(e)))
    gen = torch.Generator().manual_seed(seed)
    for name in ("w13_weight_scale_inv", "w2_weight_scale_inv"):
        raw[name] = torch.rand(raw[name].shape, generator=gen) * 2e-2 + 1e-3

    w13 = Fp8Experts(raw["w13_weight"], raw["w13_weight_scale_inv"], (b, b), "cpu")
    w2 = Fp8Experts(raw["w2_weight"], raw["w2_weight_scale_inv"], (b, b), "cpu")

    def path(x, ids, wts):
        """The layer as the triton kernels compute it: FP8 inputs, float16 between the GEMMs and out."""
        y = torch.zeros(x.shape, dtype=torch.float32)
        for ex in torch.unique(ids).tolist():
            tok, slot = (ids == ex).nonzero(as_tuple=True)
            g1 = (fp8_act(x[tok].float()) @ w13[ex].T).half().float()     # the first GEMM's output cache is float16
            mid = fp8_act((F.silu(g1[:, :i]) * g1[:, i:]).half().float())  # so is the activation's; FP8 again
            y.index_add_(0, tok, (mid @ w2[ex].T) * wts[tok, slot][:, None])
        return y.half().float()

    out = {}
    for label, amp in (("bench_inputs", 0.1), ("inputs_x100", 10.0)):
        x = (torch.randn(t, h, generator=gen) * amp).half()
        wts, ids = torch.softmax(torch.randn(t, e, generator=gen), -1).topk(k, -1)
        ref, got = fp8_reference(x, raw, ids, wts, i, (b, b)), path(x, ids, wts)
        out[label] = {"input_scale": amp, "rel_l2": round(float((got - ref).norm() / ref.norm()), 5),
                      "ref_rms": float(ref.pow(2).mean().sqrt())}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the result here as JSON (default: stdout only)")
    args = ap.parse_args(argv)
    import torch
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    from gpu_prefill_bench import emit
    t0 = time.time()
    result = {"derived": derive(), "shape": SHAPE, "how": "benchmarks/gpu/fp8_path_arithmetic.py (derived on the CPU)",
              "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": round(time.time() - t0, 1)}
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
