"""The KTransformers hybrid MoE mode, as the planner prices it (issues 12, 17, 18). Pure: no I/O.

SGLang 0.5.15.post1 with --kt-weight-path wraps every FusedMoE layer in `KTEPWrapperMethod`
(layers/moe/kt_ep_wrapper.py): the checkpoint's own GPU method creates the fused expert tensors for experts
0..N-1 only (--kt-num-gpu-experts N; core/model/arch.py `weight_layout(gpu_experts=N)`), and kt-kernel computes
the rest on the CPU (--kt-method, --kt-cpuinfer threads). GPU memory therefore goes through the planner's
one model (weight replay through the caching allocator, KV pool, activations): core/plan/planner.py plans the
hybrid mode like any other plan; this module holds what is KT's own:

- which kt-kernel method reads which checkpoint, and which CPU builds have its kernels (`KT_METHODS`);
- the bytes of one expert as kt-kernel holds it in host RAM;
- the host RAM the server holds: kt-kernel keeps EVERY expert of every MoE layer in host RAM, the GPU's
  share included (ktransformers #2084; the H100-host runs: RSS = all experts + SGLang's own, not the CPU
  share), plus the mmapped checkpoint's pages for the methods that read the checkpoint itself;
- the decode estimate (below), whose constants are fitted (config/engine.toml, kt_* keys, with their runs).

Decode, one token at batch 1 (each term derived from what a step does; the constants marked F are fitted):
    t = t_gpu + t_context + max(t_gpu_experts, t_cpu_experts) + moe_layers x t_sync(F)
    t_gpu          non-expert weights read (attention, router, shared experts, lm_head) / GPU bandwidth
    t_context      context x KV bytes per token / attention read rate(F) (SGLang's batch-1 decode attention
                   reads the KV far below the card's bandwidth; never faster than the card's bandwidth)
    t_gpu_experts  top_k x N/E x moe_layers x GPU expert bytes / GPU bandwidth
    t_cpu_experts  top_k x (E-N)/E x moe_layers x CPU expert bytes / (host read(threads) x efficiency(F))
                   x the CPU experts' pace (measured): on the AMX build the method's CPU time per byte against
                   FP8's, on a lesser build that build's time against the AMX build's
    t_sync         per MoE layer: submit to the CPU pool, the wait on the CUDA stream, the copies back
Inside a layer the attention precedes the experts (serial); the GPU's experts run while the CPU computes
(`apply`: submit, GPU experts, sync). host read(threads) is `vramkit host --bandwidth`'s sweep at the thread
count, interpolated: the thread term.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from vramkit.core.memory.torch_alloc import CachingAllocator, round_size, segment_size
from vramkit.core.memory.weight_load import pinned_size
from vramkit.core.model.arch import SCALE_PERM_BYTES
from vramkit.core.model.checkpoint import RAWINT4_GROUP, rawint4_problem
from vramkit.core.model.spec import ModelSpec
from vramkit.errors import Exit, VramkitError

# --- kt-kernel's methods and CPU builds -------------------------------------------------------------------
# A CPU "ISA" here is the kt-kernel build that runs on it, ordered: each has the instructions of those before.
CPU_ISAS = ("avx2", "avx512", "amx")
ISA_FLAGS = {   # /proc/cpuinfo flags each build needs (kt_kernel/_cpu_detect.py; the kernel spells avx512vbmi)
    "amx": ("amx_tile", "amx_bf16", "amx_int8", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"),
    "avx512": ("avx512f", "avx512bw", "avx512_vnni", "avx512vbmi", "avx512_bf16"),
    "avx2": ("avx2", "fma"),
}
KT_VARIANT = {"amx": "amx", "avx512": "avx512_bf16", "avx2": "avx2"}   # KT_KERNEL_CPU_VARIANT's spelling


@dataclass(frozen=True)
class KtMethod:
    name: str
    reads: str | None           # the checkpoint format it reads itself (checkpoint_format); None: KT's converted layout
    lossy: bool                 # against the checkpoint it comes from
    layout: str
    # a lossy layout converted from the block-FP8 checkpoint against FP8 read as is, on the random-weight proxy
    # (ACCURACY_TABLE, rows "X<-FP8" and "FP8"; tests/unit/test_moe_hybrid.py checks these against its JSON):
    # MoE-layer output error, top-1 agreement (both against a bf16 reference)
    measured_from_fp8: tuple[float, float] | None = None
    # where the decode estimate misses this method's held-out server runs by more than 20 %: (lowest, highest)
    # measured/estimate ratio over them (benchmarks/results/gpu/kt-estimate.json; tests/unit/test_kt_estimate.py
    # checks it against that file), which the plan prints beside the estimate; None: within 20 % on every run
    estimate_spread: tuple[float, float] | None = None
    spread_note: str = ""       # where in that range the runs fall, in words
    sglang_name: str = ""       # SGLang's --kt-method value where the kit's name says more ("": the name)
    gguf_type: str | None = None    # LLAMAFILE: the GGUF type of the expert tensors it reads (--kt-weight-path)
    # a lossy method measured elsewhere than ACCURACY_TABLE's "X<-FP8" rows: what the plan says, and where
    accuracy: str = ""
    accuracy_table: str = ""
    made_from: str | None = None    # a converted layout made only from this checkpoint format (None: from any)
    speed_note: str = ""            # what its measured runs say beside the estimate (a plan with it prints it)

    @property
    def sglang_method(self) -> str:
        return self.sglang_name or self.name

    def serves(self, fmt: str) -> bool:
        """Whether this method serves a checkpoint of this format (checkpoint_format): reads it, or a layout made
        from it."""
        return self.reads in (fmt, None) and self.made_from in (fmt, None)

    @property
    def kt_kernels(self) -> bool:
        """kt-kernel's own kernel classes (AMX/AVX-512/AVX2 builds differ in speed: KtConstants.build_cpu_time);
        False for LLAMAFILE, whose llamafile/ggml kernels are the same code in every build."""
        return self.gguf_type is None


FP8_MEASURED = (0.0467, 0.966)      # FP8 read as is: MoE-layer output error, top-1 agreement (ACCURACY_TABLE)
KT_METHODS = {m.name: m for m in (
    KtMethod("FP8", "fp8", False, "the block-FP8 checkpoint itself (weight_scale_inv)"),
    KtMethod("BF16", "bf16", False, "the bf16 checkpoint itself"),
    KtMethod("GPTQ_INT4", "gptq_int4", False, "the GPTQ-Int4 checkpoint itself (qweight, scales, qzeros)"),
    KtMethod("AMXINT4", None, True, "KT's INT4 layout, one f32 scale per row (converted)", (0.2777, 0.854),
             estimate_spread=(0.68, 1.20), spread_note="within 10 % at 14 threads but one session's first decode "
                                                        "after start; up to 1.20x at 6 threads"),
    KtMethod("AMXINT8", None, True, "KT's INT8 layout, one f32 scale per row (converted)", (0.0538, 0.968),
             estimate_spread=(0.77, 1.48), spread_note="mostly faster; every run on dummy weights, and where each "
                                                       "layer's router was drawn apart (seeded by name) every figure "
                                                       "was 1.00-1.35x it: the estimate is pessimistic here"),
    # kt-kernel's LLAMAFILE backend (kt_kernel/utils/llamafile.py): the experts from a GGUF file (llama.cpp's
    # blk.N.ffn_{gate,up,down}_exps tensors), computed by llamafile's ggml kernels, which every build has, the
    # avx2 one included (kt-isa.md: "llamafile only" in 0.5.1's). Q8_0: one f16 scale per 32 weights.
    KtMethod("LLAMAFILE_Q8_0", None, True, "a Q8_0 GGUF of the model (llama.cpp's layout, one f16 scale per 32 "
             "weights; converted)", sglang_name="LLAMAFILE", gguf_type="Q8_0", estimate_spread=(0.67, 1.12),
             spread_note="after a short prompt within 5 % on kt-kernel 0.5.1, 11 % faster on 0.7.0's avx2 build; "
                         "slower right after an 8K prompt at 16 GiB",
             accuracy="converted from the FP8 checkpoint: 4.91% MoE-layer output error against FP8 read as is at "
                      "4.66% and AMXINT8 converted from FP8 at 5.38% in the same run; 1.57% from bf16 weights "
                      "(random-weight proxy, reference and kernels on a CPU)",
             accuracy_table="benchmarks/results/gpu/kt-llamafile/accuracy-cpu.md"),
    # kt-kernel's RAWINT4 (AMXInt4_KGroup_MOE, Kimi-K2's group-wise int4): a symmetric GPTQ-Int4 checkpoint's own
    # nibbles and scales repacked (core/model/kt_repack.py), so the CPU reads the values the GPU's experts hold but
    # for the -8s, which its kernel computes wrong and the repack raises to -7; 4.5 bits a weight, AMXINT8's 8.1.
    # Opt-in: its prefill is an order of magnitude slower (speed_note).
    KtMethod("RAWINT4", None, True, "the GPTQ-Int4 checkpoint's own int4 values repacked for kt-kernel's group-wise "
             "int4 kernel, -8 raised to -7 and scales rounded to bf16 (make kt-convert)", made_from="gptq_int4",
             accuracy="4.1% MoE-layer output error against the GPTQ values as they are, from the 0.35% of weights "
                      "at -8 (kt-kernel's kernel puts a layer's output 65% off when it keeps them); a round-to-nearest "
                      "GPTQ proxy, kernel and reference on a CPU",
             accuracy_table="benchmarks/results/gpu/kt-rawint4/README.md",
             speed_note="RAWINT4 ran once on the H100 host (16 GiB, whole layers on marlin, 13 CPU layers, 12 "
                        "threads): decode 79.2 tok/s after 512 tokens, as AMXINT8's 76.4-77.8 on other machines "
                        "of that host, but a first token took 2.75 s after 512 tokens and 38.5 s after 8K against "
                        "AMXINT8's 0.24 s and 2.3 s: kt-kernel's group-wise int4 prefills ~15x slower "
                        "(benchmarks/results/gpu/kt-rawint4/); for long prompts --kt-method AMXINT8"),
)}
# Where each method's error was measured (kt-kernel's own kernels against a bf16 all-GPU reference, a
# random-weight proxy of Qwen3-Coder-30B-A3B): what a plan with a lossy method points at.
ACCURACY_TABLE = "benchmarks/results/gpu/kt-accuracy.md"
# The builds of each kt-kernel release whose WHEEL runs a method's kernels on that CPU (benchmarks/results/gpu/
# kt-isa.md: objdump of every published build, and each avx2 build run on an emulated AVX2-only CPU).
# 0.5.1: measured on the H100 host (its AMX and AVX-512-BF16 builds ran FP8 and AMXINT4). Its avx2 build, like
# every release's up to 0.6.4, carries AVX-512 code (zmm, k-mask, AVX512-BF16 instructions: the build host's own
# AVX-512, which their setup.py did not turn off; ktransformers #2164) and dies with SIGILL when it creates its
# thread pool on an AVX2-only CPU.
# 0.7.0: the release the kit installs on an AVX2-only CPU (config/versions.toml kt_kernel_avx2_pip), its avx2 build
# only: no AVX-512 instruction in it, and each of these methods' kernels ran its forward against numpy under QEMU's
# Haswell CPU (kt-isa.md). Its other builds are not the kit's (AVX-512 and AMX CPUs get 0.5.1): not listed.
# A release not listed is read as the newest listed one below it.
# RAWINT4: kt-kernel 0.5.1's kernel computes the nibble 0 (-8) wrong in its amx and avx512_bf16 builds alike
# (benchmarks/gpu/kt_rawint4_check.py: the GPU host's AMX CPU and the dev host's AVX-512 one,
# benchmarks/results/gpu/kt-rawint4/), which the kit's repack avoids; only the AMX build ran it in a server.
RAWINT4_BUILDS: tuple[str, ...] = ("amx",)
KT_BUILDS: dict[str, dict[str, tuple[str, ...]]] = {
    "0.5.1": {"FP8": ("avx512", "amx"), "BF16": ("avx512", "amx"), "GPTQ_INT4": (),
              "AMXINT4": ("avx512", "amx"), "AMXINT8": ("avx512", "amx"), "LLAMAFILE_Q8_0": ("avx512", "amx"),
              "RAWINT4": RAWINT4_BUILDS},
    "0.7.0": {"FP8": ("avx2",), "BF16": ("avx2",), "GPTQ_INT4": ("avx2",), "AMXINT4": (), "AMXINT8": (),
              "LLAMAFILE_Q8_0": ("avx2",), "RAWINT4": ()},
}
# What a plan on a release says beside its method: where the kit has run that release's build in a server on a GPU
# (by method), and what stands for it otherwise.
KT_SERVER_RUNS = {("0.7.0", "LLAMAFILE_Q8_0"): "benchmarks/results/gpu/moe-vs-llamacpp-q8/k16-q8-avx2-070"}
KT_RELEASE_CHECKS = {"0.7.0": "kt-kernel 0.7.0's avx2 kernels ran on an emulated AVX2-only CPU and through the kit's "
                              "adapter as SGLang calls them (benchmarks/results/gpu/kt-isa.md, tests/integration/"
                              "test_kt_compat.py)"}


def release_note(kt_kernel: str, method: str) -> str:
    """"; <what stands behind this release for this method>", or "" for a release the kit's runs all used."""
    if kt_kernel not in KT_RELEASE_CHECKS:
        return ""
    run = KT_SERVER_RUNS.get((kt_kernel, method))
    return (f"; {KT_RELEASE_CHECKS[kt_kernel]}; "
            + (f"the kit ran {method} on it in a server on a GPU, that build forced on the H100 host ({run})" if run
               else f"the kit has not yet run {method} on it in a server on a GPU"))
