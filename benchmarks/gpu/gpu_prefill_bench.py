"""The adapter's GPU prompt path for a CPU layer (kt_gpu_prefill, services/sglang-kt/kt_compat/vramkit_gpu_prefill.py;
issue 18, derived in benchmarks/results/gpu/moe-vs-llamacpp-mf/README.md), checked and timed without a server: one MoE
layer's GPTQ-Int4 experts repacked by its to_marlin, copied from pinned host RAM, and run by GpuPrefill.run through
SGLang's own marlin MoE (the kernel its GPU layers run) on a chunk of T tokens; with --format fp8 the same for block-FP8
experts (the moe preset's checkpoint) on SGLang's triton MoE; --format fp8-int8 those FP8 values requantized to int8
(int8_from_fp8: VRAMKIT_KT_PREFILL_FP8=int8) on the same triton MoE as moe_wna16's 8-bit layers, checked against the
same float32 reference on the FP8 values.

    python3 benchmarks/gpu/gpu_prefill_bench.py [--format gptq|fp8|fp8-int8] [--tokens 512,2048,4096] [--out R.json]
    .venv-sglang/bin/python benchmarks/gpu/gpu_prefill_bench.py --interpret --format fp8-int8 --out R.json  # no GPU

On the GPU host, in the SGLang archive's environment (benchmarks/gpu/host_env.sh) after the marlin JIT prewarm: random
GPTQ weights of the coder's shape (128 experts, hidden 2048, expert intermediate 768, group 128, 4 bits, symmetric),
routing drawn uniformly (8 of 128 a token). First a numeric check: 64 tokens through GpuPrefill.run against a float32
reference computed from the raw GPTQ tensors (relative L2 error). Then each figure the median of --reps timed runs
after 3 warm-ups (CUDA events): the copy alone (time and rate) and GpuPrefill.run (copy and marlin MoE) per chunk
size, and the derived first token after a 30K prompt: the committed 24 GiB run's (every layer on the GPU) plus the
copies of --cpu-layers layers per chunk.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
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


class GptqExperts:
    """One projection's experts as float32 [out, in], dequantized from raw GPTQ tensors when indexed (their values as
    SGLang computes them: kt_repack.gptq_values, symmetric around 8); `rows` picks gate or up out of w13."""

    def __init__(self, q, scales, group: int, device, rows: slice = slice(None)) -> None:
        self.q, self.scales, self.group, self.device, self.rows = q, scales, group, device, rows

    def __getitem__(self, e: int):
        sys.path.insert(0, str(ROOT))
        from vramkit.core.model.kt_repack import gptq_values
        return gptq_values(self.q[e].to(self.device), self.scales[e].to(self.device), self.group)[self.rows]


class Fp8Experts:
    """One projection's experts as float32 [out, in], dequantized from block-FP8 tensors when indexed: each weight
    times its [bn, bk] block's weight_scale_inv, as SGLang's block-FP8 linear reads them."""

    def __init__(self, w, scale, block: tuple[int, int], device, rows: slice = slice(None)) -> None:
        self.w, self.scale, self.block, self.device, self.rows = w, scale, block, device, rows

    def __getitem__(self, e: int):
        w = self.w[e].to(self.device).float()
        bn, bk = self.block
        s = self.scale[e].to(self.device).repeat_interleave(bn, 0)[: w.shape[0]].repeat_interleave(bk, 1)[:, : w.shape[1]]
        return (w * s)[self.rows]


def fp8_reference(x, raw: dict, ids, weights, inter: int, block: tuple[int, int]):
    """The MoE layer in float32 from the block-FP8 tensors (no activation quantization), by the same reference."""
    import torch
    from kt_accuracy import Model
    d = x.device
    gate = Fp8Experts(raw["w13_weight"], raw["w13_weight_scale_inv"], block, d, slice(0, inter))
    up = Fp8Experts(raw["w13_weight"], raw["w13_weight_scale_inv"], block, d, slice(inter, None))
    down = Fp8Experts(raw["w2_weight"], raw["w2_weight_scale_inv"], block, d)
    return Model.moe_torch(gate, up, down, x.float(), ids, weights, out_dtype=torch.float32)


def reference(x, raw: dict, ids, weights, inter: int, group: int):
    """The MoE layer in float32 from the raw GPTQ tensors, by the kit's shared reference (kt_accuracy's
    Model.moe_torch): each token's top-k experts, silu(x gate) * (x up) down, weighted."""
    import torch
    from kt_accuracy import Model
    d = x.device
    gate = GptqExperts(raw["w13_qweight"], raw["w13_scales"], group, d, slice(0, inter))
    up = GptqExperts(raw["w13_qweight"], raw["w13_scales"], group, d, slice(inter, None))
    down = GptqExperts(raw["w2_qweight"], raw["w2_scales"], group, d)
    return Model.moe_torch(gate, up, down, x.float(), ids, weights, out_dtype=torch.float32)


