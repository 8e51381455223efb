"""`vramkit plan`: what SGLang will allocate, whether it fits, and what would if not (parsing and printing;
the resolution is vramkit/launch/resolve.py)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from vramkit import catalog
from vramkit.core.plan.knobs import Knobs, by_name, specs
from vramkit.core.plan.request import PlanRequest, flags, request_from_text
from vramkit.errors import Exit, VramkitError
from vramkit.launch import reference
from vramkit.launch.hybrid import adapter_for
from vramkit.launch.resolve import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    Resolved,
    host_available,
    nvml_gpu,
    plan_args,
    plan_json,
    resolve,
)
from vramkit.units import bytes2human


def add_plan_arguments(p: argparse.ArgumentParser, knobs_cls: type = Knobs) -> None:
    """The arguments `plan` and `up` share: the request's fields (core/plan/request.py) and one option per
    declared knob (core/plan/knobs.py). Values stay text here: `request_from_args` checks them against their
    declarations (one line and exit 64, not argparse's 2)."""
    f = flags()
    g = p.add_argument_group("what to run")
    g.add_argument(f["preset"], help=f"one of: {', '.join(catalog.presets())} (knobs below override it; default "
                                     f"{reference.PRESET} unless --model is given)")
    g.add_argument(f["model"], help=f"a catalogued model, a folder with config.json, or a Hugging Face id "
                                    f"(owner/name: its config.json from `vramkit pull`'s folder, the Hub's cache, "
                                    f"else the Hub; neither: exit 26) (default: the preset's, else {DEFAULT_MODEL})")
    g.add_argument(f["revision"], metavar="REV", help="the Hugging Face id's branch, tag or commit (default main)")
    g.add_argument(f["gpu"], help=f"a catalogued GPU, or 'auto' to read it through NVML (default {DEFAULT_GPU})")
    g.add_argument(f["gpu_free_gib"], metavar="GIB",
                   help="memory free when SGLang starts loading weights, > 0 (its log: 'Load weight begin. avail "
                        "mem=')")
    g.add_argument(f["other_used_gib"], metavar="GIB",
                   help="memory other processes hold on the card, >= 0 (default 0)")
    g.add_argument(f["gpu_bandwidth_gbs"], metavar="GBS",
                   help="the card's memory bandwidth in GB/s (10^9 B/s); needed for a card config/gpus.toml lacks")
    g.add_argument(f["gpu_pcie"], metavar="GENxLANES", help="the card's host link, e.g. 4x16; needed for a card "
                                                            "config/gpus.toml lacks")
    g.add_argument(f["host_ram_gib"], metavar="GIB", help="the target host's available RAM, > 0 (default: this "
                                                          "machine's, read with psutil and labelled so)")
    g.add_argument(f["host_cores"], metavar="N", help="the target host's physical cores for the server, >= 1 (the "
                                                      "hybrid MoE mode's CPU threads; default: this machine's server "
                                                      "cpuset, labelled so)")
    m = p.add_argument_group("MoE experts in host RAM (the kt_* knobs; preset moe)")
    m.add_argument(f["kt_weight_path"], default=os.environ.get("VRAMKIT_KT_WEIGHT_PATH") or None, metavar="DIR",
                   help="folder of the CPU experts (default $VRAMKIT_KT_WEIGHT_PATH, else the model folder; "
                        "AMXINT4/8: KT's "
                        "converted layout, tools/make_random_checkpoint.py --kt-layout ... --from MODEL_DIR)")
    m.add_argument(f["kt_placement"], metavar="FILE",
                   help="which experts of each layer sit on the GPU: `vramkit kt-placement`'s file from recorded "
                        "routing (SGLang's --init-expert-location; default: experts 0..N-1; the kit's kt-kernel "
                        "adapter maps the router's ids to it; opt-in: a placement's speed depends on the traffic "
                        "it was recorded on)")
    m.add_argument(f["host_read_gbs"], metavar="GBS",
                   help="host memory read bandwidth in GB/s, one figure or per thread count (1:11.2,8:72.3,16:93) "
                        "(default $VRAMKIT_HOST_READ_GBS, measured by `vramkit host --bandwidth --write`)")
    m.add_argument(f["cpu_isa"], metavar="{avx2,avx512,amx}",
                   help="the CPU to plan for: which kt-kernel build runs there (avx2: any x86 desktop; avx512: with "
                        "AVX-512-BF16, e.g. Zen 4/5; amx: Xeon 4th gen+); default: this host's")
    k = p.add_argument_group("knobs (override the preset; declared in vramkit/core/plan/knobs.py)")
    for spec in specs(knobs_cls):
        unit = f" [{spec.unit}]" if spec.unit else ""
        flag = f"; SGLang {spec.sglang_flag}" if spec.sglang_flag else ""
        k.add_argument(spec.cli_flag, dest=spec.name, metavar=spec.type.__name__.upper() if not spec.choices else
                       "{" + ",".join(spec.choices) + "}", help=f"{spec.help}{unit}: {spec.range_text()}{flag}")
        for old in spec.old_names:
            k.add_argument("--" + old.replace("_", "-"), dest=old, help=argparse.SUPPRESS)


def request_from_args(args: argparse.Namespace, knobs_cls: type = Knobs) -> PlanRequest:
    """The parsed `add_plan_arguments` -> the typed request. An old knob spelling (--hicache-gib) still works,
    with a warning; both spellings at once is one line and exit 64."""
    values = {name: getattr(args, name, None) for name in flags(knobs_cls)}
    for spec in specs(knobs_cls):
        for old in spec.old_names:
            if getattr(args, old, None) is None:
                continue
            old_flag = "--" + old.replace("_", "-")
            if values.get(spec.name) is not None:
                raise VramkitError(f"both {old_flag} and {spec.cli_flag} given", f"keep only {spec.cli_flag}",
                                   Exit.BAD_INPUT)
            print(f"vramkit: warning: {old_flag} is now {spec.cli_flag} (same value, {spec.unit})", file=sys.stderr)
            values[spec.name] = getattr(args, old)
    if values.get("preset") is None and values.get("model") is None:
        values["preset"] = reference.PRESET          # bare `vramkit plan` plans what `make plan` plans
    return request_from_text(values, knobs_cls)


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
        ("free at start", bytes2human(p.free_at_start_bytes), r.free_source),
        ("weights on GPU", bytes2human(p.weights_bytes), ", ".join(
            f"{n} {bytes2human(b, digits=2)}" for n, b in p.weights_by_component.items() if b)
         + ("; embed_tokens then moves to pinned host RAM (--kt-embed-host)" if p.host_embed_bytes else "")),
        ("weights in host RAM", bytes2human(p.weights_offloaded_bytes),
         f"{by_name()['cpu_offload_gib'].sglang_flag} {k.cpu_offload_gib}"),
        ("KV bytes / token", f"{p.kv_bytes_per_token:,} B", f"kv dtype {k.kv_dtype}, tp {k.tp}"),
        ("KV pool", f"{p.kv_pool_tokens:,} tok", f"{bytes2human(p.kv_pool_bytes)} at mem_fraction {k.mem_fraction}"),
        ("context (SGLang)", f"{p.context_len:,}", f"YaRN x{p.yarn_factor:g} (asked)" if p.yarn_factor else
         "the model's native window" if p.context_len == r.model.max_position_embeddings else
         f"asked (native window {r.model.max_position_embeddings:,})"),
        ("longest prompt", f"< {p.max_request_tokens:,}", "min(context-1, pool-1) - 5"),
        (f"requests of {k.context:,} at once", str(p.max_concurrent_requests), "pool // context"),
        ("peak GPU memory", bytes2human(p.peak_vram_bytes), "as nvidia-smi shows the server"),
        ("free after start-up", bytes2human(p.startup_free_bytes),
         f"activations of a {k.chunked_prefill}-token step: {bytes2human(p.activation_bytes)}"),
        ("decode ceiling (1 stream)", f"{p.decode_tok_s_ceiling:.1f} tok/s" if p.decode_tok_s_ceiling else "n/a",
         "bandwidth / bytes read per token (+ PCIe for offloaded weights)"),
        ("host RAM available", bytes2human(r.target.host_ram_available_bytes)
         if r.target.host_ram_available_bytes is not None else "n/a", r.host_ram_source),
        ("host RAM pinned", bytes2human(p.host_ram_bytes), "hierarchical cache + offloaded weights (each tensor "
         "pinned at the next power of two)" if p.weights_offloaded_bytes else "hierarchical cache"
         + (f" + the token embeddings ({bytes2human(p.host_embed_bytes)}: a power of two)"
            if p.host_embed_bytes and p.hybrid is None else "")),
    ]
    h = p.hybrid
    if h is not None:     # the hybrid MoE mode: no bandwidth ceiling, a fitted estimate; host RAM as kt-kernel holds it
        rows[10] = ("decode estimate (1 stream)", f"{h.decode_tok_s:.1f} tok/s",
                    f"at {h.decode_context_tokens:,} tokens of context; derived terms, fitted constants "
                    f"(config/engine.toml kt_*); not a ceiling")
        rows[12] = ("host RAM", bytes2human(h.host_ram_bytes),
                    f"all {h.num_experts} experts x {h.moe_layers - h.gpu_layers} "
                    + ("CPU layers" if h.gpu_layers else "layers") + f" as {h.kt_method} "
                    f"({bytes2human(h.host_experts_bytes)}) + SGLang's own "
                    f"({bytes2human(h.host_sglang_bytes)}, {h.host_sglang_source})"
                    + (f" + the GPU prompt path's pinned copies ({bytes2human(h.host_prefill_bytes)})"
                       if h.host_prefill_bytes else "")
                    + (f" + the int4 decode's copies ({bytes2human(h.host_int4_bytes)})" if h.host_int4_bytes else "")
                    + (f" + the token embeddings ({bytes2human(h.host_embed_bytes)}, pinned)" if h.host_embed_bytes
                       else ""))
        rows.insert(2, ("experts on GPU / CPU", f"{h.num_gpu_experts} / {h.num_experts - h.num_gpu_experts}",
                        f"per MoE layer; CPU: {h.kt_method} on {h.cpuinfer_threads} threads "
                        + ("(decode batches on the checkpoint's GPTQ-Int4 values, --kt-cpu-decode) "
                           if h.cpu_decode == "int4" else "")
                        + f"({h.cpu_cores} cores, {h.cpu_cores_source}), "
                        f"{h.cpu_isa or 'no AVX2'} ({h.cpu_isa_source})"
                        + (f"; as whole layers: the experts of the last {h.gpu_layers} of {h.moe_layers} all on the "
                           "GPU, the others' all on the CPU" if h.gpu_layers else "")))
    for row in rows:
        t.add_row(*row)
    verdict = Text("FITS" if p.fits else "DOES NOT FIT", style="bold green" if p.fits else "bold red")
    out = [t, verdict]
    for reason in p.reasons:
        out.append(Text(f"  x {reason}", style="red"))
    for note in p.notes:
        out.append(Text(f"  - {note}", style="yellow"))
    sv = p.serving
    if sv is not None:    # what clients type and which parsers SGLang runs, and why those (issue 21)
        out.append(Text(f"serving: clients call it {sv.served_model_name!r}; tool calls: "
                        f"{sv.tool_call_parser or 'not parsed'}; reasoning: {sv.reasoning_parser or '-'}"
                        + (f"; chat template {sv.chat_template}" if sv.chat_template else "") + f" ({sv.source})"))
    if p.alternatives:
        at = Table(title="what would fit instead (re-planned, best first)", show_header=True)
        at.add_column("change")
        at.add_column("fits")
        at.add_column("cost", style="dim")
        for a in p.alternatives:
            why = f"; does not fit: {a.why_not}" if a.why_not else ""
            at.add_row(a.change, "yes" if a.fits else "no", a.cost + why)
        out.append(at)
    return out


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args)
    r = resolve(request_from_args(args), read_gpu=nvml_gpu, read_host=host_available)
    if args.json:
        print(json.dumps(plan_json(r), indent=2, default=str))
    else:
        from rich.console import Console
        from rich.markup import escape

        from vramkit.core.render.sglang import shell_line
        con = Console()
        for item in render_plan(r):
            con.print(item)
        # shell-quoted: pasted into a shell, a JSON override stays one argument
        con.print("[bold]SGLang arguments:[/bold] " + escape(shell_line(plan_args(r))), soft_wrap=True)
        adapter = adapter_for(r.hybrid, r.plan)
        if adapter is not None and (env := adapter.adapter_env()):     # the kit's adapter reads these, not SGLang
            con.print("[bold]in the server's environment:[/bold] "
                      + escape(" ".join(f"{k}={v}" for k, v in env.items())), soft_wrap=True)
    return 0 if r.plan.fits else int(Exit.NO_FIT)


def _list(args) -> int:
    from vramkit.hf_config import FAMILIES, QUANT_METHODS
    data = {
        "models": {n: f"[{m.family}{', ' + m.quantization.method if m.quantization else ''}] {m.note}"
                   for n, m in catalog.models().items()},
        "gpus": {n: g.label for n, g in catalog.gpus().items()},
        "presets": {n: p.description for n, p in catalog.presets().items()},
        "architectures modelled (any folder with one of these config.json files)": FAMILIES,
        "quantization methods modelled": dict.fromkeys(QUANT_METHODS, ""),
        "refused (exit 21, with the reason)": {
            "other architectures": "e.g. multimodal (Gemma3ForConditionalGeneration, Mistral3...), Mamba hybrids",
            "other quantization": "bitsandbytes, NVFP4/modelopt, AWQ 8-bit, compressed-tensors int",
            "GGUF files": "read (gguf library); planned for a dense Qwen2 in Q4_K_M (Q4_K/Q6_K matrices, measured), "
                          "every other one refused with the reason: SGLang serves most, the kit has not measured them "
                          "(vramkit/gguf_model.py)",
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