# kt-kernel's source has AVX2 kernels for these methods from the release given: built from source ON the AVX2 CPU
# (CPUINFER_CPU_INSTRUCT=AVX2) they run there, whatever release the wheel is. In the order a plan for an AVX2 CPU
# picks them (preference()): LLAMAFILE_Q8_0 first, the one measured to meet the decode goal with AVX2 kernels
# (benchmarks/results/gpu/kt-llamafile/, kt-avx2/); kt-kernel's own AVX2 FP8 kernels take 3.25x AMX's CPU time
# (~9.5 tok/s, derived).
AVX2_SOURCE: dict[str, str] = {"LLAMAFILE_Q8_0": "0.5.1", "FP8": "0.5.3", "BF16": "0.5.3", "GPTQ_INT4": "0.5.3"}
# kt-kernel's AMXINT4/AMXINT8 classes size their activation buffer by SGLang's chunked prefill (max_len) and throw
# a C++ error that aborts the whole server at load unless it is a multiple of 32 ("BufferAImpl: max_m and k must
# be multiple of M_STEP and K_STEP"; kt-kernel 0.5.3 with max_len 1000:
# benchmarks/results/gpu/kt-acc/amx-chunk-abort.txt; the same check is in 0.5.1's amx and avx512_bf16 builds).
# FP8 loaded and ran with 1000.
AMX_CHUNK_MULTIPLE = 32
AMX_CHUNK_METHODS = ("AMXINT4", "AMXINT8")


def chunk_problem(method: str, chunk: int | None) -> str | None:
    """Why this chunked prefill size would abort kt-kernel's method at load (None: it would not)."""
    if method not in AMX_CHUNK_METHODS or not chunk or chunk <= 0 or chunk % AMX_CHUNK_MULTIPLE == 0:
        return None
    down = chunk // AMX_CHUNK_MULTIPLE * AMX_CHUNK_MULTIPLE or AMX_CHUNK_MULTIPLE
    return (f"--chunked-prefill {chunk}: kt-kernel's {method} kernels abort the server at load unless the chunk "
            f"is a multiple of {AMX_CHUNK_MULTIPLE} -> --chunked-prefill {down}")


# When the asked method cannot run on the CPU: the first of these that reads the checkpoint and runs there
# (most accurate first: the checkpoint's own values before a conversion; RAWINT4 last, its prefill ~15x slower).
METHOD_PREFERENCE = ("BF16", "FP8", "GPTQ_INT4", "LLAMAFILE_Q8_0", "AMXINT8", "AMXINT4", "RAWINT4")


# A lossy method beside the method that reads the same checkpoint as is, measured side by side in one server pair,
# what each one's plan says of the other (tests/unit/test_gpu_prefill.py holds the figures to the probes)
MEASURED_PAIRS: dict[tuple[str, str], str] = {
    ("AMXINT8", "FP8"): "FP8 decoded 0.79x AMXINT8 at depth 0 (32.6 against 41.1 tok/s), 0.84x after 8K and 0.76x at "
                        "4 streams, its first token after 30K as fast (5.72 against 5.73 s, the GPU prompt path on "
                        "both); one H200 machine at 16 GiB, whole layers, 12 KT threads, one start each "
                        "(benchmarks/results/gpu/moe-vs-llamacpp-q8/h200-fp8cpu/)",
}


def pair_note(method: str, source: str = "fp8") -> str:
    """The measured pair this method is in, on the checkpoint format it was measured on ("" for none)."""
    if source != "fp8":
        return ""
    return next((f"{lossy} (lossy) against {exact} (read as is), measured side by side: {text}"
                 for (lossy, exact), text in MEASURED_PAIRS.items() if method in (lossy, exact)), "")


def lossy_note(method: str, source: str = "fp8") -> str:
    """What a plan says about a method that changes the checkpoint's values ("" for one that reads them as is);
    `source`: the checkpoint's format (checkpoint_format), which the measured figures may not be of."""
    m = KT_METHODS[method]
    if not m.lossy:
        return ""
    exact = ", ".join(x.name for x in KT_METHODS.values() if not x.lossy)
    other = "" if source == "fp8" else f"; this checkpoint is {source}, from which the conversion was not measured"
    size = (f": converted from the FP8 checkpoint, {m.measured_from_fp8[0]:.1%} MoE-layer output error and "
            f"{m.measured_from_fp8[1]:.1%} top-1 agreement against FP8 read as is at {FP8_MEASURED[0]:.1%} / "
            f"{FP8_MEASURED[1]:.1%} (random-weight proxy, {ACCURACY_TABLE}{other})" if m.measured_from_fp8 else
            f" ({m.accuracy}; {m.accuracy_table})" if m.accuracy else
            f" (a MoE layer's output error measured in {ACCURACY_TABLE})")
    return (f"{method} is lossy: {m.layout}, not the checkpoint's values{size}; the methods that read a "
            f"checkpoint as is: {exact}")


def source_build_method(model: ModelSpec, isa: str) -> str | None:
    """The method a kt-kernel built from source on this CPU would run for this checkpoint (None: none)."""
    if isa != "avx2":
        return None
    fmt = checkpoint_format(model)
    return next((m for m in AVX2_SOURCE if KT_METHODS[m].serves(fmt)), None)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split(".")[:3] if x.isdigit())


def builds(method: str, kt_kernel: str) -> tuple[str, ...]:
    """The builds of this kt-kernel release with the method's kernels (the newest listed release <= it)."""
    known = sorted(KT_BUILDS, key=_release)
    table = [v for v in known if _release(v) <= _release(kt_kernel)] or known[:1]
    return KT_BUILDS[table[-1]][method]


def isa_from_flags(flags: set[str]) -> str | None:
    """The best kt-kernel build this CPU's flags run (None: not even AVX2)."""
    for isa in reversed(CPU_ISAS):
        if all(f in flags for f in ISA_FLAGS[isa]):
            return isa
    return None


def runs_on(method: str, isa: str, kt_kernel: str) -> bool:
    """A build runs on its own ISA and every later one (kt-kernel's KT_KERNEL_CPU_VARIANT picks a lesser build)."""
    return any(CPU_ISAS.index(b) <= CPU_ISAS.index(isa) for b in builds(method, kt_kernel))


def build_for(method: str, isa: str, kt_kernel: str) -> str:
    """The kt-kernel build the method uses on this CPU: the best one it has that the CPU runs."""
    return max((b for b in builds(method, kt_kernel) if CPU_ISAS.index(b) <= CPU_ISAS.index(isa)),
               key=CPU_ISAS.index)


def checkpoint_format(model: ModelSpec) -> str:
    """The checkpoint's expert format as kt-kernel names what it reads: bf16, fp8, gptq_int4, or another
    (awq, mxfp4, gptq_int8) that no kt-kernel method reads."""
    q = model.quantization
    if q is None:
        return "bf16" if model.dtype == "bfloat16" else model.dtype
    if q.method == "fp8":
        return "fp8" if q.weight_block else "fp8_per_tensor"
    if q.method == "gptq":
        return f"gptq_int{q.bits}"
    return q.method


# kt_kernel/utils/llamafile.py (0.5.1): "intermediate_size must be divisible by QK_K (256)", whatever the GGUF type
GGUF_QK_K = 256


