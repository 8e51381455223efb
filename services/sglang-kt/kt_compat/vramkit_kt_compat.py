"""Make SGLang 0.5.15.post1's KTransformers path meet kt-kernel 0.5.1 (issue 12).

SGLang (0.5.15.post1 up to at least 0.5.23, sglang/srt/layers/moe/kt_ep_wrapper.py) builds each layer's
CPU-expert wrapper as ``KTMoEWrapper(..., num_gpu_experts=N, ...)`` and keeps experts 0..N-1 on the GPU
(it masks topk ids >= N to -1 for the GPU kernel). kt-kernel from 0.5.1 on takes
``gpu_experts_mask`` (a bool tensor [num_experts], True = on the GPU) instead, and 0.5.0 and older lack
``CPUInfer.submit_with_cuda_stream`` that the forward needs. This module patches
``kt_kernel.KTMoEWrapper`` right after kt_kernel is imported so the old call builds the mask SGLang
means: the first N experts on the GPU, the rest on the CPU. Nothing else changes.

It is loaded lazily: ``install()`` (run by the sitecustomize beside it, or a .pth line in the image)
only registers an import hook, so Python processes that never import kt_kernel pay nothing.

Opt-in, ``VRAMKIT_KT_GPU_LAYERS`` (issue 18, the placement lever): whole layers' experts on the GPU instead
of N per layer, as llama.cpp's --n-cpu-moe places them. ``auto`` turns SGLang's --kt-num-gpu-experts N into
L = N x layers / experts whole layers (the last L: the same GPU memory for experts, within one layer's
rounding); ``a-b,c`` names them. A GPU layer is built without KT (SGLang's own fused MoE over all its
experts): no CPU round trip at all. Every other layer has 0 GPU experts: its GPU MoE kernel is skipped and
its output is the CPU's alone. The last CPU layer defers nothing (its next layer has no KT wrapper to take
the deferred share).

Opt-in, experimental, with ``VRAMKIT_KT_GPU_LAYERS``: ``VRAMKIT_KT_GGML=<a GGUF of the model>`` runs the CPU layers'
decode batches on llama.cpp's CPU MoE kernels (vramkit_ggml_experts.py says how and why).

The placement dispatch (on unless ``VRAMKIT_KT_PLACEMENT_DISPATCH=0``): with a non-trivial
``--init-expert-location`` (`vramkit kt-placement`'s map), SGLang loads each logical expert into the physical slot
the map gives and kt-kernel loads the CPU's slots the same way, but 0.5.15.post1's Qwen3-MoE passes no
ExpertLocationDispatchInfo to TopK on its one-GPU forward, so the router's logical ids would index those slots
unmapped. This wraps sglang.srt.layers.moe.topk.select_experts to build the layer's dispatch info where its caller
gave none, so the ids become the physical slots (SGLang's own static dispatch, as its DeepEP path uses it), cast
back to the int32 the KT wrapper's GPU kernels take. Under the trivial map it passes every call through unchanged.
Checked on the H100 host (2026-11-27, benchmarks/results/gpu/moe-budget/hotcheck/): outputs at kernel rounding of
the unplaced server's with it, 3.5x further without it.

Opt-in, with ``VRAMKIT_KT_GPU_LAYERS`` and a GPTQ-Int4 checkpoint: ``VRAMKIT_KT_CPU_DECODE=int4`` runs the CPU layers'
decode batches on the checkpoint's own 4-bit values (int4_experts.c; vramkit_int4_experts.py says how and why).

With ``VRAMKIT_KT_GPU_LAYERS``: ``VRAMKIT_KT_GPU_PREFILL=<tokens>`` runs a CPU layer's forward of
at least that many tokens (a prompt chunk) on the GPU, its GPTQ-Int4 or block-FP8 experts copied in from pinned host
RAM (vramkit_gpu_prefill.py says how and why; the planner's kt_gpu_prefill knob sets it and plans its memory).

``VRAMKIT_KT_EMBED_HOST=on``: once the weights are loaded, the token embeddings move to pinned host RAM and the GPU
reads each token's row over the bus (vramkit_host_embed.py; the planner's kt_embed_host knob sets it and gives their
GPU memory to the KV pool and the GPU experts).

Opt-in, for diagnosis only, ``VRAMKIT_CUDA_SNAPSHOT=<path prefix>``: the weight load (ModelRunner.load_model) runs
under torch's CUDA memory-history recorder, and the snapshot at its end (after SGLang's own empty_cache, where it reads
"mem usage") is dumped to ``<prefix>.gpu<N>.pickle``: every segment the caching allocator holds, its free blocks and
each allocation's stack. benchmarks/gpu/alloc_snapshot.py reads it (the marlin load's 0.06-0.07 GiB that the planner's
replay does not place, issue 18).

Opt-in, for benchmarks only, ``VRAMKIT_DUMMY_SEED_BY_NAME=1``: ``--load-format dummy`` weights seeded by each
parameter's name. SGLang 0.5.15.post1's dummy loader (model_loader/weight_utils.py initialize_dummy_weights) seeds
every parameter with the same seed, 1234, so parameters of one shape hold the same values: every layer's router and
norms are identical, and the residual stream, ~1e-3 values, stays close to the token's embedding (derived from the
values' size). Every layer then sends a token to nearly the same experts (measured: each layer's recorded routing
correlates 0.98 with layer 0's, benchmarks/results/gpu/moe-budget.md), unlike a trained model. Seeded by name, each
parameter draws its own values from the same uniform range, so the proxy's layers route independently.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

TARGET = "kt_kernel"
SGLANG_KT = "sglang.srt.layers.moe.kt_ep_wrapper"
LAYERS_ENV = "VRAMKIT_KT_GPU_LAYERS"
SGLANG_TOPK = "sglang.srt.layers.moe.topk"
DISPATCH_ENV = "VRAMKIT_KT_PLACEMENT_DISPATCH"
SGLANG_LOADER = "sglang.srt.model_loader.loader"
DUMMY_ENV = "VRAMKIT_DUMMY_SEED_BY_NAME"
GGML_ENV = "VRAMKIT_KT_GGML"
INT4_ENV = "VRAMKIT_KT_CPU_DECODE"     # "int4": the CPU layers' decode on the GPTQ-Int4 values (vramkit_int4_experts)
SGLANG_RUNNER = "sglang.srt.model_executor.model_runner"
SNAPSHOT_ENV = "VRAMKIT_CUDA_SNAPSHOT"
PREFILL_ENV = "VRAMKIT_KT_GPU_PREFILL"
EMBED_ENV = "VRAMKIT_KT_EMBED_HOST"     # "on": the token embeddings in pinned host RAM (vramkit_host_embed.py)


def gpu_layers(spec: str, num_layers: int, num_experts: int, per_layer: int | None) -> frozenset[int]:
    """The layers whose experts all sit on the GPU: ``auto`` = the last per_layer x layers // experts,
    else a list of layers and ranges ('32-47,0')."""
    spec = spec.strip()
    if spec == "auto":
        n = (per_layer or 0) * num_layers // num_experts
        return frozenset(range(num_layers - n, num_layers))
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    if any(not 0 <= i < num_layers for i in out):
        raise ValueError(f"{LAYERS_ENV}={spec!r} names a layer outside 0..{num_layers - 1}")
    return frozenset(out)


def physical_cores() -> int:
    """Physical cores this process may run on: distinct (package, core) pairs of its affinity (logical CPUs where
    /sys does not say)."""
    cpus = sorted(os.sched_getaffinity(0))
    seen = set()
    for c in cpus:
        try:
            topo = f"/sys/devices/system/cpu/cpu{c}/topology"
            with open(f"{topo}/physical_package_id") as a, open(f"{topo}/core_id") as b:
                seen.add((a.read().strip(), b.read().strip()))
        except OSError:
            return len(cpus)
    return len(seen) or len(cpus)


# Whole layers with a float16 (GPTQ-Int4) checkpoint, measured on the 16-core H100 host (2026-11-27,
# benchmarks/results/gpu/moe-budget.md): every CPU layer stalled the GPU 7.7 ms at 14 KT threads (8.4 tok/s) and
# 0.76 ms at 10 (profiled): kt-kernel's spinning workers left SGLang's scheduler and host nodes too few cores. At 12
# (moe-budget/seed-layers, dummy weights seeded by name) whole layers decoded 70.9 tok/s, 1.32x the per-layer split
# at 12 threads paired by prompt, and 1.12x their own 10-thread server: the bound is the measured 12 of 16.
WHOLE_LAYER_THREADS_OK = (12, 16)


def placement_warning(hf: dict, kt_threads: int | None, cores: int) -> str | None:
    """Why whole layers may stall this checkpoint with these KT threads on `cores` physical cores, or None."""
    quant = str((hf.get("quantization_config") or {}).get("quant_method", "")).lower()
    if not (quant in ("gptq", "awq") or str(hf.get("torch_dtype", "")) == "float16"):
        return None
    ok, of = WHOLE_LAYER_THREADS_OK
    bound = max(1, cores * ok // of)
    if kt_threads is not None and kt_threads <= bound:
        return None
    return (f"vramkit_kt_compat: warning: {LAYERS_ENV} with a {quant or 'float16'} checkpoint stalled every CPU layer "
            f"7.7 ms at 14 KT threads of 16 cores and ran at {ok} (benchmarks/results/gpu/moe-budget.md); this "
            f"server runs {kt_threads} on {cores} physical cores: pass --kt-cpuinfer {bound} or fewer, or unset "
            f"{LAYERS_ENV}")


def first_n_mask(num_experts: int, num_gpu_experts: int | None):
    """The bool mask [num_experts] for SGLang's layout: experts 0..N-1 on the GPU (None = all on the CPU)."""
    import torch
    if num_gpu_experts is None:
        return None
    n = int(num_gpu_experts)
    if not 0 <= n <= num_experts:
        raise ValueError(f"num_gpu_experts={n} is outside 0..{num_experts}")
    mask = torch.zeros(num_experts, dtype=torch.bool)
    mask[:n] = True
    return mask


