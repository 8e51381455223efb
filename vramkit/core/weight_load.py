"""The GPU memory a model's weight load reserves per rank, by replaying SGLang's allocations.

SGLang 0.5.15.post1 builds the model under `torch.device("cuda")` (model_loader/loader.py), so every
parameter is one allocation, in module order; GPTQ layers are then converted for the marlin kernel
(hardware_backend/gpu/quantization/gptq_kernels.py GPTQMarlinLinearKernel.process_weights_after_loading),
which frees and re-allocates tensors. The order, per decoder layer of a Qwen2/Llama/Mistral model:

  qkv_proj, o_proj (their params as create_weights registers them: GPTQ qweight, g_idx, qzeros, scales;
  dense: weight; then the bias), the rotary cos/sin cache (once, in the first layer: context x
  rotary_dim, fp32), gate_up_proj, down_proj, the two RMSNorm weights; then the final norm and lm_head
  (unless tied). Marlin conversion, per linear: a workspace of one int per SM, g_idx and qzeros replaced
  by empty tensors, then qweight and scales each re-allocated (repack / permute) before the old is freed.

`--cpu-offload-gb` (OffloaderV1.maybe_offload_to_cpu) moves decoder-layer parameters to host RAM, in
order, as each layer is built, until the budget is spent: those are allocated, then freed.
Replaying this through the caching-allocator model gives the "Load weight end ... mem usage" SGLang logs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from vramkit.core.torch_alloc import CachingAllocator

# marlin_make_workspace: one int32 per SM of the card (its count: config/gpus.toml sm_count). Without a
# catalogued card (a bare --gpu-free-gib), the calibration host's H100 count: 132 x 4 B, under 1 KiB a layer.
CALIBRATION_HOST_SMS = 132


@dataclass(frozen=True)
class LoadShape:
    """What the replay needs of a model: hashable, so replays are cached."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tie_embeddings: bool
    attention_bias: bool
    dtype_bytes: int
    quant_group: int | None = None   # GPTQ/AWQ group size (converted for marlin), None for dense weights
    quant_bits: int = 4
    quant_g_idx: bool = True         # GPTQ registers g_idx; AWQ does not


@dataclass(frozen=True)
class LoadResult:
    gpu_reserved_bytes: int      # what the load leaves reserved on the GPU (SGLang's "mem usage")
    gpu_tensor_bytes: int        # the tensors themselves (the rest is allocator slack)
    offloaded_bytes: int         # parameters moved to host RAM by --cpu-offload-gb


def _linear_params(shape: LoadShape, k: int, n: int, bias: bool) -> list[tuple[str, int]]:
    if shape.quant_group is None:
        params = [("weight", k * n * shape.dtype_bytes)]
    else:
        groups = _groups(shape, k)
        params = [("qweight", _qweight_bytes(shape, k, n))] + ([("g_idx", k * 4)] if shape.quant_g_idx else []) \
            + [("qzeros", groups * (n * shape.quant_bits // 32) * 4), ("scales", groups * n * 2)]
    if bias:
        params.append(("bias", n * shape.dtype_bytes))
    return params


def _groups(shape: LoadShape, k: int) -> int:
    return math.ceil(k / shape.quant_group) if shape.quant_group and shape.quant_group > 0 else 1


def _qweight_bytes(shape: LoadShape, k: int, n: int) -> int:
    return k * n * shape.quant_bits // 8


@lru_cache(maxsize=256)
def replay_load(shape: LoadShape, tp: int, rope_cache_bytes: int, offload_budget_bytes: int = 0,
                sm_count: int = CALIBRATION_HOST_SMS) -> LoadResult:
    a = CachingAllocator()
    tp = max(1, tp)
    h, hd = shape.hidden, shape.head_dim
    vocab_rank = math.ceil(shape.vocab / tp / 64) * 64          # VocabParallelEmbedding pads to 64
    q_rank = shape.heads * hd // tp
    kv_rank = max(1, shape.kv_heads // tp) * hd
    i_rank = shape.intermediate // tp
    live: dict[int, int] = {}                                   # handle -> bytes, for what stays on the GPU
    linears: list[dict] = []
    offloaded = 0

    def keep(nbytes: int) -> int | None:
        handle = a.malloc(nbytes)
        if handle is not None:
            live[handle] = nbytes
        return handle

    def release(handle: int | None) -> None:
        live.pop(handle, None)
        a.free(handle)

    keep(vocab_rank * h * shape.dtype_bytes)                   # embed_tokens
    rope = False
    for _ in range(shape.layers):
        layer: list[tuple[dict, str, int | None]] = []
        for k, n, bias in ((h, q_rank + 2 * kv_rank, shape.attention_bias), (q_rank, h, False)):
            lin = {"k": k, "n": n}
            for name, nbytes in _linear_params(shape, k, n, bias):
                lin[name] = keep(nbytes)
                layer.append((lin, name, lin[name]))
            linears.append(lin)
        if not rope:
            keep(rope_cache_bytes)
            rope = True
        for k, n in ((h, 2 * i_rank), (i_rank, h)):
            lin = {"k": k, "n": n}
            for name, nbytes in _linear_params(shape, k, n, False):
                lin[name] = keep(nbytes)
                layer.append((lin, name, lin[name]))
            linears.append(lin)
        for _norm in range(2):
            lin = {}
            lin["norm"] = keep(h * shape.dtype_bytes)
            layer.append((lin, "norm", lin["norm"]))
        for lin, name, handle in layer:                         # the offloader, after the layer is built
            if offloaded >= offload_budget_bytes or handle is None:
                break
            offloaded += live[handle]
            release(handle)
            lin[name] = None
            lin["offloaded"] = True
    keep(h * shape.dtype_bytes)                                 # final norm
    if not shape.tie_embeddings:
        keep(vocab_rank * h * shape.dtype_bytes)                # lm_head
    if shape.quant_group is not None:
        for lin in linears:
            if lin.get("offloaded"):
                continue
            groups = _groups(shape, lin["k"])
            keep(sm_count * 4)
            release(lin.get("g_idx"))
            release(lin["qzeros"])
            new = keep(_qweight_bytes(shape, lin["k"], lin["n"]))
            release(lin["qweight"])
            lin["qweight"] = new
            new = keep(groups * lin["n"] * 2)
            release(lin["scales"])
            lin["scales"] = new
    a.empty_cache()                                             # get_available_gpu_memory(empty_cache=True)
    return LoadResult(gpu_reserved_bytes=a.reserved, gpu_tensor_bytes=sum(live.values()),
                      offloaded_bytes=offloaded)
