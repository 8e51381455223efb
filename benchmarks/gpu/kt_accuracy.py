"""Numeric check of kt-kernel's CPU MoE methods against a bf16 reference (issue 18 item 3).

    python3 benchmarks/gpu/kt_accuracy.py --layers 8 --positions 1024 --threads 14 --out RES.json

A RANDOM-WEIGHT PROXY of Qwen3-Coder-30B-A3B: the model's exact layer shape (hidden 2048, 32/4 heads of 128,
qk-norm, RoPE 1e7, 128 experts of 768, top-8 renormalised) cut to --layers decoder layers, weights N(0, 0.02)
in bf16 (lm_head N(0, 0.1) so the reference's next-token distribution is not flat; its mean top-1 probability
and entropy are reported beside the result). Real checkpoints have outlier channels that random ones lack:
a method's error here is a floor, not a forecast.

Reference: every expert in bf16 on the GPU (torch, bf16 matmuls with fp32 accumulation), the whole model on
the GPU. Each method: the same model with every routed expert computed by kt-kernel on the CPU (all experts
on the CPU, the worst case: the moe preset keeps N of 128 per layer on the GPU in the checkpoint's own
format), through kt-kernel's own MoE classes (MOEConfig, *_MOE, CPUInfer.submit(forward_task)), built from
the same weights the way each method's loader hands them over:
  BF16       the bf16 weights themselves (the noise floor of the CPU kernels)
  FP8        block-FP8 (128x128, e4m3, weight_scale_inv) quantized from the bf16 weights, like the official
             -FP8 checkpoint
  AMXINT8/4  KT's converted layout, quantized by kt-kernel itself (save mode) from the bf16 weights, then
             loaded from disk as the server does; "<-FP8": converted from the FP8 checkpoint (what the moe
             preset's one-time conversion does)
  LLAMAFILE_Q8_0  llama.cpp's Q8_0 blocks (32 int8 + one f16 scale; the gguf package's quantizer) through
             kt-kernel's llamafile backend (class MOE), as a Q8_0 GGUF of the model hands them over
  LLAMAFILE_Q4_K  the same backend on llama.cpp's Q4_K blocks (its own quantizer, KT_GGML_LIB=libggml-base.so
             from build_ggml.sh), every expert matrix Q4_K (Q4_K_M's Q6_K down tensors left out)
  RAWINT4    symmetric int4 per group of 32 with bf16 scales (Kimi-K2's compressed-tensors form), through
             AMXInt4_KGroup_MOE: kt-kernel 0.5.1's one group-wise int4 class
  GPTQ_INT4  symmetric int4, group 128, in GPTQ's layout (qweight [K/8, N], scales [K/128, N]), rounded to
             nearest (RTN: no Hessian, so worse than a real GPTQ checkpoint)
and "FP8 (GPU)": the FP8 checkpoint's values computed in bf16 by torch on the GPU (the format's own error,
no CPU kernel). `--ggml-layouts Q4_K_M,Q8_0 --ggml-lib libggml-base.so`: the peer's files, "<layout> (llama.cpp)",
each expert matrix quantized by llama.cpp's own ggml_quantize_chunk with the type llama-quantize gives it
(benchmarks/gpu/ggml_quant.py), decoded and computed by torch (the format's error, no CPU kernel);
`--gpu-formats GPTQ_INT4`: every expert's values in a GPU format, by torch (FP8_W8A8: the FP8 checkpoint's values
with each GEMM's input rounded to FP8 per 128-value group, as SGLang's block-FP8 MoE kernels compute, its prompt path
included); `--split FP8:43:AMXINT8<-FP8`: a served split. Only kt-kernel's safetensors reader is left out: the tensors it would return are handed over in
memory.

Measured: teacher-forced over --positions tokens (one random sequence, every position scored): top-1
agreement with the reference, KL(reference || method) mean / p99 / max; each MoE layer's output error on
the reference's own layer inputs and routing (relative L2 over all positions, through the prefill path, and
for --decode-positions single-token calls through the decode path).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from vramkit.core.model import kt_repack  # noqa: E402  (the nibble packing and GPTQ's values, as the kit repacks them)
from vramkit.core.model.checkpoint import RAWINT4_GROUP  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config/models/qwen3-coder-30b-a3b-instruct/config.json"
FP8_BLOCK = 128
GPTQ_GROUP = 128
LLAMAFILE_TYPES = {"LLAMAFILE_Q8_0": "Q8_0", "LLAMAFILE_Q4_K": "Q4_K"}   # kt-kernel's llamafile MOE, by ggml type
# kt-kernel 0.5.1 frees a llamafile MOE wrong: once one is freed, making the next breaks the heap ("double free or
# corruption", benchmarks/results/gpu/kt-llamafile/README.md). Every one made stays here, with its blocks, for the
# process's life, so no caller has to keep its layers.
_LLAMAFILE_ALIVE: list = []
QUANT_CONFIG = {"FP8": (8, FP8_BLOCK), "GPTQ_INT4": (4, GPTQ_GROUP), "RAWINT4": (4, RAWINT4_GROUP)}  # bits, group


# --- the random model ---------------------------------------------------------------------------------------
class Model:
    def __init__(self, cfg: dict, layers: int, device: str, seed: int, lm_head_std: float):
        g = torch.Generator(device=device).manual_seed(seed)
        h, nh, nkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        e, inter, v = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["vocab_size"]
        self.h, self.nh, self.nkv, self.hd, self.e, self.inter, self.k = h, nh, nkv, hd, e, inter, cfg["num_experts_per_tok"]
        self.eps, self.theta, self.device = cfg["rms_norm_eps"], float(cfg["rope_theta"]), device

        def w(*shape: int, std: float = 0.02) -> torch.Tensor:
            return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32) * std).to(torch.bfloat16)

        self.embed = w(v, h, std=1.0)
        self.layers = []
        for _ in range(layers):
            self.layers.append({
                "q": w(nh * hd, h), "k": w(nkv * hd, h), "v": w(nkv * hd, h), "o": w(h, nh * hd),
                "router": w(e, h), "gate": w(e, inter, h), "up": w(e, inter, h), "down": w(e, h, inter)})
        self.lm_head = w(v, h, std=lm_head_std)

    def rms(self, x: torch.Tensor) -> torch.Tensor:   # RMSNorm with unit weight (as the random checkpoints write)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(torch.bfloat16)

    def rope(self, x: torch.Tensor) -> torch.Tensor:  # [T, heads, hd], neox style (Qwen3)
        t, half = x.shape[0], self.hd // 2
        inv = 1.0 / (self.theta ** (torch.arange(0, half, device=x.device, dtype=torch.float32) / half))
        ang = torch.arange(t, device=x.device, dtype=torch.float32)[:, None] * inv[None]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        xf = x.float()
        a, b = xf[..., :half], xf[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).to(torch.bfloat16)

    def attention(self, lw: dict, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        q = self.rope(self.rms((x @ lw["q"].T).view(t, self.nh, self.hd)))
        k = self.rope(self.rms((x @ lw["k"].T).view(t, self.nkv, self.hd)))
        v = (x @ lw["v"].T).view(t, self.nkv, self.hd)
        o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                           is_causal=True, enable_gqa=True)
        return o[0].transpose(0, 1).reshape(t, self.nh * self.hd) @ lw["o"].T

    def route(self, lw: dict, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = torch.softmax((x @ lw["router"].T).float(), -1)
        wts, ids = torch.topk(p, self.k, -1)
        return ids, wts / wts.sum(-1, keepdim=True)

    @staticmethod
    def moe_torch(gate, up, down, x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor,
                  out_dtype: torch.dtype = torch.bfloat16, act=None) -> torch.Tensor:
        """Each token's top-k experts, silu(x gate^T) * (x up^T) down^T, weighted and summed in float32 (the layer's
        output has x's width); gate/up/down are indexed by expert ([out, in] each: tensors, or anything that gives one
        per index); `act`: what a kernel does to each GEMM's input first (fp8_act), None: nothing."""
        act = act or (lambda t: t)
        y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for e in torch.unique(ids).tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            xs = act(x[tok])
            hmid = act(F.silu(xs @ gate[e].T) * (xs @ up[e].T))
            y.index_add_(0, tok, (hmid @ down[e].T).float() * wts[tok, slot][:, None])
        return y.to(out_dtype)

    def forward_deferred(self, tokens: torch.Tensor, deferred: int, gpu_experts: int) -> torch.Tensor:
        """SGLang's --kt-max-deferred-experts-per-token D (kt-kernel's BaseMoEWrapper.submit_forward): of each
        token's top-k, the D lowest-weighted that are CPU experts (id >= gpu_experts) are computed late and
        added with the NEXT layer's MoE output (after that layer's attention and routing); the last layer defers
        none (kt_ep_wrapper). The experts themselves in bf16 by torch, as the reference."""
        hs, pending, last = self.embed[tokens], None, len(self.layers) - 1
        for i, lw in enumerate(self.layers):
            hs = hs + self.attention(lw, self.rms(hs))
            x = self.rms(hs)
            ids, wts = self.route(lw, x)
            late = torch.zeros_like(ids, dtype=torch.bool)
            if deferred and i < last:
                late.scatter_(1, wts.argsort(-1)[:, :deferred], True)
                late &= ids >= gpu_experts
            y = Model.moe_torch(lw["gate"], lw["up"], lw["down"], x, ids, wts.masked_fill(late, 0))
            hs = hs + y if pending is None else hs + y + pending
            pending = Model.moe_torch(lw["gate"], lw["up"], lw["down"], x, ids, wts.masked_fill(~late, 0)) \
                if bool(late.any()) else None
        return (self.rms(hs) @ self.lm_head.T).float()

    def forward(self, tokens: torch.Tensor, moe, record: list | None = None) -> torch.Tensor:
        """Logits [T, V] (fp32). moe(layer_index, x, ids, wts) -> y. record gets (x, ids, wts, y) per layer."""
        hs = self.embed[tokens]
        for i, lw in enumerate(self.layers):
            hs = hs + self.attention(lw, self.rms(hs))
            x = self.rms(hs)
            ids, wts = self.route(lw, x)
            y = moe(i, x, ids, wts)
            if record is not None:
                record.append((x, ids, wts, y))
            hs = hs + y.to(hs.device)
        return (self.rms(hs) @ self.lm_head.T).float()