def patch(module) -> None:
    """Replace module.KTMoEWrapper by a subclass that also accepts num_gpu_experts (idempotent)."""
    orig = module.KTMoEWrapper
    if getattr(orig, "_vramkit_compat", False):
        return
    import inspect
    if "gpu_experts_mask" not in inspect.signature(orig.__new__).parameters:
        return  # an old kt-kernel that still speaks SGLang's argument: nothing to adapt
    # (0.7.x's __new__ has both: gpu_experts_mask for inference, num_gpu_experts for its SFT mode only)

    class KTMoEWrapper(orig):  # the static methods (set_capture_batch_sizes, ...) are inherited
        _vramkit_compat = True

        def __new__(cls, *args, num_gpu_experts=None, gpu_experts_mask=None, **kwargs):
            if gpu_experts_mask is None and num_gpu_experts is not None:
                gpu_experts_mask = first_n_mask(int(kwargs["num_experts"]), num_gpu_experts)
            # orig.__new__ returns a backend object (not an instance of cls), so __init__ is not re-run
            return orig.__new__(orig, *args, gpu_experts_mask=gpu_experts_mask, **kwargs)

    KTMoEWrapper.__doc__ = orig.__doc__
    module.KTMoEWrapper = KTMoEWrapper


def _hf_config(server_args) -> dict:
    # SGLang 0.5.15.post1's ServerArgs has no get_hf_config: its own create_kt_config_from_server_args
    # catches the AttributeError and leaves KTConfig.num_layers None
    import json
    with open(os.path.join(server_args.model_path, "config.json")) as f:
        hf = json.load(f)
    return hf.get("text_config", hf)


