"""A CPU layer's decode batch shared with the GPU, which reads that share's experts over the bus (issue 18, the 4-stream
goal; opt-in: ``VRAMKIT_INT4_GPU_SHARE=<fraction>`` with the int4 decode kernel and the GPU prompt path on).

Why: a CPU layer's decode batch is bound by the host's read rate (at 4 streams ~29 distinct experts, 70 MB a layer,
~1.1 ms of the 16 GiB step's ~16 ms, moe-vs-llamacpp-int4/r7-prof/), while the PCIe link sits idle. The GPU prompt
path already keeps each CPU layer's experts in marlin's layout in pinned host RAM (vramkit_gpu_prefill.py), and under
CUDA's unified addressing a pinned host address is a device address: marlin can read them where they lie
(vramkit_host_embed.device_view, as the token embeddings are read). So each call's distinct experts are split: the
lowest-numbered `fraction` of them go to SGLang's own marlin MoE on the GPU (what its GPU layers run, in float16 with
float32 reduction), the rest to the int4 kernel on the CPU, started before the GPU's share and waited for after it
(int4_experts.c v4_start / v4_wait), and the two outputs are added. Two memory systems read at once; lossless against
the checkpoint either side.

Measured (benchmarks/results/gpu/moe-vs-llamacpp-int4/r8/ and share-pin/, H200 machines, 12 threads):
- without a server (benchmarks/gpu/gpu_share_bench.py: this module and HostExperts in CUDA graphs, 10 random layers
  cycled, the copies pinned by PyTorch's allocator): a batch-4 call 1.00 ms on the CPU alone against 0.81 with 0.3 of
  its experts over the bus, batch 1 0.355 against 0.319 at 0.2; more than ~0.3 and the GPU's side is the longer one.
  Registered 4 KiB pages (the GPU prompt path's default, VRAMKIT_KT_PREFILL_PIN=register) are read 12-21 % slower by
  the GPU than the allocator's (share-pin/), registered huge pages as fast (share-pin/thp/): with the share on, the
  prompt path's registered copies are made on huge pages (huge_page_copy);
- in a server (r8/, 0.4, the copies registered): 4 streams 269.4 tok/s against the preset's 264.0 (+2 %), one stream
  118.4 against 132.7 (-11 %): the CPU's calls got shorter (the kernel's log windows: 0.216-0.230 against 0.268-0.276
  ms at batch 1, 0.588-0.619 against 0.883-0.967 at batch 4) and the GPU's side lengthened the gap between them by
  more. Off by default; a server at 0.2-0.3 with the copies on huge pages is the next measurement.

The split is made on the GPU, in the decode graph: which experts the call uses (a scatter over the expert ids), each
one's rank among them, and the first round(fraction x used) taken by the GPU. A slot the GPU takes is -1 for the CPU
kernel (it adds nothing) and the other way round for marlin, whose expert map makes it skip -1 slots.
"""
from __future__ import annotations

import os

ENV = "VRAMKIT_INT4_GPU_SHARE"


def fraction(environ: dict | None = None) -> float | None:
    """VRAMKIT_INT4_GPU_SHARE: the fraction of each decode call's distinct experts computed on the GPU over the bus;
    None where unset or 0 (off). Anything that is not a number in [0, 1) stops the server at start with one line."""
    raw = (os.environ if environ is None else environ).get(ENV, "").strip()
    if raw in ("", "0", "off"):
        return None
    try:
        f = float(raw)
    except ValueError:
        f = -1.0
    if not 0.0 <= f < 1.0:
        raise SystemExit(f"vramkit_gpu_share: {ENV}={raw!r}: give the fraction of a CPU layer's decode experts to "
                         "compute on the GPU over the bus, at least 0 and below 1 (0: off)")
    return f or None


HUGE_PAGE = 2 << 20
LAYERS: set[int] = set()      # the CPU layers whose decode share reads their host copies (kept through a drop)
_MAPS: list = []     # the huge-page mappings under the copies: they live as long as the process


