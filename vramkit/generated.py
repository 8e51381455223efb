"""Blocks of committed text generated from data: each sits between a BEGIN and an END marker line in its
file, `vramkit compose` (`make compose`) rewrites it, and tests/unit/test_generated_fresh.py fails when
a committed block differs from a fresh render. Text outside the markers is the author's.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vramkit import catalog
from vramkit.bench.summary import find_key
from vramkit.core.plan import knobs
from vramkit.core.plan.knobs import Knobs
from vramkit.core.plan.planner import Engine, Target, plan
from vramkit.errors import Exit, VramkitError, exit_code_lines
from vramkit.launch import reference
from vramkit.launch.settings import SETTINGS
from vramkit.units import GiB, ratio_text

REPO_ROOT = catalog.CONFIG_DIR.parent
CEILING_MODEL = "qwen2.5-coder-14b-instruct-gptq-int4"   # the first user's model
ROOFLINE_RUN = "benchmarks/results/gpu/optimized-16g.json"
PINNED_COPY = "benchmarks/results/nvml-vs-smi.json"


def _engine() -> Engine:
    return catalog.engine()


def _ceiling(gpu_name: str, context: int, kv_dtype: str = "auto") -> tuple[float, float]:
    """(decode ceiling tok/s, GiB of weights read per token) of CEILING_MODEL on a catalogued card."""
    m, g = catalog.model(CEILING_MODEL), catalog.gpu(gpu_name)
    p = plan(m, Target(gpu=g, host_ram_available_bytes=int(reference.HOST_RAM_GIB * GiB)),
             Knobs(context=context, kv_dtype=kv_dtype), _engine(), with_alternatives=False)
    if p.decode_tok_s_ceiling is None:
        raise VramkitError(f"no decode ceiling for {m.name} on {g.name}", "check config/gpus.toml", Exit.BAD_FILE)
    return p.decode_tok_s_ceiling, p.weights_read_per_token_bytes / GiB


def _pinned_copy_gbs() -> float | None:
    try:
        data = json.loads((REPO_ROOT / PINNED_COPY).read_text())
    except (OSError, ValueError):
        return None
    found = find_key(data, "h2d_pinned_GBps")   # vramkit host's pinned host-to-GPU copy on the H100
    return float(found) if isinstance(found, (int, float)) else None


def physics_table() -> list[str]:
    """README: decode ceilings per catalogued card, from the planner (`vramkit plan`) and config/gpus.toml."""
    _, read_gib = _ceiling("h100-80gb", 1024)
    out = [f"Ceilings for the 14B GPTQ-Int4 ({read_gib:.2f} GiB read per token) from `vramkit plan`:", "",
           "| card | bandwidth | ceiling, 1K context | ceiling, 32K fp8 KV | PCIe (one way) "
           "| each offloaded GiB costs |",
           "| --- | --- | --- | --- | --- | --- |"]
    pinned = _pinned_copy_gbs()
    # the kit's cards (16-32 GB) and the measuring host; the others (8-12 GB, 48 GB): `vramkit plan --gpu NAME`
    shown = {n: g for n, g in catalog.gpus().items() if 15 * GiB < g.memory_total_bytes < 33 * GiB or n == "h100-80gb"}
    for name, g in sorted(shown.items(), key=lambda kv: kv[1].bandwidth_bytes_s):
        short, _ = _ceiling(name, 1024)
        long, _ = _ceiling(name, 32768, "fp8_e5m2")
        pcie = f"gen{g.pcie_gen} x{g.pcie_lanes}: {g.pcie_bytes_s / 1e9:.1f} GB/s"
        if name == "h100-80gb" and pinned:
            pcie += f" ({pinned:.1f} GB/s measured pinned)"
        out.append(f"| {g.label.removeprefix('GeForce ')} | {g.bandwidth_bytes_s / 1e9:.0f} GB/s | {short:.1f} tok/s "
                   f"| {long:.1f} tok/s | {pcie} | {GiB / g.pcie_bytes_s * 1000:.0f} ms/token |")
    return out


def presets_table() -> list[str]:
    """README: each preset as the planner resolves it for the first user's card."""
    g = catalog.gpu(reference.GPU)
    out = [f"| preset | model | knobs | planner on a {g.label} |", "| --- | --- | --- | --- |"]
    for p in catalog.presets().values():
        m = catalog.model(p.model)
        from vramkit.launch.hybrid import REFERENCE_HOST  # noqa: PLC0415 - launch sits above this module
        # the hybrid MoE mode is planned for the reference desktop CPU the compose files use
        target = Target(gpu=g, host_ram_available_bytes=int(reference.HOST_RAM_GIB * GiB),
                        host=REFERENCE_HOST if m.moe else None)
        r = plan(m, target, Knobs(**p.knobs), _engine(), with_alternatives=False)
        hy = r.hybrid
        k = r.knobs
        what = [f"{k.context:,}-token context", "fp16/bf16 KV" if k.kv_dtype == "auto" else f"{k.kv_dtype} KV",
                f"fraction {k.mem_fraction:g}" + ("" if "mem_fraction" in p.knobs else " (SGLang's own)")]
        if k.hicache_gb:
            what.append(f"{k.hicache_gb} GB host-RAM KV cache")
        if r.yarn_factor:
            what.append(f"YaRN x{r.yarn_factor:g}")
        if k.cpu_offload_gib:
            what.append(f"{k.cpu_offload_gib} GiB of weights offloaded")
        if r.host_embed_bytes:
            what.append(f"token embeddings in host RAM ({r.embed_freed_bytes / GiB:.2f} GiB freed on the GPU)")
        if hy is not None:
            short = dict(hy.decode_tok_s_by_context).get(512, hy.decode_tok_s)
            offload = (f" vs a ~{hy.layer_offload_decode_tok_s:.1f} tok/s ceiling with layer offload"
                       if hy.layer_offload_decode_tok_s else "")
            where = (f"the experts of {hy.gpu_layers} of {hy.moe_layers} MoE layers on the GPU (whole layers, as "
                     f"{hy.num_gpu_experts} a layer would take)" if hy.gpu_layers else
                     f"{hy.num_gpu_experts} experts/layer on the GPU")
            what.append(f"{where}, the rest in host RAM on "
                        f"{hy.cpuinfer_threads} threads ({hy.kt_method}, host RAM {hy.host_ram_bytes / GiB:.1f} GiB; "
                        f"decode ~{short:.0f} tok/s "
                        f"at 512 tokens, an estimate with fitted constants, for {REFERENCE_HOST.isa_source} at "
                        f"{REFERENCE_HOST.read_source}{offload})")
        verdict = (f"KV {r.kv_pool_tokens:,} tokens, longest prompt {r.max_request_tokens:,}, peak "
                   f"{r.peak_vram_bytes / GiB:.1f} GiB: " + ("fits" if r.fits else "**does not fit**"))
        out.append(f"| {p.name} | {p.model} | {', '.join(what)} | {verdict} |")
    return out