def patch_sglang_kt(module, spec: str) -> None:
    """SGLang's kt_ep_wrapper module, patched before fused_moe_triton/layer.py imports
    create_kt_config_from_server_args from it (idempotent):
    - always: KTConfig.num_layers filled in, so the last layer defers nothing as SGLang means it to (its
      lookup fails on 0.5.15.post1 and the last layer's deferred experts were dropped);
    - with ``spec`` (VRAMKIT_KT_GPU_LAYERS): per-layer placement."""
    if getattr(module, "_vramkit_patched", False):
        return
    import dataclasses

    orig_config = module.create_kt_config_from_server_args
    method = module.KTEPWrapperMethod
    chosen: dict = {}

    def placement(server_args):
        if "layers" not in chosen:
            hf = _hf_config(server_args)
            n_layers = int(hf["num_hidden_layers"])
            chosen["layers"] = n_layers
            if spec:
                gpu = gpu_layers(spec, n_layers, int(hf["num_experts"]), server_args.kt_num_gpu_experts)
                cpu = [i for i in range(n_layers) if i not in gpu]
                chosen.update(gpu=gpu, last_cpu=max(cpu) if cpu else -1)
                print(f"vramkit_kt_compat: {LAYERS_ENV}={spec}: experts of layers {sorted(gpu)} all on the GPU "
                      f"({len(gpu)} layers, no CPU round trip), the other {len(cpu)} layers' experts all on the "
                      "CPU", file=sys.stderr, flush=True)
                if (warn := placement_warning(hf, server_args.kt_cpuinfer, physical_cores())) is not None:
                    print(warn, file=sys.stderr, flush=True)
        return chosen

    def create_kt_config_from_server_args(server_args, layer_idx):
        cfg = orig_config(server_args, layer_idx)
        if cfg is None:
            return None
        p = placement(server_args)
        kw: dict = {}
        if cfg.num_layers is None:
            kw["num_layers"] = p["layers"]
        if spec:
            if layer_idx in p["gpu"]:
                return None                   # SGLang's own fused MoE: every expert on the GPU
            kw["num_gpu_experts"] = 0
            if layer_idx == p["last_cpu"]:
                kw["max_deferred_experts_per_token"] = 0
        return dataclasses.replace(cfg, **kw) if kw else cfg

    module.create_kt_config_from_server_args = create_kt_config_from_server_args
    module._vramkit_patched = True
    if not spec:
        return

    orig_pwal = method.process_weights_after_loading
    orig_runner = method.create_moe_runner
    orig_apply = method.apply
    prefill: dict = {}      # "engine": the GPU prefill (vramkit_gpu_prefill.GpuPrefill), None when off or refused
    int4_state: dict = {}   # "failed": why the int4 decode kernel could not take a layer (later layers do not retry)

    def gpu_prefill(kt_config):
        if "engine" not in prefill:
            import vramkit_gpu_prefill as gp
            from sglang.srt.server_args import get_global_server_args
            least, prefill["engine"] = gp.min_tokens(), None
            if least is not None:
                args = get_global_server_args()
                hf = _hf_config(args)
                why = gp.unsupported(hf, args.load_format, kt_config.max_deferred_experts_per_token or 0)
                if why is not None:
                    gp.say(f"{gp.ENV}={least} not used: {why}; prompt chunks stay on kt-kernel")
                else:
                    prefill["engine"] = gp.GpuPrefill(least, hf, args.model_path, args.load_format == "dummy")
                    gp.say(f"{gp.ENV}={least}: forwards of {least}+ tokens run the CPU layers' experts on the GPU"
                           + (f" ({gp.FP8_AS_ENV}={gp.fp8_as()})" if gp.fp8_block(hf) else ""))
        return prefill["engine"]

    def prefill_off(engine, layer_idx: int, exc: Exception) -> None:
        """Any failure of the GPU prompt path: off for every layer (the server goes on, prompts on kt-kernel)."""
        import vramkit_gpu_prefill as gp
        import vramkit_gpu_share
        shared = vramkit_gpu_share.LAYERS      # the decode share's marlin reads these layers' copies where they are
        engine.drop(keep=frozenset(shared))
        prefill["engine"] = None
        kept = f" (the host copies of {len(shared)} layers stay for {vramkit_gpu_share.ENV})" if shared else ""
        gp.say(f"layer {layer_idx}: {type(exc).__name__}: {exc}; prompts stay on kt-kernel for every layer{kept}")

    def process_weights_after_loading(self, layer):
        if self.num_gpu_experts != 0:
            return orig_pwal(self, layer)
        if self.tp_rank == 0 and self.wrapper is not None:   # the KT half of the original, no GPU experts
            import torch
            from sglang.srt.eplb.expert_location_dispatch import get_global_expert_location_metadata
            torch.cuda.synchronize()
            order = get_global_expert_location_metadata().physical_to_logical_map_cpu[self.kt_config.layer_idx]
            self.wrapper.load_weights(order.contiguous())
            if os.environ.get(PREFILL_ENV) and (engine := gpu_prefill(self.kt_config)) is not None:
                try:
                    engine.add_layer(self.kt_config.layer_idx, [int(e) for e in order.tolist()],
                                     last=self.kt_config.layer_idx == chosen.get("last_cpu"))
                except Exception as exc:     # noqa: BLE001 -- any failure: off for every layer, the server goes on
                    prefill_off(engine, self.kt_config.layer_idx, exc)
            if os.environ.get(INT4_ENV, "").strip() not in ("", "kt"):   # opt-in: decode on the GPTQ-Int4 values
                import vramkit_int4_experts as vi
                from sglang.srt.server_args import get_global_server_args
                args = get_global_server_args()
                if vi.decode_kernel() == "int4" and "failed" not in int4_state:
                    try:
                        self.wrapper = vi.wrap(
                            self.wrapper, self.kt_config.layer_idx, _hf_config(args), args.model_path,
                            args.load_format == "dummy", [int(e) for e in order.tolist()], args.kt_cpuinfer,
                            self.kt_config.max_deferred_experts_per_token or 0,
                            last=self.kt_config.layer_idx == chosen.get("last_cpu"), bus=bus_copy(self.kt_config))
                    except (ValueError, OSError, RuntimeError) as exc:   # this and every later layer on kt-kernel
                        int4_state["failed"] = str(exc)
                        print(f"vramkit_int4_experts: layer {self.kt_config.layer_idx}: {exc}; the CPU layers' "
                              "decode stays on kt-kernel from here on", file=sys.stderr, flush=True)
            import vramkit_gpu_prefill
            vramkit_gpu_prefill.release()     # the layer's raw GPTQ tensors, once both consumers have their copies
            if os.environ.get(GGML_ENV):      # opt-in: decode batches on llama.cpp's CPU kernels
                import vramkit_ggml_experts
                from sglang.srt.server_args import get_global_server_args
                args = get_global_server_args()
                self.wrapper = vramkit_ggml_experts.wrap(
                    self.wrapper, self.kt_config.layer_idx, _hf_config(args), args.kt_cpuinfer,
                    self.kt_config.max_deferred_experts_per_token or 0, args.init_expert_location != "trivial")

    def bus_copy(kt_config):
        """The GPU prompt path's pinned marlin copy of this CPU layer (GPTQ-Int4 only), for VRAMKIT_INT4_GPU_SHARE."""
        engine = prefill.get("engine")
        if engine is None or engine.block is not None:
            return None
        return engine.host.get(kt_config.layer_idx)

    def create_moe_runner(self, layer, moe_runner_config):
        if self.num_gpu_experts != 0:
            return orig_runner(self, layer, moe_runner_config)
        self.moe_runner_config = moe_runner_config

    def apply(self, layer, dispatch_output):
        if self.num_gpu_experts != 0:
            return orig_apply(self, layer, dispatch_output)
        from sglang.srt.layers.moe.token_dispatcher import StandardCombineInput
        x = dispatch_output.hidden_states
        engine = prefill.get("engine")
        if engine is not None and engine.wants(self.kt_config.layer_idx, x.shape[0]):
            try:
                return engine.run(self.kt_config.layer_idx, dispatch_output, self.moe_runner_config)
            except Exception as exc:     # noqa: BLE001 -- any failure: off for every layer, this chunk on kt-kernel
                prefill_off(engine, self.kt_config.layer_idx, exc)
        if getattr(self.wrapper, "share", None) is not None:     # the GPU's share runs SGLang's marlin: its config
            self.wrapper.runner_config = self.moe_runner_config
        self.submit(layer, dispatch_output)
        return StandardCombineInput(hidden_states=self.sync(x).clone())

    method.process_weights_after_loading = process_weights_after_loading
    method.create_moe_runner = create_moe_runner
    method.apply = apply


