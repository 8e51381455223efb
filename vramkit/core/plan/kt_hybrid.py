"""Hybrid CPU-GPU plan for a MoE model through SGLang's KTransformers path (issue 12). Pure: no I/O.

SGLang 0.5.15.post1 with --kt-weight-path keeps experts 0..N-1 of every MoE layer on the GPU
(--kt-num-gpu-experts N, in the checkpoint's own format) and computes the rest on the CPU with
kt-kernel (--kt-method, in that method's layout, --kt-cpuinfer threads). Per layer it submits the CPU
experts, runs the GPU experts meanwhile, then waits and adds (kt_ep_wrapper.KTEPWrapperMethod.apply).

GPU memory (derived from source, the same steps as core/plan/planner.py):
    weights = non-expert tensors + N x moe_layers x gpu_expert_bytes + KT_GPU_WEIGHT_EXTRA (measured)
    static  = mem_fraction x free_at_start;  KV pool = static - weights;  the rest: graphs, activations
N is the largest count whose KV pool still holds context x concurrency tokens.
Host RAM: (E - N) x moe_layers x cpu_expert_bytes in the method's layout (KT keeps its own copy, not
pinned; the checkpoint's page cache comes on top while it loads) + KT's pinned per-batch buffers (small).

Decode, one token (derived; the CPU efficiency is fitted to the H100-host runs, labelled so):
    GPU side: (attention + lm_head + GPU experts touched) bytes / GPU bandwidth
    CPU side: top_k x (E-N)/E x moe_layers x cpu_expert_bytes / (host read bandwidth x KT_CPU_EFFICIENCY)
              + moe_layers x KT_LAYER_SYNC_S (submit, copies and the wait on the CUDA stream per layer)
The two overlap inside a layer, so a token takes about max(GPU, CPU) + the per-layer sync.
Layer offload (--cpu-offload-gb) beside it: every offloaded byte crosses PCIe every step.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from vramkit.core.checks import Reason
from vramkit.core.model import checkpoint as cl

# kt-kernel 0.5.1's methods: the checkpoint they read, their bytes per expert, the CPU ISA they need.
# ISA: the variant kt-kernel loads (kt_kernel/_cpu_detect.py) must have the method's kernels: its AMX and
# AVX-512-BF16 builds have FP8, BF16 and AMXINT4/8 (run on both: the H100 host (AMX) and an AVX-512-BF16
# CPU, tests/integration/test_kt_compat.py); its AVX2 build has llamafile (GGUF) only.
KT_METHODS: dict[str, dict[str, Any]] = {
    "FP8": {"checkpoint": "fp8", "layout": "the block-FP8 checkpoint itself (weight_scale_inv 128x128)",
            "isa": ("amx", "avx512_bf16")},
    "BF16": {"checkpoint": "bf16", "layout": "the bf16 checkpoint itself", "isa": ("amx", "avx512_bf16")},
    "AMXINT4": {"checkpoint": None, "layout": "KT's INT4 layout (_layer_*/_numa_*/INT4_*.kt, converted)",
                "isa": ("amx", "avx512_bf16")},
    "AMXINT8": {"checkpoint": None, "layout": "KT's INT8 layout (_layer_*/_numa_*/INT8_*.kt, converted)",
                "isa": ("amx", "avx512_bf16")},
    "LLAMAFILE": {"checkpoint": None, "layout": "GGUF (llamafile kernels)", "isa": ("amx", "avx512_bf16", "avx2")},
}
ISA_FLAGS = {  # /proc/cpuinfo flag names per kt-kernel variant (its _cpu_detect.py; the kernel spells avx512vbmi)
    "amx": ("amx_tile", "amx_bf16", "amx_int8", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"),
    "avx512_bf16": ("avx512f", "avx512bw", "avx512_vnni", "avx512vbmi", "avx512_bf16"),
    "avx2": ("avx2", "fma"),
}
KT_RESERVED_CORES = 2       # SGLang's scheduler (it drives the GPU) and its HTTP/tokenizer process
# SGLang holds each GPU expert in a little more than its checkpoint bytes: "Load weight end ... mem usage"
# was 9.01 GiB with 32 experts/layer and 11.42 GiB with 43 against 8.78 / 11.10 GiB of tensors (FP8,
# H100 host: benchmarks/results/gpu/moe/probe-session1, moe-16g-fp8-amx.json). Fitted to the two points:
# +3.9 % per GPU expert, -0.03 GiB fixed (measured, two points).
KT_GPU_EXPERT_FACTOR = 1.039
KT_GPU_WEIGHT_EXTRA = -int(0.03 * 2**30)
# Decode: two constants fitted to the two kit runs on the H100 host at 43 GPU experts/layer and 14 threads
# (host read 93.0 GB/s measured at 16 threads): AMXINT4 38.4 tok/s, FP8 26.6 tok/s
# (benchmarks/results/gpu/moe/moe-16g-*.probe.json). Checked against the runs not used in the fit:
# FP8 at 32 GPU experts 27.9 measured vs 24.6, FP8 on the AVX-512-BF16 kernels 26.0 vs 26.6 (fitted, labelled so).
# Host RAM of SGLang's own processes beside KT's experts: the AMXINT4 run's server tree held 18.8 GiB of
# RSS with 9.0 GiB of experts (moe-16g-int4-amx.json): 9.8 GiB (measured, one point; the FP8 methods add
# the mmapped checkpoint on top, 60 GiB RSS measured, reclaimable page cache).
SGLANG_HOST_BASE = int(9.8 * 2**30)
KT_CPU_EFFICIENCY = 0.555   # share of the measured host read bandwidth KT's kernels reach while decoding
KT_LAYER_SYNC_S = 0.000297  # per MoE layer and token: submit, pinned copies, the wait on the CUDA stream


@dataclass(frozen=True)
class MoeSizes:
    """Bytes from the checkpoint layout (core/model/checkpoint.py), per format."""

    moe_layers: int
    num_experts: int
    top_k: int
    non_expert_bytes: int          # everything on the GPU that is not an expert
    decode_non_expert_bytes: int   # what a decode token reads of it (attention, router, lm_head; not embeddings)
    gpu_expert_bytes: int          # one expert of one layer as the GPU holds it
    cpu_expert_bytes: int          # one expert of one layer in the KT method's layout
    total_bytes: int               # the whole checkpoint in the GPU format (for layer offload)
    kv_bytes_per_token: int


def kt_expert_bytes(cfg: dict[str, Any], method: str) -> int:
    """One expert (gate, up, down) in a KT method's layout. INT4/INT8: one f32 scale per output row
    (measured: 303,824,896 bytes per Qwen3-30B-A3B layer of 128 experts in AMXINT4)."""
    h, i = int(cfg["hidden_size"]), int(cfg["moe_intermediate_size"])
    params = 3 * h * i
    rows = 2 * i + h
    if method == "AMXINT4":
        return params // 2 + 4 * rows
    if method == "AMXINT8":
        return params + 4 * rows
    if method in ("FP8", "BF16"):
        fmt = KT_METHODS[method]["checkpoint"]
        return sum(t.nbytes for t in cl.layer_tensors(cfg, 0, fmt) if ".experts.0." in t.name)
    raise ValueError(f"kt method {method}: no layout size known")


def sizes(cfg: dict[str, Any], gpu_format: str, kt_method: str, kv_dtype_bytes: float) -> MoeSizes:
    specs = cl.checkpoint_tensors(cfg, gpu_format)
    experts = [t for t in specs if ".mlp.experts." in t.name]
    moe_layers = sum(1 for i in range(int(cfg["num_hidden_layers"])) if cl.is_moe_layer(cfg, i))
    e = int(cfg["num_experts"])
    non_expert = sum(t.nbytes for t in specs) - sum(t.nbytes for t in experts)
    embed = sum(t.nbytes for t in specs if t.role == "embed")
    kv_heads = int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    hd = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
    return MoeSizes(
        moe_layers=moe_layers, num_experts=e, top_k=int(cfg["num_experts_per_tok"]),
        non_expert_bytes=non_expert, decode_non_expert_bytes=non_expert - embed,
        gpu_expert_bytes=sum(t.nbytes for t in experts) // (e * moe_layers),
        cpu_expert_bytes=kt_expert_bytes(cfg, kt_method), total_bytes=sum(t.nbytes for t in specs),
        kv_bytes_per_token=int(2 * kv_heads * hd * int(cfg["num_hidden_layers"]) * kv_dtype_bytes))


@dataclass
class HybridPlan:
    kt_method: str
    num_gpu_experts: int
    cpuinfer_threads: int
    fits: bool
    reasons: list[Reason]
    gpu_weights_bytes: int
    kv_pool_tokens: int
    host_ram_bytes: int            # KT's copy of the CPU experts (not pinned)
    host_ram_pinned_bytes: int     # KT's pinned buffers (chunked prefill x hidden, a few per layer slot)
    decode_gpu_s: float
    decode_cpu_s: float
    decode_tok_s: float            # the estimate: derived, CPU efficiency fitted (see module docstring)
    offload_gib: int               # layer offload that would fit instead (--cpu-offload-gb)
    offload_decode_tok_s: float
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def cpuinfer_threads(server_physical_cores: int) -> int:
    """KT's worker threads: the server's physical cores (the `make optimize` cpuset) minus those SGLang's
    own processes need; one thread per physical core (SMT siblings share the core's AMX/AVX units)."""
    return max(1, server_physical_cores - KT_RESERVED_CORES)


def plan_hybrid(s: MoeSizes, *, kt_method: str, free_at_start_bytes: int, mem_fraction: float, context: int,
                concurrency: int, gpu_bandwidth_bytes_s: float, pcie_bytes_s: float, host_read_bytes_s: float,
                host_ram_available_bytes: int | None, server_physical_cores: int, chunked_prefill: int,
                hidden_size: int, num_gpu_experts: int | None = None) -> HybridPlan:
    reasons: list[Reason] = []
    notes: list[str] = []
    static = int(mem_fraction * free_at_start_bytes)
    kv_need = context * concurrency * s.kv_bytes_per_token
    per_n = int(s.moe_layers * s.gpu_expert_bytes * KT_GPU_EXPERT_FACTOR)
    base = s.non_expert_bytes + KT_GPU_WEIGHT_EXTRA
    if num_gpu_experts is None:
        n = max(0, min(s.num_experts, (static - kv_need - base) // per_n))
    else:
        n = num_gpu_experts
    weights = base + n * per_n
    kv_tokens = max(0, (static - weights) // s.kv_bytes_per_token)
    if kv_tokens < context * concurrency:
        reasons.append(Reason("kv", f"KV pool {kv_tokens:,} tokens < {context:,} x {concurrency} with the non-expert "
                              f"weights ({s.non_expert_bytes / 2**30:.2f} GiB) and {n} experts/layer on the GPU"))
    cpu_experts = s.num_experts - n
    host = cpu_experts * s.moe_layers * s.cpu_expert_bytes
    pinned = 2 * 2 * chunked_prefill * hidden_size * 2 * 2      # KExpertsCPUBuffer: in + out, 2 slots, bf16
    if host_ram_available_bytes is not None and host + SGLANG_HOST_BASE > host_ram_available_bytes:
        reasons.append(Reason("host_ram", f"host RAM: {host / 2**30:.1f} GiB of CPU experts + "
                              f"{SGLANG_HOST_BASE / 2**30:.1f} GiB for SGLang > "
                              f"{host_ram_available_bytes / 2**30:.1f} GiB available"))
    threads = cpuinfer_threads(server_physical_cores)
    frac_gpu = n / s.num_experts
    gpu_bytes = s.decode_non_expert_bytes + s.top_k * frac_gpu * s.moe_layers * s.gpu_expert_bytes
    gpu_s = gpu_bytes / gpu_bandwidth_bytes_s
    cpu_bytes = s.top_k * (1 - frac_gpu) * s.moe_layers * s.cpu_expert_bytes
    cpu_s = cpu_bytes / (host_read_bytes_s * KT_CPU_EFFICIENCY) + s.moe_layers * KT_LAYER_SYNC_S
    tok_s = 1.0 / max(gpu_s, cpu_s, 1e-9)
    # layer offload of the same checkpoint: what does not fit the static budget crosses PCIe every step
    off = max(0, s.total_bytes + kv_need - static)
    off_gib = -(-off // 2**30)
    off_s = (s.total_bytes - off) / gpu_bandwidth_bytes_s + off_gib * 2**30 / pcie_bytes_s
    notes.append(f"{cpu_experts} of {s.num_experts} experts/layer on the CPU: "
                 f"{cpu_bytes / 1e9:.2f} GB read per token from host RAM")
    notes.append(f"host RAM: {host / 2**30:.1f} GiB of experts (not pinned) + ~{SGLANG_HOST_BASE / 2**30:.1f} GiB "
                 f"for SGLang; KT pins {pinned / 2**20:.0f} MiB of transfer buffers")
    return HybridPlan(kt_method=kt_method, num_gpu_experts=int(n), cpuinfer_threads=threads, fits=not reasons,
                      reasons=reasons, gpu_weights_bytes=int(weights), kv_pool_tokens=int(kv_tokens),
                      host_ram_bytes=int(host), host_ram_pinned_bytes=int(pinned), decode_gpu_s=gpu_s,
                      decode_cpu_s=cpu_s, decode_tok_s=tok_s, offload_gib=int(off_gib),
                      offload_decode_tok_s=1.0 / off_s, notes=notes)


def isa_check(kt_method: str, cpu_flags: set[str]) -> tuple[str | None, str]:
    """(the kt-kernel variant this CPU gets for the method, or None, and why)."""
    for variant in KT_METHODS[kt_method]["isa"]:
        if all(f in cpu_flags for f in ISA_FLAGS[variant]):
            return variant, f"{variant} kernels ({', '.join(ISA_FLAGS[variant][:3])}...)"
    need = " or ".join(v.upper().replace("_", "-") for v in KT_METHODS[kt_method]["isa"])
    return None, f"--kt-method {kt_method} needs {need}; this CPU has none of them"