def roofline() -> list[str]:
    """README: the measured single-stream decode against the planner's ceiling for the card it ran on."""
    run = json.loads((REPO_ROOT / ROOFLINE_RUN).read_text())
    measured = run["summary"]["latency"]["decode_tok_s_p50"]
    prompt = run["summary"]["latency"]["prompt_tokens"]
    ceiling, read_gib = _ceiling("h100-80gb", 1024)
    return [f"**Roofline.** Single-stream decode {measured:.1f} tok/s ({prompt}-token prompt, `{ROOFLINE_RUN}`) "
            f"against the bandwidth ceiling of {ceiling:.1f} tok/s (H100, 1K context, {read_gib:.2f} GiB of weights "
            f"read per token, `vramkit plan`): {measured / ceiling:.0%}. With Triton attention (the test host's "
            "SGLang lacks FA3) and GPTQ-marlin at batch 1, the GPU is not bandwidth-bound; on consumer cards the "
            "ceiling is far lower."]


KT_ESTIMATE = "benchmarks/results/gpu/kt-estimate.json"


def _held_out_by_placement(res: dict, by: dict) -> str:
    """The held-out decodes by where the CPU layers' experts sat and what decoded them: the moe preset's placement
    (whole layers) apart from the split it left, and the int4 decode (a GPTQ-Int4 checkpoint's, --kt-cpu-decode) among
    the whole layers, each with how many missed by more than 20 %."""
    held = [m for m in res["measurements"] if m["role"] == "held-out"]
    groups = (("whole layers (the moe preset's placement)", lambda q: q["gpu_layers"]),
              ("of them the int4 decode", lambda q: q["gpu_layers"] and q.get("host_int4_bytes")),
              ("the split (the placement before)", lambda q: not q["gpu_layers"]))
    parts = []
    for word, keep in groups:
        e = [m["error"] for m in held if keep(by[m["point"]])]
        if e:
            missed = sum(abs(x) > 0.2 for x in e)
            parts.append(f"{word} {len(e)}, {min(e):+.1%} to {max(e):+.1%}, {missed} outside 20 %")
    return "- held out, by placement: " + "; ".join(parts)