def patch_sglang_topk(module) -> None:
    """select_experts with the layer's ExpertLocationDispatchInfo where its caller passed none and the server runs a
    non-trivial --init-expert-location (idempotent; the module docstring says why)."""
    if getattr(module, "_vramkit_patched", False):
        return
    orig = module.select_experts
    placed: list[bool] = []         # whether this server runs a placement: read once, at the first call

    def select_experts(*args, **kwargs):
        if kwargs.get("expert_location_dispatch_info") is not None or kwargs.get("layer_id") is None:
            return orig(*args, **kwargs)
        if not placed:
            from sglang.srt.server_args import get_global_server_args
            where = get_global_server_args().init_expert_location
            placed.append(where != "trivial")
            if placed[0]:     # once per process: the server log shows the placement is mapped (its evidence)
                print(f"vramkit_kt_compat: --init-expert-location {where}: the router's ids mapped to it on the "
                      f"one-GPU forward ({DISPATCH_ENV}=0 turns this off)", file=sys.stderr, flush=True)
        if not placed[0]:
            return orig(*args, **kwargs)
        from sglang.srt.eplb.expert_location_dispatch import ExpertLocationDispatchInfo
        kwargs["expert_location_dispatch_info"] = ExpertLocationDispatchInfo.init_new(layer_id=kwargs["layer_id"])
        out = orig(*args, **kwargs)
        # the static map is an int64 tensor and CUDA indexing keeps its dtype (SGLang casts back on HIP only: DeepEP
        # takes int64), while the KT wrapper's GPU kernels check for int32 (measured: "expert_ids must have dtype
        # int32" at the first graph capture, H100 host 2026-11-27)
        import torch
        return out if out.topk_ids.dtype == torch.int32 else out._replace(topk_ids=out.topk_ids.to(torch.int32))

    module.select_experts = select_experts
    module._vramkit_patched = True


