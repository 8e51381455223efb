"""A launch request (preset, knobs, GPU) resolved into a plan: the knob merge, the GPU read through NVML, the
host RAM read through psutil. `vramkit plan` and `vramkit up` both start here."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from vramkit import catalog
from vramkit.catalog import GpuSpec, ModelSpec
from vramkit.core.planner import Engine, Knobs, Plan, Target, plan
from vramkit.errors import Exit, VramkitError
from vramkit.units import GiB

DEFAULT_MODEL = "qwen2.5-coder-14b-instruct-gptq-int4"
DEFAULT_GPU = "rtx-5060-ti-16gb"      # the first user's kind of card; `--gpu auto` reads the real one


@dataclass
class Resolved:
    model: ModelSpec
    gpu: GpuSpec | None
    target: Target
    knobs: Knobs
    preset: str | None
    plan: Plan
    hybrid: object = None       # launch.hybrid.Hybrid when the experts are split GPU / host RAM (kt_*)


def resolve(args: argparse.Namespace, *, read_gpu=None, read_host=None) -> Resolved:
    """Raw arguments -> a plan. `read_gpu()`/`read_host()` are the adapters (NVML, psutil), passed in."""
    preset = catalog.preset(args.preset) if args.preset else None
    model = catalog.model(args.model or (preset.model if preset and preset.model else DEFAULT_MODEL))
    knobs = dict(preset.knobs) if preset else {}
    kt = {k: knobs.pop(k) for k in list(knobs) if k.startswith("kt_")}
    for name in ("context", "concurrency", "kv_dtype", "mem_fraction", "chunked_prefill", "cuda_graph_max_bs",
                 "max_running", "hicache_gib", "tp"):
        if getattr(args, name, None) is not None:
            knobs[name] = getattr(args, name)
    if getattr(args, "cpu_offload_gib", None) is not None:
        v = args.cpu_offload_gib
        if v != "auto" and not str(v).isdigit():
            raise VramkitError(f"--cpu-offload-gib {v!r}: SGLang's --cpu-offload-gb takes whole GiB",
                               "give an integer or 'auto'", Exit.BAD_INPUT)
        knobs["cpu_offload_gib"] = v if v == "auto" else int(v)
    if knobs.get("mem_fraction") is not None and not 0.1 <= knobs["mem_fraction"] < 1.0:
        raise VramkitError(f"--mem-fraction {knobs['mem_fraction']} is outside (0.1, 1)", "try 0.75-0.88")
    for name in ("context", "concurrency"):
        if knobs.get(name) is not None and knobs[name] < 1:
            raise VramkitError(f"--{name} must be at least 1", "", Exit.BAD_INPUT)
    knobs_obj = Knobs(**knobs)

    engine = Engine.from_config(catalog.engine_constants())
    gpu_free = int(args.gpu_free_gib * GiB) if args.gpu_free_gib is not None else None
    gpu_name = args.gpu or (None if gpu_free is not None else DEFAULT_GPU)
    gpu: GpuSpec | None = None
    other_used = int(args.other_used_gib * GiB)
    if gpu_name == "auto":
        if read_gpu is None:
            raise VramkitError("--gpu auto needs NVML", "name a GPU with --gpu", Exit.NO_GPU)
        gpu, nvml_free = read_gpu(knobs_obj.tp)
        if gpu_free is None:   # SGLang sees what is free once its context (and, tp > 1, NCCL) is up
            gpu_free = nvml_free - engine.startup_overhead(knobs_obj.tp)
    elif gpu_name:
        gpu = catalog.gpu(gpu_name)
    host_avail = int(args.host_ram_gib * GiB) if args.host_ram_gib is not None else (read_host() if read_host else None)
    target = Target(gpu=gpu, gpu_free_bytes=gpu_free, other_used_bytes=other_used, host_ram_available_bytes=host_avail)
    r = Resolved(model, gpu, target, knobs_obj, preset.name if preset else None,
                 plan(model, target, knobs_obj, engine, candidates=tuple(catalog.models().values())))
    from vramkit.launch import hybrid
    return hybrid.apply(r, kt, args)


def nvml_gpu(tp: int = 1, ids: list[int] | None = None, snap=None) -> tuple[GpuSpec, int]:
    """The GPUs a server will run on, through NVML: one GpuSpec (the first card's; its catalogued twin gives
    bandwidth and PCIe when known) and the smallest free memory among them, since SGLang sizes every
    tensor-parallel rank from the minimum across ranks (model_runner.init_torch_distributed).
    `ids` are NVML indices (default: the first `tp`); `snap` a snapshot already read (default: read one)."""
    from vramkit.adapters import nvml
    from vramkit.core.gpu_snapshot import is_na

    ids = list(ids) if ids else list(range(max(1, tp)))
    if snap is None:
        snap = nvml.read_snapshot(with_processes=False)
    if snap.unavailable is not None or not snap.gpus:
        reason = snap.unavailable.reason if snap.unavailable is not None else "no GPU"
        raise VramkitError(f"no GPU to plan for ({reason})", "name one with --gpu (e.g. --gpu rtx-4080-16gb)",
                           Exit.NO_GPU)
    missing = [i for i in ids if not 0 <= i < len(snap.gpus)]
    if missing:
        raise VramkitError(f"GPU {missing[0]} is not there: NVML sees {len(snap.gpus)} (0-{len(snap.gpus) - 1})",
                           "pick --gpus from `nvidia-smi -L`, or lower --tp", Exit.NO_GPU)
    chosen = [snap.gpus[i] for i in ids]
    for i, g in zip(ids, chosen, strict=True):
        if g.error is not None or is_na(g.total_bytes) or is_na(g.free_bytes):
            raise VramkitError(f"GPU {i} did not answer NVML", "check nvidia-smi, or name one with --gpu", Exit.NO_GPU)
    g = chosen[0]
    known = catalog.gpu_by_nvml_name(str(g.name))
    base = known or catalog.gpu("rtx-4080-16gb")
    spec = GpuSpec(name=known.name if known else f"nvml:{g.name}", label=str(g.name),
                   memory_total_bytes=min(int(x.total_bytes) for x in chosen), bandwidth_bytes_s=base.bandwidth_bytes_s,
                   pcie_gen=base.pcie_gen, pcie_lanes=base.pcie_lanes, nvml_names=(str(g.name),))
    return spec, min(int(x.free_bytes) for x in chosen)


def host_available() -> int:
    from vramkit.adapters.host import host_memory
    return host_memory()[1]


def plan_json(r: Resolved) -> dict:
    from vramkit.core.render import sglang_args
    d = r.plan.to_json()
    d["preset"] = r.preset
    d["sglang_args"] = sglang_args(r.model, r.plan, model_path=r.model.hf_id)
    if r.hybrid is not None:
        d["hybrid"] = r.hybrid.to_json()
        d["sglang_args"] += r.hybrid.args(r.model.hf_id)
    return d