def kt_estimate_table() -> list[str]:
    """README: the hybrid MoE decode estimate against every committed KT run, fitted and held-out apart
    (benchmarks/gpu/fit_kt.py writes the data)."""
    res = json.loads((REPO_ROOT / KT_ESTIMATE).read_text())
    c = res["constants"]
    by = {q["name"]: q for q in res["points"]}
    out = [f"Fitted (config/engine.toml): CPU read efficiency {c['kt_cpu_read_efficiency']}, per-layer sync "
           f"{c['kt_layer_sync_us']} us, batch-1 attention read {c['kt_attention_read_gbs']} GB/s, whole layers' GPU "
           f"step {c['kt_whole_layer_step_us']} us (fitted on one whole-layer run); measured: "
           f"SGLang's own host RAM {c['kt_sglang_host_mib'] / 1024:.1f} GiB. Data: `{KT_ESTIMATE}` "
           "(`benchmarks/gpu/fit_kt.py`).", "",
           "| run | used to fit? | GPU weights | CPU experts, build | GPU experts, threads | decode at | measured "
           "| estimate | error |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m in res["measurements"]:
        q = by[m["point"]]
        out.append(f"| {m['point']} | {'fitted' if m['role'] == 'fit' else 'held out'} | {m['gpu_weights']} | "
                   f"{q['method']}, {q['build']} | "
                   f"{q['gpu_experts']}, {q['threads']} | {m['context']:,} tokens | {m['tok_s']:.1f} tok/s | "
                   f"{m['plan_tok_s']:.1f} | {m['error']:+.1%}"
                   + (" (slower than the same run after a longer prompt: another prompt)"
                      if m["inconsistent"] else "")
                   + " |")
    out.append("")
    for role, word in (("fit", "runs used to fit"), ("held-out", "runs held out")):
        errs = [abs(m["error"]) for m in res["measurements"] if m["role"] == role]
        if errs:
            out.append(f"- {word}: {len(errs)} decode measurements, worst error {max(errs):.1%}, "
                       f"mean {sum(errs) / len(errs):.1%}" + "".join(
                           f"; {w} GPU weights {len(e)}, worst {max(e):.1%}, mean {sum(e) / len(e):.1%}"
                           for w in dict.fromkeys(m["gpu_weights"] for m in res["measurements"])
                           if (e := [abs(m["error"]) for m in res["measurements"]
                                     if m["role"] == role and m["gpu_weights"] == w])))
    out.append(_held_out_by_placement(res, by))
    budget = REPO_ROOT / MOE_BUDGET
    by_name = [m["error"] for m in res["measurements"] if m["gpu_weights"] == "dummy by name"]
    if budget.exists() and (r := json.loads(budget.read_text()).get("dummy_layer_routing")):
        out.append("- GPU weights: \"checkpoint\", a random checkpoint on disk whose layers' routers are drawn apart; "
                   "\"dummy\", SGLang's --load-format dummy, which gives every layer the same router (each layer's "
                   f"recorded routing correlates {r['corr_with_layer0_median']:.2f} with the first's: a token's CPU "
                   "share does not average out over the layers, so one request's rate moves with its prompt); "
                   "\"dummy by name\", the same with each parameter seeded by its name (each layer's router its own: "
                   f"`VRAMKIT_DUMMY_SEED_BY_NAME=1`), where {sum(e < 0 for e in by_name)} of {len(by_name)} figures "
                   "were faster than the estimate (`benchmarks/results/gpu/kt-estimate.md`)")
    rss = [q for q in res["points"] if q.get("rss_after_start_bytes")]
    if rss:
        out.append("- host RAM (all experts as kt-kernel holds them + SGLang's own, + the mapped checkpoint for FP8) "
                   "against the server's RSS right after start: " + ", ".join(
                       f"{q['name']} {q['rss_error']:+.1%} ({'fitted' if q['role'] == 'fit' else 'held out'})"
                       for q in rss))
    return out


# the tables' rows: a card, and which llama.cpp file the kit is set beside (the report's pairings), the kit as it
# now comes first; the later rows are earlier sessions' kit, kept for the record and out of the goals' count
MOE_PAIRINGS = (
    # the moe preset on the GPTQ-Int4 config as it comes since 2026-11-29: its CPU layers' decode on the GPTQ-Int4
    # values (--kt-cpu-decode auto, the adapter's int4_experts.c), beside the preset without it and llama.cpp
    ("moe-vs-llamacpp-int4cpu-16g", "16 GiB"),
    # the same on a second machine, llama.cpp's --n-cpu-moe swept there and both engines' thread counts tried
    ("moe-vs-llamacpp-int4cpu-r5-16g", "16 GiB, second machine"),
    # a third, llama.cpp's CPU backend built as loadable variants (its sapphirerapids one here), then both engines'
    # AVX2 builds on the same cores in the same run (an AVX2-only desktop's kernels: the int4 kernel's AVX2 build
    # forced, llama.cpp's haswell backend alone)
    ("moe-vs-llamacpp-int4cpu-r6-16g", "16 GiB, third machine"),
    ("moe-vs-llamacpp-avx2-16g", "16 GiB, AVX2 builds (third machine)"),
    # a fourth, the int4 kernel as it now is (down's units by expert, units in runs), its masked AVX-512 build beside
    ("moe-vs-llamacpp-int4cpu-r7-16g", "16 GiB, fourth machine"),
    # a fifth, beside the opt-in decode share (part of each CPU layer's experts read by the GPU over the bus)
    ("moe-vs-llamacpp-int4cpu-r8-16g", "16 GiB, fifth machine"),
    ("moe-vs-llamacpp-24g", "24 GiB"),
    # the FP8 preset (the moe preset's default checkpoint) beside llama.cpp on a Q8_0 file
    ("moe-vs-llamacpp-q8-16g", "16 GiB, Q8_0 peer"),
    # earlier: the GPTQ-Int4 preset with kt-kernel's decode (the token embeddings in host RAM, 2026-11-28), and the
    # first session's best 16 GiB configuration (2026-11-27)
    ("moe-vs-llamacpp-default-16g", "16 GiB, 2026-11-28 (kt-kernel decode)"),
    ("moe-vs-llamacpp-16g", "16 GiB, 2026-11-27 (kt-kernel decode)"))
MOE_EARLIER = ("moe-vs-llamacpp-default-16g", "moe-vs-llamacpp-16g")
GPU_RESULTS = "benchmarks/results/gpu"
MOE_ROWS = (("decode, 1 stream, depth 0", "decode_tok_s", " tok/s", ">= 1.0x"),
            ("decode, 1 stream, depth 8K", "decode_tok_s_8k", " tok/s", ">= 1.0x"),
            ("TTFT, 30K-token prompt", "ttft_30k_s", " s", "<= 1.0x"),
            ("aggregate decode, 4 streams", "aggregate_4_streams_tok_s", " tok/s", ">= 2x"))


def moe_vs_llamacpp_table() -> list[str]:
    """README's MoE section opens with the kit against llama.cpp on the same host, shape and emulated card
    (benchmarks/gpu/moe_vs_llamacpp_report.py writes the data; issue 18). Every word about a card's
    configuration and which goals it meets comes from that card's JSON."""
    out = ["| card | measured | vramkit (best) | llama.cpp (best) | kit / llama.cpp | goal |",
           "| --- | --- | --- | --- | --- | --- |"]
    notes, missed = [], []
    comparisons = _comparisons()
    for stem, card in MOE_PAIRINGS:
        if stem not in comparisons:
            continue
        c = comparisons[stem]
        k, ll = c["engines"].get("vramkit", {}), c["engines"].get("llamacpp", {})
        for label, key, unit, goal in MOE_ROWS:
            a, b = k.get(key), ll.get(key)
            out.append(f"| {card} | {label} | {a:.1f}{unit} | {b:.1f}{unit} | {ratio_text(a / b)} | {goal} |"
                       if a and b else f"| {card} | {label} | - | - | - | {goal} |")
            bar = float(goal.split()[1].rstrip("x"))
            if stem in MOE_EARLIER:
                continue
            if not (a and b) or (a / b > bar if goal.startswith("<=") else a / b < bar):
                missed.append(f"{card} {label}")
        bud = c.get("budget_ms_per_token", {})
        if "vramkit" in bud and "llamacpp" in bud:
            modes = sorted(set(ll.get("mode_of_each", {}).values()))
            st = k["settings"]
            experts = st["gpu_expert_dtype"]             # "GPTQ-Int4 (group 128, moe_wna16 triton MoE)"
            g = st["gpu_layers"]        # whole layers on the GPU as the report counted them; 0: the split
            int4 = st.get("cpu_decode") == "int4"
            cpu = "decode on their GPTQ-Int4 values (int4_experts.c), longer chunks' " if int4 else ""
            kit = ((f"whole layers: the experts of {g} MoE layers {experts} on the GPU, the others' "
                    f"{cpu}{st['kt_method']} on the CPU" if g else
                    f"{st['kt_num_gpu_experts']} {experts} GPU experts per layer planned, {st['kt_method']} on the CPU")
                   if st.get("kt_method") else f"every {experts} expert on the GPU, no hybrid mode")
            levers = ["2 deferred experts"] if "deferred-experts-per-token 2" in st["vramkit_up"] else []
            notes.append(f"{card}: {bud['vramkit']['measured_ms_per_token_depth0']} ms against "
                         f"{bud['llamacpp']['measured_ms_per_token_depth0']} ms (kit: {st['point']}, {kit}"
                         + "".join(f", {t}" for t in levers) + f"; llama.cpp: the best per row of "
                         f"{' and '.join(modes)}; measured {c['date'][:10]})")
    if len(out) == 2:
        return ["(no committed comparison yet: benchmarks/gpu/run_moe_vs_llamacpp.sh)"]
    rows = _proxy_rows()
    notes_after = _peer_accuracy_line(rows) + _which_to_run(comparisons, rows)
    cards = "; ".join(f"{label}: {_card(comparisons[stem])}" for stem, label in MOE_PAIRINGS if stem in comparisons)
    now = [f"`{stem}.md`" for stem, _ in MOE_PAIRINGS if stem in comparisons and stem not in MOE_EARLIER]
    earlier = [f"`{stem}.md`" for stem, _ in MOE_PAIRINGS if stem in comparisons and stem in MOE_EARLIER]
    return (["Against llama.cpp on the same GPU host, model shape and emulated card, both engines measured in one "
             f"host session per card ({cards}; {_host_cpus(comparisons)}; "
             "random weights; llama.cpp: Q4_K_M, and in the Q8_0 peer rows Q8_0, the file "
             "closest to the kit's preset in accuracy; the kit's configuration per card below; "
             f"in `{GPU_RESULTS}/`: " + ", ".join(now)
             + (", and the earlier " + " and ".join(earlier) if earlier else "")
             + "; the levers in `moe-vs-llamacpp-levers.md`):",
             ""] + out + ["", "Per-token time at batch 1, depth 0 (1000 / decode tok/s): " + "; ".join(notes) + ". "
                          + ("Goals not met (the kit as it now comes; the dated rows are earlier sessions' kit, "
                             "kept for the record): " + "; ".join(missed) + ". The levers file and the measured "
                             "budgets below say what would close the rest." if missed else "Every goal is met.")]
            + _measured_budget() + notes_after)


def _rounds(c: dict) -> str:
    """', each figure the median of N rounds' where the comparison's probes repeated (its "rounds")."""
    return f", each figure the median of {c['rounds']} rounds" if c.get("rounds", 1) > 1 else ""


def _card(c: dict) -> str:
    """The card a comparison's session ran on (its device line's first field): each pairing is one session."""
    return c.get("device", "").split(",")[0] or "the GPU host"


def _host_cpus(comparisons: dict[str, dict]) -> str:
    """Whether the pairings' machines share one CPU: each session's host.txt (lscpu, free, df, the GPU line) with its
    GPU line, clock readings and sizes that vary from boot to boot left out."""
    def cpu(c: dict) -> tuple[str, ...]:
        host = REPO_ROOT / GPU_RESULTS / c.get("evidence_dir", "") / "host.txt"
        lines = host.read_text().splitlines() if c.get("evidence_dir") and host.is_file() else []
        return tuple(ln for ln in lines if ln.split(":")[0].strip() in LSCPU_KEYS)
    seen = {cpu(c) for c in comparisons.values()}
    if len(seen) == 1 and () not in seen:
        (one,) = seen
        return f"every session's CPU the same by lscpu: {_lscpu(one, 'Model name')}, {_lscpu(one, 'CPU(s)')} CPUs"
    return "the sessions' CPUs differ (each host.txt)"


LSCPU_KEYS = ("Model name", "CPU(s)", "Thread(s) per core", "Socket(s)", "NUMA node(s)", "Flags", "L2 cache",
              "L3 cache")


def _lscpu(lines: tuple[str, ...], key: str) -> str:
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.split(":")[0].strip() == key), "?")