def seed_by_name(name: str, seed: int = 1234) -> int:
    """A parameter's own seed: SGLang's dummy seed plus the CRC-32 of its name (stable across processes)."""
    import zlib
    return seed + zlib.crc32(name.encode())


def patch_dummy_loader(module) -> None:
    """The loader's initialize_dummy_weights, each state-dict entry seeded by its name (idempotent; opt-in, the
    module docstring says why)."""
    if getattr(module, "_vramkit_dummy_patched", False):
        return
    orig = module.initialize_dummy_weights

    def initialize_dummy_weights(model, low: float = -1e-3, high: float = 1e-3, seed: int = 1234) -> None:
        import torch
        print(f"vramkit_kt_compat: {DUMMY_ENV}=1: dummy weights seeded by parameter name", file=sys.stderr,
              flush=True)
        for name, tensor in model.state_dict().items():
            one = torch.nn.Module()          # SGLang's own fill (FP8 included) on this entry alone, its own seed
            one.register_buffer("t", tensor)
            orig(one, low=low, high=high, seed=seed_by_name(name, seed))

    module.initialize_dummy_weights = initialize_dummy_weights
    module._vramkit_dummy_patched = True


def patch_model_runner(module, prefix: str) -> None:
    """ModelRunner.load_model under torch's CUDA memory-history recorder, its snapshot dumped at the end (idempotent;
    opt-in, the module docstring says why)."""
    runner = module.ModelRunner
    if getattr(runner, "_vramkit_snapshot", False):
        return
    orig = runner.load_model

    def load_model(self, *args, **kwargs):
        import torch
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
        try:
            return orig(self, *args, **kwargs)
        finally:
            path = f"{prefix}.gpu{torch.cuda.current_device()}.pickle"
            torch.cuda.memory._dump_snapshot(path)
            torch.cuda.memory._record_memory_history(enabled=None)
            print(f"vramkit_kt_compat: {SNAPSHOT_ENV}: the weight load's CUDA memory snapshot in {path}",
                  file=sys.stderr, flush=True)

    runner.load_model = load_model
    runner._vramkit_snapshot = True