# --- checkpoint formats derived from the bf16 weights ---------------------------------------------------------
def fp8_block(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., N, K] bf16 -> (e4m3 [..., N, K], weight_scale_inv f32 [..., N/128, K/128]), as the -FP8 checkpoints."""
    *lead, n, k = w.shape
    b = w.float().reshape(*lead, n // FP8_BLOCK, FP8_BLOCK, k // FP8_BLOCK, FP8_BLOCK)
    scale = b.abs().amax(dim=(-3, -1)).clamp_min(1e-12) / 448.0
    q = (b / scale[..., :, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q.reshape(*lead, n, k), scale


def fp8_act(a: torch.Tensor) -> torch.Tensor:
    """A GEMM input as SGLang's block-FP8 kernels read it (sglang_per_token_group_quant_fp8): each row's groups of
    FP8_BLOCK values rounded to e4m3 under one scale, max |value| / 448, then back to the input's dtype."""
    g = a.float().view(*a.shape[:-1], -1, FP8_BLOCK)
    s = g.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448.0
    return ((g / s).to(torch.float8_e4m3fn).float() * s).view(a.shape).to(a.dtype)


def fp8_values(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The FP8 checkpoint's values, code x its block's scale, float32."""
    *lead, n, k = q.shape
    b = q.float().reshape(*lead, n // FP8_BLOCK, FP8_BLOCK, k // FP8_BLOCK, FP8_BLOCK)
    return (b * scale[..., :, None, :, None]).reshape(*lead, n, k)


def fp8_dequant(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return fp8_values(q, scale).to(torch.bfloat16)


def gptq_rtn(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One expert's [N, K] bf16 -> (qweight int32 [K/8, N], scales f32 [K/128, N]), symmetric (zero 8)."""
    wt = w.float().T.contiguous()                                  # [K, N]
    k, n = wt.shape
    g = wt.view(k // GPTQ_GROUP, GPTQ_GROUP, n)
    scale = (g.abs().amax(1) / 7.5).clamp_min(1e-12)              # [K/128, N]; GPTQ sym: 2*max/15
    q = (torch.round(g / scale[:, None, :]) + 8).clamp(0, 15).to(torch.int32).view(k, n)
    return kt_repack.pack(q, 0), scale


def kgroup_int4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[E, N, K] -> RAWINT4's compressed-tensors form, as kt-kernel's AMXInt4_KGroup_MOE reads it (Kimi-K2's native
    int4): symmetric int4 per group of RAWINT4_GROUP along K, scale max|w| / 7 in bf16 [E, N, K/32]; each int32 holds
    8 consecutive values of a row, lowest nibble first, each value stored plus 8."""
    e, n, k = w.shape
    g = w.float().view(e, n, k // RAWINT4_GROUP, RAWINT4_GROUP)
    scale = (g.abs().amax(-1) / 7.0).clamp_min(1e-8)
    q = (torch.round(g / scale[..., None]).clamp(-8, 7) + 8).to(torch.int32).view(e, n, k)
    return kt_repack.pack(q), scale.to(torch.bfloat16)


def one_layer_case(experts: int, hidden: int, inter: int, top_k: int, tokens: int = 64, seed: int = 0):
    """A MoE layer's random experts ({gate, up, down} bf16 ~ N(0, 0.02)) and `tokens` routed inputs (x, ids, weights):
    the one-layer kernel checks' case (kt_rawint4_check.py, kt_llamafile_check.py)."""
    g = torch.Generator().manual_seed(seed)
    w = {n: (torch.randn(*s, generator=g) * 0.02).to(torch.bfloat16)
         for n, s in (("gate", (experts, inter, hidden)), ("up", (experts, inter, hidden)),
                      ("down", (experts, hidden, inter)))}
    x = torch.randn(tokens, hidden, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)])
    wts = torch.softmax(torch.randn(tokens, top_k, generator=g), -1)
    return w, x, ids, wts


