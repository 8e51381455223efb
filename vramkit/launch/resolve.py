"""A launch request (core/plan/request.py: preset, knobs, GPU) resolved into a plan: the knob merge, the GPU
read through NVML, the host RAM read through psutil. `vramkit plan` and `vramkit up` both start here."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from vramkit import catalog
from vramkit.core.memory.weight_load import prelude_bytes
from vramkit.core.model.spec import GpuSpec, ModelSpec
from vramkit.core.plan import kt_placement as kp
from vramkit.core.plan.knobs import Knobs, by_name
from vramkit.core.plan.planner import Plan, Target, plan, unasked_context
from vramkit.core.plan.request import PlanRequest
from vramkit.errors import Exit, VramkitError
from vramkit.launch import reference
from vramkit.launch.hybrid import Hybrid, adapter_for, for_plan, host_cpu, this_host_isa
from vramkit.units import GiB

DEFAULT_MODEL = "qwen2.5-coder-14b-instruct-gptq-int4"
DEFAULT_GPU = reference.GPU           # the first user's kind of card; `--gpu auto` reads the real one


@dataclass
class Resolved:
    model: ModelSpec
    gpu: GpuSpec | None
    target: Target
    knobs: Knobs
    preset: str | None
    plan: Plan
    hybrid: Hybrid | None = None            # the launch side of plan.hybrid (kt_method)
    free_source: str = ""                   # where the free memory at start came from, in words
    host_ram_source: str = ""               # where the host RAM figure came from (given, or this machine's)


def resolve(request: PlanRequest, *, read_gpu=None, read_host=None) -> Resolved:
    """A request -> a plan. `read_gpu()`/`read_host()` are the adapters (NVML, psutil), passed in."""
    preset = catalog.preset(request.preset) if request.preset else None
    model = catalog.model(request.model or (preset.model if preset and preset.model else DEFAULT_MODEL),
                          request.revision)
    asked = (preset.knobs if preset else {}) | dict(request.knobs)
    context_note = None
    if "context" not in asked:      # the knob's default: no YaRN the user did not ask for
        context, context_note = unasked_context(model, Knobs().context)
        asked = asked | {"context": context}
    knobs_obj = Knobs(**asked)
    engine = catalog.engine()
    maps = prelude_bytes(model)     # SGLang's expert-location maps, on the GPU before the weights (derived)
    gpu_free = int(request.gpu_free_gib * GiB) if request.gpu_free_gib is not None else None
    gpu_name = request.gpu or (None if gpu_free is not None else DEFAULT_GPU)
    gpu: GpuSpec | None = None
    other_used = int((request.other_used_gib or 0.0) * GiB)
    if gpu_name == "auto":
        if read_gpu is None:
            raise VramkitError("--gpu auto needs NVML", "name a GPU with --gpu", Exit.NO_GPU)
        gpu, nvml_free = read_gpu(knobs_obj.tp, link_for=lambda base: gpu_link(request, base))
        if gpu_free is None:   # SGLang sees what is free once its context (tp > 1: NCCL) and expert maps are up
            gpu_free = nvml_free - engine.startup_overhead(knobs_obj.tp) - maps
    elif gpu_name:
        gpu = catalog.gpu(gpu_name)
        link = gpu_link(request, gpu)
        if link is not None:
            gpu = replace(gpu, bandwidth_bytes_s=link[0], pcie_gen=link[1], pcie_lanes=link[2])
    elif gpu_free is not None and (link := gpu_link(request, None)) is not None:
        # only the free memory and the card's figures: a card of its own, sized as the planner sizes a bare
        # free-memory figure (free + what the server takes before its weights), so the decode ceiling is there
        gpu = GpuSpec(name="given-card", label=f"a card with {request.gpu_free_gib:g} GiB free",
                      memory_total_bytes=gpu_free + engine.startup_overhead(knobs_obj.tp) + maps,
                      bandwidth_bytes_s=link[0],
                      pcie_gen=link[1], pcie_lanes=link[2])
    host_avail = (int(request.host_ram_gib * GiB) if request.host_ram_gib is not None
                  else (read_host() if read_host else None))
    host_ram_source = ("given (--host-ram-gib)" if request.host_ram_gib is not None else
                       "this machine's available RAM (psutil; plan another host with --host-ram-gib)"
                       if host_avail is not None else "not known")
    # the CPU side (the hybrid MoE mode, and its alternative for a MoE that does not fit): --cpu-isa or this host's
    host = host_cpu(cpu_isa=request.cpu_isa, host_read=request.host_read_gbs,
                    physical_cores=request.host_cores) if model.moe is not None else None
    target = Target(gpu=gpu, gpu_free_bytes=gpu_free, other_used_bytes=other_used, host_ram_available_bytes=host_avail,
                    host=host)
    p = plan(model, target, knobs_obj, engine, candidates=tuple(catalog.models().values()))
    if context_note:
        p = replace(p, notes=(context_note, *p.notes))
    layers_asked = dict(request.knobs).get("kt_gpu_layers")
    if layers_asked is not None and p.hybrid is None and model.moe is not None:   # said, as --kt-placement is
        p = replace(p, notes=(*p.notes, f"{by_name()['kt_gpu_layers'].cli_flag} {layers_asked} not used: this plan "
                                        "keeps every expert on the GPU (no hybrid MoE mode)"))
    if request.kt_placement and p.hybrid is None:     # said, not refused: a script may pass it to every card size
        p = replace(p, notes=(*p.notes, f"--kt-placement {request.kt_placement} not used: this plan keeps every "
                                        "expert on the GPU (no hybrid MoE mode)"))
    elif request.kt_placement and p.hybrid is not None and not p.hybrid.gpu_layers:   # whole layers: its check refuses
        p = replace(p, notes=(*p.notes, f"--kt-placement {request.kt_placement}: the first {p.hybrid.num_gpu_experts} "
                                        "experts of each of its rows sit on the GPU (SGLang's --init-expert-location; "
                                        "the kit's kt-kernel adapter maps the router's ids to them); the decode "
                                        "estimate above assumes routing spread evenly and does not count the "
                                        f"placement; {kp.SPEED}"))
    here = this_host_isa() if p.hybrid is not None else None
    if request.gpu_free_gib is not None:
        free_source = "given (--gpu-free-gib), not measured"
    elif gpu_name == "auto":
        free_source = "NVML's free now - CUDA context (measured)"
    else:
        free_source = "card - others - driver reserve - CUDA context (those two measured, config/engine.toml)"
    if request.gpu_free_gib is None and maps:
        free_source += f" - SGLang's expert-location maps ({maps / 2**20:.0f} MiB, derived)"
    return Resolved(model, gpu, target, knobs_obj, preset.name if preset else None, p,
                    for_plan(p, request.kt_weight_path, here, request.kt_placement, model.num_layers,
                             model.architecture), free_source, host_ram_source)


def nvml_gpu(tp: int = 1, ids: list[int] | None = None, snap=None, *,
             link_for: Callable[[GpuSpec | None], tuple[float, int, int] | None] | None = None) -> tuple[GpuSpec, int]:
    """The GPUs a server will run on, through NVML: one GpuSpec (the first card's; bandwidth and PCIe from
    `link_for(catalogued twin or None)` when it gives them (the --gpu-bandwidth-gbs / --gpu-pcie figures),
    else from its catalogued twin; a card the catalog lacks without them is refused,
    never given another card's figures) and the smallest free memory among them, since SGLang sizes every
    tensor-parallel rank from the minimum across ranks (model_runner.init_torch_distributed).
    `ids` are NVML indices (default: the first `tp`); `snap` a snapshot already read (default: read one)."""
    from vramkit.adapters import nvml
    from vramkit.core.gpu.snapshot import is_na

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
    known = catalog.gpu_by_nvml_name(str(g.name), int(g.total_bytes))
    link = link_for(known) if link_for is not None else None
    if link is None and known is not None:
        link = (known.bandwidth_bytes_s, known.pcie_gen, known.pcie_lanes)
    if link is None:
        raise VramkitError(f"GPU {ids[0]} ({g.name}) is not in config/gpus.toml: its memory bandwidth and PCIe link, "
                           "which the decode ceiling needs, are unknown",
                           "give --gpu-bandwidth-gbs N --gpu-pcie GENxLANES from its spec sheet, or add the card "
                           "to config/gpus.toml", Exit.BAD_INPUT)
    bandwidth, gen, lanes = link
    spec = GpuSpec(name=known.name if known else f"nvml:{g.name}", label=str(g.name),
                   memory_total_bytes=min(int(x.total_bytes) for x in chosen), bandwidth_bytes_s=bandwidth,
                   pcie_gen=gen, pcie_lanes=lanes, nvml_names=(str(g.name),),
                   # NVML's compute capability (MXFP4's layout), else the catalogued twin's; the SM count (marlin's
                   # workspace) NVML does not give: the twin's, else the planner's stated default
                   sm_count=known.sm_count if known else None,
                   compute_capability=(g.compute_capability if not is_na(g.compute_capability)
                                       else known.compute_capability if known else None))
    return spec, min(int(x.free_bytes) for x in chosen)


def gpu_link(request: PlanRequest, base: GpuSpec | None) -> tuple[float, int, int] | None:
    """(bandwidth B/s, PCIe gen, lanes) from --gpu-bandwidth-gbs / --gpu-pcie over `base` (a catalogued card's);
    None when neither is given. For a card the catalog lacks both are needed: no guessed figure."""
    if request.gpu_bandwidth_gbs is None and request.gpu_pcie is None:
        return None
    bandwidth = (request.gpu_bandwidth_gbs * 1e9 if request.gpu_bandwidth_gbs is not None
                 else (base.bandwidth_bytes_s if base else None))
    gen, lanes = request.gpu_pcie or ((base.pcie_gen, base.pcie_lanes) if base else (None, None))
    if bandwidth is None or gen is None or lanes is None:
        missing = "--gpu-pcie GENxLANES" if gen is None else "--gpu-bandwidth-gbs N"
        raise VramkitError("a card the catalog lacks needs both its memory bandwidth and its PCIe link",
                           f"add {missing} (spec sheet)", Exit.BAD_INPUT)
    return bandwidth, gen, lanes


def host_available() -> int:
    from vramkit.adapters.host import host_memory
    return host_memory()[1]


def default_model_path(model: ModelSpec, revision: str | None = None) -> str:
    """What SGLang loads when --model-path does not say: the folder `vramkit pull` recorded for the model's Hub
    id (so nothing is downloaded twice), else the Hub id (SGLang downloads it), else a folder model's folder."""
    from vramkit.core.render.sglang import model_path_for
    if model.hf_id:
        from vramkit.adapters import hub
        folder = hub.pulled_folder(model.hf_id, revision)
        if folder is not None:
            return str(folder)
    return model_path_for(model)


def plan_args(r: Resolved, revision: str | None = None) -> list[str]:
    """The SGLang arguments of a plan as `vramkit plan` shows them (the pulled folder, else the model's hf_id, or
    a folder model's folder; SGLang's port), with --kt-weight-path in the hybrid MoE mode."""
    from vramkit.core.render.sglang import sglang_args
    path = default_model_path(r.model, revision)
    extra = r.hybrid.args(path) if r.hybrid is not None else []
    return sglang_args(r.model, r.plan, model_path=path, port=catalog.sglang().port) + extra


def plan_json(r: Resolved) -> dict:
    d = r.plan.to_json()
    d["preset"] = r.preset
    d["sglang_args"] = plan_args(r)
    if r.hybrid is not None:
        d["hybrid"] |= r.hybrid.to_json()
    if (adapter := adapter_for(r.hybrid, r.plan)) is not None:
        d["server_env"] = adapter.adapter_env()      # the kit's adapter's settings (VRAMKIT_KT_GPU_LAYERS, ...)
    return d
