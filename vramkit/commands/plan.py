"""`vramkit plan`: what SGLang will allocate, whether it fits, and what would if not."""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from vramkit import catalog
from vramkit.catalog import GpuSpec, ModelSpec
from vramkit.core.planner import VALID_KV_DTYPES, Knobs, Plan, Target, plan
from vramkit.errors import Exit, VramkitError
from vramkit.units import GiB, bytes2human

DEFAULT_MODEL = "qwen2.5-coder-14b-instruct-gptq-int4"
DEFAULT_GPU = "rtx-5060-ti-16gb"      # the first user's kind of card; `--gpu auto` reads the real one


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """The knobs `plan`, `up` and `render` share."""
    g = p.add_argument_group("what to run")
    g.add_argument("--preset", help=f"one of: {', '.join(catalog.presets())} (knobs below override it)")
    g.add_argument("--model", help=f"a catalogued model or a folder with config.json (default: the preset's, "
                                   f"else {DEFAULT_MODEL})")
    g.add_argument("--gpu", help=f"a catalogued GPU, or 'auto' to read it through NVML (default {DEFAULT_GPU})")
    g.add_argument("--gpu-free-gib", type=float,
                   help="memory free when SGLang starts loading weights (its log: 'Load weight begin. avail mem=')")
    g.add_argument("--other-used-gib", type=float, default=0.0, help="memory other processes hold on the card")
    g.add_argument("--host-ram-gib", type=float, help="available host RAM (default: read with psutil)")
    k = p.add_argument_group("knobs (override the preset)")
    k.add_argument("--context", type=int, help="tokens in one request (prompt + output)")
    k.add_argument("--concurrency", type=int, help="requests of that context at once")
    k.add_argument("--kv-dtype", choices=VALID_KV_DTYPES, help="SGLang --kv-cache-dtype (auto = model dtype)")
    k.add_argument("--mem-fraction", type=float, help="SGLang --mem-fraction-static")
    k.add_argument("--chunked-prefill", type=int, help="SGLang --chunked-prefill-size")
    k.add_argument("--cuda-graph-max-bs", type=int, help="decode CUDA graph batch size; 0 = graphs off")
    k.add_argument("--max-running", type=int, help="SGLang --max-running-requests")
    k.add_argument("--hicache-gib", type=float, help="host-RAM KV cache in GB (0 = off)")
    k.add_argument("--cpu-offload-gib", help="weights kept in host RAM, whole GiB, or 'auto'")
    k.add_argument("--tp", type=int, help="tensor parallel size (GPUs)")


@dataclass
class Resolved:
    model: ModelSpec
    gpu: GpuSpec | None
    target: Target
    knobs: Knobs
    preset: str | None
    plan: Plan


def resolve(args: argparse.Namespace, *, read_gpu=None, read_host=None) -> Resolved:
    """Raw arguments -> a plan. `read_gpu()`/`read_host()` are the adapters (NVML, psutil), passed in."""
    preset = catalog.preset(args.preset) if args.preset else None
    model = catalog.model(args.model or (preset.model if preset and preset.model else DEFAULT_MODEL))
    knobs = dict(preset.knobs) if preset else {}
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

    engine = catalog.engine()
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
    return Resolved(model, gpu, target, knobs_obj, preset.name if preset else None,
                    plan(model, target, knobs_obj, engine, candidates=tuple(catalog.models().values())))


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
    from vramkit.core.render import model_path_for, sglang_args
    d = r.plan.to_json()
    d["preset"] = r.preset
    d["sglang_args"] = sglang_args(r.model, r.plan, model_path=model_path_for(r.model))
    return d