# --- kt-kernel, called directly ----------------------------------------------------------------------------------
def load_kt_ext(site: str | None = None):
    """kt-kernel's compiled extension, picked by the package's own _cpu_detect (KT_KERNEL_CPU_VARIANT, then
    /proc/cpuinfo, with its fallback chain), without importing the package (whose loaders need gguf).
    Returns (ext, variant, version)."""
    import importlib.metadata
    import importlib.util
    spec = importlib.util.find_spec("kt_kernel")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("kt_kernel is not installed on this path")
    pkg = list(spec.submodule_search_locations)[0]
    det_spec = importlib.util.spec_from_file_location("_kt_cpu_detect", os.path.join(pkg, "_cpu_detect.py"))
    det = importlib.util.module_from_spec(det_spec)
    det_spec.loader.exec_module(det)
    variant = det.detect_cpu_features()
    ext = det.load_extension(variant)
    try:
        version = importlib.metadata.version("kt-kernel")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    return ext, variant, version, getattr(ext, "__file__", "?")


class Kt:
    def __init__(self, threads: int):
        self.ext, self.variant, self.version, self.so = load_kt_ext()
        wp = self.ext.WorkerPoolConfig()
        wp.subpool_count, wp.subpool_numa_map, wp.subpool_thread_count = 1, [0], [threads]
        self.cpu = self.ext.CPUInfer(wp)
        self.classes = sorted(n for n in dir(self.ext.moe) if n.endswith("_MOE"))

    def cls(self, method: str):
        m = self.ext.moe
        order = {"BF16": ("AMXBF16_MOE", "AVX2BF16_MOE"), "FP8": ("AMXFP8_MOE", "AVX2FP8_MOE"),
                 "AMXINT8": ("AMXInt8_MOE",), "AMXINT4": ("AMXInt4_MOE",), "RAWINT4": ("AMXInt4_KGroup_MOE",),
                 "GPTQ_INT4": (("AVXVNNI256GPTQInt4_MOE", "AVX2GPTQInt4_MOE")
                               if os.environ.get("KT_GPTQ_INT4_BACKEND", "") != "avx2" else ("AVX2GPTQInt4_MOE",)),
                 "LLAMAFILE_Q8_0": ("MOE",), "LLAMAFILE_Q4_K": ("MOE",)}
        for name in order[method]:
            if hasattr(m, name):
                return name, getattr(m, name)
        return None, None