def huge_page_copy(t):
    """`t` copied into anonymous host memory aligned to 2 MiB and advised MADV_HUGEPAGE before it is touched, so the
    kernel backs it with transparent huge pages where it allows them (/sys/kernel/mm/transparent_hugepage/enabled:
    always or madvise; with never, 4 KiB pages as before). Registered with CUDA, such a copy is read by the GPU over
    the bus as fast as PyTorch's pinned allocator's: 0.629 ms for 0.4 of a batch-4 call against 0.631 allocated and
    0.800 for the tensor's own 4 KiB pages registered (one H200 machine, madvise mode; share-pin/thp/). Its size is
    rounded up to whole 2 MiB pages (at most 8 MiB a CPU layer's four tensors)."""
    import mmap

    import torch
    nbytes = t.numel() * t.element_size()
    size = (nbytes + 2 * HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE        # room to align the start
    mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = torch.frombuffer(mm, dtype=torch.uint8)
    off = (-raw.data_ptr()) % HUGE_PAGE
    if hasattr(mmap, "MADV_HUGEPAGE"):
        mm.madvise(mmap.MADV_HUGEPAGE, off, (size - off) // HUGE_PAGE * HUGE_PAGE)
    out = raw[off:off + nbytes].view(t.dtype).view(t.shape)
    out.copy_(t)
    _MAPS.append((mm, raw))
    return out


def split_ids(ids, frac: float, experts: int):
    """(gpu_ids, cpu_ids) of a call's top-k ids [n, k]: the lowest-numbered round(frac x distinct) experts the call
    uses go to the GPU; each side sees -1 in the other's slots (and in slots that were -1 already)."""
    import torch
    flat = ids.reshape(-1).long()
    valid = (flat >= 0) & (flat < experts)
    slot = torch.where(valid, flat, torch.full_like(flat, experts))          # invalid slots to a spare bin
    used = torch.zeros(experts + 1, dtype=torch.int32, device=ids.device).scatter_(0, slot, 1)[:experts]
    rank = used.cumsum(0) - 1
    quota = torch.round(used.sum().to(torch.float32) * frac).to(torch.int32)
    take = (used > 0) & (rank < quota)                                      # [experts]
    on_gpu = (take[slot.clamp(max=experts - 1)] & valid).view(ids.shape)
    none = torch.full_like(ids, -1)
    return torch.where(on_gpu, ids, none), torch.where(on_gpu | ~valid.view(ids.shape), none, ids)


class BusExperts:
    """One CPU layer's marlin tensors in pinned host RAM, read by marlin on the GPU through device views."""

    def __init__(self, host: dict, experts: int, view=None, layer: int | None = None):
        """`host`: the GPU prompt path's pinned copy of the layer (vramkit_gpu_prefill.GpuPrefill.host[layer]);
        `view`: the device view (vramkit_host_embed.device_view; replaced in the dev host's tests); `layer`: its
        index, recorded in LAYERS once the views are made."""
        if view is None:
            from vramkit_host_embed import device_view as view
        import vramkit_gpu_prefill
        self.host = host        # the pinned tensors the views read live as long as this layer's share
        self.experts = experts
        self.info = vramkit_gpu_prefill.marlin_info({k: view(v) for k, v in host.items()}, experts, skip_masked=True)
        if layer is not None:
            LAYERS.add(layer)

    def run(self, x, ids, weights, runner_config):
        """marlin's MoE output for the slots of `ids` (others -1), in x's dtype: the weighted sum of its experts alone,
        as the CPU kernel's share is (no routed scaling factor on either side: the layer's caller applies it to the
        sum, as it does to the CPU's output without a share)."""
        import dataclasses

        from sglang.srt.layers.moe.moe_runner.marlin import fused_experts_none_to_marlin
        from sglang.srt.layers.moe.token_dispatcher.standard import StandardDispatchOutput
        from sglang.srt.layers.moe.topk import StandardTopKOutput
        # marlin reads the router logits' row count only: the weights' [n, k] has it
        d = StandardDispatchOutput(hidden_states=x, hidden_states_scale=None, topk_output=StandardTopKOutput(
            topk_weights=weights, topk_ids=ids, router_logits=weights))
        config = dataclasses.replace(runner_config, routed_scaling_factor=None)
        return fused_experts_none_to_marlin(d, self.info, config).hidden_states