def bench(tokens: list[int], reps: int, fmt: str = "gptq", pin: str = "alloc", device: str = "cuda") -> dict:
    """The adapter's own path on one random layer, checked against a float32 reference, then timed: GPTQ-Int4
    (to_marlin, the pinned copy, GpuPrefill.run through SGLang's fused_experts_none_to_marlin) or block FP8 (the
    adapter's own dummy layer, the pinned copy, GpuPrefill.run through SGLang's fused_experts_none_to_triton with
    FP8 weights and activations). `device` "cpu": the check alone, in Triton's interpreter (--interpret)."""
    import torch
    sys.path.insert(0, str(ROOT / "services" / "sglang-kt" / "kt_compat"))
    import vramkit_gpu_prefill as gp
    try:    # what the server's start does first (flashinfer_comm_fusion): the archive's flashinfer.comm stops at its
        import flashinfer.comm  # noqa: F401 -- cuTile part (no cuda.tile), its submodules SGLang's MoE imports stay
    except ImportError:
        pass
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.token_dispatcher.standard import StandardDispatchOutput
    from sglang.srt.layers.moe.topk import StandardTopKOutput

    e, h, i, g, k = SHAPE["experts"], SHAPE["hidden"], SHAPE["inter"], SHAPE["group"], SHAPE["top_k"]
    gen = torch.Generator().manual_seed(0)
    raw = {}
    for name, (shape, dtype) in gp.shapes(h, i, e, g).items():
        raw[name] = (torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32, generator=gen) if dtype == "int32"
                     else (torch.rand(shape, generator=gen) * 2e-2 + 1e-3).half())
    hf = {"hidden_size": h, "moe_intermediate_size": i, "num_experts": e,
          "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": g, "sym": True, "desc_act": False}}
    fp8 = fmt.startswith("fp8")
    if fp8:
        # the triton MoE reads the server's arguments (its deterministic-inference switch), which a server sets:
        # here ServerArgs with its fields' defaults, without its start-up checks (no model to read)
        from sglang.srt.runtime_context import get_context
        from sglang.srt.server_args import ServerArgs
        get_context().set_server_args(ServerArgs.__new__(ServerArgs))
        hf["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128],
                                     "activation_scheme": "dynamic", "fmt": "e4m3"}
        hf["torch_dtype"] = "float16"                  # the bench's inputs: int8's scales in the same dtype
        engine = gp.GpuPrefill(1, hf, "", dummy=True)
        engine.fp8_as = "int8" if fmt == "fp8-int8" else "w8a8"     # as VRAMKIT_KT_PREFILL_FP8 sets it
        raw = engine._fp8_layer(0, list(range(e)))     # the adapter's dummy codes; scales as large as the GPTQ
        for name in ("w13_weight_scale_inv", "w2_weight_scale_inv"):   # check's, so fp16 outputs stay normal
            raw[name] = torch.rand(raw[name].shape, generator=gen) * 2e-2 + 1e-3
    else:
        engine = gp.GpuPrefill(1, hf, "", dummy=False)
    engine.pin = pin                               # the adapter's own pinning, as VRAMKIT_KT_PREFILL_PIN sets it
    t0 = time.perf_counter()
    layer = gp.to_marlin(raw, h, i, g) if not fp8 else \
        gp.int8_from_fp8(raw, (128, 128), torch.float16) if fmt == "fp8-int8" else raw
    convert_s = time.perf_counter() - t0     # int8: what each CPU layer adds to a start from a real checkpoint
    on_gpu = device == "cuda"
    engine.host[0] = {n: engine._pin(t.cpu()) if on_gpu else t.cpu() for n, t in layer.items()}
    engine.stage = {n: torch.empty_like(t, device=device) for n, t in engine.host[0].items()}
    dev = torch.device(device)
    layer_bytes = sum(t.numel() * t.element_size() for t in engine.host[0].values())

    def inputs(t: int):
        x = (torch.randn(t, h, generator=gen) * 0.1).half().to(dev)
        logits = torch.randn(t, e, generator=gen).to(dev)
        weights, ids = torch.softmax(logits, dim=-1).topk(k, dim=-1)
        return x, StandardDispatchOutput(hidden_states=x, hidden_states_scale=None, topk_output=StandardTopKOutput(
            topk_weights=weights, topk_ids=ids.to(torch.int32), router_logits=logits.half())), ids, weights

    x, dispatch, ids, weights = inputs(64)
    # the reference first, from a copy of the input: the path must not have written over it (2026-11-28's first fp8
    # run wrote its output over x through SGLang's in-place default, and the reference then read the output)
    x0 = x.clone()
    got = engine.run(0, dispatch, MoeRunnerConfig()).hidden_states.float()
    out_kept = bool(torch.equal(x, x0))
    ref = fp8_reference(x0, raw, ids, weights, i, (128, 128)) if fp8 else reference(x0, raw, ids, weights, i, g)
    out: dict = {"check_64_tokens": {"rel_l2": round(float((got - ref).norm() / ref.norm()), 5),
                                     "ref_rms": float(ref.pow(2).mean().sqrt()), "input_kept": out_kept}}
    if fmt == "fp8-int8":
        out["int8_convert_s"] = {"seconds": round(convert_s, 2), "threads": torch.get_num_threads()}
        if on_gpu:      # the adapter converts on the GPU since 2026-11-29, in its staging set: the same tensors?
            staged = {n: torch.empty(shape, dtype=getattr(torch, d), device=dev)
                      for n, (shape, d) in gp.int8_shapes(h, i, e, "float16").items()}
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            gp.int8_into(raw, (128, 128), staged)
            torch.cuda.synchronize()
            out["int8_convert_gpu"] = {"seconds": round(time.perf_counter() - t0, 4), "bit_equal_to_cpu": all(
                torch.equal(staged[n].cpu(), layer[n]) for n in staged)}
    if not on_gpu:
        return out | {"device": "cpu, Triton's interpreter", "format": fmt}

    def copy() -> None:
        for name, t in engine.host[0].items():
            engine.stage[name].copy_(t, non_blocking=True)

    out |= {"layer_bytes": layer_bytes, "copy_ms": round(_median_ms(copy, reps), 3), "pin": pin,
            "all_pinned": all(t.is_pinned() for t in engine.host[0].values())}
    out["copy_gbs"] = round(layer_bytes / (out["copy_ms"] / 1e3) / 1e9, 1)
    out["run_ms"] = {}          # GpuPrefill.run: the copy and the marlin MoE, as a prompt chunk pays them
    for t in tokens:
        _, dispatch, _, _ = inputs(t)
        out["run_ms"][str(t)] = round(_median_ms(lambda d=dispatch: engine.run(0, d, MoeRunnerConfig()), reps), 3)
    out["device"] = torch.cuda.get_device_name(0)
    out["format"] = fmt
    return out