class KtLayer:
    """One MoE layer on the CPU through kt-kernel's own class for `method`."""

    def __init__(self, kt: Kt, method: str, layer: int, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor,
                 max_len: int, workdir: str, source: str = "bf16", top_k: int = 8, qdev: str = "cpu",
                 gpu_experts: int = 0, rawint4: dict | None = None):
        """`rawint4` (RAWINT4 only): the experts' (weight_packed, weight_scale) per projection, as a repacked
        checkpoint hands them over (kt_repack), instead of kgroup_int4 of gate/up/down (which then give the shape);
        the group is read from the scales' width, as kt-kernel's own RAWINT4 loader reads it."""
        e, inter, h = gate.shape
        self.kt, self.h, self.keep = kt, h, []
        self.cls_name, cls = kt.cls(method)
        if cls is None:
            raise RuntimeError(f"{method}: no kernel class in kt-kernel {kt.version} ({kt.variant} build)")
        self.mask = torch.zeros(e, dtype=torch.bool)          # True = on the GPU: the kernel skips it
        self.mask[:gpu_experts] = True                        # SGLang's layout: experts 0..N-1 on the GPU
        self.p2l = torch.arange(e, dtype=torch.long)
        ext = kt.ext

        def config():
            c = ext.moe.MOEConfig(e, top_k, h, inter, self.mask.data_ptr())
            c.layer_idx, c.pool, c.max_len = layer, kt.cpu.backend_, max_len
            return c

        if method in LLAMAFILE_TYPES:
            # kt_kernel/utils/llamafile.py's load_weights, the GGUF's tensors handed over in memory: llama.cpp's
            # blocks of ffn_{gate,up}_exps [E][inter][h] and ffn_down_exps [E][h][inter]; Q8_0 from gguf's own
            # quantizer, Q4_K from llama.cpp's (ggml_quantize_chunk, KT_GGML_LIB: build_ggml.sh's libggml-base.so)
            import numpy as np
            kind = LLAMAFILE_TYPES[method]
            if kind == "Q8_0":
                from gguf.constants import GGMLQuantizationType
                from gguf.quants import quantize

                def blocks(t: torch.Tensor):
                    return quantize(t.float().numpy(), GGMLQuantizationType.Q8_0)
            else:
                from ggml_quant import Ggml
                if not os.environ.get("KT_GGML_LIB"):
                    raise RuntimeError(f"{method}: set KT_GGML_LIB to libggml-base.so (benchmarks/gpu/build_ggml.sh)")
                ggml = Ggml(os.environ["KT_GGML_LIB"])

                def blocks(t: torch.Tensor):
                    return ggml.quantize(t.float().numpy(), kind)
            qs = [torch.from_numpy(np.ascontiguousarray(blocks(t))) for t in (gate, up, down)]
            self.keep += qs
            gt = ext.kvcache.ggml_type
            c = config()
            c.m_block, c.group_min_len, c.group_max_len = 32, 10, max(1, max_len)
            c.gate_proj, c.up_proj, c.down_proj = (q.data_ptr() for q in qs)
            c.gate_type = c.up_type = c.down_type = getattr(gt, kind)
            c.hidden_type = gt.BF16
            self.moe = cls(c)
            _LLAMAFILE_ALIVE.append((self.moe, qs))
        elif method in ("AMXINT4", "AMXINT8"):
            path = os.path.join(workdir, f"{method}-{source}")
            self.converted_here = not os.path.isdir(os.path.join(path, f"_layer_{layer}"))
            if self.converted_here:     # else: a layout written earlier (maybe by another thread count) is read
                c = config()
                g, u, d = (t.contiguous() for t in (gate, up, down))
                c.gate_proj, c.up_proj, c.down_proj = g.data_ptr(), u.data_ptr(), d.data_ptr()
                c.save, c.load, c.path = True, False, path
                saver = cls(c)
                kt.cpu.submit(saver.load_weights_task(self.p2l.data_ptr()))
                kt.cpu.sync()
                del saver, g, u, d
            c = config()                                        # the server's path: KT's layout read from disk
            c.load, c.path = True, path
            self.moe = cls(c)
        else:
            if method == "BF16":
                ws = [[t[x].contiguous() for x in range(e)] for t in (gate, up, down)]
                ss = [[None] * e] * 3
            elif method == "RAWINT4" and rawint4 is not None:
                ws = [[p for p, _ in rawint4[n]] for n in ("gate", "up", "down")]
                ss = [[sc for _, sc in rawint4[n]] for n in ("gate", "up", "down")]
            elif method in ("FP8", "RAWINT4"):          # whole [E, ...] tensors -> (values, scales) per expert
                quant = fp8_block if method == "FP8" else kgroup_int4
                per = [tuple(x.cpu() for x in quant(t.to(qdev))) for t in (gate, up, down)]
                ws = [[q[x].contiguous() for x in range(e)] for q, _ in per]
                ss = [[s[x].contiguous() for x in range(e)] for _, s in per]
            elif method == "GPTQ_INT4":
                ws, ss = [], []
                for t in (gate, up, down):
                    td = t.to(qdev)
                    pk = [tuple(y.cpu() for y in gptq_rtn(td[x])) for x in range(e)]
                    ws.append([p for p, _ in pk])
                    ss.append([s for _, s in pk])
            else:
                raise ValueError(method)
            self.keep += [ws, ss]
            c = config()
            c.gate_projs, c.up_projs, c.down_projs = ([[t.data_ptr() for t in lst]] for lst in ws)
            c.gate_scales, c.up_scales, c.down_scales = ([[0 if t is None else t.data_ptr() for t in lst]] for lst in ss)
            if method in QUANT_CONFIG:
                c.quant_config.bits, c.quant_config.group_size = QUANT_CONFIG[method]
                c.quant_config.zero_point = False
            if method == "RAWINT4":             # kt_kernel/utils/amx.py NativeMoEWrapper: hidden // scale width
                c.quant_config.group_size = h // ss[0][0].shape[1]
            self.moe = cls(c)
        kt.cpu.submit(self.moe.load_weights_task(self.p2l.data_ptr()))
        kt.cpu.sync()

    def __call__(self, x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        xin = x.to("cpu", torch.bfloat16).contiguous()
        ids_c = ids.to("cpu", torch.long).contiguous()
        w_c = wts.to("cpu", torch.float32).contiguous()
        out = torch.zeros(b, self.h, dtype=torch.bfloat16)
        bsz = torch.tensor([b], dtype=torch.int32)
        self.kt.cpu.submit(self.moe.forward_task(bsz.data_ptr(), ids_c.shape[1], ids_c.data_ptr(), w_c.data_ptr(),
                                                 xin.data_ptr(), out.data_ptr(), False))
        self.kt.cpu.sync()
        return out.to(x.device)


def ggml_layers(model: Model, layout: str, lib: Path | None, n_layers: int) -> tuple[list, dict]:
    """The MoE layers of a llama.cpp file of this layout: each expert matrix quantized by ggml itself with the type
    llama-quantize gives it in this n-layer model, decoded by gguf-py, computed by torch on the reference's device."""
    from ggml_quant import Ggml, expert_types
    if lib is None:
        raise SystemExit("--ggml-layouts needs --ggml-lib (benchmarks/gpu/build_ggml.sh builds libggml-base.so)")
    g = Ggml(lib)
    types = [expert_types(layout, i, n_layers) for i in range(n_layers)]
    deq = [{n: torch.from_numpy(g.roundtrip(model.layers[i][n].float().cpu().numpy(), types[i][n]))
            .to(model.device, torch.bfloat16) for n in ("gate", "up", "down")} for i in range(n_layers)]
    return [torch_layer(d) for d in deq], {
        "path": f"llama.cpp's {layout} file: experts quantized by ggml_quantize_chunk ({g.version}), "
                "decoded by gguf-py, bf16 by torch (no CPU kernel)",
        "types": ["/".join(t[n] for n in ("gate", "up", "down")) for t in types]}


def gptq_dequant(w: torch.Tensor) -> torch.Tensor:
    """[E, N, K] bf16 -> the values of its GPTQ-Int4 RTN form (gptq_rtn per expert), bf16 [E, N, K]."""
    return torch.stack([kt_repack.gptq_values(*gptq_rtn(x), GPTQ_GROUP) for x in w]).to(torch.bfloat16)


GPU_FORMATS = {"FP8": lambda w: fp8_dequant(*fp8_block(w)), "GPTQ_INT4": gptq_dequant}
GPU_FORMATS["FP8_W8A8"] = GPU_FORMATS["FP8"]       # the same weights; its kernels also round the inputs (GPU_ACTS)


def int8_group(w: torch.Tensor, group: int = FP8_BLOCK) -> torch.Tensor:
    """[..., N, K] -> its values as symmetric int8 under one scale per row and `group` inputs (max |value| / 127,
    stored in bf16 as the adapter stores it: vramkit_gpu_prefill.int8_from_fp8), bf16: the weights SGLang's triton MoE
    reads with use_int8_w8a16 and block_shape [0, group] (moe_wna16's 8-bit kernel), bf16 inputs left as they are."""
    *lead, n, k = w.shape
    g = w.float().reshape(*lead, n, k // group, group)
    s = (g.abs().amax(-1, keepdim=True) / 127.0).clamp_min(1e-12).to(torch.bfloat16).float()
    return (torch.round(g / s).clamp(-127, 127) * s).reshape(*lead, n, k).to(torch.bfloat16)


# the FP8 checkpoint's values requantized to int8 per row and 128 inputs, computed with bf16 inputs: the FP8 prompt
# path's "int8" arithmetic (kt_prefill_fp8) beside FP8_W8A8, its "w8a8"
GPU_FORMATS["INT8_W8A16<-FP8"] = lambda w: int8_group(fp8_values(*fp8_block(w)))
GPU_ACTS = {"FP8_W8A8": fp8_act}       # a format whose kernels also round each GEMM's input


def split_layer(gpu, cpu, n_gpu: int):
    """A served MoE layer: experts below n_gpu computed by `gpu`, the others by `cpu` (which skips the GPU's)."""
    def run(x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor) -> torch.Tensor:
        on_gpu = gpu(x, ids, wts.masked_fill(ids >= n_gpu, 0))
        return (on_gpu.float() + cpu(x, ids, wts).float().to(on_gpu.device)).to(torch.bfloat16)
    return run


# --- metrics --------------------------------------------------------------------------------------------------
def torch_layer(w: dict, act=None):
    """A MoE layer computed by torch on the reference's device from these expert weights (`act`: Model.moe_torch's)."""
    def run(x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor) -> torch.Tensor:
        return Model.moe_torch(w["gate"], w["up"], w["down"], x, ids, wts, act=act)
    return run


def by_layer(layers: list):
    """Model.forward's moe(layer_index, x, ids, wts) over a list of per-layer callables."""
    def moe(i: int, x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor) -> torch.Tensor:
        return layers[i](x, ids, wts)
    return moe


def rel_l2(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def compare(ref_logits: torch.Tensor, logits: torch.Tensor, chunk: int = 128) -> dict:
    """Top-1 agreement and KL(reference || method) per position, a chunk of positions at a time (a [T, V] fp32
    log-softmax of the 152K vocabulary is 0.6 GB per 1,024 positions)."""
    kls, agree = [], 0
    for i in range(0, ref_logits.shape[0], chunk):
        r, m = ref_logits[i:i + chunk], logits[i:i + chunk]
        lp_ref, lp = F.log_softmax(r, -1), F.log_softmax(m, -1)
        kls.append((lp_ref.exp() * (lp_ref - lp)).sum(-1))
        agree += int((r.argmax(-1) == m.argmax(-1)).sum())
        del lp_ref, lp
    kl = torch.cat(kls)
    return {"top1_agreement": agree / ref_logits.shape[0],
            "kl_mean": float(kl.mean()), "kl_p99": float(torch.quantile(kl.float(), 0.99)), "kl_max": float(kl.max()),
            "logits_rel_l2": rel_l2(logits, ref_logits)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--decode-positions", type=int, default=16)
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--methods", default="BF16,FP8,AMXINT8,AMXINT4,AMXINT4<-FP8,AMXINT8<-FP8,GPTQ_INT4")
    ap.add_argument("--deferred", default="", help="e.g. 1,2: --kt-max-deferred-experts-per-token values to check")
    ap.add_argument("--gpu-experts", type=int, default=43, help="with --deferred: experts 0..N-1 on the GPU")
    ap.add_argument("--no-fp8-gpu", action="store_true", help="skip the FP8 (GPU) row")
    ap.add_argument("--ggml-layouts", default="", help="e.g. Q4_K_M,Q8_0: llama.cpp's files' expert values")
    ap.add_argument("--ggml-lib", type=Path, help="libggml-base.so (benchmarks/gpu/build_ggml.sh)")
    ap.add_argument("--gpu-formats", default="", help="e.g. GPTQ_INT4: every expert in that GPU format, by torch")
    ap.add_argument("--split", default="", help="e.g. FP8:43:AMXINT8<-FP8: a served split, experts 0..N-1 on the GPU "
                                                "in that format (FP8 or GPTQ_INT4, by torch), the rest by kt-kernel")
    ap.add_argument("--whole-layers", default="", help="e.g. GPTQ_INT4:3:AMXINT8<-FP8: the last 3 layers' experts "
                    "all in the GPU's format, the others' all through kt-kernel (VRAMKIT_KT_GPU_LAYERS=auto)")
    ap.add_argument("--lm-head-std", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--md", action="store_true", help="only write OUT's table beside it (OUT with .md), run nothing")
    a = ap.parse_args(argv)
    if a.md:
        a.out.with_suffix(".md").write_text(markdown(json.loads(a.out.read_text())))
        return 0
    t0 = time.time()
    cfg = json.loads(a.config.read_text())
    torch.manual_seed(a.seed)
    model = Model(cfg, a.layers, a.device, a.seed, a.lm_head_std)
    tokens = torch.randint(0, cfg["vocab_size"], (a.positions,), generator=torch.Generator().manual_seed(a.seed + 1))
    tokens = tokens.to(a.device)
    kt = Kt(a.threads) if a.methods.strip() or a.split.strip() or a.whole_layers.strip() else None
    res: dict = {
        "what": "kt-kernel CPU MoE methods vs a bf16 all-GPU reference; RANDOM-WEIGHT PROXY of Qwen3-Coder-30B-A3B "
                f"(its layer shape, cut to {a.layers} layers): real checkpoints have outliers that random ones lack",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "device": torch.cuda.get_device_name(0) if a.device == "cuda" else platform.processor() or "cpu",
        "reference_device": a.device, "cpu": _cpu_model(), "threads": a.threads,
        "kt_kernel": kt.version if kt else None, "kt_variant": kt.variant if kt else None,
        "kt_so": os.path.basename(kt.so) if kt else None, "kt_classes": kt.classes if kt else [],
        "torch": torch.__version__, "python": platform.python_version(),
        "layers": a.layers, "positions": a.positions, "decode_positions": a.decode_positions,
        "weights": f"N(0, 0.02) bf16; embed N(0, 1); lm_head N(0, {a.lm_head_std})", "seed": a.seed,
        "experts_on_cpu": "all 128 per layer (worst case)", "methods": {}}

    record: list = []
    with torch.no_grad():
        ref = model.forward(tokens, lambda i, x, ids, w: Model.moe_torch(
            model.layers[i]["gate"], model.layers[i]["up"], model.layers[i]["down"], x, ids, w), record)
        top1, ent = [], []
        for i in range(0, ref.shape[0], 128):
            lp = F.log_softmax(ref[i:i + 128], -1)
            top1.append(lp.max(-1).values.exp())
            ent.append(-(lp.exp() * lp).sum(-1))
            del lp
        res["reference"] = {"mean_top1_prob": float(torch.cat(top1).mean()),
                            "mean_entropy_nats": float(torch.cat(ent).mean()),
                            "seconds": round(time.time() - t0, 1)}
        print(f"reference: {res['reference']}", flush=True)
        cpu_w = [{n: model.layers[i][n].cpu() for n in ("gate", "up", "down")} for i in range(a.layers)]
        fp8_w: list[dict] = []          # the FP8 checkpoint's values, made once for every "<-FP8" method

        def kt_layers(spec: str, work: str, gpu_experts: int = 0) -> list[KtLayer]:
            """Each layer through kt-kernel's class for METHOD[<-FP8] (converted from the FP8 checkpoint's values)."""
            method, _, source = spec.partition("<-")
            if source == "FP8" and not fp8_w:
                fp8_w.extend({n: fp8_dequant(*fp8_block(model.layers[i][n])).cpu() for n in ("gate", "up", "down")}
                             for i in range(a.layers))
            src = fp8_w if source == "FP8" else cpu_w
            return [KtLayer(kt, method, i, src[i]["gate"], src[i]["up"], src[i]["down"], a.positions, work,
                            source or "bf16", model.k, a.device, gpu_experts=gpu_experts) for i in range(a.layers)]
        def gpu_layers(fmt_: str) -> list:
            """Each layer with every expert in a GPU format (GPU_FORMATS), computed by torch on the reference's device."""
            return [torch_layer({n: GPU_FORMATS[fmt_](model.layers[i][n]) for n in ("gate", "up", "down")},
                                GPU_ACTS.get(fmt_)) for i in range(a.layers)]
        with tempfile.TemporaryDirectory(prefix="ktacc-") as work:
            ggml_specs = [f"{x.strip()} (llama.cpp)" for x in a.ggml_layouts.split(",") if x.strip()]
            splits = {f"{g} 0-{int(n) - 1} (GPU) + {c} (CPU)": (g, int(n), c)
                      for g, n, c in (x.strip().split(":") for x in a.split.split(",") if x.strip())}
            # whole layers (the adapter's VRAMKIT_KT_GPU_LAYERS=auto): the last N layers' experts all in the GPU's
            # format, the first layers' all through kt-kernel
            def span(lo: int, hi: int) -> str:
                return f"layer {lo}" if lo == hi else f"layers {lo}-{hi}"
            wholes = {f"{g} {span(a.layers - int(n), a.layers - 1)} (GPU) + {c} {span(0, a.layers - int(n) - 1)} "
                      "(CPU)": (g, int(n), c)
                      for g, n, c in (x.strip().split(":") for x in a.whole_layers.split(",") if x.strip())}
            gpu_rows = [f"{x.strip()} (GPU)" for x in a.gpu_formats.split(",") if x.strip()]
            for spec in ([] if a.no_fp8_gpu else ["FP8 (GPU)"]) + [m.strip() for m in a.methods.split(",") if m.strip()] \
                    + ggml_specs + list(splits) + list(wholes) + [g for g in gpu_rows if g != "FP8 (GPU)"]:
                t1 = time.time()
                row: dict = {}
                try:
                    if spec == "FP8 (GPU)" or spec in gpu_rows:     # a GPU format's values, by torch (no CPU kernel)
                        fmt_ = spec.split()[0]
                        layers_fn = gpu_layers(fmt_)
                        row["path"] = f"every expert's {fmt_} values, bf16 by torch on {a.device} (no CPU kernel)" \
                            + ("; each GEMM's input rounded to FP8 per 128-value group first" if fmt_ in GPU_ACTS else "")
                    elif spec in ggml_specs:
                        layers_fn, row = ggml_layers(model, spec.split()[0], a.ggml_lib, a.layers)
                    elif spec in splits:
                        gpu_fmt, n_gpu, cpu_spec = splits[spec]
                        method, _, source = cpu_spec.partition("<-")
                        cpu = kt_layers(cpu_spec, work, n_gpu)
                        layers_fn = [split_layer(g, c, n_gpu) for g, c in zip(gpu_layers(gpu_fmt), cpu, strict=True)]
                        row = {"path": f"as the server splits it: experts 0..{n_gpu - 1} of each layer in {gpu_fmt} "
                                       f"by torch (the GPU's values), the rest by kt-kernel's {method} from "
                                       f"{source or 'bf16'} (its own mask skips the GPU's)",
                               "kernel_class": cpu[0].cls_name}
                    elif spec in wholes:
                        gpu_fmt, n_gpu_layers, cpu_spec = wholes[spec]
                        first = a.layers - n_gpu_layers
                        cpu = kt_layers(cpu_spec, work)
                        layers_fn = cpu[:first] + gpu_layers(gpu_fmt)[first:]
                        row = {"path": f"whole layers as the adapter places them: layers {first}..{a.layers - 1} with "
                                       f"every expert in {gpu_fmt} by torch (the GPU's values), layers 0..{first - 1} "
                                       f"with every expert by kt-kernel's {cpu_spec}",
                               "kernel_class": cpu[0].cls_name}
                    else:
                        layers_fn = kt_layers(spec, work)
                        row["kernel_class"] = layers_fn[0].cls_name
                        row["load_s"] = round(time.time() - t1, 1)
                    errs, dec = [], []
                    for i, (x, ids, w, y) in enumerate(record):
                        errs.append(rel_l2(layers_fn[i](x, ids, w), y))
                        d = torch.cat([layers_fn[i](x[j:j + 1], ids[j:j + 1], w[j:j + 1])
                                       for j in range(min(a.decode_positions, x.shape[0]))])
                        dec.append(rel_l2(d, y[:d.shape[0]]))
                    row["moe_layer_rel_l2_prefill"] = [round(v, 6) for v in errs]
                    row["moe_layer_rel_l2_decode"] = [round(v, 6) for v in dec]
                    t2 = time.time()
                    logits = model.forward(tokens, by_layer(layers_fn))
                    row["forward_s"] = round(time.time() - t2, 1)
                    row.update(compare(ref, logits))
                    del logits, layers_fn
                except Exception as ex:   # one method failing must not lose the others' rows
                    row["error"] = f"{type(ex).__name__}: {ex}"[:400]
                row["seconds"] = round(time.time() - t1, 1)
                res["methods"][spec] = row
                print(f"{spec}: {json.dumps(row)}", flush=True)
                a.out.write_text(json.dumps(res, indent=1))
        for d in (int(x) for x in a.deferred.split(",") if x.strip()):
            t1 = time.time()
            logits = model.forward_deferred(tokens, d, a.gpu_experts)
            row = {"path": f"--kt-max-deferred-experts-per-token {d}: the {d} lowest-weighted CPU experts of each "
                           f"token (experts >= {a.gpu_experts} on the CPU) added one layer late; experts in bf16 "
                           "by torch, as the reference", **compare(ref, logits), "seconds": round(time.time() - t1, 1)}
            res["methods"][f"deferred {d} (bf16)"] = row
            print(f"deferred {d}: {json.dumps(row)}", flush=True)
            a.out.write_text(json.dumps(res, indent=1))
            del logits
    res["seconds"] = round(time.time() - t0, 1)
    a.out.write_text(json.dumps(res, indent=1))
    return 0


def markdown(res: dict) -> str:
    """The result as a table (kt-accuracy.md's columns), with the conditions it was measured under."""
    lines = [f"# kt-kernel CPU MoE methods against a bf16 reference, on {res['reference_device']} "
             f"({res['date']})", "",
             f"**A random-weight proxy** of Qwen3-Coder-30B-A3B (its layer shape cut to {res['layers']} layers; real "
             f"checkpoints have outlier channels that random ones lack), {res['positions']} teacher-forced positions, weights {res['weights']}. Reference: every expert in "
             f"bf16 by torch on `{res['reference_device']}` ({res['cpu']}); methods: kt-kernel {res['kt_kernel']}'s "
             f"`{res['kt_so']}` ({res['kt_variant']} build), {res['threads']} threads, all 128 experts per layer on "
             f"the CPU. Reference next-token distribution: mean top-1 probability "
             f"{res['reference']['mean_top1_prob']:.2f}, entropy {res['reference']['mean_entropy_nats']:.2f} nats. "
             f"torch {res['torch']}, Python {res['python']}. Written by `benchmarks/gpu/kt_accuracy.py --md`.", "",
             "| method | kernel class | MoE layer output error (rel. L2), per layer: prefill | decode path | top-1 "
             "agreement | KL mean / p99 / max (nats) |", "| --- | --- | --- | --- | --- | --- |"]
    if res.get("invocations"):
        lines[3:3] = ["", "Rows from " + str(len(res["invocations"])) + " processes with the same seed (the same model, "
                      "tokens and reference): " + "; ".join(", ".join(i["methods"]) + (f" ({i['note']})" if i.get("note")
                                                                                           else "")
                                                            for i in res["invocations"]) + "."]
    for name, r in res["methods"].items():
        name = name.replace("(GPU)", f"(torch, {res['reference_device']})")     # the checkpoint's values, no kt kernel
        if "error" in r:
            lines.append(f"| {name} | - | failed: {r['error']} | | | |")
            continue
        pre = ", ".join(f"{100 * v:.2f} %" for v in r["moe_layer_rel_l2_prefill"])
        dec = ", ".join(f"{100 * v:.2f} %" for v in r["moe_layer_rel_l2_decode"])
        lines.append(f"| {name} | {r.get('kernel_class', 'torch')} | {pre} | {dec} | {100 * r['top1_agreement']:.1f} % "
                     f"| {r['kl_mean']:.5f} / {r['kl_p99']:.5f} / {r['kl_max']:.5f} |")
    return "\n".join(lines) + "\n"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