def _patch_for(fullname: str):
    if fullname == TARGET:
        return patch
    if fullname == SGLANG_KT:
        spec = os.environ.get(LAYERS_ENV, "").strip()
        return lambda m: patch_sglang_kt(m, spec)
    if fullname == SGLANG_TOPK and os.environ.get(DISPATCH_ENV) != "0":
        return patch_sglang_topk
    if fullname == SGLANG_LOADER and os.environ.get(DUMMY_ENV) == "1":
        return patch_dummy_loader
    if fullname == SGLANG_RUNNER:
        prefix = os.environ.get(SNAPSHOT_ENV, "").strip()
        embed = os.environ.get(EMBED_ENV, "").strip() == "on"
        if not (prefix or embed):
            return None

        def runner(m) -> None:      # the embeddings' move wraps the load, inside the snapshot's recording
            if embed:
                import vramkit_host_embed
                vramkit_host_embed.patch_model_runner(m)
            if prefix:
                patch_model_runner(m, prefix)
        return runner
    return None


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, after):
        self.inner = inner
        self.after = after

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        self.after(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        after = _patch_for(fullname)
        if after is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, after)
        return spec


def install() -> None:
    """Patch kt_kernel, SGLang's KT wrapper and its TopK (the placement dispatch) when (or if already)
    imported; safe to call more than once."""
    for name in (TARGET, SGLANG_KT, SGLANG_TOPK, SGLANG_LOADER, SGLANG_RUNNER):
        after = _patch_for(name)
        if after is not None and name in sys.modules:
            after(sys.modules[name])
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