MOE_BUDGET = "benchmarks/results/gpu/moe-budget.json"


def _measured_budget() -> list[str]:
    """Where a 16 GiB token's time goes, both engines, and the same pair as medians of three rounds
    (benchmarks/gpu/moe_budget.py writes the data from SGLang's profiler traces and llama-bench sweeps)."""
    path = REPO_ROOT / MOE_BUDGET
    if not path.exists():
        return []
    d = json.loads(path.read_text())
    k, ll, m = d["kit"], d["llamacpp"], d["medians_of_3"]
    row = ((_comparisons().get("moe-vs-llamacpp-16g") or {}).get("engines", {}).get("vramkit") or {}) \
        .get("settings", {})
    now, lnow = d["kit_now"], d["llamacpp_now"]
    one, four = now["one_stream"], now["four_streams"]
    return ["", f"Where a 16 GiB token goes, measured (`{GPU_RESULTS}/moe-budget.md`: SGLang's profiler over 32 "
                "decode steps; llama.cpp's --n-cpu-moe swept): the moe preset as it now comes on a GPTQ-Int4 "
                f"checkpoint ({now['point']}, one H200 machine) {one['step_ms']:.2f} ms under the profiler "
                f"({one['unprofiled_step_ms']:.2f} ms without) = {one['gpu_kernels_ms']:.2f} ms of GPU kernels + "
                f"{one['wait_ms']:.2f} ms waiting for its {now['cpu_layers']} CPU layers' int4 decode + "
                f"{one['other_gaps_ms']:.2f} ms of shorter gaps; at 4 streams {four['step_ms']:.2f} ms = "
                f"{four['gpu_kernels_ms']:.2f} + {four['wait_ms']:.2f} + {four['other_gaps_ms']:.2f}; llama.cpp on the "
                f"same machine {lnow['step_ms_n_cpu_moe_11']:.2f} ms at --n-cpu-moe 11 = "
                f"{lnow['all_gpu_step_ms']:.2f} ms with every expert on the GPU + 11 CPU layers at "
                f"{lnow['per_cpu_layer_ms']:.3f} ms (least squares over the sweep). Before the int4 decode, the kit's "
                f"GPTQ-Int4 split as planned ({k['point']}" + (f"; the 2026-11-27 row is {row['point']}"
                                                               if row.get("point", k["point"]) != k["point"] else "")
                + f", H100) {k['step_ms']:.1f} ms = "
                f"{k['gpu_kernels_ms']:.1f} ms of GPU kernels + {k['handoff_ms']:.1f} ms handing {k['moe_layers']} "
                f"layers' CPU experts over through kt-kernel's host nodes + {k['wait_ms']:.1f} ms waiting for them + "
                f"{k['other_gaps_ms']:.1f} ms of shorter gaps; llama.cpp at --n-cpu-moe {ll['n_cpu_moe']} "
                f"{ll['step_ms']:.1f} ms = {ll['all_gpu_step_ms']:.1f} ms with every expert on the GPU + "
                f"{ll['n_cpu_moe']} CPU layers at {ll['per_cpu_layer_ms']:.2f} ms. That split beside llama.cpp's "
                f"best, medians of three rounds on another machine: {m['decode_tok_s']:.2f}x at depth 0, "
                f"{m['decode_tok_s_8k']:.2f}x after 8K, TTFT {m['ttft_30k_s']:.2f}x, "
                f"{m['aggregate_4_streams_tok_s']:.2f}x at 4 streams."
            + (f" One request's rate depends on its prompt: on the same seeded prompts the kit's fastest decoded "
               f"{p['kit']:.2f}x its slowest at the same depth (medians over {p['kit_servers']} servers; llama.cpp "
               f"{p['llamacpp']:.2f}x), since SGLang keeps experts 0..N-1 of each layer on the GPU and a prompt that "
               "routes to the others waits on the CPU; the tables take medians of three prompts."
               if (p := d.get("prompt_span")) else "")
            + (" Most of that spread was the proxy's: SGLang's dummy weights give every layer the same router, and "
               f"each layer's recorded routing correlates {r['corr_with_layer0_median']:.2f} with the first layer's "
               "(median), so a token's CPU share does not average out over the layers as a trained model's would "
               "(llama.cpp's random file draws each layer's router apart). With each parameter seeded by its name "
               "(`VRAMKIT_DUMMY_SEED_BY_NAME=1` in the server's environment) the correlation is "
               f"{z['layer_routing']['corr_with_layer0_median']:.2f} and the span {z['prompt_span']['kit_split']:.2f}x "
               f"(llama.cpp {z['prompt_span']['llamacpp']:.2f}x). On those weights, same machine: the split beside "
               f"llama.cpp's --n-cpu-moe 11 decoded {a['decode_tok_s']:.2f}x at depth 0, {a['decode_tok_s_8k']:.2f}x "
               f"after 8K and {a['aggregate_4_streams_tok_s']:.2f}x at 4 streams, and answered a 30K prompt in "
               f"{a['ttft_30k_s']:.2f}x its time (at the preset's new mem_fraction 0.90, the same machine: "
               f"{a9['decode_tok_s']:.2f}x, {a9['decode_tok_s_8k']:.2f}x, {a9['aggregate_4_streams_tok_s']:.2f}x, "
               f"{a9['ttft_30k_s']:.2f}x); mem_fraction 0.90 decoded "
               f"{f['paired_with_085']['single_median']:.2f}x 0.85 paired by prompt "
               f"({f['paired_with_085']['four_median']:.2f}x at 4 streams; peak {f['peak_vram_gb']['0.90']:.2f} GB of "
               "17.18), so the moe preset took 0.90 (0.93 since, `moe-vs-llamacpp-mf/`); whole layers' experts on "
               "the GPU decoded "
               f"{w['single_median']:.2f}x the split at 12 KT threads ({w['four_median']:.2f}x at 4 streams) with "
               f"{wl['host_rss_peak_gb']:.0f} GB of host RAM against {wl['split_host_rss_peak_gb']:.0f}."
               + (f" On a third machine the moe preset's own FP8 checkpoint with whole layers decoded "
                  f"{fp['paired_whole_with_split']['single_median']:.2f}x the split paired by prompt "
                  f"({fp['whole_figures']['decode_tok_s']:.1f} against {fp['split_figures']['decode_tok_s']:.1f} "
                  f"tok/s at depth 0; {fp['paired_whole_with_split']['four_median']:.2f}x at 4 streams), took "
                  f"{fp['whole_figures']['ttft_8k_s'] / fp['split_figures']['ttft_8k_s']:.2f}x the time to a first "
                  f"token after 8K, and held {fp['whole_host_rss_peak_gb']:.1f} GB of host RAM against "
                  f"{fp['split_host_rss_peak_gb']:.1f}: the preset now places whole layers (`--kt-gpu-layers off` "
                  "gives the split back)." if (fp := z.get("best16", {}).get("fp8")) else "")
               if (r := d.get("dummy_layer_routing")) and (z := d.get("seeded"))
               and (a := z["against_llamacpp"]["ratio"]) and (a9 := z["against_llamacpp"]["ratio_090"])
               and (f := z["mem_fraction_090"])
               and (wl := z["whole_layers"]["12"]) and (w := wl["paired_with_split"]) else "")
            + (" The host levers, one machine, each request against the same seeded request on the 14-thread servers: "
               + ", ".join(f"{t} threads {x['single_median']:.2f}x single-stream, {x['four_median']:.2f}x at 4 "
                               "streams" for t, x in h["paired_with_14_threads"].items())
               + "; so the plan now leaves a quarter of the physical cores (at least 2) to SGLang: 12 of 16; "
               f"transparent huge pages \"always\" {h['thp_paired']['single_median']:.2f}x the host's madvise "
               f"paired the same way ({h['thp_paired']['four_median']:.2f}x at 4 streams), and anonymous "
               f"huge pages peaked at {h['anon_huge_pages_max_gib']:.1f} GiB of a ~32 GiB server: they do not reach "
               "kt-kernel's experts, and the kit leaves the setting alone."
               if (h := d.get("host_levers")) else "")]


