"""The two costs of computing a CPU layer's prompt chunk on the GPU, as llama.cpp does (issue 18; the lever derived in
benchmarks/results/gpu/moe-vs-llamacpp-mf/README.md, not built): copying one MoE layer's GPTQ-Int4 experts, already in
marlin's layout, from pinned host RAM to the GPU, and running SGLang's own marlin MoE (fused_marlin_moe, the kernel
its GPU layers run) on a chunk of T tokens.

    python3 benchmarks/gpu/gpu_prefill_bench.py [--tokens 512,2048,4096] [--out R.json]

On the GPU host, in the SGLang archive's environment (benchmarks/gpu/host_env.sh) after the marlin JIT prewarm: random
weights of the coder's shape (128 experts, hidden 2048, expert intermediate 768, group 128, 4 bits), repacked by
SGLang's gptq_marlin_moe_repack and marlin_moe_permute_scales as its GPTQ marlin MoE method does after loading, routing
drawn uniformly (8 of 128 a token). Each figure is the median of --reps timed runs after 3 warm-ups (CUDA events).
Writes the per-layer copy time and rate, the marlin time per chunk size, and the derived first token after a 30K
prompt: the committed 24 GiB run's (every layer on the GPU) plus the copies of --cpu-layers layers per chunk.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHAPE = {"experts": 128, "hidden": 2048, "inter": 768, "top_k": 8, "group": 128, "bits": 4}


def derived_ttft(ttft_all_gpu_s: float, copy_s: float, cpu_layers: int, prompt: int, chunk: int) -> dict:
    """The first token with the CPU layers' prompt on the GPU: every layer's compute as on the all-GPU card (its
    measured TTFT) plus each chunk's copies of the CPU layers' experts (the copies do not overlap the compute here:
    one staging buffer)."""
    chunks = math.ceil(prompt / chunk)
    copies = chunks * cpu_layers * copy_s
    return {"chunks": chunks, "copies_s": round(copies, 3), "ttft_s": round(ttft_all_gpu_s + copies, 2)}


def _median_ms(fn, reps: int) -> float:
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def bench(tokens: list[int], reps: int) -> dict:
    import torch
    from sglang.srt.hardware_backend.gpu.quantization.gptq_kernels import gptq_marlin_moe_repack
    from sglang.srt.layers.moe.fused_moe_triton.fused_marlin_moe import fused_marlin_moe
    from sglang.srt.layers.quantization.marlin_utils import marlin_make_workspace, marlin_moe_permute_scales

    e, h, i, g, k = SHAPE["experts"], SHAPE["hidden"], SHAPE["inter"], SHAPE["group"], SHAPE["top_k"]
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    qmax = 2**31 - 1

    def qweight(*shape: int) -> torch.Tensor:
        return torch.randint(-qmax, qmax, shape, dtype=torch.int32, device=dev, generator=gen)

    empty = torch.empty((e, 0), dtype=torch.int32, device=dev)     # no act-order: SGLang's empty g_idx / sort indices
    # GPTQMarlinMoEKernel.process_weights_after_loading's calls, in its order and with its arguments
    w13 = gptq_marlin_moe_repack(qweight(e, h // 8, 2 * i), empty, h, 2 * i, 4)
    w2 = gptq_marlin_moe_repack(qweight(e, i // 8, h), empty, i, h, 4)
    s13 = marlin_moe_permute_scales(s=(torch.rand(e, h // g, 2 * i, device=dev, generator=gen) * 1e-2).half(),
                                    size_k=i, size_n=2 * i, group_size=g)
    s2 = marlin_moe_permute_scales(s=(torch.rand(e, i // g, h, device=dev, generator=gen) * 1e-2).half(),
                                   size_k=i, size_n=h, group_size=g)
    stage = [w13, w2, s13, s2]                        # the GPU staging tensors, one layer's worth
    host = [t.cpu().pin_memory() for t in stage]      # the CPU layer's copy in pinned host RAM
    layer_bytes = sum(t.numel() * t.element_size() for t in host)

    def copy() -> None:
        for dst, src in zip(stage, host, strict=True):
            dst.copy_(src, non_blocking=True)

    out: dict = {"layer_bytes": layer_bytes, "copy_ms": round(_median_ms(copy, reps), 3)}
    out["copy_gbs"] = round(layer_bytes / (out["copy_ms"] / 1e3) / 1e9, 1)
    workspace = marlin_make_workspace(dev, max_blocks_per_sm=4)
    out["marlin_ms"] = {}
    for t in tokens:
        x = (torch.randn(t, h, device=dev, generator=gen) * 0.1).half()
        logits = torch.randn(t, e, device=dev, generator=gen)
        weights, ids = torch.softmax(logits, dim=-1).topk(k, dim=-1)

        def moe(x=x, logits=logits, weights=weights, ids=ids) -> None:
            fused_marlin_moe(hidden_states=x, w1=w13, w2=w2, w1_scale=s13, w2_scale=s2, gating_output=logits.half(),
                             topk_weights=weights, topk_ids=ids.to(torch.int32), global_num_experts=e,
                             g_idx1=empty, g_idx2=empty, sort_indices1=empty, sort_indices2=empty,
                             workspace=workspace, num_bits=4, is_k_full=True)
        out["marlin_ms"][str(t)] = round(_median_ms(moe, reps), 3)
    out["device"] = torch.cuda.get_device_name(0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="512,2048,4096", help="chunk sizes to time the marlin MoE at")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cpu-layers", type=int, default=11, help="CPU layers of the 16 GiB preset (37 of 48 on the GPU)")
    ap.add_argument("--chunk", type=int, default=4096, help="the preset's chunked prefill")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    try:
        tokens = [int(t) for t in a.tokens.split(",")]
    except ValueError:
        print(f"gpu_prefill_bench: --tokens {a.tokens!r}: give whole numbers separated by commas", file=sys.stderr)
        return 2
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device here")
        res = bench(tokens, a.reps)
    except Exception as exc:       # noqa: BLE001 -- the GPU host's failure, written down for the run's record
        print(f"gpu_prefill_bench: {type(exc).__name__}: {exc}", file=sys.stderr)
        if a.out:
            a.out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return 3
    c24 = json.loads((ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-24g.json").read_text())
    ttft24 = c24["engines"]["vramkit"]["ttft_30k_s"]
    res |= {"shape": SHAPE, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "how": "benchmarks/gpu/gpu_prefill_bench.py: medians of CUDA-event timings after 3 warm-ups",
            "derived_ttft_30k": {"all_gpu_ttft_30k_s": ttft24, "source": "moe-vs-llamacpp-24g.json (measured)",
                                 **derived_ttft(ttft24, res["copy_ms"] / 1e3, a.cpu_layers, 30000, a.chunk)}}
    text = json.dumps(res, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
