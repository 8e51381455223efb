"""`vramkit plan`: what SGLang will allocate, whether it fits, and what would if not (parsing and printing;
the resolution is vramkit/launch/resolve.py)."""
from __future__ import annotations

import argparse
import os
import json

from vramkit import catalog
from vramkit.core.planner import VALID_KV_DTYPES
from vramkit.errors import Exit
from vramkit.launch.resolve import DEFAULT_GPU, DEFAULT_MODEL, Resolved, host_available, nvml_gpu, plan_json, resolve
from vramkit.units import bytes2human


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
    m = p.add_argument_group("MoE experts in host RAM (SGLang's KTransformers path; preset moe)")
    m.add_argument("--kt-method", help="CPU expert format: FP8, BF16 (read from the checkpoint), AMXINT4, AMXINT8")
    m.add_argument("--kt-num-gpu-experts", help="experts per layer kept on the GPU (default auto: as many as fit)")
    m.add_argument("--kt-cpuinfer", type=int, help="CPU expert threads (default: physical cores of the server "
                                                   "cpuset minus 2)")
    m.add_argument("--kt-weight-path", default=os.environ.get("KT_WEIGHT_PATH") or None,
                   help="folder of the CPU experts (default: the model folder; AMXINT4/8: KT's converted layout)")
    m.add_argument("--host-read-gbs", type=float, help="host memory read bandwidth, GB/s (default: "
                                                       "$VRAMKIT_HOST_READ_GBS from `vramkit host --bandwidth`)")


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
        from vramkit.core.render import sglang_args
        con = Console()
        for item in render_plan(r):
            con.print(item)
        con.print("[bold]SGLang arguments:[/bold] " + " ".join(sglang_args(r.model, r.plan, model_path=r.model.hf_id)
                                                   + (r.hybrid.args(r.model.hf_id) if r.hybrid else [])),
                  soft_wrap=True)
    return 0 if r.plan.fits else int(Exit.NO_FIT)


def _list(args) -> int:
    data = {
        "models": {n: m.note for n, m in catalog.models().items()},
        "gpus": {n: g.label for n, g in catalog.gpus().items()},
        "presets": {n: p.description for n, p in catalog.presets().items()},
    }
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        for kind, items in data.items():
            print(f"{kind}:")
            for n, d in items.items():
                print(f"  {n:40s} {d}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("plan", help="what SGLang will allocate and whether it fits",
                       description="Compute what SGLang 0.5.15.post1 will allocate for a model on a GPU, "
                                   "whether the target fits, and what would if not. Exit 0 fits, 10 does not.")
    add_plan_arguments(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--list", action="store_true", help="list the catalogued models, GPUs and presets")
    p.set_defaults(func=run)