PEER_ACCURACY = "benchmarks/results/gpu/peer-accuracy/accuracy-cpu.json"
WHOLE_ROW = "GPTQ_INT4 layers 1-3 (GPU) + AMXINT8<-FP8 layer 0 (CPU)"     # the proxy's 4 layers, 3 of them on the GPU
KIT_ACCURACY = "benchmarks/results/gpu/kt-llamafile/accuracy-cpu.json"     # the same proxy's single-method rows
# the 16 GB preset as served: whole layers, FP8 on the GPU through SGLang's kernels (inputs rounded to FP8 too), AMXINT8
# on the CPU (benchmarks/gpu/peer_accuracy.py's SERVED, held equal by a test); its split placement before it
SERVED_ROW = "FP8_W8A8 layer 3 (GPU) + AMXINT8<-FP8 layers 0-2 (CPU)"
SPLIT_ROW = "FP8 0-42 (GPU) + AMXINT8<-FP8 (CPU)"
PEER_ROWS = (("llama.cpp's Q4_K_M experts", "Q4_K_M (llama.cpp)"),
             ("the kit's 16 GB preset as served (whole layers: FP8 experts on the GPU as SGLang computes them, inputs "
              "rounded to FP8 too; AMXINT8 from FP8 on the CPU)", SERVED_ROW),
             ("its FP8 prompt path's layers as it computes them by default (the FP8 values in int8, bf16 inputs)",
              "INT8_W8A16<-FP8 (GPU)"),
             ("the same path with --kt-prefill-fp8 w8a8 (every expert FP8 as SGLang computes it)", "FP8_W8A8 (GPU)"),
             ("the kit's GPTQ-Int4 split (88 GPTQ-Int4 GPU experts a layer, round to nearest)",
              "GPTQ_INT4 0-87 (GPU) + AMXINT8<-FP8 (CPU)"),
             ("its fastest 16 GB row (whole layers: three quarters of the layers' experts GPTQ-Int4 on the GPU, the "
              "rest AMXINT8 on the CPU)", WHOLE_ROW),
             ("its 24 GB row (every expert GPTQ-Int4)", "GPTQ_INT4 (GPU)"),
             ("llama.cpp at Q8_0", "Q8_0 (llama.cpp)"))