def render_plan(r: Resolved):
    """Rich renderables for a plan (the terminal edge)."""
    from rich.table import Table
    from rich.text import Text

    p = r.plan
    k = p.knobs
    t = Table(title=f"{r.model.name} on {r.gpu.label if r.gpu else 'the given free memory'}"
                    + (f"  [preset {r.preset}]" if r.preset else ""), show_header=True, header_style="bold")
    t.add_column("what", style="cyan")
    t.add_column("value", justify="right")
    t.add_column("how", style="dim")
    rows = [
        ("free at start", bytes2human(p.free_at_start_bytes), "card - others - CUDA context (measured)"),
        ("weights on GPU", bytes2human(p.weights_bytes), ", ".join(
            f"{n} {bytes2human(b, digits=2)}" for n, b in p.weights_by_component.items() if b)),
        ("weights in host RAM", bytes2human(p.weights_offloaded_bytes), f"--cpu-offload-gb {k['cpu_offload_gib']}"),
        ("KV bytes / token", f"{p.kv_bytes_per_token:,} B", f"kv dtype {k['kv_dtype']}, tp {k['tp']}"),
        ("KV pool", f"{p.kv_pool_tokens:,} tok", f"{bytes2human(p.kv_pool_bytes)} at mem_fraction {k['mem_fraction']}"),
        ("context (SGLang)", f"{p.context_len:,}", f"YaRN x{p.yarn_factor:g}" if p.yarn_factor else "native"),
        ("longest prompt", f"< {p.max_request_tokens:,}", "min(context-1, pool-1) - 5"),
        (f"requests of {k['context']:,} at once", str(p.max_concurrent_requests), "pool // context"),
        ("peak GPU memory", bytes2human(p.peak_vram_bytes), "as nvidia-smi shows the server"),
        ("free after start-up", bytes2human(p.startup_free_bytes),
         f"activations of a {k['chunked_prefill']}-token step: {bytes2human(p.activation_bytes)}"),
        ("decode ceiling (1 stream)", f"{p.decode_tok_s_ceiling:.1f} tok/s" if p.decode_tok_s_ceiling else "n/a",
         "bandwidth / bytes read per token (+ PCIe for offloaded weights)"),
        ("host RAM pinned", bytes2human(p.host_ram_bytes), "hierarchical cache + offloaded weights"),
    ]
    for row in rows:
        t.add_row(*row)
    verdict = Text("FITS" if p.fits else "DOES NOT FIT", style="bold green" if p.fits else "bold red")
    out = [t, verdict]
    for reason in p.reasons:
        out.append(Text(f"  x {reason}", style="red"))
    for note in p.notes:
        out.append(Text(f"  - {note}", style="yellow"))
    if p.alternatives:
        at = Table(title="what would fit instead (re-planned, best first)", show_header=True)
        at.add_column("change")
        at.add_column("fits")
        at.add_column("cost", style="dim")
        for a in p.alternatives:
            at.add_row(a.change, "yes" if a.fits else "no", a.cost)
        out.append(at)
    return out


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args)
    r = resolve(args, read_gpu=nvml_gpu, read_host=host_available)
    if args.json:
        print(json.dumps(plan_json(r), indent=2, default=str))
    else:
        from rich.console import Console
        from rich.markup import escape

        from vramkit.core.render import model_path_for, sglang_args, shell_line
        con = Console()
        for item in render_plan(r):
            con.print(item)
        argv = sglang_args(r.model, r.plan, model_path=model_path_for(r.model))
        con.print("[bold]SGLang arguments:[/bold] " + escape(shell_line(argv)), soft_wrap=True)
    return 0 if r.plan.fits else int(Exit.NO_FIT)


def _list(args) -> int:
    from vramkit.hf_config import FAMILIES, QUANT_METHODS
    data = {
        "models": {n: f"[{m.family}{', ' + m.quantization.method if m.quantization else ''}] {m.note}"
                   for n, m in catalog.models().items()},
        "gpus": {n: g.label for n, g in catalog.gpus().items()},
        "presets": {n: p.description for n, p in catalog.presets().items()},
        "architectures modelled (any folder with one of these config.json files)": FAMILIES,
        "quantization methods modelled": {m: "" for m in QUANT_METHODS},
        "refused (exit 20, with the reason)": {
            "other architectures": "e.g. multimodal (Gemma3ForConditionalGeneration, Mistral3...), Mamba hybrids",
            "other quantization": "bitsandbytes, GGUF, NVFP4/modelopt, AWQ 8-bit, compressed-tensors int",
            "Qwen-MoE dense layers": "decoder_sparse_step != 1 or mlp_only_layers: SGLang builds every layer sparse",
        },
    }
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        for kind, items in data.items():
            print(f"{kind}:")
            for n, d in items.items():
                print(f"  {n:40s} {d}".rstrip())
    return 0


def register(sub) -> None:
    p = sub.add_parser("plan", help="what SGLang will allocate and whether it fits",
                       description="Compute what SGLang 0.5.15.post1 will allocate for a model on a GPU, "
                                   "whether the target fits, and what would if not. Exit 0 fits, 10 does not.")
    add_plan_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--list", action="store_true", help="list the catalogued models, GPUs and presets")
    p.set_defaults(func=run)