def _reader_hint(model: ModelSpec) -> str:
    """What to run instead: the method that reads this checkpoint as it is, else a converted layout."""
    have = checkpoint_format(model)
    reader = next((m.name for m in KT_METHODS.values() if m.reads == have), None)
    return (f"--kt-method {reader} reads it" if reader else
            "a converted layout (--kt-method AMXINT4/AMXINT8 with --kt-weight-path)")


def check_model(model: ModelSpec, method: str) -> None:
    """Refuse, in one line with what to do, a model or method the hybrid mode cannot serve."""
    if method not in KT_METHODS:
        raise VramkitError(f"--kt-method {method}: not a kt-kernel method the kit plans",
                           f"use one of {', '.join(KT_METHODS)}", Exit.BAD_INPUT)
    if model.moe is None:
        raise VramkitError(f"--kt-method {method}: {model.name} is a dense model (no routed experts to put on "
                           "the CPU)", "drop the kt_* knobs, or pick a MoE model", Exit.BAD_INPUT)
    if model.moe.expert_bias or model.moe.router_bias or model.quantization is not None \
            and model.quantization.method == "mxfp4":
        raise VramkitError(f"--kt-method {method}: {model.name}'s experts are MXFP4 with biases and a clamped "
                           "SwiGLU; kt-kernel reads no MXFP4 checkpoint and its CPU experts have neither",
                           "serve it on the GPU (plan without --kt-method)", Exit.UNSUPPORTED_MODEL)
    if KT_METHODS[method].gguf_type and model.moe.expert_intermediate % GGUF_QK_K:
        raise VramkitError(f"--kt-method {method}: kt-kernel's LLAMAFILE backend splits each expert in blocks of "
                           f"{GGUF_QK_K}; {model.name}'s expert width {model.moe.expert_intermediate} is not a "
                           "multiple",
                           _reader_hint(model), Exit.UNSUPPORTED_MODEL)
    need, have = KT_METHODS[method].reads, checkpoint_format(model)
    made = KT_METHODS[method].made_from
    if made is not None and made != have:
        raise VramkitError(f"--kt-method {method} is made from a {made} checkpoint's own tensors; {model.name} is "
                           f"{have}", f"{_reader_hint(model)}, or pick the {made} model", Exit.BAD_INPUT)
    q = model.quantization
    if method == "RAWINT4" and q is not None and \
            (why := rawint4_problem(q.method, q.bits, q.group_size, q.sym, q.desc_act)) is not None:
        raise VramkitError(f"--kt-method RAWINT4: {model.name}: {why}",
                           "--kt-method AMXINT8, converted from the bf16 or FP8 checkpoint", Exit.UNSUPPORTED_MODEL)
    if need is not None and need != have:
        raise VramkitError(f"--kt-method {method} reads a {need} checkpoint; {model.name} is {have}",
                           f"{_reader_hint(model)}, or pick the {need} model", Exit.BAD_INPUT)


# SGLang 0.5.15.post1's KT wrapper keeps experts 0..N-1 of a layer on the GPU by masking a token's other experts
# to id -1 for the GPU MoE kernel: the triton kernels (bf16, FP8, and moe_wna16's int4/int8) skip them, the marlin
# MoE kernel that runs GPTQ and AWQ experts by default reads them out of bounds ("illegal memory access" while the
# decode CUDA graph is captured; GPTQ-Int4, 86 of 128 GPU experts per layer, the H100 host:
# benchmarks/results/gpu/moe-vs-llamacpp-gptq/k16-gptq.evidence.txt). So a split GPTQ/AWQ layer runs on
# SGLang's moe_wna16 method (`--quantization moe_wna16`: the same int4 files, the triton kernel; linear layers stay
# on marlin), which takes GPTQ without act-order at 4 or 8 bits and AWQ at 4 (moe_wna16.py is_moe_wna16_compatible).
MOE_KERNELS = ("auto", "marlin", "wna16")
# Where the GPU's experts sit (the kt_gpu_layers knob; the kit's adapter reads VRAMKIT_KT_GPU_LAYERS): "off" = experts
# 0..N-1 of every MoE layer, SGLang's own split; "auto" = whole layers, the last N x layers // experts of them
KT_GPU_LAYERS = ("off", "auto")


# The whole-layer estimate's measured/estimate range on the runs not used to fit it (benchmarks/results/gpu/
# kt-estimate.md: 64 servers, FP8 and GPTQ-Int4 GPU experts, AMXINT4, AMXINT8, FP8 and RAWINT4, fifteen of them with
# the int4 decode kernel, 6-14 threads, 41 on H200s; fitted on a 65th), rounded outward; tests/unit/test_kt_estimate.py
# holds it to the data
WHOLE_LAYER_SPREAD = (0.57, 1.41)
WHOLE_LAYER_SPREAD_NOTE = ("one decode after 30K at 0.57x; the FP8 checkpoint's per-layer-seeded run 1.12-1.20x "
                           "(faster, as its split twin); the other 178 decodes 0.77-1.40x")
# Whole layers against the split, one machine, paired by prompt (benchmarks/results/gpu/moe-budget.md, the seeded
# section; tests/unit/test_kt_placement.py holds it to moe-budget.json)
WHOLE_LAYER_SPEED = ("measured on the H100 host, GPTQ-Int4 at 16 GiB, 12 KT threads: 1.32x the split single-stream, "
                     "0.99x at 4 streams, 13 GB of host RAM against 34 (moe-budget.md)")
# The CPU methods run with whole layers on the GPU host (fit_kt.py's whole-layer points; tests/unit/test_kt_estimate.py
# holds this to them): a whole-layer plan with another method says it is unmeasured
WHOLE_LAYER_METHODS = ("AMXINT4", "AMXINT8", "FP8", "RAWINT4")
# The split against whole layers on the moe preset's own checkpoint (FP8, AMXINT8, 12 threads), one machine
# (moe-budget/best16; tests/unit/test_kt_placement.py holds it to moe-budget.json)
SPLIT_SPEED = ("measured on the H100 host, the FP8 checkpoint at 16 GiB, 12 KT threads, against whole layers: 0.97x "
               "single-stream, 1.00x at 4 streams, a first token 0.86x the time after 8K and 0.94x after 30K, 34.6 GB "
               "of host RAM against 24.6 (moe-budget.md)")


def whole_gpu_layers(num_gpu_experts: int, moe_layers: int, num_experts: int) -> int:
    """The MoE layers whose experts all sit on the GPU under kt_gpu_layers = "auto": the same GPU memory for experts
    as N per layer, rounded down to whole layers (services/sglang-kt/kt_compat: gpu_layers("auto", ...))."""
    return num_gpu_experts * moe_layers // num_experts


def gpu_expert_counts(model: ModelSpec, num_gpu_experts: int, whole_layers: bool) -> int | tuple[int, ...]:
    """What the GPU allocates for experts, as core/model/arch.py's weight_layout takes it: N in every MoE layer, or
    with whole layers every expert of the last N x layers // experts decoder layers and none of the others (the
    adapter counts decoder layers, builds a GPU layer without KT and gives a CPU layer 0 GPU experts;
    services/sglang-kt/kt_compat)."""
    assert model.moe is not None
    if not whole_layers:
        return num_gpu_experts
    first = _first_gpu_layer(model, num_gpu_experts)
    return tuple(model.moe.num_experts if i >= first else 0 for i in range(model.num_layers))


def _first_gpu_layer(model: ModelSpec, num_gpu_experts: int) -> int:
    """The adapter's first whole GPU layer: it counts decoder layers (kt_compat gpu_layers("auto", ...))."""
    assert model.moe is not None
    return model.num_layers - whole_gpu_layers(num_gpu_experts, model.num_layers, model.moe.num_experts)


def whole_moe_layers(model: ModelSpec, num_gpu_experts: int) -> int:
    """The MoE layers these GPU experts make as whole layers: those among the adapter's last N x decoder layers //
    experts (gpu_expert_counts'; a dense decoder layer among them holds no experts)."""
    assert model.moe is not None
    return sum(model.moe.moe_layers[_first_gpu_layer(model, num_gpu_experts):])


def splits_layers(model: ModelSpec, num_gpu_experts: int | None, whole_layers: bool) -> bool:
    """Whether the hybrid mode splits a layer's experts between the GPU and the CPU: N per layer, 0 < N < experts;
    whole layers split none (a GPU layer is SGLang's own MoE over every expert, a CPU layer skips its GPU kernel in
    the adapter)."""
    moe = model.moe
    return moe is not None and num_gpu_experts is not None and 0 < num_gpu_experts < moe.num_experts \
        and not whole_layers


INT_MOE = ("gptq", "awq")


def wna16_problem(model: ModelSpec) -> str | None:
    """Why SGLang's moe_wna16 cannot run this checkpoint's experts (None: it can)."""
    q = model.quantization
    if q is None or q.method not in INT_MOE:
        return f"it runs GPTQ/AWQ checkpoints' experts; {model.name} is {q.method if q else 'not quantized'}"
    if q.method == "gptq" and (q.desc_act or q.bits not in (4, 8)):
        return f"it takes GPTQ at 4 or 8 bits without act-order; {model.name} is {q.bits}-bit" + \
            (", desc_act" if q.desc_act else "")
    if q.method == "awq" and q.bits != 4:
        return f"it takes 4-bit AWQ; {model.name} is {q.bits}-bit"
    return None


def moe_kernel(model: ModelSpec, asked: str | None, num_gpu_experts: int | None,
               whole_layers: bool = False) -> tuple[ModelSpec, str | None]:
    """(the model with its experts' GPU layout set, the kernel to render: "marlin" / "wna16", None where SGLang
    has no choice). `asked`: the knob (None, as a resolved plan holds it where there was no choice: auto).
    `num_gpu_experts`: the hybrid mode's N per layer (None: no hybrid mode). `whole_layers`: kt_gpu_layers = "auto".
    auto = moe_wna16 where a layer's experts are split between the GPU and the CPU (splits_layers) and it can run
    them, marlin otherwise: with whole layers marlin decoded 1.05x moe_wna16 paired by prompt, 1.09x at 4 streams
    (H100 host at 16 GiB, moe-budget/marlin)."""
    asked = asked or "auto"
    if asked not in MOE_KERNELS:
        raise VramkitError(f"--moe-kernel {asked!r} is not one of {', '.join(MOE_KERNELS)}",
                           "auto picks the kernel", Exit.BAD_INPUT)
    q, moe = model.quantization, model.moe
    if asked == "wna16" and (why := wna16_problem(model)) is not None:
        raise VramkitError(f"--moe-kernel wna16 (SGLang's moe_wna16): {why}", "use --moe-kernel auto",
                           Exit.BAD_INPUT)
    if q is None or q.method not in INT_MOE or moe is None:
        return model, None
    split = splits_layers(model, num_gpu_experts, whole_layers)
    kernel = asked if asked != "auto" else "wna16" if split and wna16_problem(model) is None else "marlin"
    return replace(model, quantization=replace(q, moe_kernel=kernel)), kernel