def _comparisons() -> dict[str, dict]:
    """The committed side-by-side comparisons (benchmarks/gpu/moe_vs_llamacpp_report.py), by MOE_PAIRINGS stem."""
    res = REPO_ROOT / GPU_RESULTS
    return {stem: json.loads(p.read_text()) for stem, _ in MOE_PAIRINGS if (p := res / f"{stem}.json").exists()}


def _proxy_rows() -> dict[str, dict]:
    """The accuracy proxy's rows that ran, by name: benchmarks/gpu/peer_accuracy.py's table over the single-method
    rows of the same proxy's earlier run (the FP8 checkpoint's own, for one), each file read once."""
    out: dict[str, dict] = {}
    for rel in (KIT_ACCURACY, PEER_ACCURACY):
        path = REPO_ROOT / rel
        if path.exists():
            out.update({k: r for k, r in json.loads(path.read_text())["methods"].items() if "error" not in r})
    return out


def _mean_error(row: dict) -> float:
    """A proxy row's MoE-layer error, in %: the mean over its layers."""
    return 100 * sum(row["moe_layer_rel_l2_prefill"]) / len(row["moe_layer_rel_l2_prefill"])


def _peer_accuracy_line(rows: dict[str, dict]) -> list[str]:
    """What each engine computes with, on the accuracy proxy (benchmarks/gpu/peer_accuracy.py writes the data)."""
    said = [f"{label} {_mean_error(r):.1f} % (top-1 {100 * r['top1_agreement']:.1f} %)"
            for label, key in PEER_ROWS if (r := rows.get(key))]
    return ["", "Not like for like in accuracy: each engine's MoE-layer error against bf16 experts on a random-weight "
                "proxy (`benchmarks/results/gpu/peer-accuracy/`): " + "; ".join(said) + "."] if said else []