def interpreted(fmt: str, out: Path | None) -> int:
    """--interpret: bench()'s numeric check on the CPU, SGLang's triton MoE in Triton's interpreter with the SGLang
    check's stand-ins (vramkit/adapters/_sglang_check_worker.py triton_moe_on_cpu); a derivation, not the kernel on a
    GPU."""
    if fmt == "gptq":
        print("gpu_prefill_bench: --interpret: marlin is CUDA code, not triton; give --format fp8 or fp8-int8",
              file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from vramkit.adapters._sglang_check_worker import triton_moe_on_cpu
    t0 = time.time()
    with triton_moe_on_cpu():
        res = bench([], 0, fmt, "alloc", device="cpu")
    import torch
    res |= {"seconds": round(time.time() - t0), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "how": "benchmarks/gpu/gpu_prefill_bench.py --interpret: the GPU bench's layer, inputs and check, computed "
                   "by SGLang's triton kernels in Triton's interpreter on the CPU (derived, not measured on a GPU)"}
    return emit(res, out)


def emit(res: dict, out: Path | None) -> int:
    """A result as indented JSON on stdout and in `out` when given (this script's and fp8_path_arithmetic.py's)."""
    text = json.dumps(res, indent=1)
    if out:
        out.write_text(text + "\n")
    print(text)
    return 0


def failed(out: Path | None, what: str) -> int:
    """One line on stderr, the same in --out's JSON, exit 3."""
    print(f"gpu_prefill_bench: {what}", file=sys.stderr)
    if out:
        out.write_text(json.dumps({"error": what}) + "\n")
    return 3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="512,2048,4096", help="chunk sizes to time the marlin MoE at")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cpu-layers", type=int, default=11, help="CPU layers of the 16 GiB preset (37 of 48 on the GPU)")
    ap.add_argument("--chunk", type=int, default=4096, help="the preset's chunked prefill")
    ap.add_argument("--format", choices=("gptq", "fp8", "fp8-int8"), default="gptq",
                    help="the experts' format: GPTQ-Int4 on marlin, or block FP8 (the moe preset's checkpoint) on "
                         "triton, as is or requantized to int8 with bf16 inputs (VRAMKIT_KT_PREFILL_FP8=int8)")
    ap.add_argument("--pin", choices=("alloc", "register"), default="alloc",
                    help="the adapter's pinning of the host copies (VRAMKIT_KT_PREFILL_PIN)")
    ap.add_argument("--interpret", action="store_true",
                    help="the numeric check alone, on the CPU: SGLang's triton MoE in Triton's interpreter (no GPU; "
                         "minutes; w8a8's FP8 steps are not computed as the GPU computes them)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.interpret:
        os.environ["TRITON_INTERPRET"] = "1"     # before triton is first imported
        return interpreted(a.format, a.out)
    try:
        tokens = [int(t) for t in a.tokens.split(",")]
    except ValueError:
        print(f"gpu_prefill_bench: --tokens {a.tokens!r}: give whole numbers separated by commas", file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        return failed(a.out, "RuntimeError: no CUDA device here")
    try:
        res = bench(tokens, a.reps, a.format, a.pin)
    except Exception as exc:       # noqa: BLE001 -- the GPU host's failure, written down for the run's record
        traceback.print_exc()      # with where it failed, for the driver's log
        return failed(a.out, f"{type(exc).__name__}: {exc}")
    c24 = json.loads((ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-24g.json").read_text())
    ttft24 = c24["engines"]["vramkit"]["ttft_30k_s"]
    shape = SHAPE if a.format == "gptq" else {k: v for k, v in SHAPE.items() if k not in ("group", "bits")} | {
        "block": [128, 128], "bits": 8} | ({"int8_group": 128} if a.format == "fp8-int8" else {})
    res |= {"shape": shape, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "how": "benchmarks/gpu/gpu_prefill_bench.py: medians of CUDA-event timings after 3 warm-ups",
            "derived_ttft_30k": {"all_gpu_ttft_30k_s": ttft24, "source": "moe-vs-llamacpp-24g.json (measured)",
                                 **derived_ttft(ttft24, res["copy_ms"] / 1e3, a.cpu_layers, 30000, a.chunk)}}
    return emit(res, a.out)


if __name__ == "__main__":
    sys.exit(main())
