"""The kit against llama.cpp on the same host, shape and emulated card (issue 18 items 1, 2, 6).

    python3 benchmarks/gpu/moe_vs_llamacpp_report.py evidence RES_DIR      # on the GPU host (run_moe_vs_llamacpp.sh)
    python3 benchmarks/gpu/moe_vs_llamacpp_report.py report RES_DIR [--out benchmarks/results/gpu]
        [--budgets 16] [--evidence DIR] [--no-levers] [--stem moe-vs-llamacpp-default]   # a later session's pairing
    python3 benchmarks/gpu/moe_vs_llamacpp_report.py int8 RES_DIR [--out benchmarks/results/gpu]
    python3 benchmarks/gpu/moe_vs_llamacpp_report.py merge OUT_DIR RES_1 RES_2 RES_3   # then: report OUT_DIR

`evidence` trims every server log in RES_DIR to the lines that show the expert split, the KT threads and the
memory figures (SGLang's and llama.cpp's), as NAME.evidence.txt beside the point's JSON. `report` reads the
points run_moe_vs_llamacpp.sh wrote (moe_point.py / moe_probe.py JSON, llama-bench JSON) and writes, per
budget, moe-vs-llamacpp-{16,24}g.json / .md / .png, the evidence files beside them, and
moe-vs-llamacpp-levers.md (what each kit lever gave at 16 GiB). `int8` takes another host session's points
(STEPS="setup amxint8 amxint8-levers": the CPU experts in AMXINT8) into moe-vs-llamacpp-int8/ and rewrites the
levers file, whose last section sets them beside FP8 and AMXINT4. `merge` takes the same steps run N times on one
machine, each point started afresh each time, into one session folder: every probe the median over the starts
(moe_probe.merge_starts), the other files of the first start, each start's own files under rounds/rK/. Every number
is a measurement from that run; the per-token budgets are labelled derived (1000 / decode tok/s, split by the fitted
sync constant).
"""
from __future__ import annotations

import json
import re
import shutil
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moe_levers import INT8_DIR, LEVERS_DIR, levers  # noqa: E402
from moe_session import (  # noqa: E402
    EXPERTS,
    INT4_DECODE_WORDS,
    METRICS,
    MOE_LAYERS,
    PAIRINGS,
    Q4,
    RESULTS,
    ROOT,
    Pairing,
    bench_rows,
    best,
    cpu_decode,
    disturbed,
    failed_requests,
    fmt,
    kit_point,
    llama_best,
    llama_point,
    load,
    ran_whole_layers,
)

sys.path.insert(0, str(ROOT))
from vramkit.core.plan import kt_hybrid as kt  # noqa: E402
from vramkit.units import ratio_text  # noqa: E402

SGLANG_LINES = re.compile(
    r"Load weight (begin|end)|KV Cache is allocated|max_total_num_tokens|Memory pool end|Capture cuda graph (begin|end)"
    r"|avail mem|kt_|KTMoE|[Kk][Tt]ransformers|CPUInfer|cpuinfer|gpu_experts|num_gpu_experts|thread|numa|NUMA"
    r"|vramkit_kt_compat|vramkit_gpu_prefill|vramkit_int4_experts|vramkit_ggml_experts|context_len|max_running_requests|chunked_prefill_size|AMX|amx|deferred"
    r"|Load.*experts|memory|Memory|OOM|Error|error")
LLAMA_LINES = re.compile(
    r"fit|overflow|offload|n_cpu_moe|buffer size|KV buffer|kv_unified|n_ctx|n_seq|n_batch|n_ubatch|flash_attn"
    r"|CUDA0|model size|model params|file type|type +(f32|q4_K|q6_K)|threads|system_info|AMX|n_slots|slot +init"
    r"|total VRAM|free|error|failed|load_backend")
MAX_LINES = 160
NOISE = ("Decode batch", "Prefill batch", "slot update_slots", "slot launch_slot", "print_timing",
         "Ignore import error", "Loading from", "Creating AMX_MOE_TP", "slot release", "slot get_availabl",
         "  threadpool_count: ")       # kt-kernel's LLAMAFILE wrapper prints its TP split for each of the 48 layers
SERVER_ARGS_KEYS = ("context_length", "mem_fraction_static", "kv_cache_dtype", "chunked_prefill_size",
                    "max_running_requests", "cuda_graph_max_bs_decode", "load_format", "kt_method", "kt_cpuinfer",
                    "kt_threadpool_count", "kt_num_gpu_experts", "kt_max_deferred_experts_per_token", "kt_weight_path")