def _which_to_run(comparisons: dict[str, dict], rows: dict[str, dict]) -> list[str]:
    """The 16 GB choice in one paragraph: speed from the committed 16 GiB comparisons (Q4_K_M and Q8_0 peers),
    error from the accuracy proxy; every figure read from those files."""
    q4, q8 = comparisons.get("moe-vs-llamacpp-16g"), comparisons.get("moe-vs-llamacpp-q8-16g")
    if not (q4 and q8):
        return []
    k8, l8 = q8["engines"]["vramkit"], q8["engines"]["llamacpp"]
    k4, l4 = q4["engines"]["vramkit"], q4["engines"]["llamacpp"]
    whole = k4["settings"].get("gpu_layers", 0) > 0       # the row's placement (whole layers or split): its proxy row
    whole8 = k8["settings"].get("gpu_layers", 0) > 0      # the 8-bit row's placement: its proxy row
    keys = (SERVED_ROW if whole8 else SPLIT_ROW, "Q8_0 (llama.cpp)", "Q4_K_M (llama.cpp)",
            WHOLE_ROW if whole else "GPTQ_INT4 0-87 (GPU) + AMXINT8<-FP8 (CPU)")
    if not all(k in rows for k in keys):
        return []
    if not all(e.get("decode_tok_s") for e in (k8, l8, k4, l4)):
        return []
    e_pre, e_q8, e_q4, e_gptq = (_mean_error(rows[k]) for k in keys)
    fp8 = rows.get("FP8_W8A8 (GPU)")    # the FP8 checkpoint alone as SGLang computes it, every expert on the GPU
    r = k8["decode_tok_s"] / l8["decode_tok_s"]
    pace = "about as fast as" if abs(1 - r) <= 0.2 else f"at {r:.2f}x the rate of"   # the kit's spread: a fifth
    budget = REPO_ROOT / MOE_BUDGET
    fp = (json.loads(budget.read_text()).get("seeded", {}).get("best16", {}).get("fp8") if budget.exists() else None)
    now = (f" The preset now places whole layers, which decoded "
           f"{fp['paired_whole_with_split']['single_median']:.2f}x that split paired by prompt on another machine "
           f"({fp['paired_whole_with_split']['four_median']:.2f}x at 4 streams; `moe-budget/best16`)."
           if fp else "")
    if whole8:
        now = ""                # the row is the whole-layer preset already
    row8 = f"{'whole layers' if whole8 else 'split'}: {k8['decode_tok_s']:.1f} tok/s, {e_pre:.1f} % MoE-layer error"
    t8 = (f"answers a 30K-token prompt in {k8['ttft_30k_s']:.1f} s against llama.cpp's {l8['ttft_30k_s']:.1f}"
          if k8["ttft_30k_s"] <= l8["ttft_30k_s"] else
          f"is slower to a 30K-token prompt's first token: {k8['ttft_30k_s']:.1f} s against llama.cpp's "
          f"{l8['ttft_30k_s']:.1f}")
    return ["", f"**Which to run on a 16 GB card** (the rows above, the proxy's errors beside them): the kit's preset "
                f"(its Q8_0-peer row, {row8}) decodes "
                f"one stream {pace} llama.cpp on a Q8_0 file ({l8['decode_tok_s']:.1f} tok/s, {e_q8:.1f} %), which "
                "errs "
                + ("less" if e_q8 < e_pre else "more")
                + (f" (the FP8 checkpoint alone, as SGLang's kernels compute it, errs {_mean_error(fp8):.1f} %)"
                   if fp8 else "")
                + f"; the preset {t8}, and serves 4 streams at "
                f"{k8['aggregate_4_streams_tok_s'] / l8['aggregate_4_streams_tok_s']:.2f}x llama.cpp's rate (one "
                f"session, {_card(q8)}{_rounds(q8)}). In the first Q4_K_M pairing ({q4['date'][:10]}, the CPU "
                f"layers on kt-kernel; one session, {_card(q4)}) llama.cpp "
                "decodes "
                f"{l4['decode_tok_s']:.1f} tok/s at {e_q4:.1f} %, {l4['decode_tok_s'] / k4['decode_tok_s']:.2f}x the "
                f"kit's fastest 16 GB configuration there ({k4['settings']['point']}, {k4['decode_tok_s']:.1f} tok/s "
                f"at {e_gptq:.1f} %"
                + (", before its deferred experts, which change the computation further" if
                   "deferred-experts-per-token" in k4["settings"]["vramkit_up"] else "")
                + f"), and the kit answers a 30K-token prompt in {k4['ttft_30k_s']:.1f} s against llama.cpp's "
                f"{l4['ttft_30k_s']:.1f} on that file." + now + _int4_sentence(comparisons, rows, e_q4)]