def wna16_note(model: ModelSpec, *, asked: bool) -> str:
    """The plan's line for experts on moe_wna16: why, and what it costs where nothing forces it."""
    q = model.quantization
    assert q is not None        # moe_kernel() sets wna16 only on a GPTQ/AWQ checkpoint
    why = ("asked (--moe-kernel wna16); on a card that holds every expert marlin decoded faster (24 GiB, H100 "
           "host: 229.7 against 169.2 tok/s, benchmarks/results/gpu/moe-vs-llamacpp-levers.md)" if asked else
           "the hybrid mode splits each layer's experts, which SGLang's marlin MoE cannot run (measured)")
    return (f"{q.method.upper()} experts on SGLang's moe_wna16 (--quantization moe_wna16: the same int4 "
            f"files on the triton MoE kernel; linear layers stay on marlin): {why}")


def split_problem(model: ModelSpec, num_gpu_experts: int, whole_layers: bool) -> str | None:
    """Why SGLang cannot split this checkpoint's experts N per layer on the kernel planned (None: it can, or no
    layer is split)."""
    q, moe = model.quantization, model.moe
    if q is None or q.method not in INT_MOE or q.moe_kernel != "marlin" or moe is None \
            or not splits_layers(model, num_gpu_experts, whole_layers):
        return None
    why = wna16_problem(model)
    return (f"{q.method.upper()} experts split {num_gpu_experts} GPU / {moe.num_experts - num_gpu_experts} CPU per "
            "layer: SGLang's marlin MoE kernel reads the CPU experts' masked ids out of bounds (illegal memory "
            "access at start, measured) -> " + ("--moe-kernel wna16 (the triton kernel skips them), " if why is None
                                               else f"not moe_wna16 either ({why}); ")
            + "the FP8 or bf16 checkpoint for the hybrid mode, or a card that holds every expert")


def preference(isa: str) -> tuple[str, ...]:
    """The order a plan tries methods in when the asked one cannot run: the most accurate first, except on an AVX2
    CPU, where only LLAMAFILE_Q8_0 meets the decode goal (AVX2_SOURCE's order, then the rest)."""
    if isa != "avx2":
        return METHOD_PREFERENCE
    return tuple(AVX2_SOURCE) + tuple(m for m in METHOD_PREFERENCE if m not in AVX2_SOURCE)


def needed_build(method: str, kt_kernel: str) -> str:
    """The builds that have the method's kernels, in words: this release's, else the listed releases' that do."""
    here = builds(method, kt_kernel)
    if here:
        return f"kt-kernel {kt_kernel}'s {' or '.join(here)} build"
    return (" or ".join(f"kt-kernel {v}'s {' or '.join(b[method])} build" for v, b in KT_BUILDS.items() if b[method])
            or "a build no release has")


def resolve_method(model: ModelSpec, asked: str, isa: str, kt_kernel: str) -> tuple[str | None, str]:
    """(the method to plan with, or None when none runs on this CPU; why). The asked one when the CPU runs
    it, else the first of preference(isa) that reads this checkpoint (or a converted layout) and runs there."""
    kk = f"kt-kernel {kt_kernel}"
    if runs_on(asked, isa, kt_kernel):
        return asked, (f"{asked} runs on {kk}'s {KT_VARIANT[build_for(asked, isa, kt_kernel)]} build"
                       + release_note(kt_kernel, asked))
    need = needed_build(asked, kt_kernel)
    fmt = checkpoint_format(model)
    for m in preference(isa):
        if KT_METHODS[m].serves(fmt) and runs_on(m, isa, kt_kernel):
            return m, (f"{asked} has no kernels in {kk}'s {isa} build (it needs {need}): planned with {m} "
                       f"instead, which runs on the {KT_VARIANT[build_for(m, isa, kt_kernel)]} build"
                       + release_note(kt_kernel, m))
    return None, no_wheel_text(model, isa, kt_kernel)


def no_wheel_text(model: ModelSpec, isa: str, kt_kernel: str) -> str:
    """Why no published kt-kernel wheel serves this checkpoint on this CPU, and what would."""
    src = source_build_method(model, isa)
    if src is None:
        return f"no kt-kernel {kt_kernel} method for a {checkpoint_format(model)} checkpoint runs on {isa}"
    return source_build_text(src, isa)


def first_wheel(method: str, isa: str) -> str | None:
    """The first listed kt-kernel release whose wheel runs the method on this CPU (None: none)."""
    return next((v for v in sorted(KT_BUILDS, key=_release) if runs_on(method, isa, v)), None)


def source_build_text(method: str, isa: str) -> str:
    wheel = first_wheel(method, isa)
    return ((f"kt-kernel >= {wheel}'s wheel runs {method} on an {isa}-only CPU (earlier releases' avx2 builds carry "
             "AVX-512 instructions: SIGILL, benchmarks/results/gpu/kt-isa.md) -> install it (make setup-kt-native "
             "picks it for this CPU), or build" if wheel else
             f"no published kt-kernel wheel runs {method} on an {isa}-only CPU -> build")
            + f" kt-kernel >= {AVX2_SOURCE[method]} from source on that CPU (CPUINFER_CPU_INSTRUCT=AVX2); or layer "
            "offload (plan without --kt-method)")


