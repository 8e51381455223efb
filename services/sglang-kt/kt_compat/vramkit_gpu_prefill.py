"""The CPU layers' prompt chunks on the GPU, as llama.cpp computes them (the planner's kt_gpu_prefill knob sets
VRAMKIT_KT_GPU_PREFILL=<least tokens>; the moe preset's "auto" where it can run; issue 18).

With whole layers (VRAMKIT_KT_GPU_LAYERS=auto) a CPU layer's experts live in host RAM and kt-kernel computes them, a
prompt chunk too: ~6 of the 9 s the kit takes to a first token after 30K at 16 GiB
(benchmarks/results/gpu/moe-vs-llamacpp-mf/README.md). Here each such layer also keeps its GPTQ-Int4 experts in
marlin's layout in pinned host RAM (0.29 GiB a layer for Qwen3-30B-A3B), or its block-FP8 experts as the checkpoint
has them (0.56 GiB). A forward of at least the set number of tokens copies them into one GPU staging set, shared by
every CPU layer and allocated at load (SGLang counts it with the weights, and the planner plans it), and runs SGLang's
own MoE on them, what its GPU layers run: marlin (fused_experts_none_to_marlin) for GPTQ-Int4, the triton MoE with
block-FP8 weights and dynamic FP8 activations (fused_experts_none_to_triton) for FP8. Decode batches stay on
kt-kernel.

The weights: SGLang's loader skips every expert of a layer with no GPU experts (FusedMoE._weight_loader_physical),
so they are read here from the checkpoint's safetensors (each expert's gate/up/down qweight and scales; symmetric
GPTQ without act-order only, as the config says), in the server's physical expert order, and repacked by SGLang's
gptq_marlin_moe_repack and marlin_moe_permute_scales as its GPTQ marlin MoE method does. With --load-format dummy
they are random, as SGLang's dummy weights are, and go through the same repack. Anything that fails, adding a layer
or running a forward, turns the path off for every layer (the server goes on, prompts on kt-kernel) and says so once.

Measured 2026-11-28 for GPTQ-Int4 (benchmarks/results/gpu/moe-gpu-prefill/run3, medians of 3 starts, one machine at
16 GiB): the first token after 30K in 3.66 s against 9.85 on kt-kernel and llama.cpp's 7.87; for block FP8
(fp8-server/, one start): 5.52 s, against 20.71 without the path on another machine of the same kind. The
arithmetic and the checkpoint reading are tested on the CPU (tests/unit/test_gpu_prefill.py), the path against
SGLang's own repack, MoE entries and shape checks in the SGLang check (tests/integration/test_gpu_prefill_sglang.py),
its numbers against a float32 reference on the GPU host (gpu_prefill_bench.py).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path

ENV = "VRAMKIT_KT_GPU_PREFILL"
# How the CPU layers' copies are pinned (the planner's kt_prefill_pin sets it and counts its sizes): "register" (the
# default: each tensor's own host memory registered with CUDA, as torch.distributed's checkpoint stager does, exactly
# its pages), or "alloc" (PyTorch's pinned allocator, which rounds each tensor up to a power of two: 768 MiB for a 576
# MiB FP8 layer). Measured with the FP8 preset in a server on the H100 host (one start each): RSS after start 45.8 GiB
# registered against 51.6 allocated, the first token after 30K in 5.52 s both (moe-gpu-prefill/fp8-register/ and
# fp8-server/); in the bench one layer copied at 54.8 GB/s registered, 54.4 allocated (fp8-bench/c).
PIN_ENV = "VRAMKIT_KT_PREFILL_PIN"
# How block-FP8 experts are computed on the path (the planner's kt_prefill_fp8 sets it): "int8" (the default: each CPU
# layer's FP8 values requantized at load to int8 per row and 128 inputs, bf16 scales, and computed with bf16 inputs by
# SGLang's triton MoE as its moe_wna16 8-bit layers are), or "w8a8" (SGLang's own block-FP8 triton MoE, which rounds
# each GEMM's input to FP8 too). One layer against float32 on the FP8 values on the H200 host: 2.85 % error for int8,
# 5.10 % for w8a8 (benchmarks/results/gpu/moe-gpu-prefill/fp8-bench/h200/); both served (moe-vs-llamacpp-q8/h200/,
# moe-gpu-prefill/fp8-register/)
FP8_AS_ENV = "VRAMKIT_KT_PREFILL_FP8"
INT8_GROUP = 128
PACK = 8          # 4-bit values in an int32
PROJ = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}


def min_tokens(environ: dict | None = None) -> int | None:
    """The least forward (tokens) whose CPU layers run on the GPU; None: off (unset or 0). A value that is not a
    whole number >= 0 stops the server at start with one line."""
    raw = (os.environ if environ is None else environ).get(ENV, "").strip()
    if raw in ("", "0"):
        return None
    if not raw.isdigit():
        raise SystemExit(f"vramkit_gpu_prefill: {ENV}={raw!r}: give the least prompt chunk (tokens) to run on the "
                         "GPU, or 0 for off")
    return int(raw)


# Each setting's values, the first its default, with what each means (for the one line a wrong value gets)
PINS = {"register": "each copy's own memory registered with CUDA", "alloc": "PyTorch's pinned allocator"}
FP8_AS = {"int8": "the FP8 values requantized to int8 per 128 inputs, bf16 inputs", "w8a8": "SGLang's FP8 MoE"}


def _setting(name: str, values: dict[str, str], environ: dict | None) -> str:
    """One of the adapter's settings: unset gives the first of `values`; anything else outside them stops the server
    at start with one line."""
    raw = (os.environ if environ is None else environ).get(name, "").strip() or next(iter(values))
    if raw not in values:
        raise SystemExit(f"vramkit_gpu_prefill: {name}={raw!r}: give "
                         + " or ".join(f"{v} ({what})" for v, what in values.items()))
    return raw


def pin_how(environ: dict | None = None) -> str:
    """VRAMKIT_KT_PREFILL_PIN: "register" (unset) or "alloc"."""
    return _setting(PIN_ENV, PINS, environ)


def fp8_as(environ: dict | None = None) -> str:
    """VRAMKIT_KT_PREFILL_FP8: "int8" (unset) or "w8a8"."""
    return _setting(FP8_AS_ENV, FP8_AS, environ)


def fp8_block(hf: dict) -> tuple[int, int] | None:
    """The checkpoint's FP8 weight block [n, k] where its experts are block-quantized FP8 with dynamic activation
    scales (Qwen's and DeepSeek's FP8 releases: weight_block_size [128, 128]), else None."""
    q = hf.get("quantization_config") or {}
    block = q.get("weight_block_size")
    if q.get("quant_method") != "fp8" or not block or len(block) != 2 \
            or q.get("activation_scheme", "dynamic") != "dynamic":
        return None
    return int(block[0]), int(block[1])


def unsupported(hf: dict, load_format: str, deferred: int) -> str | None:
    """Why this server cannot run the path (None: it can): GPTQ-Int4 experts, symmetric and without act-order, as
    SGLang's GPTQ marlin MoE reads them here, or block-FP8 experts as SGLang's triton MoE runs them; no deferred
    experts (their state spans layers)."""
    q = hf.get("quantization_config") or {}
    if fp8_block(hf) is None and (q.get("quant_method") != "gptq" or int(q.get("bits", 0)) != 4):
        return (f"the checkpoint is {q.get('quant_method') or 'not quantized'}, neither GPTQ-Int4 nor block FP8 with "
                "dynamic activation scales")
    if q.get("quant_method") == "gptq" and (q.get("desc_act") or not q.get("sym", True)):
        return "act-order or asymmetric GPTQ (SGLang's marlin MoE needs their permutation and zero points here)"
    if deferred:
        return "deferred experts (--kt-max-deferred-experts-per-token) carry state from one layer to the next"
    if load_format not in ("auto", "dummy", "safetensors"):
        return f"--load-format {load_format}: the CPU layers' experts are read from safetensors files"
    return None


def shapes(hidden: int, inter: int, experts: int, group: int) -> dict[str, tuple[tuple[int, ...], str]]:
    """One layer's FusedMoE GPTQ tensors as SGLang creates them (gptq/schemes/gptq_moe.py), before the repack, which
    keeps each one's size: qweight int32 [E, K / 8, N], scales float16 [E, K / group, N]; w13 is gate | up."""
    return {"w13_qweight": ((experts, hidden // PACK, 2 * inter), "int32"),
            "w2_qweight": ((experts, inter // PACK, hidden), "int32"),
            "w13_scales": ((experts, hidden // group, 2 * inter), "float16"),
            "w2_scales": ((experts, inter // group, hidden), "float16")}


SIZE = {"int32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "uint8": 1, "float32": 4}  # bytes per element


def _bytes(tensors: dict[str, tuple[tuple[int, ...], str]]) -> dict[str, int]:
    return {name: math.prod(shape) * SIZE[dtype] for name, (shape, dtype) in tensors.items()}


def layer_bytes(hidden: int, inter: int, experts: int, group: int) -> dict[str, int]:
    """Each tensor's bytes (the staging set's and each CPU layer's pinned copy's)."""
    return _bytes(shapes(hidden, inter, experts, group))


def fp8_shapes(hidden: int, inter: int, experts: int, block: tuple[int, int]) -> dict[str, tuple[tuple[int, ...], str]]:
    """One layer's FusedMoE block-FP8 tensors as SGLang creates them (Fp8MoEMethod.create_weights) and runs them on
    CUDA (no repack): weight float8_e4m3fn [E, N, K], weight_scale_inv float32 [E, ceil(N / bn), ceil(K / bk)]."""
    bn, bk = block
    return {"w13_weight": ((experts, 2 * inter, hidden), "float8_e4m3fn"),
            "w2_weight": ((experts, hidden, inter), "float8_e4m3fn"),
            "w13_weight_scale_inv": ((experts, -(-2 * inter // bn), -(-hidden // bk)), "float32"),
            "w2_weight_scale_inv": ((experts, -(-hidden // bn), -(-inter // bk)), "float32")}


def fp8_layer_bytes(hidden: int, inter: int, experts: int, block: tuple[int, int]) -> dict[str, int]:
    return _bytes(fp8_shapes(hidden, inter, experts, block))


def int8_shapes(hidden: int, inter: int, experts: int,
                scale_dtype: str = "bfloat16") -> dict[str, tuple[tuple[int, ...], str]]:
    """One layer's experts as SGLang's moe_wna16 holds 8-bit weights (MoeWNA16Method.create_weights, bits 8, no zero
    points): qweight uint8 [E, N, K] (zero 128), scales [E, N, K / 128] in the model's dtype; w13 is gate | up."""
    g = INT8_GROUP
    return {"w13_qweight": ((experts, 2 * inter, hidden), "uint8"), "w2_qweight": ((experts, hidden, inter), "uint8"),
            "w13_scales": ((experts, 2 * inter, hidden // g), scale_dtype),
            "w2_scales": ((experts, hidden, inter // g), scale_dtype)}


def int8_layer_bytes(hidden: int, inter: int, experts: int) -> dict[str, int]:
    return _bytes(int8_shapes(hidden, inter, experts))


def fp8_values(codes, block_scales, block: tuple[int, int]):
    """Block-FP8 experts' values, float32: each code [E, N, K] times its [bn, bk] block's weight_scale_inv."""
    e, n, k = codes.shape
    bn, bk = block
    return (codes.float().view(e, n // bn, bn, k // bk, bk) * block_scales[:, :, None, :, None]).view(e, n, k)


# Experts a time that int8_into converts (its float32 scratch: 48 MiB for the coder's w13), and what it allocates on
# the tensors' device for each projection, in order, all of it freed at the projection's end: the block scales, the
# scratch, two reductions (the planner's kt_hybrid.prefill_layer_work replays these sizes)
INT8_CHUNK = 4


def int8_work(n: int, k: int, experts: int, block: tuple[int, int], chunk: int = INT8_CHUNK) -> tuple[int, ...]:
    """The bytes int8_into allocates for one projection of [experts, n, k] (block scales, scratch, two reductions)."""
    bn, bk = block
    m = min(chunk, experts)
    return (experts * -(-n // bn) * -(-k // bk) * 4, m * n * k * 4, m * n * (k // INT8_GROUP) * 4,
            m * n * (k // INT8_GROUP) * 4)


def int8_into(layer: dict, block: tuple[int, int], out: dict, chunk: int = INT8_CHUNK) -> None:
    """A layer's block-FP8 w13/w2 (fp8_shapes, on the CPU) requantized into `out` (int8_shapes, on its device: the
    GPU staging set at load, or CPU tensors): the FP8 values (code x its block's scale, float32) over max |value| /
    127 of their row's group of INT8_GROUP inputs, rounded, stored + 128; the scales in out's dtype, the quotient by
    the scale as stored. The codes are copied into out's own qweight bytes and converted there `chunk` experts at a
    time, so the device holds nothing else but int8_work's buffers (2026-11-29: on the CPU at load this took ~9.6 s a
    layer in a server with a checkpoint on disk, moe-vs-llamacpp-q8/h200-realload/). Each dimension a whole number of
    FP8 blocks and of groups, as SGLang's block-FP8 MoE requires."""
    import torch
    bn, bk = block
    for w in ("w13", "w2"):
        codes, block_scales = layer[f"{w}_weight"], layer[f"{w}_weight_scale_inv"]
        q, scales = out[f"{w}_qweight"], out[f"{w}_scales"]
        e, n, k = codes.shape
        if n % bn or k % bk or k % INT8_GROUP:
            raise ValueError(f"{w} [{n}, {k}] is not whole blocks of {block} and groups of {INT8_GROUP}")
        q.copy_(codes.view(torch.uint8))
        m = min(chunk, e)
        s = block_scales.to(q.device, torch.float32)
        v = torch.empty((m, n, k), dtype=torch.float32, device=q.device)
        hi = torch.empty((m, n, k // INT8_GROUP), dtype=torch.float32, device=q.device)
        lo = torch.empty_like(hi)
        for a in range(0, e, m):
            b = min(e, a + m)
            vv, hh, ll = v[:b - a], hi[:b - a], lo[:b - a]
            vv.copy_(q[a:b].view(torch.float8_e4m3fn))
            vv.view(b - a, n // bn, bn, k // bk, bk).mul_(s[a:b, :, None, :, None])
            g = vv.view(b - a, n, k // INT8_GROUP, INT8_GROUP)
            torch.amax(g, -1, out=hh)
            torch.amin(g, -1, out=ll)
            torch.maximum(hh, ll.neg_(), out=hh)
            scales[a:b].copy_(hh.div_(127.0).clamp_min_(1e-12))
            hh.copy_(scales[a:b])                           # the step as stored
            g.div_(hh[..., None]).round_().clamp_(-127, 127).add_(128)
            q[a:b].copy_(vv)
        del s, v, hi, lo


def int8_from_fp8(layer: dict, block: tuple[int, int], scale_dtype, chunk: int = INT8_CHUNK) -> dict:
    """int8_into on the CPU: the layer's int8 tensors (int8_shapes) in `scale_dtype` scales."""
    import torch
    e, n13, h = layer["w13_weight"].shape
    out = {name: torch.empty(shape, dtype=getattr(torch, dtype))
           for name, (shape, dtype) in int8_shapes(h, n13 // 2, e, str(scale_dtype).removeprefix("torch.")).items()}
    int8_into(layer, block, out, chunk)
    return out


def _gather(read, names: list[tuple[str, str, str]], out: dict, keys: tuple[str, str], dim: int) -> None:
    """Each slot's (gate, up, down) tensors read into out[w13] (gate and up joined along `dim` + 1) and out[w2]
    [slot], both made at the first slot: one copy from the file's pages, no list of them to stack."""
    import torch
    for slot, (gate_name, up_name, down_name) in enumerate(names):
        gate, up, down = read(gate_name), read(up_name), read(down_name)
        if slot == 0:
            shape = list(gate.shape)
            shape[dim] += up.shape[dim]
            out[keys[0]] = torch.empty((len(names), *shape), dtype=gate.dtype)
            out[keys[1]] = torch.empty((len(names), *down.shape), dtype=down.dtype)
        w13 = out[keys[0]][slot]
        w13.narrow(dim, 0, gate.shape[dim]).copy_(gate)
        w13.narrow(dim, gate.shape[dim], up.shape[dim]).copy_(up)
        out[keys[1]][slot].copy_(down)


def fp8_assemble(read, prefix: str, order: list[int]) -> dict:
    """One layer's block-FP8 w13/w2 and their scales from the checkpoint's per-expert linears ([out, in] each, as
    FusedMoE loads them), slot by slot in the server's physical order; w13 is gate over up."""
    out: dict = {}
    for t in ("weight", "weight_scale_inv"):
        names = [tuple(f"{prefix}.experts.{logical}.{p}_proj.{t}" for p in ("gate", "up", "down")) for logical in order]
        _gather(read, names, out, (f"w13_{t}", f"w2_{t}"), 0)
    return {k: out[k] for k in ("w13_weight", "w2_weight", "w13_weight_scale_inv", "w2_weight_scale_inv")}


def expert_names(prefix: str, expert: int) -> dict[str, str]:
    """The checkpoint names of one expert's GPTQ tensors (Qwen's layout: mlp.experts.<e>.<proj>.<tensor>)."""
    return {f"{p}.{t}": f"{prefix}.experts.{expert}.{name}.{t}" for p, name in PROJ.items()
            for t in ("qweight", "scales")}


def assemble(read, prefix: str, order: list[int]) -> dict:
    """One layer's w13/w2 qweight and scales from the checkpoint's per-expert linears, slot by slot in the server's
    physical order (`order[slot]` = the logical expert): `read(name)` gives a CPU tensor. GPTQ stores a linear's
    qweight as [K / 8, N] and its scales as [K / group, N], the layout FusedMoE loads as is (is_transposed)."""
    out: dict = {}
    for t in ("qweight", "scales"):
        names = []
        for logical in order:
            n = expert_names(prefix, logical)
            names.append((n[f"gate.{t}"], n[f"up.{t}"], n[f"down.{t}"]))
        _gather(read, names, out, (f"w13_{t}", f"w2_{t}"), 1)
    return {k: out[k] for k in ("w13_qweight", "w2_qweight", "w13_scales", "w2_scales")}


def dummy_gptq(layer_idx: int, hidden: int, inter: int, experts: int, group: int) -> dict:
    """A dummy load's raw GPTQ tensors for one CPU layer (shapes()): random words, scales in SGLang's dummy range,
    drawn from the layer's own seed, so every reader of the layer (this path, the int4 decode kernel) gets the same."""
    import torch
    gen = torch.Generator().manual_seed(1234 + layer_idx)
    return {name: (torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32, generator=gen) if dtype == "int32"
                   else (torch.rand(shape, generator=gen) * 2e-3 - 1e-3).half())
            for name, (shape, dtype) in shapes(hidden, inter, experts, group).items()}


_LAYER: dict = {}     # one CPU layer's raw GPTQ tensors while its consumers take them (release() drops them)


def gptq_layer(layer_idx: int, order: list[int], hidden: int, inter: int, experts: int, group: int,
               read=None) -> dict:
    """One CPU layer's raw GPTQ tensors (shapes()): `read` from the checkpoint (assemble), or a dummy load's draw
    (read None). The GPU prompt path and the int4 decode kernel (vramkit_int4_experts.py) both take each CPU layer's:
    the second gets what the first read or drew (0.29 GiB a layer of the coder, ~1 s to draw), until the adapter
    releases the layer."""
    key = (layer_idx, tuple(order), read is None)
    if _LAYER.get("key") != key:
        _LAYER.clear()
        raw = dummy_gptq(layer_idx, hidden, inter, experts, group) if read is None else \
            assemble(read, f"model.layers.{layer_idx}.mlp", order)
        _LAYER.update(key=key, raw=raw)
    return _LAYER["raw"]


def release() -> None:
    """Drop the layer gptq_layer holds (the adapter calls it once the layer's consumers have their copies)."""
    _LAYER.clear()


class Reader:
    """Tensors by name from a checkpoint folder's safetensors files (the index's weight map, else every file). A file
    is opened when one of its tensors is first read and stays open until close(): an open file keeps the pages read
    mapped, in the server's RSS (2026-11-29: 16.9 GiB more than the same server on dummy weights, the CPU layers'
    experts, while the reader stayed open; moe-vs-llamacpp-q8/h200-realload/)."""

    def __init__(self, folder: str) -> None:
        root = Path(folder)
        if not root.is_dir():       # a Hugging Face id: the snapshot SGLang's loader downloaded into the cache
            from huggingface_hub import snapshot_download
            root = Path(snapshot_download(folder, local_files_only=True, allow_patterns=["*.safetensors", "*.json"]))
        index = root / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
            self._file: dict[str, Path] = {name: root / f for name, f in weight_map.items()}
        else:
            from safetensors import safe_open
            self._file = {}
            for f in sorted(root.glob("*.safetensors")):
                with safe_open(str(f), framework="pt") as h:
                    self._file.update((name, f) for name in h.keys())
        if not self._file:
            raise FileNotFoundError(f"no safetensors files in {root}")
        self._open: dict[Path, object] = {}      # file -> its open handle

    def __call__(self, name: str):
        f = self._file.get(name)
        if f is None:
            raise KeyError(f"{name} is not in the checkpoint")
        if f not in self._open:
            from safetensors import safe_open
            self._open[f] = safe_open(str(f), framework="pt")
        return self._open[f].get_tensor(name)

    def close(self) -> None:
        """Every open file closed (their mapped pages leave the RSS); a later read opens its file again."""
        self._open.clear()


def to_marlin(raw: dict, hidden: int, inter: int, group: int, device: str = "cuda") -> dict:
    """The repack SGLang's GPTQMarlinMoEKernel.process_weights_after_loading does, on the GPU, with its functions and
    arguments (no act-order: empty sort indices). Its qweights come back [E, K / 16, 2N], each scale as it was."""
    import torch
    from sglang.srt.hardware_backend.gpu.quantization.gptq_kernels import gptq_marlin_moe_repack
    from sglang.srt.layers.quantization.marlin_utils import marlin_moe_permute_scales
    w13, w2 = raw["w13_qweight"].to(device), raw["w2_qweight"].to(device)
    empty = torch.empty((w13.shape[0], 0), dtype=torch.int32, device=w13.device)
    return {"w13_qweight": gptq_marlin_moe_repack(w13, empty, w13.shape[1] * PACK, w13.shape[2], 4),
            "w2_qweight": gptq_marlin_moe_repack(w2, empty, w2.shape[1] * PACK, w2.shape[2], 4),
            "w13_scales": marlin_moe_permute_scales(s=raw["w13_scales"].to(device), size_k=inter,
                                                    size_n=raw["w13_scales"].shape[2], group_size=group),
            "w2_scales": marlin_moe_permute_scales(s=raw["w2_scales"].to(device),
                                                   size_k=raw["w2_scales"].shape[1] * group,
                                                   size_n=raw["w2_scales"].shape[2], group_size=group)}


def marlin_info(t: dict, experts: int, skip_masked: bool = False):
    """SGLang's MarlinMoeQuantInfo over a layer's marlin tensors (to_marlin's names: symmetric GPTQ-Int4, no act-order).
    `skip_masked`: with an expert map, which makes marlin skip the blocks of -1 slots (is_ep); without one it computes
    them with expert -1's weights (measured on the H200 host: an illegal address, gpu_share_bench.py's first run)."""
    import torch
    from sglang.srt.layers.moe.moe_runner.marlin import MarlinMoeQuantInfo
    empty = t["w13_qweight"].new_empty((experts, 0))
    emap = torch.arange(experts, dtype=torch.int32, device=empty.device) if skip_masked else None
    return MarlinMoeQuantInfo(w13_qweight=t["w13_qweight"], w2_qweight=t["w2_qweight"], w13_scales=t["w13_scales"],
                              w2_scales=t["w2_scales"], w13_g_idx_sort_indices=empty, w2_g_idx_sort_indices=empty,
                              weight_bits=4, w13_g_idx=empty, w2_g_idx=empty, is_k_full=True,
                              global_num_experts=experts, expert_map=emap)


class GpuPrefill:
    """The staging set on the GPU and each CPU layer's pinned copy; `run` computes one forward on them."""

    def __init__(self, least: int, hf: dict, model_path: str, dummy: bool) -> None:
        self.least = least
        self.hidden, self.inter = int(hf["hidden_size"]), int(hf["moe_intermediate_size"])
        self.experts = int(hf["num_experts"])
        self.block = fp8_block(hf)              # block FP8 (SGLang's triton MoE), else GPTQ-Int4 (its marlin MoE)
        self.group = int(hf["quantization_config"].get("group_size", 128))
        self.model_path, self.dummy = model_path, dummy
        self.host: dict[int, dict] = {}          # layer -> its tensors in pinned host RAM
        self.stage: dict | None = None
        self._reader: Reader | None = None
        self._dummy: dict | None = None          # the FP8 dummy layer, drawn once
        self.pin = pin_how()
        self.fp8_as = fp8_as() if self.block is not None else None
        self.scale_dtype = str(hf.get("torch_dtype") or "bfloat16")     # moe_wna16's scales: the model's dtype
        self._registered: list[int] = []         # host pointers registered with CUDA ("register")
        self._times = [0.0, 0.0]                  # seconds reading the layers, converting and pinning them
        self.device = "cuda"                      # the staging set's (the SGLang check runs the path on the CPU)

    def add_layer(self, layer_idx: int, order: list[int], last: bool = False) -> None:
        """The layer's experts into pinned host RAM (read and repacked, or random for a dummy load); the staging set
        at the first layer, while SGLang still counts what the load allocates. Block FP8 as int8: the set first, the
        layer requantized in it on the GPU (int8_into), then copied out. `last`: the last CPU layer, after which the
        checkpoint's files are closed and the load's times said."""
        import time
        t0 = time.monotonic()
        if self.block is not None and self.fp8_as == "int8":
            fp8 = self._fp8_layer(layer_idx, order, copy=False)      # int8_into only reads it
            t1 = time.monotonic()
            if self.stage is None:
                self._place_stage({name: (shape, dtype) for name, (shape, dtype) in
                                   int8_shapes(self.hidden, self.inter, self.experts, self.scale_dtype).items()})
            assert self.stage is not None
            int8_into(fp8, self.block, self.stage)
            del fp8
            pinned = {k: self._pin(v.to("cpu", copy=True)) for k, v in self.stage.items()}
        else:
            layer = self._fp8_layer(layer_idx, order) if self.block is not None else \
                to_marlin(self._gptq_layer(layer_idx, order), self.hidden, self.inter, self.group)
            t1 = time.monotonic()
            pinned = {k: self._pin(v.cpu()) for k, v in layer.items()}
            del layer
            if self.stage is None:
                self._place_stage({k: (tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in pinned.items()})
        self.host[layer_idx] = pinned
        self._times[0] += t1 - t0
        self._times[1] += time.monotonic() - t1
        if last:
            if self._reader is not None:
                self._reader.close()
            say(f"{len(self.host)} CPU layers' experts in pinned host RAM: {self._times[0]:.1f} s reading "
                f"{'random values' if self.dummy else 'the checkpoint'}, {self._times[1]:.1f} s converting and "
                "copying them")

    def _place_stage(self, tensors: dict) -> None:
        """The staging set on the GPU ({name: (shape, dtype)}). Block FP8: in segments of its own. The load leaves
        cached free blocks behind (the dummy fill's float16 copies of each FP8 tensor, the loader's buffers); placed in
        those, the set kept their whole segments from SGLang's empty_cache at the load's end: 1.17 GiB of "mem usage"
        for a 0.57 GiB set, measured (benchmarks/results/gpu/moe-gpu-prefill/fp8-server/). GPTQ's set is placed after
        its repack's own blocks, as measured in run3, and stays so."""
        import torch
        cached = 0
        if self.block is not None:
            cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
            torch.cuda.empty_cache()
        self.stage = {k: torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
                      for k, (shape, dtype) in tensors.items()}
        size = sum(t.numel() * t.element_size() for t in self.stage.values())
        say(f"staging set {size / 2**30:.2f} GiB on the GPU; {cached / 2**30:.2f} GiB of cached free blocks "
            "released first")

    def _pin(self, t):
        """A CPU tensor in page-locked memory, as PIN_ENV says: PyTorch's pinned copy, or the tensor's own storage
        (a copy where it shares one) registered with CUDA; with VRAMKIT_INT4_GPU_SHARE a copy on transparent huge
        pages (vramkit_gpu_share.huge_page_copy: the GPU reads 4 KiB registered pages 12-21 % slower). Two small
        tensors may share a page: the driver registers disjoint ranges on one page apart and refuses only overlapping
        ones (a native probe, lupinemachines/lupine PR #878), and the planner counts whole pages for each, the safe
        side."""
        if self.pin == "alloc":
            return t.pin_memory()
        import torch
        import vramkit_gpu_share
        if vramkit_gpu_share.fraction() is not None:     # the decode share's GPU reads them: on huge pages
            t = vramkit_gpu_share.huge_page_copy(t)
        elif not t.is_contiguous() or t.untyped_storage().nbytes() != t.numel() * t.element_size():
            t = t.contiguous().clone()
        rc = int(torch.cuda.cudart().cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 1))  # portable
        if rc != 0:
            raise RuntimeError(f"cudaHostRegister of {t.numel() * t.element_size()} bytes failed: cudaError {rc}")
        self._registered.append(t.data_ptr())
        return t

    def _reader_for(self) -> Reader:
        if self._reader is None:
            self._reader = Reader(self.model_path)
        return self._reader

    def _gptq_layer(self, layer_idx: int, order: list[int]) -> dict:
        """The layer's raw GPTQ tensors (the checkpoint's layout, before the repack): read, or random for a dummy
        load in SGLang's dummy range (the repack then treats them as a real load's)."""
        return gptq_layer(layer_idx, order, self.hidden, self.inter, self.experts, self.group,
                          None if self.dummy else self._reader_for())

    def _fp8_layer(self, layer_idx: int, order: list[int], copy: bool = True) -> dict:
        """The layer's block-FP8 tensors as SGLang's GPU layers hold them (no repack on CUDA): read, or random for a
        dummy load: e4m3 codes below 1.0 in magnitude with either sign (0x00-0x37 and 0x80-0xB7: no NaN, drawn as
        bytes), scales ~1e-3, so the weights have SGLang's dummy magnitude. A dummy layer is drawn once and copied
        for every layer (0.6 GB of codes a layer: drawing each would add minutes to a start; the values are random
        either way). `copy`: a dummy layer as a copy of the drawn one (False: the drawn one itself, for a reader)."""
        import torch
        if not self.dummy:
            return fp8_assemble(self._reader_for(), f"model.layers.{layer_idx}.mlp", order)
        assert self.block is not None
        if self._dummy is None:
            gen = torch.Generator().manual_seed(1234)

            def codes(shape):
                v = torch.randint(0, 112, shape, dtype=torch.uint8, generator=gen)
                return torch.where(v >= 56, v + 72, v).view(torch.float8_e4m3fn)
            self._dummy = {name: codes(shape) if dtype != "float32" else torch.rand(shape, generator=gen) * 1e-3 + 1e-4
                           for name, (shape, dtype) in fp8_shapes(self.hidden, self.inter, self.experts,
                                                                  self.block).items()}
        return {name: t.clone() if copy else t for name, t in self._dummy.items()}

    def drop(self, keep: frozenset[int] = frozenset()) -> None:
        """Give back what add_layer took (after a failure: the server goes on with every prompt on kt-kernel), but for
        the host copies of the layers in `keep` (the decode share's GPU reads them: vramkit_gpu_share)."""
        kept = {t.data_ptr() for layer in keep for t in self.host.get(layer, {}).values()}
        if self._registered:
            import torch
            for ptr in self._registered:      # an error here leaves nothing to give back: the tensors go next
                if ptr not in kept:
                    torch.cuda.cudart().cudaHostUnregister(ptr)
            self._registered = [ptr for ptr in self._registered if ptr in kept]
        self.host = {layer: t for layer, t in self.host.items() if layer in keep}
        self.stage = None
        self._reader = self._dummy = None

    def wants(self, layer_idx: int, tokens: int) -> bool:
        return tokens >= self.least and layer_idx in self.host and self.stage is not None

    def run(self, layer_idx: int, dispatch_output, runner_config):
        """Copy the layer's experts in (on the current stream: the kernel below waits for them) and run SGLang's own
        MoE on them (marlin for GPTQ-Int4, triton for block FP8); the StandardCombineInput its GPU layers return."""
        assert self.stage is not None
        for name, t in self.host[layer_idx].items():
            self.stage[name].copy_(t, non_blocking=True)
        s = self.stage
        if self.block is not None:
            from sglang.srt.layers.moe.moe_runner.triton import TritonMoeQuantInfo, fused_experts_none_to_triton
            if self.fp8_as == "int8":       # as moe_wna16's 8-bit layers (get_triton_quant_info): bf16 inputs
                info = TritonMoeQuantInfo(w13_weight=s["w13_qweight"], w2_weight=s["w2_qweight"], use_int8_w8a16=True,
                                          w13_scale=s["w13_scales"], w2_scale=s["w2_scales"],
                                          block_shape=[0, INT8_GROUP])
            else:
                info = TritonMoeQuantInfo(w13_weight=s["w13_weight"], w2_weight=s["w2_weight"], use_fp8_w8a8=True,
                                          w13_scale=s["w13_weight_scale_inv"], w2_scale=s["w2_weight_scale_inv"],
                                          block_shape=list(self.block))
            # not in place (SGLang's default writes the output over the input): a forward that fails part way then
            # still has its input for kt-kernel, and the output is a new tensor, as marlin's is
            config = dataclasses.replace(runner_config, inplace=False)
            return fused_experts_none_to_triton(dispatch_output, info, config)
        from sglang.srt.layers.moe.moe_runner.marlin import fused_experts_none_to_marlin
        return fused_experts_none_to_marlin(dispatch_output, marlin_info(s, self.experts), runner_config)


def say(text: str) -> None:
    print(f"vramkit_gpu_prefill: {text}", file=sys.stderr, flush=True)