def _int4_sentence(comparisons: dict[str, dict], rows: dict[str, dict], e_q4: float) -> str:
    """The int4 CPU decode's pairing in the 16 GB choice: its speed against llama.cpp's on the same machine, and its
    error, the proxy's every-expert-GPTQ-Int4 row (the CPU layers compute the checkpoint's own values)."""
    c, row = comparisons.get("moe-vs-llamacpp-int4cpu-16g"), rows.get("GPTQ_INT4 (GPU)")
    if not c or not row or "vramkit" not in c["engines"] or "llamacpp" not in c["engines"]:
        return ""
    k, ll = c["engines"]["vramkit"], c["engines"]["llamacpp"]
    return (f" With a GPTQ-Int4 checkpoint the preset decodes its CPU layers on their own values (--kt-cpu-decode, "
            f"auto there; one session, {_card(c)}{_rounds(c)}): {k['decode_tok_s']:.1f} tok/s, "
            f"{k['decode_tok_s'] / ll['decode_tok_s']:.2f}x llama.cpp's {ll['decode_tok_s']:.1f} on the Q4_K_M file "
            f"beside it, {k['decode_tok_s_8k'] / ll['decode_tok_s_8k']:.2f}x after 8K, at {_mean_error(row):.1f} % "
            f"(every expert computes the checkpoint's GPTQ-Int4 values, the proxy's 24 GB row) against its "
            f"{e_q4:.1f} %: faster than llama.cpp on this proxy's Q4 class, and further from bf16.")


def settings_table() -> list[str]:
    """README: the launch settings as vramkit/launch/settings.py declares them."""
    out = ["| setting | flag | environment | make | default |", "| --- | --- | --- | --- | --- |"]
    for s in SETTINGS:
        default = "config/sglang.toml's port" if s.name == "port" else ("-" if s.default in (None, False)
                                                                          else str(s.default))
        out.append(f"| {s.help} | `{s.cli_flag}` | `{s.env_name}` | {f'`{s.make_var}`' if s.make_var else '-'} "
                   f"| {default} |")
    return out


def serving_table() -> list[str]:
    """README: what clients call each catalogued model and which SGLang parsers it runs (config/models.toml)."""
    out = ["| model | clients call it | --tool-call-parser | --reasoning-parser |", "| --- | --- | --- | --- |"]
    for name, m in catalog.models().items():
        s = m.serving
        if s is None:
            continue
        out.append(f"| {name} | `{s.served_model_name}` | {f'`{s.tool_call_parser}`' if s.tool_call_parser else '-'} "
                   f"| {f'`{s.reasoning_parser}`' if s.reasoning_parser else '-'} |")
    return out


def exit_codes_table() -> list[str]:
    """README: every exit code, as vramkit/errors.py declares it (`vramkit --help` prints the same)."""
    out = ["| code | meaning |", "| --- | --- |"]
    for line in exit_code_lines():
        code, text = line.split(maxsplit=1)
        out.append(f"| {code} | {text} |")
    return out


@dataclass(frozen=True)
class Block:
    path: Path                       # the file that holds it
    name: str                        # the marker's name
    render: Callable[[], list[str]]  # the block's lines, markers excluded
    comment: tuple[str, str] = ("# ", "")   # how a marker line is commented in that file

    def markers(self) -> tuple[str, str]:
        a, b = self.comment
        return (f"{a}BEGIN GENERATED {self.name}: `make compose` writes it, do not edit{b}",
                f"{a}END GENERATED {self.name}{b}")


HTML = ("<!-- ", " -->")
BLOCKS: tuple[Block, ...] = (
    Block(catalog.CONFIG_DIR / "presets.toml", "knob table (vramkit/core/plan/knobs.py)", knobs.doc_table),
    Block(REPO_ROOT / "README.md", "launch settings (vramkit/launch/settings.py)", settings_table, HTML),
    Block(REPO_ROOT / "README.md", "exit codes (vramkit/errors.py)", exit_codes_table, HTML),
    Block(REPO_ROOT / "README.md", "presets table (vramkit/generated.py)", presets_table, HTML),
    Block(REPO_ROOT / "README.md", "serving table (vramkit/generated.py)", serving_table, HTML),
    Block(REPO_ROOT / "README.md", "roofline (vramkit/generated.py)", roofline, HTML),
    Block(REPO_ROOT / "README.md", "physics table (vramkit/generated.py)", physics_table, HTML),
    Block(REPO_ROOT / "README.md", "hybrid MoE estimate (vramkit/generated.py)", kt_estimate_table, HTML),
    Block(REPO_ROOT / "README.md", "MoE against llama.cpp (vramkit/generated.py)", moe_vs_llamacpp_table, HTML),
)


def render_file(text: str, block: Block) -> str:
    """`text` with the block between its markers replaced by a fresh render."""
    begin, end = block.markers()
    lines = text.split("\n")
    try:
        i, j = lines.index(begin), lines.index(end)
    except ValueError:
        raise VramkitError(f"{block.path.name}: the markers of the generated {block.name} are missing",
                           f"restore the lines '{begin}' and '{end}' from git", Exit.BAD_FILE) from None
    if j < i:
        raise VramkitError(f"{block.path.name}: END before BEGIN of {block.name}", "restore it from git", Exit.BAD_FILE)
    return "\n".join(lines[: i + 1] + block.render() + lines[j:])


def stale_blocks(*, write: bool) -> list[str]:
    """'file: block' for each generated block that differs from a fresh render; with `write`, rewrite it."""
    stale = []
    for block in BLOCKS:
        current = block.path.read_text()
        fresh = render_file(current, block)
        if fresh != current:
            stale.append(f"{block.path.name}: {block.name}")
            if write:
                block.path.write_text(fresh)
    return stale
