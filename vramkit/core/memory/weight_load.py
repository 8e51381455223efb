"""The GPU memory a model's weight load reserves per rank, by replaying SGLang's allocations.

SGLang 0.5.15.post1 builds the model under `torch.device("cuda")` (model_loader/loader.py), so every
parameter is one allocation, in module order (core/model/arch.py lists them per family and quantization
method); the rotary cos/sin cache is built inside the first layer. After loading, each quantization
method converts its tensors (core/model/arch.py `Op`s): GPTQ/AWQ marlin repacks allocate the new tensor
before the old is freed, GPTQ's g_idx and qzeros become empty, MLA keeps copies of kv_b_proj's halves.

`--cpu-offload-gb` (OffloaderV1.maybe_offload_to_cpu) moves decoder-layer parameters to host RAM, in
order, as each layer is built, until the budget is spent: those are allocated, then freed, and their
conversions run on the CPU. Replaying this through the caching-allocator model gives the "Load weight
end ... mem usage" SGLang logs.

Each offloaded parameter is a `torch.empty_strided(..., pin_memory=True)`: PyTorch's pinned host allocator
rounds every allocation up to a power of two before cudaHostAlloc (ATen/core/CachingHostAllocator.h,
`PowerOf2Ceil(size)`), so the host RAM pinned is the sum of the rounded sizes, a third more than the
weights for Qwen3-MoE's 0.75 GiB expert tensors (`pinned_host_bytes`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from vramkit.core.memory.torch_alloc import CachingAllocator
from vramkit.core.model.arch import CALIBRATION_HOST_SMS, WeightLayout, expert_location_prelude  # noqa: F401
from vramkit.core.model.spec import ModelSpec


@dataclass(frozen=True)
class LoadResult:
    gpu_reserved_bytes: int      # what the load leaves reserved on the GPU (SGLang's "mem usage")
    gpu_tensor_bytes: int        # the tensors themselves (the rest is allocator slack)
    offloaded_bytes: int         # parameters moved to host RAM by --cpu-offload-gb
    pinned_host_bytes: int = 0   # the pinned host RAM they take: each rounded up to a power of two
    live_by_role: dict[str, int] = field(default_factory=dict, compare=False)   # GPU tensors after conversion, by role


# the suite replays ~800 distinct loads (256 had it replay 1,183 times: 13.6 s of the unit tests' 60 on the 2-core
# machine, 8.3 s with room for all); a plan replays a few
@lru_cache(maxsize=2048)
def replay_load(layout: WeightLayout, offload_budget_bytes: int = 0, staging: tuple[int, ...] = (),
                staging_after_layer: int = 0, staging_fresh: bool = False, cpu_layers: tuple[int, ...] = (),
                layer_work: tuple[int, ...] = ()) -> LoadResult:
    """`staging`: tensors the kt-kernel adapter's GPU prompt path allocates while the weights are converted, when
    SGLang converts decoder layer `staging_after_layer`'s experts (its first CPU layer), so after that layer's own
    conversions and before the next layer's; `staging_fresh`: the adapter empties the allocator's cache first (its
    block-FP8 set), else the set takes what the cache holds by then (its GPTQ set). `layer_work`: what the path does
    on the GPU for each of `cpu_layers` at the same place (CachingAllocator.run's encoding, all of it freed): its
    GPTQ set, repacked there before it is copied to host RAM, the first layer's work before the staging set; its
    block-FP8 set requantized to int8 inside the staging set, the work after it (kt_hybrid.prefill_layer_work)."""
    a = CachingAllocator()
    live: dict[int, tuple[str, int]] = {}                       # handle -> (role, bytes) still on the GPU
    params: dict[tuple[int, str], tuple[str, int | None]] = {}  # (group, name) -> (role, handle)
    offloaded_groups: set[int] = set()   # their post-load conversions run on the CPU (MLA: w_kc/w_vc too)
    offloaded = 0
    pinned = 0

    def keep(role: str, nbytes: int) -> int | None:
        handle = a.malloc(nbytes)
        if handle is not None:
            live[handle] = (role, nbytes)
        return handle

    def release(handle: int | None) -> None:
        if handle is not None:
            live.pop(handle, None)
        a.free(handle)

    for p in layout.head:
        keep(p.role, p.nbytes)
    group_role: dict[int, str] = {}
    for i, layer in enumerate(layout.layers):
        built = []
        for j, p in enumerate(layer):
            if i == 0 and j == layout.rope_after:                # the rotary cache, once, in the first layer,
                work = a.run(layout.rope_temps)                  # built from work tensors freed after it
                keep("rope", layout.rope_first_layer)
                for handle in work:
                    a.free(handle)
            if layout.rope_second[1] and i == layout.rope_second[0] and j == layout.rope_after:
                keep("rope", layout.rope_second[1])              # Gemma 3: the other rope base's cache
            handle = keep(p.role, p.nbytes)
            params[(p.group, p.name)] = (p.role, handle)
            group_role.setdefault(p.group, p.role)
            built.append((p, handle))
        for p, handle in built:                                  # the offloader, after the layer is built
            if offloaded >= offload_budget_bytes or handle is None:
                break
            offloaded += p.nbytes
            pinned += pinned_size(p.nbytes)
            release(handle)
            params[(p.group, p.name)] = (p.role, None)
            offloaded_groups.add(p.group)
    for p in layout.tail:
        keep(p.role, p.nbytes)
    layer_of = {p.group: i for i, layer in enumerate(layout.layers) for p in layer}
    # the path's stops, each run before the first op of a later layer's group: every CPU layer's work, the staging
    # set after its layer's
    stops = sorted(set(cpu_layers if layer_work else ()) | ({staging_after_layer} if staging else set()))

    def stop(layer: int) -> None:    # reserved, but no weight a decode step reads: not in live_by_role
        placing = bool(staging) and layer == staging_after_layer
        if placing and staging_fresh:    # the block-FP8 set: the cache emptied, the set placed, the work in it
            a.empty_cache()
            a.run(staging)
        a.run(layer_work)
        if placing and not staging_fresh:    # GPTQ: the layer's repack, then the set in what the cache holds
            a.run(staging)
    for op in layout.ops:
        while stops and layer_of.get(op.group, -1) > stops[0]:
            stop(stops.pop(0))
        if op.group in offloaded_groups:
            continue
        role = group_role.get(op.group, "attention")
        if op.kind == "alloc":
            keep(role, op.nbytes)
        elif op.kind == "free":
            role, handle = params.get((op.group, op.name), (role, None))
            release(handle)
            params[(op.group, op.name)] = (role, None)
        else:                                                    # replace: the new tensor, then the old freed
            role, old = params.get((op.group, op.name), (role, None))
            new = keep(role, op.nbytes)
            for handle in [a.malloc(n) for n in op.temp]:
                a.free(handle)
            release(old)
            params[(op.group, op.name)] = (role, new)
    for n in stops:                                             # no conversions after those layers'
        stop(n)
    a.empty_cache()                                             # get_available_gpu_memory(empty_cache=True)
    by_role: dict[str, int] = {}
    for role, nbytes in live.values():
        by_role[role] = by_role.get(role, 0) + nbytes
    return LoadResult(gpu_reserved_bytes=a.reserved, gpu_tensor_bytes=sum(by_role.values()),
                      offloaded_bytes=offloaded, pinned_host_bytes=pinned, live_by_role=by_role)


def prelude_bytes(model: ModelSpec) -> int:
    """What a server of `model` holds on each GPU before its weights load, besides its CUDA context: the MoE
    expert-location maps (arch.expert_location_prelude), 22 MiB for Qwen3-Coder-30B-A3B; 0 for most models."""
    return prelude_reserved(expert_location_prelude(model))


@lru_cache(maxsize=64)
def prelude_reserved(prelude: tuple[int, ...]) -> int:
    """What SGLang's allocations before "Load weight begin" keep reserved (arch.expert_location_prelude: n > 0
    allocates n bytes, -k frees the k-th allocation): the expert-location maps' segments, kept for good ("Load
    weight begin" reads get_available_gpu_memory(empty_cache=True), which keeps them). Replayed apart from the load,
    on the safe side: PyTorch's allocator would let the weights fill their free space (Qwen3-30B-A3B's 20 MiB
    segment holds 6.3 MB), and over the 60 KT servers with log figures (fit_kt.py) that reuse fits better on average
    (the pool within 0.9 % against 1.4, none more than 2 % under against 10), but it plans 6 pools 0.5-1.1 % over
    SGLang's, and it would place 38 GPU layers at mem_fraction 0.95 (GPTQ-Int4 on marlin) with a pool that covers
    the 32K context where the 38-layer server measured 32,631 tokens (moe-vs-llamacpp-mf/run1); replayed apart, no
    pool is over by more than 0.5 %. moe-gptq-24g's load also logged 15.87 GiB as replayed apart (15.85 with the
    reuse)."""
    pre = CachingAllocator()
    pre.run(prelude)
    pre.empty_cache()
    return pre.reserved


def pinned_size(nbytes: int) -> int:
    """What PyTorch's caching host allocator pins for an allocation: the next power of two."""
    return 1 << (nbytes - 1).bit_length() if nbytes > 0 else 0