# --- bytes ----------------------------------------------------------------------------------------------------
def cpu_expert_bytes(model: ModelSpec, method: str) -> int:
    """One routed expert (gate, up, down) as kt-kernel holds it in host RAM. AMXINT4/8: one f32 scale per output
    row (measured: 303,824,896 bytes per Qwen3-30B-A3B layer of 128 experts in AMXINT4,
    benchmarks/results/gpu/moe/kt-int4-layout.json). FP8/BF16/GPTQ_INT4: the checkpoint's own tensors."""
    assert model.moe is not None
    h, i = model.hidden_size, model.moe.expert_intermediate
    params, rows = 3 * h * i, 2 * i + h
    if method == "AMXINT4":
        return params // 2 + 4 * rows
    if method == "AMXINT8":
        return params + 4 * rows
    if method == "LLAMAFILE_Q8_0":        # ggml's block_q8_0: 32 int8 + one f16 scale, along each row
        return params // 32 * 34
    if method == "BF16":
        return params * 2
    if method == "RAWINT4":               # int4 + one bf16 scale per group of a row (kt_repack)
        return params // 2 + 2 * (params // RAWINT4_GROUP)
    if method == "FP8":
        q = model.quantization
        bn, bk = q.weight_block if q is not None and q.weight_block else (128, 128)
        blocks = 2 * (-(-i // bn)) * (-(-h // bk)) + (-(-h // bn)) * (-(-i // bk))    # gate + up, down
        return params + 4 * blocks
    if method == "GPTQ_INT4":
        q = model.quantization
        gs = q.group_size if q is not None and q.group_size > 0 else h
        groups = 2 * (h // gs) * i + (i // gs) * h            # scales (fp16) and qzeros (4 bits) per group
        return params // 2 + 2 * groups + groups // 2
    raise ValueError(f"kt method {method}: no layout size known")


# --- the host -------------------------------------------------------------------------------------------------
def parse_read_gbs(text: str, where: str) -> tuple[tuple[int, float], ...]:
    """"93.0" (one figure) or "1:11.2,2:27.3,16:93.0" (GB/s per thread count, as `vramkit host --bandwidth
    --write` keeps it) -> ((threads, GB/s), ...), sorted; a bad one is one line and exit 64."""
    out = []
    try:
        for part in str(text).split(","):
            t, _, gbs = part.strip().rpartition(":")
            value = float(gbs)
            if not 0 < value < 10_000 or (t and int(t) < 1):
                raise ValueError
            out.append((int(t) if t else 1, value))
    except ValueError:
        raise VramkitError(f"{where} {text!r} is not a bandwidth in GB/s", f"e.g. {where} 60, or "
                           "1:11.2,8:72.3,16:93.0 (GB/s per thread count, as `vramkit host --bandwidth` writes)",
                           Exit.BAD_INPUT) from None
    if len(out) > 1 and len({t for t, _ in out}) != len(out):
        raise VramkitError(f"{where} {text!r} names a thread count twice", "one GB/s per thread count", Exit.BAD_INPUT)
    return tuple(sorted(out))


@dataclass(frozen=True)
class HostCpu:
    """The CPU side of a target: what kt-kernel build runs, how fast host RAM reads per thread count, how many
    physical cores the server gets. Built by the launch layer (this host's, or --cpu-isa / --host-read-gbs)."""

    isa: str | None                                  # CPU_ISAS, None: not even AVX2
    isa_source: str                                  # "this host's (/proc/cpuinfo)", "--cpu-isa", ...
    read_bytes_s: tuple[tuple[int, float], ...]      # (threads, bytes/s) measured; one entry = one figure
    read_source: str
    physical_cores: int                              # of the server's cpuset
    kt_kernel: str                                   # the kt-kernel release the server runs (config/versions.toml)
    cores_source: str = ""
    cpus: int | None = None                          # logical CPUs the server may use (its cpuset); None: not known

    def read_at(self, threads: int) -> float:
        """Host read bandwidth at `threads`: the sweep interpolated linearly, flat past its last point, in
        proportion below its first (one figure: that figure at any count)."""
        pts = sorted(self.read_bytes_s)
        if len(pts) == 1:
            return pts[0][1]
        if threads <= pts[0][0]:
            return pts[0][1] * threads / pts[0][0]
        for (t0, b0), (t1, b1) in zip(pts, pts[1:], strict=False):
            if threads <= t1:
                return b0 + (b1 - b0) * (threads - t0) / (t1 - t0)
        return pts[-1][1]


# torch inductor's compile workers: a subprocess pool of min(32, CPUs the process may use) (torch/_inductor/config.py,
# decide_compile_threads; torch._utils.cpu_count reads the affinity), started at the server's first torch.compile and
# quiesced after it (compile_worker quiesce), so they count in the RSS right after start and are gone by the first
# requests. On the 16-CPU H100 host a server tree held 17 such processes right after start and one by the probe's end
# (moe-budget/best16 and marlin, moe_point's per-process readings; none on a marlin whole-layer server). SGLang's own
# host RAM (kt_sglang_host_mib) was measured there, so another CPU count moves it by the workers it adds or drops.
COMPILE_WORKERS_CAP = 32
COMPILE_WORKER_BYTES = 394_000_000      # measured: one worker's RSS, the mean over those readings (held by a test)
MEASURED_HOST_CPUS = 16                 # the CPUs of the host kt_sglang_host_mib was measured on
# What a server without the compile pool grows by while it serves, beyond its RSS right after start: measured on the
# H100 host's marlin whole-layer server of moe-budget/marlin (its tree's RSS after start and at the probe's end);
# held out, moe-vs-llamacpp-ggml/run1 and run2 grew 1,038,827,520 and 1,041,604,608 bytes (held by a test). A server
# with the pool reads its peak right after start (the pool quiesces by the first requests), which the measured
# kt_sglang_host_mib already is.
SERVING_GROWTH_BYTES = 1_042_415_616


def starts_compile_pool(model: ModelSpec, whole_layers: bool, gpu_layers: int) -> bool:
    """Whether the server calls torch.compile, which starts inductor's compile pool (derived from SGLang 0.5.15.post1's
    source: its only torch.compile'd functions on this path are kt_ep_wrapper.mask_cpu_expert_ids, which a split
    layer calls, and the triton MoE runner's moe_sum_reduce_torch_compile, which FP8/BF16 and moe_wna16 experts on
    the GPU call). Whole layers whose GPU layers run on marlin call neither. Measured on the H100 host: those servers
    held none of the pool's 17 processes after start, every other server 17 (moe-budget/marlin,
    moe-vs-llamacpp-ggml/run1 and run2)."""
    q = model.quantization
    marlin = q is not None and q.method in INT_MOE and q.moe_kernel == "marlin"    # (FP8 experts run triton)
    return not (whole_layers and (gpu_layers == 0 or marlin))


def sglang_own_bytes(measured: int, cpus: int | None, compile_pool: bool = True) -> tuple[int, str]:
    """SGLang's own host RAM on a server with `cpus` CPUs at its peak: the measured figure, moved by the compile workers
    a host with that many CPUs starts (None: the measured host's count); where the server starts no pool
    (`starts_compile_pool`) the figure less the whole pool and plus what it grows by serving (its peak is then at the
    end, not right after start); and where the figure comes from, in words."""
    if not compile_pool:        # the pool is its workers and the process that spawned them
        pool = (min(MEASURED_HOST_CPUS, COMPILE_WORKERS_CAP) + 1) * COMPILE_WORKER_BYTES
        return measured - pool + SERVING_GROWTH_BYTES, (
            f"measured on {MEASURED_HOST_CPUS} CPUs, less torch's compile pool ({pool / 2**30:.1f} GiB: nothing here "
            f"calls torch.compile), plus what such a server grows by serving ({SERVING_GROWTH_BYTES / 2**30:.2f} GiB, "
            "measured), derived")
    if cpus is None or min(cpus, COMPILE_WORKERS_CAP) == min(MEASURED_HOST_CPUS, COMPILE_WORKERS_CAP):
        return measured, "measured"
    moved = (min(cpus, COMPILE_WORKERS_CAP) - min(MEASURED_HOST_CPUS, COMPILE_WORKERS_CAP)) * COMPILE_WORKER_BYTES
    return measured + moved, (f"measured on {MEASURED_HOST_CPUS} CPUs, {'+' if moved > 0 else '-'}"
                              f"{abs(moved) / 2**30:.1f} GiB of torch's compile workers for {cpus} here, derived")


@dataclass(frozen=True)
class KtConstants:
    """The fitted and measured constants of the estimate (config/engine.toml kt_* keys, provenance there)."""

    cpu_read_efficiency: float       # F: share of host read(threads) kt-kernel's decode reaches
    layer_sync_s: float              # F: per MoE layer and token
    attention_read_bytes_s: float    # F: KV read rate of batch-1 decode attention
    sglang_host_bytes: int           # measured: SGLang's own host RAM beside kt-kernel's experts
    whole_layer_step_s: float = 0.0  # F: whole layers only, the GPU side's step beyond its bandwidth terms
    reserved_cores: int = 2          # SGLang's scheduler and its HTTP/tokenizer process keep a core each
    build_cpu_time: tuple[tuple[str, float], ...] = ()   # measured: CPU-expert time of a build / the AMX build's
    method_cpu_time: tuple[tuple[str, float], ...] = ()  # measured: a method's CPU-expert time per byte / FP8's

    def cpu_time_factor(self, build: str | None, method: str | None = None) -> float:
        """How much longer the CPU experts take than the estimate's bytes at FP8's pace on the AMX build: a lesser
        kt-kernel build (1.0: AMX, or not measured; measured for FP8), or on the AMX build the method's own pace per
        byte (1.0: FP8, or not measured; its AMX kernels, which a lesser build does not have)."""
        if build not in (None, "amx"):
            return dict(self.build_cpu_time).get(build, 1.0)
        return dict(self.method_cpu_time).get(method or "", 1.0)


def cpuinfer_threads(physical_cores: int, reserved: int) -> int:
    """KT's threads: the server's physical cores (the `make optimize` cpuset) minus SGLang's own, a quarter of them
    and at least `reserved`; one per physical core (SMT siblings share the core's AMX/AVX units). kt-kernel pins each
    worker to a core and spins it between layers, so SGLang's scheduler, its CUDA host nodes and the tokenizer need
    cores of their own. Measured on the H100 host only (16 physical cores, the GPTQ split at 16 GiB, paired prompt by
    prompt against 14 threads; benchmarks/results/gpu/moe-budget.md): 12 threads decoded 1.10x (4 streams 1.09x),
    10 threads 1.15x (4 streams 1.01x), 8 threads 4 streams 0.91x; the quarter on other core counts is an
    assumption."""
    return max(1, physical_cores - max(reserved, physical_cores // 4))


def oversubscribed(threads: int, physical_cores: int, cores_source: str = "") -> str:
    """Why KT threads on every physical core are refused: SGLang's scheduler and its tokenizer process then share
    those cores with KT's spinning workers (the likely cause, not measured; on an SMT CPU the siblings share each
    core's units with KT's workers, so the rule counts physical cores there too). Measured on the H100 host (16
    physical cores, no SMT, the preset at 16 GiB, AMXINT8, 2026-11-27, benchmarks/results/gpu/moe-vs-llamacpp-q8/
    k16-int8-t16*): 16 KT threads decoded 1.7 tok/s against 36.1 at 14, and each warm-up request took 12 s."""
    return (f"--kt-cpuinfer {threads} leaves none of the {physical_cores} physical cores"
            + (f" ({cores_source})" if cores_source else "") + " to SGLang's own processes: measured, 16 KT threads "
            "on 16 cores (no SMT) decoded 1.7 tok/s against 36.1 at 14")


@dataclass(frozen=True)
class DecodeEstimate:
    gpu_s: float
    context_s: float
    gpu_experts_s: float
    cpu_experts_s: float
    sync_s: float
    host_read_bytes_s: float
    cpu_bytes_per_token: int
    cpu_time_factor: float = 1.0

    gpu_layers: int = 0              # whole layers on the GPU (kt_gpu_layers = "auto"); 0: N experts in every layer
    step_s: float = 0.0              # whole layers: the GPU side's fitted step (KtConstants.whole_layer_step_s)

    @property
    def seconds(self) -> float:
        """Split: the GPU's experts run while the CPU's do. Whole layers: a CPU layer's experts are all on the CPU,
        so nothing on the GPU overlaps them, and only the CPU's layers sync."""
        if self.gpu_layers:
            return self.gpu_s + self.context_s + self.gpu_experts_s + self.cpu_experts_s + self.sync_s + self.step_s
        return self.gpu_s + self.context_s + max(self.gpu_experts_s, self.cpu_experts_s) + self.sync_s

    @property
    def tok_s(self) -> float:
        return 1.0 / self.seconds

    def aggregate_tok_s(self, streams: int, num_experts: int, top_k: int) -> float:
        """Tokens a second of `streams` requests decoding together, each at this estimate's context (derived, no
        constant of its own): one step reads each layer's experts that any of its tokens names, the expert terms
        times distinct_expert_factor; each stream reads its own KV; the per-step terms (the GPU's other weights,
        sync, the whole-layer step) are paid once."""
        f = distinct_expert_factor(num_experts, top_k, streams)
        experts = (self.gpu_experts_s + self.cpu_experts_s if self.gpu_layers
                   else max(self.gpu_experts_s, self.cpu_experts_s)) * f
        return streams / (self.gpu_s + streams * self.context_s + experts + self.sync_s + self.step_s)


def distinct_expert_factor(num_experts: int, top_k: int, tokens: int) -> float:
    """How many more experts `tokens` tokens name in one layer than one token does, each token's top_k drawn
    independently and uniformly: num_experts x (1 - (1 - top_k / num_experts)^tokens) / top_k (3.64 for 4 tokens of
    Qwen3-30B-A3B's 8 of 128). Trained routers are not uniform; the committed runs' dummy weights are."""
    return num_experts * (1 - (1 - top_k / num_experts) ** tokens) / top_k


# The aggregate estimate (DecodeEstimate.aggregate_tok_s) against every committed KT run's 4-stream probe (4 requests
# after 512-token prompts; benchmarks/gpu/fit_kt.py, kt-estimate.md), as measured/estimate by CPU method and
# placement: derived from the batch-1 estimate with nothing fitted to these runs, so all of them are held out.
# (method, whole layers) -> (least, greatest measured / estimate, rounded outward to 0.01; runs). It is high for
# LLAMAFILE_Q8_0, RAWINT4 and whole layers (4 tokens cost more than the experts they read: compute grows with the
# tokens) and on both sides for the split's AMX methods: the spread is printed beside every figure
AGGREGATE_SPREAD: dict[tuple[str, bool], tuple[float, float, int]] = {
    ("AMXINT4", False): (0.71, 1.13, 4),
    ("AMXINT4", True): (0.85, 0.86, 1),
    ("AMXINT8", False): (0.85, 1.28, 22),
    ("AMXINT8", True): (0.64, 1.31, 53),      # 13 of them with the int4 decode kernel (kt_cpu_decode): 0.64-0.93x
    ("FP8", False): (0.87, 0.96, 2),
    ("FP8", True): (0.95, 1.03, 2),
    ("LLAMAFILE_Q8_0", False): (0.70, 0.91, 5),
    ("RAWINT4", True): (0.64, 0.65, 1),
}


def aggregate_note(streams: int, tok_s: float, method: str, whole_layers: bool, factor: float) -> str:
    """The plan's words for the aggregate estimate, with what the committed runs measured against it."""
    measured = AGGREGATE_SPREAD.get((method, whole_layers))
    where = f"{method} {'whole-layer' if whole_layers else 'split'}"
    return (f"{streams} requests decoding together ~{tok_s:.0f} tok/s in all after 512-token prompts: derived from "
            f"that estimate ({streams} tokens name {factor:.2f}x one token's experts, routing drawn uniformly; no "
            "constant of its own); "
            + (f"the {measured[2]} committed {where} run{'s' if measured[2] > 1 else ''} with 4 streams measured "
               f"{measured[0]:.2f}-{measured[1]:.2f}x it" if measured else f"no {where} run measured it")
            + " (benchmarks/results/gpu/kt-estimate.md)")


# --- the CPU layers' prompt chunks on the GPU (kt_gpu_prefill; the adapter's vramkit_gpu_prefill.py) ------------------
# kt_gpu_prefill = "auto": forwards of this many tokens or more. Derived from one measured pair (H100 host at 16 GiB,
# benchmarks/results/gpu/moe-gpu-prefill/): a CPU layer's copy took 6.2 ms at 50.6 GB/s, and kt-kernel's AMXINT8 prompt
# ~26 us per token and CPU layer (12 threads). The copy pays for itself from ~240 tokens there, ~480 at PCIe 4 x16's ~25
# GB/s, ~1,000 at PCIe 3's ~12: 1,024 is ahead on PCIe 4 and up, even on 3, and every full 4,096-token chunk takes it.
AUTO_PREFILL_TOKENS = 1024
# ... and from fewer tokens for a CPU method whose kt-kernel prompt is far slower. FP8 (kt-kernel 0.5.1, AMX build, 14
# threads) answered an 8K prompt in 129.8 s with 85 of 128 experts of each of 48 layers on the CPU (benchmarks/results/
# gpu/moe/moe-16g-fp8-amx): ~0.5 ms a token and whole CPU layer, so a layer's FP8 copy (~0.6 GB) pays for itself from
# ~50 tokens at PCIe 4 x16's ~25 GB/s and ~100 at PCIe 3's ~12 (derived). Run since beside FP8 CPU experts at 128: an
# 8K prompt's first token in 1.02 s, 30K in 5.72 (benchmarks/results/gpu/moe-vs-llamacpp-q8/h200-fp8cpu/)
AUTO_PREFILL_TOKENS_BY_METHOD = {"FP8": 128}


def auto_prefill_tokens(method: str | None) -> int:
    """kt_gpu_prefill = "auto"'s least forward for the CPU experts' method (AUTO_PREFILL_TOKENS_BY_METHOD)."""
    return AUTO_PREFILL_TOKENS_BY_METHOD.get(method or "", AUTO_PREFILL_TOKENS)
# ... and only where the server, its pinned copies included, leaves this share of the host's available RAM to the rest
# of the desktop (the copies are page-locked: the kernel can neither swap nor reclaim them). A policy, not a
# measurement: the path is a speed-up, so auto does not take it at the edge of the RAM; asked for by number it is
# planned as any knob, up to all of it
AUTO_PREFILL_HOST_HEADROOM = 0.10


@dataclass(frozen=True)
class PrefillMeasured:
    """The path measured for one expert format (the GPU host named, its card emulated at 16 GiB, the moe preset): the
    first token after a 30K prompt with the path, without it (--kt-gpu-prefill 0; None: not run on that machine), and
    llama.cpp's best; how and where (tests/unit/test_gpu_prefill.py reads each figure from its run)."""
    path_s: float
    kt_kernel_s: float | None
    llama_cpp_s: float
    how: str
    where: str
    accuracy: str = ""      # what the path's arithmetic does to the CPU layers' prompt chunks, where it differs
    host: str = "the H100 host"


# the formats whose path ran in a server on a GPU: "auto" takes only these; a number given runs the others too, and
# the plan says they are not measured. FP8's copy is twice GPTQ-Int4's (11.1 ms a layer at 54 GB/s): it pays for
# itself from ~430 tokens there, ~930 at PCIe 4's ~25 GB/s, ~1,900 at PCIe 3's (derived as above), so 1,024 stays
PREFILL_MEASURED = {
    "gptq": PrefillMeasured(3.66, 9.85, 7.87, "medians of 3 starts on one machine, llama.cpp on Q4_K_M; decode within "
                            "the starts' spread", "benchmarks/results/gpu/moe-gpu-prefill/run3/"),
    "fp8": PrefillMeasured(5.52, 20.71, 17.17, "one start each; with the path on a second machine of the same kind, "
                           "llama.cpp on Q8_0; decode 37.3 tok/s against 35.7 without it",
                           "benchmarks/results/gpu/moe-gpu-prefill/fp8-server/ and moe-vs-llamacpp-q8/run2/",
                           "--kt-prefill-fp8 w8a8: the CPU layers' prompt chunks computed as SGLang computes FP8 "
                           "(inputs rounded to FP8 too): 5.1 % error on the GPU host's MoE-layer check against 2.9 % "
                           "for int8, the default (benchmarks/results/gpu/moe-gpu-prefill/fp8-bench/h200/); 6.4 % on "
                           "the random-weight accuracy proxy against 5.4 % for AMXINT8 (peer-accuracy/)"),
    "fp8-int8": PrefillMeasured(5.90, None, 18.00, "one start, llama.cpp on Q8_0 on the same machine (--fit on; "
                                "42.79 s with --n-cpu-moe 28); decode 42.6 tok/s against llama.cpp's 33.5; prompts on "
                                "kt-kernel not run on that machine (20.71 s on the H100 host, whose CPU lscpu reads "
                                "the same); on a second H200 machine, the preset as it comes: 5.71 s against 13.54, "
                                "decode 50.5 tok/s against 47.3; on a third, medians of 3 rounds: 5.73 s against "
                                "16.18, decode 41.8 tok/s against 41.9",
                                "benchmarks/results/gpu/moe-vs-llamacpp-q8/h200/, h200-b/ and h200-med/",
                                "each CPU layer's FP8 values requantized at load to int8 per row and 128 inputs, bf16 "
                                "inputs: 2.9 % error on the GPU host's MoE-layer check against 5.1 % for w8a8 "
                                "(benchmarks/results/gpu/moe-gpu-prefill/fp8-bench/h200/), 4.8 % on the random-weight "
                                "proxy against 6.4 % and AMXINT8's 5.4 % (peer-accuracy/)", "the H200 host"),
}


# How the path computes block-FP8 experts (kt_prefill_fp8; the adapter's VRAMKIT_KT_PREFILL_FP8), the first the
# default: "int8", each CPU layer's FP8 values requantized at load to int8 per row and 128 inputs and computed with bf16
# inputs by SGLang's triton MoE as its moe_wna16 8-bit layers are, or "w8a8", SGLang's block-FP8 triton MoE (each
# GEMM's input rounded to FP8 too). On the H200 host one layer's check against float32 on the FP8 values read 2.85 %
# for int8 and 5.10 % for w8a8, its 4,096-token chunk 12.8 against 11.8 ms beside an 11.2 ms copy
# (benchmarks/results/gpu/moe-gpu-prefill/fp8-bench/h200/); the random-weight proxy 4.82 against 6.38 %, kt-kernel's
# AMXINT8 from FP8 5.38 % (benchmarks/results/gpu/peer-accuracy/). int8 in a server: PREFILL_MEASURED["fp8-int8"]
PREFILL_FP8 = ("int8", "w8a8")
INT8_GROUP = 128
INT8_CHUNK = 4      # experts the adapter requantizes at a time on the GPU (vramkit_gpu_prefill.INT8_CHUNK)


def prefill_format(model: ModelSpec, fp8_as: str = PREFILL_FP8[0]) -> str | None:
    """The expert format the GPU prompt path would copy: "gptq" (GPTQ-Int4, SGLang's marlin MoE), "fp8" (block FP8
    with dynamic activation scales, as Qwen's and DeepSeek's FP8 releases store it: weight_scale_inv; its triton MoE),
    "fp8-int8" (the same requantized to int8, fp8_as "int8"), None (neither: the adapter's
    vramkit_gpu_prefill.unsupported says the same)."""
    q = model.quantization
    if block_fp8(model):
        return "fp8-int8" if fp8_as == "int8" else "fp8"
    if q is not None and q.method == "gptq" and q.bits == 4:
        return "gptq"
    return None


def block_fp8(model: ModelSpec) -> bool:
    """Block-FP8 experts with dynamic activation scales: the FP8 formats of the path, whichever arithmetic computes
    them (prefill_format "fp8" or "fp8-int8")."""
    q = model.quantization
    return q is not None and q.method == "fp8" and q.weight_block is not None and q.fp8_scheme == "dynamic"


def prefill_problem(model: ModelSpec, whole_layers: bool, moe_kernel: str | None) -> str | None:
    """Why kt_gpu_prefill cannot run for this plan (None: it can): the adapter copies a CPU layer's experts, read from
    the checkpoint, into whole-layer CPU layers: GPTQ-Int4 (symmetric, no act-order) in marlin's layout, or block FP8
    as the checkpoint has them."""
    q = model.quantization
    if not whole_layers:
        return "it needs whole layers on the GPU (--kt-gpu-layers auto): a split layer's GPU experts are its own"
    if block_fp8(model):
        return None
    if prefill_format(model) is None:
        how = ("" if q is None or q.method != "fp8" else " per tensor" if q.weight_block is None else
               " with static activation scales" if q.fp8_scheme == "static" else f" ({q.fp8_scheme})")
        return (f"{model.name}'s experts are {q.method if q else 'not quantized'}{how}"
                + "; the GPU prompt path runs GPTQ-Int4 experts on SGLang's marlin MoE and block-FP8 experts on its "
                "triton MoE")
    assert q is not None
    if not q.sym or q.desc_act:
        return "asymmetric or act-order GPTQ: SGLang's marlin MoE would need the zero points and permutation here"
    if moe_kernel != "marlin":
        return f"--moe-kernel {moe_kernel}: the GPU prompt path runs SGLang's marlin MoE"
    return None


def prefill_tensors(model: ModelSpec, fp8_as: str = PREFILL_FP8[0]) -> tuple[int, ...]:
    """One MoE layer's expert tensors as the path holds them, the adapter's GPU staging set and each CPU layer's
    pinned copy: GPTQ-Int4 as marlin does (w13 and w2 qweight, w13 and w2 scales; the repack keeps each size), block
    FP8 as the checkpoint has them (w13 and w2 float8 weights, their float32 block scales), or requantized to int8
    as moe_wna16 holds 8 bits (uint8 weights, 16-bit scales per row and 128 inputs)."""
    moe, q = model.moe, model.quantization
    assert moe is not None and q is not None
    h, i, e = model.hidden_size, moe.expert_intermediate, moe.num_experts
    if prefill_format(model, fp8_as) == "fp8-int8":
        return (e * 2 * i * h, e * h * i, e * 2 * i * (h // INT8_GROUP) * 2, e * h * (i // INT8_GROUP) * 2)
    if block_fp8(model):
        assert q.weight_block is not None
        bn, bk = q.weight_block
        return (e * 2 * i * h, e * h * i, e * -(-2 * i // bn) * -(-h // bk) * 4, e * -(-h // bn) * -(-i // bk) * 4)
    g = q.group_size if q.group_size > 0 else h
    return (e * h * 2 * i // 2, e * i * h // 2, e * (h // g) * 2 * i * 2, e * (i // g) * h * 2)


def prefill_layer_work(model: ModelSpec, fp8_as: str = PREFILL_FP8[0]) -> tuple[int, ...]:
    """What the adapter allocates and frees on the GPU for each CPU layer while the weights load, as
    CachingAllocator.run encodes it. GPTQ (vramkit_gpu_prefill.to_marlin): the layer's raw qweights, then SGLang's
    gptq_marlin_moe_repack of each (the new tensor and one expert's work tensor), then marlin_moe_permute_scales of
    each raw scale (the new tensor, the 64-entry permutation and one expert's permuted scales); the raw tensors are
    freed, then the repacked ones once copied to host RAM. Recorded in order: moe-vs-llamacpp-gptq/h200-stagesnap/.
    Block FP8 requantized to int8 (the default): in the staging set itself, which comes first (weight_load.replay_load
    with staging_fresh), each projection with its block scales, a float32 scratch of INT8_CHUNK experts and two
    reductions, all freed (vramkit_gpu_prefill.int8_into). Block FP8 as is: copied without a GPU step, nothing."""
    assert model.moe is not None
    e = model.moe.num_experts
    if prefill_format(model, fp8_as) == "fp8-int8":
        q = model.quantization
        assert q is not None and q.weight_block is not None
        bn, bk = q.weight_block
        h, i, m = model.hidden_size, model.moe.expert_intermediate, min(INT8_CHUNK, e)
        work: tuple[int, ...] = ()
        for j, (n, k) in enumerate(((2 * i, h), (h, i))):      # w13, then w2: four allocations each, then freed
            work += (e * -(-n // bn) * -(-k // bk) * 4, m * n * k * 4, m * n * (k // INT8_GROUP) * 4,
                     m * n * (k // INT8_GROUP) * 4, *(-(4 * j + x) for x in range(1, 5)))
        return work
    if block_fp8(model):
        return ()
    q13, q2, s13, s2 = prefill_tensors(model, fp8_as)
    return (q13, q2,                                  # 1, 2: the raw qweights
            q13, q13 // e, -4,                        # 3: w13 repacked (4: one expert's work)
            q2, q2 // e, -6,                          # 5: w2 repacked
            s13, s13, SCALE_PERM_BYTES, s13 // e, -9, -10, -7,    # 7: raw w13 scales, 8: permuted
            s2, s2, SCALE_PERM_BYTES, s2 // e, -13, -14, -11,     # 11: raw w2 scales, 12: permuted
            -1, -2, -3, -5, -8, -12)


def prefill_staging_bytes(model: ModelSpec, fp8_as: str = PREFILL_FP8[0]) -> int:
    """The GPU prompt path's staging set as the caching allocator reserves it on its own (core/memory/torch_alloc.py;
    allocated after the weights, counted with them by SGLang)."""
    a = CachingAllocator()
    for n in prefill_tensors(model, fp8_as):
        a.malloc(n)
    return a.reserved


# How the adapter page-locks the CPU layers' copies (kt_prefill_pin; its VRAMKIT_KT_PREFILL_PIN): "register", each
# copy's own memory registered with CUDA (cudaHostRegister, as torch.distributed's checkpoint stager pins), exactly its
# pages; "alloc", PyTorch's pinned allocator, each rounded up to a power of two (768 MiB for FP8's 576 MiB layer).
# Measured on the H100 host at 16 GiB, the FP8 preset with the path (one start each, two machines of one kind): RSS
# after start 45.8 GiB registered against 51.6 allocated, 5.8 GiB apart as these sizes say; the first token after 30K
# in 5.52 s both (benchmarks/results/gpu/moe-gpu-prefill/fp8-register/ and fp8-server/)
PREFILL_PINS = ("register", "alloc")
PAGE_BYTES = 4096


# The token embeddings in pinned host RAM, read by the GPU itself over the bus (kt_embed_host = "on", or "auto": on
# where embed_host_problem finds nothing in the way; the adapter's services/sglang-kt/kt_compat/vramkit_host_embed.py
# moves embed_tokens there once the weights are loaded). A decode step reads one row a token; the GPU memory the table
# held goes to the KV pool, and from it to more whole GPU layers (the plan's N). Measured at kernel level on an H200
# machine (benchmarks/results/gpu/uva-embed/h200/): gathers bit-identical to a GPU copy's, eager and in a replayed CUDA
# graph; 0.016 ms for a decode token's row against 0.014 from GPU memory, 0.33 ms for a 4,096-token chunk against 0.02.
# In a server (moe-vs-llamacpp-q8/h200-embhost/, one H200 machine at 16 GiB, the FP8 preset, starts in the order on,
# off, on): 18 GPU layers against 17, KV pool 40,473 tokens against 40,132 (planned 40,479 and 40,095), decode at depth
# 0 34.6 tok/s (the two starts' mean) against 34.9, after 512 / 8K / 30K-token prompts 1.05x / 1.06x / 1.12x, 4
# streams 1.00x, the first token after 30K in 0.98x the time. The moe preset's default since ("auto")
EMBED_HOST = ("off", "on", "auto")
EMBED_HOST_MEASURED = ("measured on one H200 machine at 16 GiB, the FP8 preset with and without it (starts on, off, "
                       "on): one more whole GPU layer, decode 0.99x at depth 0 and 1.05-1.12x after 512-30K-token "
                       "prompts, 4 streams 1.00x (benchmarks/results/gpu/moe-vs-llamacpp-q8/h200-embhost/); a token's "
                       "row bit-identical, 0.016 ms against 0.014 from GPU memory (uva-embed/h200/)")


# Without the hybrid mode (benchmarks/calibration/opt-embed-16g-h200*.json beside opt-f085-16g-h200*.json, two H200
# machines at 16 GiB, 2026-11-28, twenty-fifth session; the second started the control first): the optimized preset's
# 14B GPTQ-Int4 with its 1.45 GiB table moved held a KV pool of 55,211 tokens against 39,403 on both (planned 55,213
# and 39,362), decoded 192.8 tok/s against 192.8 and 192.8 against 193.1, and answered a 29K-token prompt in 5.42 s
# against 5.43 and 5.45 against 5.42; the host's available RAM fell 2.91 and 1.34 GiB more (2.00 planned).
EMBED_HOST_DENSE = ("measured without the hybrid mode on two H200 machines at 16 GiB, the optimized preset's 14B: "
                    "KV pool 55,211 tokens against 39,403 on both, decode 192.8 tok/s against 192.8 and 192.8 against "
                    "193.1, a 29K-token prompt's first token 5.42 s against 5.43 and 5.45 against 5.42 "
                    "(benchmarks/calibration/opt-embed-16g-h200*.json, opt-f085-16g-h200*.json)")


# The CPU layers' decode on the GPTQ-Int4 values as the checkpoint has them (kt_cpu_decode = "int4"): the kit's adapter
# (services/sglang-kt/kt_compat/int4_experts.c, vramkit_int4_experts.py) computes each whole CPU layer's decode batch
# from the checkpoint's 4-bit words and float16 scales in float32, SGLang's marlin arithmetic on the GPU layers; a
# longer chunk goes to kt-kernel's method (or the GPU prompt path) as before. It reads 19.5 MB a CPU layer a token
# where AMXINT8 reads 37.8. Measured (benchmarks/results/gpu/moe-vs-llamacpp-int4/r4/, one H200 machine at 16 GiB, the
# GPTQ-Int4 preset, medians of 3 rounds): 125.6 tok/s at depth 0 against 91.8 without it, llama.cpp's best 114.4; its
# AVX2 build forced on the same cores 109.0.
CPU_DECODES = ("kt", "int4", "auto")     # auto: int4 where int4_decode_problem finds nothing in the way, else kt
INT4_DECODE = "INT4_DECODE"     # its pace's key in KtConstants.method_cpu_time (config/engine.toml); + "_AVX2": its
# AVX2 build's, on a host without AVX-512
INT4_DECODE_MEASURED = ("measured on one H200 machine at 16 GiB (the GPTQ-Int4 preset, medians of 3 rounds): 125.6 "
                        "tok/s at depth 0 against 91.8 with kt-kernel's AMXINT8 alone, llama.cpp's best 114.4 "
                        "(benchmarks/results/gpu/moe-vs-llamacpp-int4cpu-16g.md)")


def int4_decode_bytes(model: ModelSpec) -> int:
    """One routed expert as the int4 decode kernel holds it: the GPTQ words (4 bits a weight) and one float16 scale a
    group of each output column, gate, up and down (int4_experts.c's strips keep the checkpoint's bytes)."""
    assert model.moe is not None
    h, i = model.hidden_size, model.moe.expert_intermediate
    q = model.quantization
    gs = q.group_size if q is not None and q.group_size > 0 else h
    return 3 * h * i // 2 + 2 * (2 * (h // gs) * i + (i // gs) * h)


def int4_decode_problem(model: ModelSpec, whole_layers: bool) -> str | None:
    """Why the int4 decode kernel cannot run this plan's CPU layers (None: it can): symmetric GPTQ-Int4 without
    act-order, whole CPU layers, strips of 16 and groups that divide both widths (int4_experts.c's shape rule)."""
    q = model.quantization
    if q is None or q.method != "gptq" or q.bits != 4:
        return f"it computes GPTQ-Int4 experts; this checkpoint is {checkpoint_format(model)}"
    if not q.sym or q.desc_act:
        return "it reads symmetric GPTQ values in input order; this checkpoint has " + \
            ("zero points" if not q.sym else "act-order")
    if not whole_layers:
        return "it computes whole CPU layers; give --kt-gpu-layers auto"
    assert model.moe is not None
    h, i, gs = model.hidden_size, model.moe.expert_intermediate, q.group_size
    if gs <= 0 or gs % 8 or h % 16 or i % 16 or h % gs or i % gs:
        return f"hidden {h} / expert width {i} are not whole strips of 16 and groups of {gs}"
    return None


def embed_host_problem(model: ModelSpec, tp: int, offload_bytes: int = 0) -> str | None:
    """Why the token embeddings cannot move to host RAM for this plan (None: they can): the move is the kit's SGLang
    adapter's, of one whole table (tp 1: SGLang splits the vocabulary across GPUs at tp > 1), not of a head tied to
    it (the lm_head would read the whole table over the bus every token), and not beside --cpu-offload-gb (SGLang's
    offloader and the move have not run together)."""
    if tp > 1:
        return f"at tp {tp} SGLang splits the embeddings across the GPUs; the adapter moves one whole table"
    if model.tie_word_embeddings:
        return (f"{model.name} ties its lm_head to the embeddings: the head would read the whole table over the bus "
                "every token")
    if model.quantization is not None and model.quantization.method == "gguf":
        return "a GGUF's token embeddings are a quantized ggml type; the adapter moves a bf16 or fp16 table"
    if offload_bytes:
        return "beside --cpu-offload-gb: SGLang's weight offload and the move have not run together"
    return None


def embed_host_bytes(embed_bytes: int) -> tuple[int, int]:
    """(GPU bytes freed, host bytes pinned) when the table of `embed_bytes` moves: its own allocator segment (the
    first parameter SGLang allocates, past 10 MiB: core/memory/torch_alloc.py), and PyTorch's pinned host
    allocator's power of two (weight_load.pinned_size; the adapter pins it with Tensor.pin_memory, as measured)."""
    return segment_size(round_size(embed_bytes)), pinned_size(embed_bytes)


def prefill_pinned_bytes(model: ModelSpec, cpu_layers: int, pin: str = "register", fp8_as: str = PREFILL_FP8[0]) -> int:
    """The CPU layers' copies in host RAM as `pin` (PREFILL_PINS) page-locks them: whole pages each, or PyTorch's
    pinned host allocator's power of two each."""
    size = pinned_size if pin == "alloc" else (lambda n: -(-n // PAGE_BYTES) * PAGE_BYTES)
    return cpu_layers * sum(size(n) for n in prefill_tensors(model, fp8_as))


def decode_estimate(model: ModelSpec, *, num_gpu_experts: int, cpu_expert_bytes_each: int, threads: int,
                    context: int, kv_bytes_per_token: float, gpu_non_expert_read: int, gpu_expert_read: int,
                    gpu_bandwidth_bytes_s: float, host: HostCpu, k: KtConstants,
                    build: str | None = None, gpu_layers: int = 0, method: str | None = None) -> DecodeEstimate:
    """One token at batch 1 with `context` tokens before it (the module docstring derives it); `build`: the
    kt-kernel build (CPU_ISAS) the CPU experts run on (a lesser one is slower: KtConstants.build_cpu_time);
    `gpu_layers`: whole layers on the GPU (kt_gpu_layers = "auto"), 0 for N experts in every layer; `method`: the CPU
    experts' format (its pace per byte: KtConstants.method_cpu_time)."""
    moe = model.moe
    assert moe is not None
    cpu_layers = moe.num_moe_layers - gpu_layers
    cpu_share = (moe.num_experts - num_gpu_experts) / moe.num_experts
    cpu_bytes = int(moe.top_k * (cpu_layers if gpu_layers else cpu_share * moe.num_moe_layers) * cpu_expert_bytes_each)
    read = host.read_at(threads)
    slow = k.cpu_time_factor(build, method)
    attn_rate = min(k.attention_read_bytes_s, gpu_bandwidth_bytes_s)
    return DecodeEstimate(
        gpu_s=gpu_non_expert_read / gpu_bandwidth_bytes_s, context_s=context * kv_bytes_per_token / attn_rate,
        gpu_experts_s=gpu_expert_read / gpu_bandwidth_bytes_s,
        cpu_experts_s=slow * cpu_bytes / (read * k.cpu_read_efficiency) if cpu_bytes else 0.0,
        sync_s=cpu_layers * k.layer_sync_s if cpu_bytes else 0.0,      # the layers with a KT wrapper
        host_read_bytes_s=read, cpu_bytes_per_token=cpu_bytes, cpu_time_factor=slow, gpu_layers=gpu_layers,
        step_s=k.whole_layer_step_s if gpu_layers else 0.0)


# --- the plan's hybrid section ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class HybridSection:
    """What the hybrid mode adds to a Plan (its GPU figures are the Plan's own)."""

    kt_method: str                   # what is planned (may differ from the asked one: method_note says why)
    asked_method: str
    method_note: str
    lossy: bool
    num_gpu_experts: int             # per MoE layer
    num_experts: int
    moe_layers: int
    cpuinfer_threads: int
    cpu_isa: str | None
    cpu_isa_source: str
    kt_variant: str | None           # KT_KERNEL_CPU_VARIANT for this method on this CPU; None: no method runs
    kt_kernel: str                   # the kt-kernel release planned for
    host_experts_bytes: int          # every expert of every MoE layer, as kt-kernel holds it
    host_sglang_bytes: int           # SGLang's own processes (measured, config/engine.toml; sglang_own_bytes)
    host_checkpoint_bytes: int       # mapped pages of the checkpoint (FP8/BF16/GPTQ_INT4) or GGUF (page cache)
    host_pinned_bytes: int           # kt-kernel's pinned transfer buffers
    host_read_bytes_s: float         # at cpuinfer_threads
    host_read_source: str
    cpu_bytes_per_token: int
    decode_gpu_s: float
    decode_context_s: float
    decode_gpu_experts_s: float
    decode_cpu_experts_s: float
    decode_sync_s: float
    decode_cpu_time_factor: float    # the build's CPU-expert time relative to AMX's (measured, config/engine.toml)
    decode_tok_s: float              # the estimate: derived terms, fitted constants (not a bandwidth ceiling)
    decode_context_tokens: int       # the context it is estimated at (the target's)
    decode_tok_s_by_context: tuple[tuple[int, float], ...]   # (context, tok/s) at shorter contexts
    layer_offload_decode_tok_s: float | None   # the same model with --cpu-offload-gb instead (a ceiling), None: n/a
    layer_offload_gib: int | None
    cpu_cores: int = 0               # the physical cores the threads were derived from
    cpu_cores_source: str = ""       # where that count came from (--host-cores, or this machine's, labelled)
    gpu_layers: int = 0              # kt_gpu_layers = "auto": whole MoE layers on the GPU (the last ones); 0: split
    as_whole_layers: int = 0         # the MoE layers the same GPU experts make as whole layers (whole_moe_layers)
    host_sglang_source: str = "measured"    # where host_sglang_bytes comes from, in words (sglang_own_bytes)
    compile_pool: bool = True               # whether the server starts torch's compile pool (starts_compile_pool)
    other_sglang_bytes: int | None = None   # SGLang's own under the other placement (other_placement); None: the same
    host_prefill_bytes: int = 0             # kt_gpu_prefill: the CPU layers' experts pinned (prefill_pinned_bytes)
    prefill_gpu_bytes: int = 0              # kt_gpu_prefill: its GPU staging set, counted with the weights
    prefill_tokens: int = 0                 # kt_gpu_prefill: the least forward it takes (0: not planned)
    prefill_pin: str = "register"           # kt_prefill_pin: how its host copies are page-locked (PREFILL_PINS)
    prefill_fp8: str = PREFILL_FP8[0]       # kt_prefill_fp8: how it computes block-FP8 experts (PREFILL_FP8)
    host_embed_bytes: int = 0               # kt_embed_host: the token embeddings pinned in host RAM (0: on the GPU)
    cpu_decode: str = "kt"                  # kt_cpu_decode: what computes the CPU layers' decode (CPU_DECODES)
    host_int4_bytes: int = 0                # kt_cpu_decode = "int4": the CPU layers' GPTQ-Int4 copies
    aggregate_streams: int = 0              # max_running requests decoding together (0: one at a time)
    aggregate_tok_s: float | None = None    # their tok/s in all after 512-token prompts (aggregate_tok_s, derived)

    @property
    def host_ram_bytes(self) -> int:
        """What the server needs of host RAM (the mapped checkpoint's pages are reclaimable: not counted)."""
        return self.host_experts_bytes + self.host_sglang_bytes + self.host_pinned_bytes + self.host_prefill_bytes \
            + self.host_embed_bytes + self.host_int4_bytes

    @property
    def host_ram_bytes_text(self) -> str:
        return f"{self.host_ram_bytes / 2**30:.1f} GiB ({self.kt_method})"

    @property
    def host_rss_bytes(self) -> int:
        """The server tree's RSS right after start: the need plus the mapped checkpoint pages."""
        return self.host_ram_bytes + self.host_checkpoint_bytes

    @property
    def other_placement(self) -> tuple[int, int]:
        """(whole GPU layers, host RAM) of the same GPU experts placed the other way: a split's as whole layers
        (kt-kernel then holds the CPU's layers only), whole layers' as N in every layer (every layer's experts)."""
        cpu_layers = self.moe_layers - self.gpu_layers
        one_layer = self.host_experts_bytes // cpu_layers if cpu_layers else 0     # one layer's experts, as held
        own = (self.other_sglang_bytes if self.other_sglang_bytes is not None else self.host_sglang_bytes) \
            - self.host_sglang_bytes                  # the compile pool one placement starts and the other not
        if self.gpu_layers:     # the split has no GPU prompt path (prefill_problem): its pinned copies go too
            return 0, self.host_ram_bytes + one_layer * self.gpu_layers + own - self.host_prefill_bytes
        return self.as_whole_layers, self.host_ram_bytes - one_layer * self.as_whole_layers + own


def parse_cpu_isa(raw: object) -> str:
    """--cpu-isa: one of CPU_ISAS (one line and exit 64 otherwise)."""
    if raw not in CPU_ISAS:
        raise VramkitError(f"--cpu-isa {raw!r} is not one of {', '.join(CPU_ISAS)}",
                           "avx2: any x86 desktop since 2013; avx512: with AVX-512-BF16 (Zen 4/5); amx: Xeon 4th gen+",
                           Exit.BAD_INPUT)
    return str(raw)