def short_server_args(line: str) -> str:
    """SGLang's one-line ServerArgs dump, cut to the settings that matter here."""
    if "server_args=ServerArgs(" not in line:
        return line
    kept = [m.group(0) for k in SERVER_ARGS_KEYS for m in [re.search(rf"\b{k}=[^,)]*", line)] if m]
    return line.split("server_args=")[0] + "server_args (kept): " + ", ".join(kept)


def trim(text: str, pattern: re.Pattern) -> str:
    keep = [ln.rstrip() for ln in text.splitlines() if pattern.search(ln)]
    # drop request-by-request noise (SGLang's per-batch lines, llama-server's per-request slot lines)
    keep = [short_server_args(ln) for ln in keep if not any(x in ln for x in NOISE)]
    keep = [ln[:600] for ln in keep]
    if len(keep) > MAX_LINES:
        keep = keep[:MAX_LINES // 2] + [f"... {len(keep) - MAX_LINES} lines left out ..."] + keep[-MAX_LINES // 2:]
    return "\n".join(keep) + "\n"


def retrim(path: Path) -> None:
    """Apply the current filter to an evidence file trimmed on the host with an older one."""
    head, _, body = path.read_text(errors="replace").partition("\n")
    pat = SGLANG_LINES if ".server.log" in head else LLAMA_LINES
    path.write_text(head + "\n" + trim(body, pat))


def add_plan_lines(evidence_file: Path, up_txt: Path) -> None:
    """The plan's expert split and memory rows from `vramkit up`'s output (the SGLang log does not print
    --kt-num-gpu-experts), once."""
    if not up_txt.exists():
        return
    text = evidence_file.read_text()
    if "# from vramkit up" in text:
        return
    rows = [ln.strip() for ln in up_txt.read_text(errors="replace").splitlines()
            if re.search(r"experts on GPU / CPU|free at start|KV pool|host RAM|weights on GPU", ln)]
    if rows:
        evidence_file.write_text(text + f"# from vramkit up's plan table ({up_txt.name}):\n" + "\n".join(rows) + "\n")


def evidence(res: Path) -> list[Path]:
    out = []
    for log in sorted(res.glob("*.server.log")) + sorted(res.glob("*.llama.log")):
        name = log.name.split(".")[0]
        pat = SGLANG_LINES if log.name.endswith(".server.log") else LLAMA_LINES
        dst = res / f"{name}.evidence.txt"
        dst.write_text(f"# trimmed from {log.name} (run_moe_vs_llamacpp.sh): expert split, threads, memory\n"
                       + trim(log.read_text(errors="replace"), pat))
        out.append(dst)
    return out


def versions(res: Path) -> dict:
    f = next((p for p in (res / "logs" / "site.txt", res / "site.txt") if p.exists()), None)
    site = f.read_text(errors="replace") if f else ""
    kt = next((ln.split(None, 1)[1] for ln in site.splitlines() if ln.startswith("kt_kernel ")), "0.5.1")
    # the driver's llama.cpp CPU flags where it wrote them (LLAMA_CPU_VARIANTS=1: the CPU backend as loadable
    # variants), else the one static build every earlier session ran
    built = (res / "llama-build.txt").read_text().strip() if (res / "llama-build.txt").exists() else "GGML_NATIVE=ON"
    return {"sglang": "0.5.15.post1", "kt_kernel": kt,
            "llama_cpp": "as vendored by the llama-cpp-python 0.3.36 sdist (commit 0c1e570), built with "
                         f"GGML_CUDA=ON CMAKE_CUDA_ARCHITECTURES=90 {built}"}


def device(res: Path) -> str:
    host = (res / "host.txt").read_text(errors="replace") if (res / "host.txt").exists() else ""
    gpu = next((ln for ln in host.splitlines() if "H100" in ln or "H200" in ln), "").strip()
    cpu = next((ln.split(":", 1)[1].strip() for ln in host.splitlines() if ln.startswith("Model name")), "")
    return f"{gpu}; CPU {cpu}"


ALL_CORES = 16     # the GPU host's physical cores: llama-server's other thread count (run_moe_vs_llamacpp.sh's $PHYS)
LLAMA_SETTINGS = ("-c 32768 -np 4 -kvu -fa on -ctk q8_0 -ctv q8_0 -t {t} (llama-server, 4 slots sharing one "
                  "32K KV cache; requests: token ids, greedy, EOS ignored, no prompt cache)")


def sweep_note(res: Path, budget: int, ncmoe: str | None, pairing: Pairing = Q4) -> str:
    if ncmoe is None:
        return ""
    n = int(ncmoe)
    if n == 0:
        return "--fit off -ngl 99: every layer's experts on the GPU"
    lower = res / f"{pairing.llama.format(b=budget)}-ncmoe{n - 1}.evidence.txt"
    oom = lower.exists() and "out of memory" in lower.read_text(errors="replace")
    swept = (res / f"{pairing.llama.format(b=budget)}-ncmoe{n}.evidence.txt").exists()
    return (f"--fit off -ngl 99: the experts of the first {n} layers on the CPU"
            + (f"; {n - 1} did not start (out of memory)" if oom else "")
            + ("" if swept else "; not swept in this session: the lowest that started on the earlier sweeps"))


def kit_weights(p: dict) -> str:
    """The kit's weights at a point, in words (its GPU experts' format; the CPU experts' method, if any)."""
    gptq = p["gpu_expert_dtype"].startswith("GPTQ")
    kernel = "moe_wna16 (the triton MoE kernel)" if "moe_wna16" in p["gpu_expert_dtype"] else "marlin MoE"
    src = ("from Qwen's GPTQ-Int4 quantization_config on this shape (dummy load, float16 activations, experts on the GPU "
           f"through SGLang's {kernel})" if gptq else "from a block-FP8 config (dummy load, experts on the GPU in FP8)")
    return src + (f" and KT's {p['kt_method']} layout for the CPU experts" if p["kt_method"]
                  else ", every expert on the GPU (the plan drops the hybrid mode: no KT)")


def _server_setting(point: dict, key: str) -> int | None:
    """A KT setting the server ran with, as SGLang's own ServerArgs line in its log says (kt_cpuinfer=12), else as
    its command line does (--kt-cpuinfer 12)."""
    m = (re.search(rf"\b{key}=(\d+)", point.get("server_args") or "")
         or re.search(rf"--{key.replace('_', '-')}[ =](\d+)", point.get("sglang_command") or ""))
    return int(m.group(1)) if m else None


def deferred(point: dict) -> bool:
    """Whether the server ran with deferred experts (--kt-max-deferred-experts-per-token above 0)."""
    return bool(_server_setting(point, "kt_max_deferred_experts_per_token")
                or re.search(r"--kt-max-deferred-experts-per-token[ =][1-9]", " ".join(point.get("vramkit_up_args") or [])))


def kt_threads(point: dict) -> int | None:
    """The KT threads the server ran with."""
    return _server_setting(point, "kt_cpuinfer")


def decode_of(p: dict, best: dict) -> dict:
    """What decoded another point's CPU layers, where the int4 kernel is in the session (its build where forced by
    VRAMKIT_INT4_ISA): kt-kernel's method or the int4 kernel; nothing for sessions without it."""
    dec = {q["name"]: cpu_decode(q["env"], q["vramkit_up_args"]) for q in (p, best) if q["kt_method"]}
    if "int4" not in dec.values():
        return {}
    isa = next((e.split("=", 1)[1] for e in p["env"] or [] if e.startswith("VRAMKIT_INT4_ISA=")), None)
    share = next((e.split("=", 1)[1] for e in p["env"] or [] if e.startswith("VRAMKIT_INT4_GPU_SHARE=")), None)
    return {"cpu_decode": dec.get(p["name"], "kt"), **({"int4_isa": isa} if isa else {}),
            **({"int4_gpu_share": share} if share else {})}


def compare(res: Path, budget: int, pairing: Pairing = Q4) -> dict | None:
    kits = [p for p in (kit_point(res, n) for n in pairing.kits(budget)) if p and not disturbed(res, p["name"], budget)]
    full = [p for p in kits if all(p["figures"][k] for k in METRICS)]
    lname = pairing.llama.format(b=budget)
    fit = llama_point(res, f"{lname}-fit")
    sweep = llama_point(res, f"{lname}-best")
    ncmoe = (res / f"{lname}-best-ncmoe.txt").read_text().strip() \
        if (res / f"{lname}-best-ncmoe.txt").exists() else None
    # the same two at every physical core where the session ran them (its NAME-fit-t16 / NAME-best-t16 points: the
    # server's other thread count, as llama-bench's rows have it), so the best per row is over both counts
    t16 = {f"--fit on -t {ALL_CORES}": llama_point(res, f"{lname}-fit-t{ALL_CORES}"),
           f"--n-cpu-moe {ncmoe} -t {ALL_CORES}": llama_point(res, f"{lname}-best-t{ALL_CORES}")}
    points = {"--fit on": fit, f"--n-cpu-moe {ncmoe}": sweep} | {m: p for m, p in t16.items() if p}
    modes = {m: p["figures"] if p else None for m, p in points.items()}
    # the headline is the best point that computes what the checkpoint says (a deferred expert lands one layer late,
    # kt-accuracy.md, so such a point stays among the other points): the one that meets the most of the goals
    # against llama.cpp's best, then the fastest decode
    lb_which = llama_best(modes) if fit or sweep else None
    goals = lb_which[0] if lb_which else None
    kit_best = best([p for p in full if not deferred(p)], goals) or best(full, goals)
    if not (fit or sweep) and (pairing is not Q4 or not kit_best):   # a pairing needs its llama.cpp side
        return None
    threads = 14
    date = (kit_best or {}).get("probe_date") or ""
    n_rounds, rounds_are = rounds(res, budget)
    out: dict = {
        "budget_gib": budget,
        "device": device(res) + f"; card memory emulated at {budget} GiB free by the same ballast "
                                "(shared/gpu/ballast.py) for both engines",
        "model": "Qwen3-Coder-30B-A3B shape (48 layers, 128 experts, top-8), random weights: the kit's "
                 + (kit_weights(kit_best) if kit_best else "-")
                 + f"; llama.cpp's {pairing.gguf}",
        "date": date, "versions": versions(res),
        "how": "benchmarks/gpu/run_moe_vs_llamacpp.sh, one host session, engines one after the other; "
               "decode_tok_s: 1 stream, 512-token prompt, 128 tokens, client-side 1/TPOT; decode_tok_s_8k: the "
               "64 tokens after an 8,192-token prompt; ttft_30k_s: a 30,000-token prompt; "
               "aggregate_4_streams_tok_s: 4 concurrent 512-token prompts, sum of per-stream decode rates"
               + (f"; each figure the median of {n_rounds} rounds: {rounds_are}" if n_rounds > 1 else "") + ". "
               "vramkit: the best configuration measured with every figure (the moe preset as planned for the "
               "checkpoint, or with a lever: whole layers on the GPU, other KT threads, the GPU prompt path; the "
               "one meeting the most goals, then the fastest decode; a point with deferred "
               "experts, which changes the computation, only where no other has every figure); llama.cpp: its "
               "best per "
               "figure over --fit and --n-cpu-moe "
               "(swept down to the lowest that starts, or the lowest an earlier sweep found)",
        "rounds": n_rounds,      # each probe figure the median of this many rounds (1: one request)
        "engines": {},
        "llamacpp_bench": bench_rows(res, budget, pairing),
    }
    if kit_best:
        k = kit_best
        out["engines"]["vramkit"] = {**{key: k["figures"][key] for key in METRICS},
            "more": {key: k["figures"][key] for key in ("ttft_512_s", "ttft_8k_s", "decode_tok_s_30k")},
            "settings": {"point": k["name"], "vramkit_up": "vramkit up --runtime native " + " ".join(k["vramkit_up_args"] or []),
                         "env": k["env"], "kt_num_gpu_experts": k["planned_gpu_experts_per_layer"],
                         "gpu_layers": gpu_layers(k),
                         "kt_cpuinfer": kt_threads(k) if k["kt_method"] else 0, "kt_method": k["kt_method"],
                         # the adapter's int4 kernel for the CPU layers' decode (absent: kt-kernel's method)
                         **({"cpu_decode": "int4"} if k["kt_method"] and cpu_decode(k["env"], k["vramkit_up_args"]) == "int4" else {}),
                         "gpu_expert_dtype": k["gpu_expert_dtype"], "activations": k["activations"]},
            "start_s": k["start_s"], "peak_vram_bytes": k["peak_vram_bytes"],
            "host_rss_after_start_bytes": k["host_rss_after_start_bytes"], "log_figures_gib": k["log_figures_gib"],
            "other_points": [{"point": p["name"], **p["figures"], **decode_of(p, k),
                              **({"failed": f} if (f := failed_requests(res / f"{p['name']}.probe.json")) else {})}
                             for p in kits if p is not k]}
    if lb_which:
        lb, which = lb_which
        out["engines"]["llamacpp"] = {**{key: lb[key] for key in METRICS},
            "more": {key: lb[key] for key in ("ttft_512_s", "ttft_8k_s", "decode_tok_s_30k")},
            "mode_of_each": which,
            "settings": {"server": "llama-server -m <gguf> " + LLAMA_SETTINGS.format(t=threads),
                         "modes": {"--fit on": "llama.cpp picks the offload (default margin 1024 MiB)",
                                   f"--n-cpu-moe {ncmoe}": sweep_note(res, budget, ncmoe, pairing)}
                         | {m: f"the same with -t {ALL_CORES}, every physical core" for m, p in t16.items() if p},
                         "n_cpu_moe_swept_best": int(ncmoe) if ncmoe else None},
            "by_mode": {m: f for m, f in modes.items() if f},
            "start_s": {m: p["start_s"] for m, p in points.items() if p},
            "vram_used_mib_with_ballast": {m: p["vram_used_mib_with_ballast"] for m, p in points.items() if p}}
    out["ratios"] = ratios(out)
    out["budget_ms_per_token"] = budgets(out, res, budget)
    return out


def rounds(res: Path, budget: int) -> tuple[int, str]:
    """How many rounds each probe of this card's session ran, and how: within one start (moe_probe.py --repeat; 1
    before it existed) or over separate starts (merge)."""
    probes = [p for p in (load(f) for f in res.glob(f"*{budget}*.probe.json")) if isinstance(p, dict)]
    n = min((p.get("repeat", 1) for p in probes), default=1)
    how = {p.get("rounds_are") for p in probes} - {None}
    return n, (how.pop() if len(how) == 1 and all(p.get("rounds_are") for p in probes)
               else "fresh prompts within one start of each server (moe_probe.py --repeat)")


def ratios(c: dict) -> dict:
    k, ll = c["engines"].get("vramkit"), c["engines"].get("llamacpp")
    if not k or not ll:
        return {}

    def r(key, inv=False):
        a, b = k.get(key), ll.get(key)
        if not a or not b:
            return None
        return round(b / a if inv else a / b, 3)
    return {"decode_vs_llamacpp": r("decode_tok_s"), "decode_8k_vs_llamacpp": r("decode_tok_s_8k"),
            "ttft_30k_llamacpp_over_kit": r("ttft_30k_s", inv=True),
            "aggregate_4_vs_llamacpp": r("aggregate_4_streams_tok_s"),
            "goal": "decode >= 1.0 at depth 0 and 8K, TTFT ratio >= 1.0, aggregate >= 2.0"}


def gpu_layers(point: dict) -> int:
    """The MoE layers a kit point ran whole on the GPU (ran_whole_layers): the plan's per-layer GPU share as the
    adapter takes it (96 of 128 a layer: 36 of 48 layers), or the count its server log gives; 0 for the per-layer
    split."""
    if point.get("gpu_layers_logged") is not None and point["kt_method"]:
        return point["gpu_layers_logged"]
    if not point["kt_method"] or not ran_whole_layers(point["env"], point["vramkit_up_args"]):
        return 0
    return kt.whole_gpu_layers(point["planned_gpu_experts_per_layer"], MOE_LAYERS, EXPERTS)


def budgets(c: dict, res: Path, budget: int) -> dict:
    """Per-token time at batch 1: measured (1000 / decode tok/s; llama-bench's tg128 beside llama-server's), and
    for the kit the share the fitted per-layer sync accounts for (derived: MoE layers with CPU experts x
    config/engine.toml's kt_layer_sync_us)."""
    out: dict = {}
    for eng, e in c["engines"].items():
        if e.get("decode_tok_s"):
            out[eng] = {"measured_ms_per_token_depth0": round(1000 / e["decode_tok_s"], 2)}
            if e.get("decode_tok_s_8k"):
                out[eng]["measured_ms_per_token_8k"] = round(1000 / e["decode_tok_s_8k"], 2)
    tg = [r for r in c["llamacpp_bench"] if r["test"].startswith("tg") and r["depth"] == 0 and r["threads"] == 14]
    if tg and "llamacpp" in out:
        out["llamacpp"]["llama_bench_tg128_ms_per_token_depth0"] = round(1000 / tg[0]["tok_s"], 2)
    k = c["engines"].get("vramkit")
    if k and "vramkit" in out:
        import tomllib
        sync_us = tomllib.loads((ROOT / "config" / "engine.toml").read_text()).get("kt_layer_sync_us")
        layers = MOE_LAYERS - k["settings"]["gpu_layers"] if k["settings"]["kt_method"] else 0  # no KT: no trip
        if sync_us and layers:
            out["vramkit"]["derived_sync_ms"] = round(layers * float(sync_us) / 1000, 2)
            out["vramkit"]["derived_sync_note"] = (f"derived: {layers} MoE layers with CPU experts x {sync_us} us "
                                                   "(config/engine.toml kt_layer_sync_us, fitted by fit_kt.py)")
    return out


ROWS = (("decode, 1 stream, depth 0 (tok/s)", "decode_tok_s", ">= 1.0x"),
        ("decode, 1 stream, depth 8K (tok/s)", "decode_tok_s_8k", ">= 1.0x"),
        ("TTFT, 30K-token prompt (s)", "ttft_30k_s", "<= 1.0x"),
        ("aggregate decode, 4 streams (tok/s)", "aggregate_4_streams_tok_s", ">= 2x"))


def table(c: dict) -> list[str]:
    """The comparison table (the README's MoE section opens with it, vramkit/generated.py)."""
    k, ll = c["engines"].get("vramkit", {}), c["engines"].get("llamacpp", {})
    out = ["| | vramkit (kit's best) | llama.cpp (best) | kit / llama.cpp | goal |", "| --- | --- | --- | --- | --- |"]
    for label, key, goal in ROWS:
        a, bb = k.get(key), ll.get(key)
        ratio = ratio_text(a / bb) if a and bb else "-"
        mode = (ll.get("mode_of_each") or {}).get(key)
        out.append(f"| {label} | {fmt(a)} | {fmt(bb)}{f' ({mode})' if mode else ''} | {ratio} | {goal} |")
    return out


def markdown(c: dict) -> str:
    b = c["budget_gib"]
    k, ll = c["engines"].get("vramkit", {}), c["engines"].get("llamacpp", {})
    lines = [f"# The kit against llama.cpp at {b} GiB (issue 18)", "",
             f"Measured {c['date']} on {c['device']}.", "", c["model"] + ".", "", c["how"] + ".", ""]
    lines += table(c)
    lines += ["", "Settings:", ""]
    if k:
        s = k["settings"]
        lines.append(f"- vramkit ({s['point']}): `{s['vramkit_up']}`"
                     + (f" with {', '.join(s['env'])}" if s["env"] else "")
                     + ((f"; whole layers: the experts of {g} of {MOE_LAYERS} MoE layers on the GPU "
                         f"({s['gpu_expert_dtype']}; the plan's share, {s['kt_num_gpu_experts']} of {EXPERTS} a layer, "
                         f"as whole layers), those of {MOE_LAYERS - g} on the CPU, KT {s['kt_method']}, "
                         f"{s['kt_cpuinfer']} threads"
                         + (f"; {INT4_DECODE_WORDS} {s['kt_method']}" if s.get("cpu_decode") == "int4" else "")
                         if (g := s["gpu_layers"]) else
                         f"; planned {s['kt_num_gpu_experts']} GPU experts per layer ({s['gpu_expert_dtype']}), "
                         f"KT {s['kt_method']} on the CPU, {s['kt_cpuinfer']} threads") if s["kt_method"] else
                        f"; every expert on the GPU ({s['gpu_expert_dtype']}): the plan holds them all beside the "
                        "pool and drops the hybrid mode (no kt-kernel, no CPU round trip)"))
        for p in k.get("other_points", []):
            how = ("" if "cpu_decode" not in p else " (the CPU layers' decode on the int4 kernel"
                   + (f", its {p['int4_isa'].upper()} build forced" if p.get("int4_isa") else "")
                   + (f"; {p['int4_gpu_share']} of each call's experts on the GPU over the bus"
                      if p.get("int4_gpu_share") else "") + ")"
                   if p["cpu_decode"] == "int4" else f" (the CPU layers' decode on kt-kernel's {s['kt_method']})")
            lines.append(f"  - also measured, {p['point']}{how}: decode {fmt(p['decode_tok_s'])} / "
                         f"{fmt(p['decode_tok_s_8k'])} "
                         f"tok/s (0 / 8K), TTFT 30K {fmt(p['ttft_30k_s'])} s, 4 streams "
                         f"{fmt(p['aggregate_4_streams_tok_s'])} tok/s"
                         + "".join(f"; {f}" for f in p.get("failed", [])))
    if ll:
        n = {2: "two", 3: "three", 4: "four"}.get(len(ll["by_mode"]), str(len(ll["by_mode"])))
        lines.append(f"- llama.cpp: `{ll['settings']['server']}`, in {n} modes (the table takes its best per row):")
        for mode, f in ll.get("by_mode", {}).items():
            lines.append(f"  - `{mode}` ({ll['settings']['modes'].get(mode, '')}): decode {fmt(f['decode_tok_s'])} / "
                         f"{fmt(f['decode_tok_s_8k'])} tok/s (0 / 8K), TTFT 30K "
                         f"{'not measured' if f['ttft_30k_s'] is None else fmt(f['ttft_30k_s']) + ' s'}, 4 streams "
                         f"{fmt(f['aggregate_4_streams_tok_s'])} tok/s")
    if c["llamacpp_bench"]:
        lines += ["", f"llama-bench with --n-cpu-moe {ll.get('settings', {}).get('n_cpu_moe_swept_best')} (-fa 1, "
                  "q8_0 KV; each depth filled first):", "", "| test | depth | threads | tok/s |", "| --- | --- | --- | --- |"]
        lines += [f"| {r['test']} | {r['depth']:,} | {r['threads']} | {r['tok_s']:.1f} ± {r['stddev']:.1f} |"
                  for r in c["llamacpp_bench"]]
    bud = c.get("budget_ms_per_token", {})
    if bud:
        lines += ["", "Per-token time at batch 1 (measured = 1000 / decode tok/s; the sync share is derived):", ""]
        for eng, v in bud.items():
            extra = f"; of it ~{v['derived_sync_ms']} ms GPU<->CPU round trips ({v['derived_sync_note']})" \
                if "derived_sync_ms" in v else ""
            lb = f"; llama-bench tg128: {v['llama_bench_tg128_ms_per_token_depth0']} ms" \
                if "llama_bench_tg128_ms_per_token_depth0" in v else ""
            lines.append(f"- {eng}: {v['measured_ms_per_token_depth0']} ms at depth 0"
                         + (f", {v['measured_ms_per_token_8k']} ms at 8K" if "measured_ms_per_token_8k" in v else "")
                         + lb + extra)
    lines += ["", f"Evidence: `{c.get('evidence_dir', 'moe-vs-llamacpp')}/*.evidence.txt` (trimmed server logs: expert split, KT threads, memory; "
              "llama-server logs little at its default verbosity: its OOM line at --n-cpu-moe one lower, and "
              "`*.smi.txt`, the card's use with the ballast, stand for it), the points' JSON beside them.", ""]
    return "\n".join(lines)


def plot(c: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = [("decode_tok_s", "decode d0\n(tok/s)"), ("decode_tok_s_8k", "decode 8K\n(tok/s)"),
            ("aggregate_4_streams_tok_s", "4 streams\n(tok/s)"), ("ttft_30k_s", "TTFT 30K\n(s)")]
    fig, axes = plt.subplots(1, len(keys), figsize=(11, 3.6))
    kit = (c["engines"].get("vramkit") or {}).get("settings", {}).get("point", "")
    gguf = re.search(r"llama\.cpp's an? (\w+)", c["model"])          # the file it ran: Q4_K_M, Q8_0
    names = [f"vramkit\n{kit}", f"llama.cpp\n{gguf.group(1) if gguf else ''}"]
    for ax, (key, label) in zip(axes, keys, strict=True):
        vals = [c["engines"].get(e, {}).get(key) or 0 for e in ("vramkit", "llamacpp")]
        ax.bar(names, vals, color=["#4c72b0", "#dd8452"])
        ax.tick_params(axis="x", labelsize=8)
        ax.set_title(label, fontsize=9)
        for i, v in enumerate(vals):
            ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    fig.suptitle(f"Qwen3-Coder-30B-A3B shape, card emulated at {c['budget_gib']} GiB (one H100 host run)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(res: Path, out_dir: Path, budgets_: tuple[int, ...] = (16, 24), evd_name: str = "moe-vs-llamacpp",
           with_levers: bool = True, q4_stem: str | None = None) -> list[Path]:
    """`q4_stem`: the Q4_K_M pairing's files under another name (a later session's pairing beside the first one's)."""
    res = untar(res)                             # the archive the device call brought back, or a folder
    written = []
    evd = out_dir / evd_name
    evd.mkdir(parents=True, exist_ok=True)
    for pairing, budget in ((p, b) for p in PAIRINGS for b in budgets_):
        c = compare(res, budget, pairing)
        if c is None:
            continue
        c["evidence_dir"] = evd_name
        stem = out_dir / f"{q4_stem if q4_stem and pairing is Q4 else pairing.stem}-{budget}g"
        stem.with_suffix(".json").write_text(json.dumps(c, indent=1) + "\n")
        stem.with_suffix(".md").write_text(markdown(c))
        try:
            plot(c, stem.with_suffix(".png"))
            written.append(stem.with_suffix(".png"))
        except ImportError:
            pass
        written += [stem.with_suffix(".json"), stem.with_suffix(".md")]
    # the points' own files beside the comparison: probes, point JSONs, llama-bench, evidence
    if (res / "logs" / "site.txt").exists():
        shutil.copy(res / "logs" / "site.txt", evd / "site.txt")
    for p in sorted(res.glob("*")):
        if p.is_file() and p.suffix in (".json", ".txt", ".start_s") and p.resolve() != (evd / p.name).resolve():
            shutil.copy(p, evd / p.name)
            if p.name.endswith(".evidence.txt"):
                retrim(evd / p.name)
                add_plan_lines(evd / p.name, res / p.name.replace(".evidence.txt", ".up.txt"))
    if with_levers:     # the levers file stands on the first session's points, whichever session a card comes from
        first = out_dir / LEVERS_DIR if (out_dir / LEVERS_DIR / "k16.json").exists() else RESULTS / LEVERS_DIR
        (out_dir / "moe-vs-llamacpp-levers.md").write_text(levers(first, out_dir))
        written.append(out_dir / "moe-vs-llamacpp-levers.md")
    return written


def untar(res: Path) -> Path:
    if res.suffix != ".tgz":
        return res
    import tempfile
    tmp = Path(tempfile.mkdtemp(prefix="moe-vs-llamacpp-"))
    with tarfile.open(res) as t:
        t.extractall(tmp, filter="data")
    return tmp


def int8(res: Path, out_dir: Path) -> list[Path]:
    """The AMXINT8 session's files into OUT/moe-vs-llamacpp-int8/ (evidence trimmed, plan lines added), then the
    levers file rewritten from the committed points beside it (moe-vs-llamacpp/)."""
    res = untar(res)
    d = out_dir / INT8_DIR
    d.mkdir(parents=True, exist_ok=True)
    if (res / "logs" / "site.txt").exists():
        shutil.copy(res / "logs" / "site.txt", d / "site.txt")
    for p in sorted(res.glob("*")):
        if p.is_file() and p.suffix in (".json", ".txt"):
            shutil.copy(p, d / p.name)
            if p.name.endswith(".evidence.txt"):
                retrim(d / p.name)
                add_plan_lines(d / p.name, res / p.name.replace(".evidence.txt", ".up.txt"))
    (out_dir / "moe-vs-llamacpp-levers.md").write_text(levers(out_dir / "moe-vs-llamacpp", out_dir))
    return [d, out_dir / "moe-vs-llamacpp-levers.md"]


def merge(out: Path, runs: list[Path]) -> list[Path]:
    """N host runs of the same steps (the driver's RES, moved aside between runs) into one session folder OUT."""
    from moe_probe import merge_starts
    runs = [untar(r) for r in runs]
    how = (f"{len(runs)} separate starts of each server on one machine, back to back, the same prompts each time "
           "(no prefix cache survives a start); each start's own files under rounds/")
    out.mkdir(parents=True, exist_ok=True)
    for k, r in enumerate(runs, 1):
        shutil.copytree(r, out / "rounds" / f"r{k}", dirs_exist_ok=True)
    if (runs[0] / "logs" / "site.txt").exists():
        shutil.copy(runs[0] / "logs" / "site.txt", out / "site.txt")
    written = []
    for p in sorted(runs[0].glob("*")):
        if not p.is_file():
            continue
        if p.name.endswith(".probe.json") and all((r / p.name).exists() for r in runs[1:]):
            merged = merge_starts([load(r / p.name) for r in runs], how)
            (out / p.name).write_text(json.dumps(merged, indent=1) + "\n")
        else:
            shutil.copy(p, out / p.name)
        written.append(out / p.name)
    return written


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("evidence", "report", "int8", "merge") or (argv[0] == "merge" and len(argv) < 4):
        print("usage: moe_vs_llamacpp_report.py evidence|report|int8 RES_DIR [--out DIR] | merge OUT_DIR RES_1 RES_2 ...",
              file=sys.stderr)
        return 64
    res = Path(argv[1])
    if argv[0] == "merge":
        runs = [Path(a) for a in argv[2:]]
        if missing := [str(r) for r in runs if not (r.is_dir() or r.suffix == ".tgz" and r.is_file())]:
            print(f"moe_vs_llamacpp_report.py merge: no such run folder or .tgz: {', '.join(missing)}", file=sys.stderr)
            return 66
        try:
            print(f"{len(merge(res, runs))} files in {res}")
        except ValueError as exc:       # a probe that ran more than one round per start
            print(f"moe_vs_llamacpp_report.py merge: {exc}", file=sys.stderr)
            return 65
        return 0
    if argv[0] == "evidence":
        for p in evidence(res):
            print(p)
        return 0
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else RESULTS
    if argv[0] == "report":     # --budgets 24 --evidence DIR --no-levers [--stem NAME]: a later run beside the first one's files
        bud = tuple(int(x) for x in argv[argv.index("--budgets") + 1].split(",")) if "--budgets" in argv else (16, 24)
        evd = argv[argv.index("--evidence") + 1] if "--evidence" in argv else "moe-vs-llamacpp"
        written = report(res, out, bud, evd, "--no-levers" not in argv,
                         argv[argv.index("--stem") + 1] if "--stem" in argv else None)
    else:
        written = int8(res, out)
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
