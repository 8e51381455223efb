"""The token embeddings in pinned host RAM, read by the GPU itself (VRAMKIT_KT_EMBED_HOST=on; the planner's
kt_embed_host knob sets it and plans its memory).

Once SGLang has loaded the weights, the model's ``embed_tokens`` table is copied to page-locked host RAM and its
parameter is pointed at that memory through the host address, which CUDA's unified addressing makes a device address
for pinned memory: a CUDA tensor over ``__cuda_array_interface__`` (``device_view``). SGLang's embedding lookup
(``F.embedding``, captured in the decode CUDA graphs like any kernel) then reads each token's row over the bus, and
the table's GPU memory goes back to the driver before SGLang sizes its KV pool (it empties the allocator's cache
before reading the free memory). On a 16 GB card that is about one more MoE layer's experts on the GPU.

Checked at kernel level on an H200 machine (benchmarks/gpu/uva_embed_check.py, benchmarks/results/gpu/uva-embed/):
gathers bit-identical to a GPU copy's, eager and in a replayed CUDA graph; a decode token's row in 0.016 ms against
0.014 from GPU memory, a 4,096-token chunk's rows in 0.33 ms against 0.02.

Refused, with one line on stderr and the table left on the GPU: a model without ``model.embed_tokens``, an
embedding split across GPUs (tp > 1), an lm_head tied to the table (it would read all of it every token), a table
not of 2-byte elements, a host copy that cannot be pinned or mapped for the GPU (the error's first line: a driver
without unified addressing, a page-locked limit), and a view that reads other values than the GPU table (256 random
rows, compared bit for bit before the table goes). The server then starts with a pool that much smaller than planned.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

ENV = "VRAMKIT_KT_EMBED_HOST"
CHECK_ROWS = 256        # rows read through the view and from the GPU table, compared before the table goes


class _HostView:
    """A pinned CPU tensor's memory as a CUDA array: under unified addressing its host address is its device one."""

    def __init__(self, t: Any):
        assert t.is_pinned() and t.is_contiguous(), "the GPU reads only page-locked, contiguous host memory"
        self.__cuda_array_interface__ = {"shape": tuple(t.shape), "typestr": f"<i{t.element_size()}",
                                         "data": (t.data_ptr(), False), "strides": None, "version": 3}


_INTS = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def device_view(pinned: Any) -> Any:
    """A CUDA tensor of `pinned`'s dtype that reads it over the bus; no GPU memory of its own (the embeddings' bf16 or
    fp16 here, a CPU layer's marlin words and scales in vramkit_gpu_share)."""
    import torch
    as_int = getattr(torch, _INTS[pinned.element_size()])
    return torch.as_tensor(_HostView(pinned.view(as_int)), device="cuda").view(pinned.dtype)


def _pin(t: Any) -> Any:
    return t.detach().to("cpu").pin_memory()


def move_embed(model: Any, *, to_host: Callable[[Any], Any] = _pin, view: Callable[[Any], Any] = device_view,
               empty_cache: Callable[[], None] | None = None) -> str:
    """Move `model`'s token embeddings to host RAM (the GPU reads them through `view`); the line that says what
    happened, or why not. `to_host`, `view` and `empty_cache` are the CUDA calls, replaced in the dev host's tests."""
    inner = getattr(model, "model", None)
    emb = getattr(inner, "embed_tokens", None)
    weight = getattr(emb, "weight", None)
    if weight is None:
        return f"{ENV}: {type(model).__name__} has no model.embed_tokens.weight; the embeddings stay on the GPU"
    if getattr(emb, "tp_size", 1) > 1:
        return f"{ENV}: the embeddings are split across {emb.tp_size} GPUs; they stay on the GPU"
    head = getattr(getattr(model, "lm_head", None), "weight", None)
    if head is not None and head.data_ptr() == weight.data_ptr():
        return f"{ENV}: the lm_head is tied to the embeddings (every token would read the table); they stay on the GPU"
    if weight.element_size() != 2:
        return f"{ENV}: embeddings of {weight.dtype}, not 2-byte elements; they stay on the GPU"
    import torch
    try:
        host = to_host(weight)
        nbytes = host.numel() * host.element_size()
        seen = view(host)
        # the view must read what the GPU table holds before the table goes: rows drawn at random, compared bit for bit
        rows = torch.randint(0, weight.shape[0], (CHECK_ROWS,), device=weight.device)
        same = torch.equal(torch.nn.functional.embedding(rows, seen), torch.nn.functional.embedding(rows, weight))
    except (RuntimeError, TypeError, ValueError, AssertionError) as e:     # pinning or the device view refused
        first = (str(e).strip().splitlines() or [""])[0][:200]
        return (f"{ENV}: the host copy could not be made or read ({type(e).__name__}: {first}); the embeddings stay on "
                "the GPU (the KV pool is their size smaller than planned; --kt-embed-host off plans it so)")
    if not same:
        return f"{ENV}: the host copy read through the GPU differs from the GPU table; the embeddings stay on the GPU"
    weight.data = seen
    emb._vramkit_host_embed = host              # the pinned table lives as long as the module that reads it
    if empty_cache is None:
        empty_cache = torch.cuda.empty_cache
    empty_cache()
    return (f"{ENV}=on: embed_tokens ({nbytes / 2**30:.2f} GiB) moved to pinned host RAM, read by the GPU over the "
            "bus; its GPU memory freed before the KV pool is sized")


def patch_model_runner(module: Any) -> None:
    """ModelRunner.load_model, then the move (idempotent)."""
    runner = module.ModelRunner
    if getattr(runner, "_vramkit_host_embed", False):
        return
    orig = runner.load_model

    def load_model(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        print(f"vramkit_kt_compat: {move_embed(self.model)}", file=sys.stderr, flush=True)
        return out

    runner.load_model = load_model
    runner._vramkit_host_embed = True
