"""The kit against llama.cpp on the same host, shape and emulated card (issue 18 items 1, 2, 6).

    python3 benchmarks/gpu/moe_vs_llamacpp_report.py evidence RES_DIR      # on the GPU host (run_moe_vs_llamacpp.sh)
    python3 benchmarks/gpu/moe_vs_llamacpp_report.py report RES_DIR [--out benchmarks/results/gpu]
    python3 benchmarks/gpu/moe_vs_llamacpp_report.py int8 RES_DIR [--out benchmarks/results/gpu]

`evidence` trims every server log in RES_DIR to the lines that show the expert split, the KT threads and the
memory figures (SGLang's and llama.cpp's), as NAME.evidence.txt beside the point's JSON. `report` reads the
points run_moe_vs_llamacpp.sh wrote (moe_point.py / moe_probe.py JSON, llama-bench JSON) and writes, per
budget, moe-vs-llamacpp-{16,24}g.json / .md / .png, the evidence files beside them, and
moe-vs-llamacpp-levers.md (what each kit lever gave at 16 GiB). `int8` takes another host session's points
(STEPS="setup amxint8 amxint8-levers": the CPU experts in AMXINT8) into moe-vs-llamacpp-int8/ and rewrites the
levers file, whose last section sets them beside FP8 and AMXINT4. Every number is a measurement from that run;
the per-token budgets are labelled derived (1000 / decode tok/s, split by the fitted sync constant).
"""
from __future__ import annotations

import json
import re
import shutil
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "gpu"


def session_dir(out_dir: Path, name: str) -> Path:
    """A host session's points: OUT/NAME where a report is writing them, else the committed folder."""
    return out_dir / name if (out_dir / name).is_dir() else RESULTS / name
SGLANG_LINES = re.compile(
    r"Load weight (begin|end)|KV Cache is allocated|max_total_num_tokens|Memory pool end|Capture cuda graph (begin|end)"
    r"|avail mem|kt_|KTMoE|[Kk][Tt]ransformers|CPUInfer|cpuinfer|gpu_experts|num_gpu_experts|thread|numa|NUMA"
    r"|vramkit_kt_compat|context_len|max_running_requests|chunked_prefill_size|AMX|amx|deferred|Load.*experts"
    r"|memory|Memory|OOM|Error|error")
LLAMA_LINES = re.compile(
    r"fit|overflow|offload|n_cpu_moe|buffer size|KV buffer|kv_unified|n_ctx|n_seq|n_batch|n_ubatch|flash_attn"
    r"|CUDA0|model size|model params|file type|type +(f32|q4_K|q6_K)|threads|system_info|AMX|n_slots|slot +init"
    r"|total VRAM|free|error|failed")
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
NAMES = {"k16": 16, "k24": 24}


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


# ---- report ----------------------------------------------------------------------------------------------
def load(p: Path) -> dict | list | None:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def probe_figures(probe: dict | None) -> dict:
    """decode_tok_s (1 stream, 512-token prompt), decode_tok_s_8k, ttft_30k_s, aggregate_4_streams_tok_s."""
    f: dict = {"decode_tok_s": None, "decode_tok_s_8k": None, "ttft_30k_s": None, "ttft_8k_s": None,
               "ttft_512_s": None, "decode_tok_s_30k": None, "aggregate_4_streams_tok_s": None}
    if not probe:
        return f
    for d in probe.get("decode", []):
        if d.get("streams") == 1 and d.get("per_stream_tok_s"):
            f["decode_tok_s"] = round(d["per_stream_tok_s"], 2)
        if d.get("streams") == 4 and d.get("aggregate_tok_s") and all(r.get("ok") for r in d.get("requests", [])):
            f["aggregate_4_streams_tok_s"] = round(d["aggregate_tok_s"], 2)
    for r in probe.get("ttft", []):
        if not r.get("ok"):
            continue
        n = r["prompt_tokens"]
        key = {512: "512", 8192: "8k", 30000: "30k"}.get(n)
        if key:
            f[f"ttft_{key}_s"] = round(r["ttft_s"], 3)
            if key != "512" and r.get("decode_tok_s"):
                f[f"decode_tok_s_{key}"] = round(r["decode_tok_s"], 2)
    return f


@dataclass(frozen=True)
class Pairing:
    """Which points of a session are set side by side: the kit's, and llama.cpp's on one GGUF."""

    stem: str                   # the committed files: STEM-{16,24}g.{json,md,png}
    llama: str                  # llama.cpp's points' prefix, {b} the card: llama-{b}-fit, -best, -bench-*
    gguf: str                   # the file llama.cpp ran, in words
    kit_names: tuple[str, ...]  # the kit's candidate points, {b} the card (those at 16 GiB only: prefixed 16:)

    def kits(self, budget: int) -> list[str]:
        return [n.split(":", 1)[-1].format(b=budget) for n in self.kit_names
                if not n.startswith("16:") or budget == 16]


Q4 = Pairing("moe-vs-llamacpp", "llama-{b}", "a Q4_K_M-typed GGUF (tools/make_random_gguf.py, 17.3 GiB)",
             ("k{b}", "k{b}-gptq", "k{b}-gptq-kv32", "k{b}-wna16", "16:k{b}-layers", "16:k{b}-layers-defer2",
              "16:k16-gptq-layers", "16:k16-gptq-layers-defer2", "16:k16-wna16-defer2", "16:k16-wna16-layers",
              "16:k16-wna16-layers-defer2"))
# the 8-bit class (benchmarks/results/gpu/peer-accuracy/): the kit's FP8 GPU experts + AMXINT8 CPU experts, no deferral,
# against llama.cpp on a Q8_0 file (run_moe_vs_llamacpp.sh STEPS="setup llama-q8")
Q8 = Pairing("moe-vs-llamacpp-q8", "llama-q8-{b}", "a Q8_0 GGUF (tools/make_random_gguf.py --type Q8_0, 30.3 GiB)",
             ("k{b}-int8", "k{b}-int8-layers"))
PAIRINGS = (Q4, Q8)


def bench_rows(res: Path, budget: int, pairing: Pairing = Q4) -> list[dict]:
    rows = []
    name = pairing.llama.format(b=budget)
    for f in (f"{name}-bench-d0-8k.json", f"{name}-bench-d30k.json"):
        for r in load(res / f) or []:
            rows.append({"test": f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}",
                         "depth": r["n_depth"], "threads": r["n_threads"], "tok_s": round(r["avg_ts"], 2),
                         "stddev": round(r["stddev_ts"], 2), "reps": len(r.get("samples_ts", []))})
    return rows


EXPERTS = 128           # per MoE layer of the shape every point here runs
# SGLang's "Load weight end ... quant=X" -> the GPU experts' format and the activations' dtype (the config's)
GPU_EXPERTS = {"fp8": ("FP8 (block 128)", "bfloat16"), "gptq": ("GPTQ-Int4 (group 128, marlin MoE)", "float16")}
WNA16_EXPERTS = ("GPTQ-Int4 (group 128, moe_wna16 triton MoE)", "float16")
# The points run at 74e7a2a, whose planner rendered --quantization moe_wna16 for a split GPTQ layer (--moe-kernel auto;
# test_a_card_that_holds_every_expert_gets_no_hybrid_mode) before its plan printed the kernel; SGLang's own line
# names the MoE method only where no KT wrapper hides it
WNA16_AT_74E7A2A = ("k16-wna16", "k16-wna16-defer2")


def gpu_experts(name: str, up: str, evd: str) -> tuple[str, str] | None:
    """A point's GPU-expert format and activations: SGLang's quant= load line, its MoE method where it names it,
    the plan's moe_wna16 note, or the points declared above."""
    q = re.search(r"quant=(\w+)", evd)
    fmt_ = GPU_EXPERTS.get(q.group(1) if q else "")
    if fmt_ and q and q.group(1) == "gptq" and ("quant_method=MoeWNA16Method" in evd or "moe_wna16" in up
                                                  or name in WNA16_AT_74E7A2A):
        return WNA16_EXPERTS
    return fmt_


def kit_point(res: Path, name: str) -> dict | None:
    point = load(res / f"{name}.json")
    if not isinstance(point, dict) or point.get("up_rc") != 0:
        return None
    probe = load(res / f"{name}.probe.json")
    up = (res / f"{name}.up.txt").read_text(errors="replace") if (res / f"{name}.up.txt").exists() else ""
    cmd = next((ln.strip() for ln in up.splitlines() if "sglang.launch_server" in ln), "")
    # the plan's split row (none: the plan holds every expert on the GPU, no KT) and SGLang's own load line
    m = re.search(r"experts on GPU / CPU\s*\S\s*(\d+) / (\d+)\s*\S\s*per MoE layer; CPU: (\w+)", up)
    evd = res / f"{name}.evidence.txt"
    fmt_ = gpu_experts(name, up, evd.read_text(errors="replace") if evd.exists() else "")
    return {"name": name, "figures": probe_figures(probe if isinstance(probe, dict) else None),
            "kt_method": m.group(3) if m else None,
            "gpu_expert_dtype": fmt_[0] if fmt_ else None, "activations": fmt_[1] if fmt_ else None,
            "vramkit_up_args": point.get("vramkit_up_args"), "env": point.get("env"),
            "planned_gpu_experts_per_layer": int(m.group(1)) if m else EXPERTS,
            "sglang_command": cmd, "start_s": point.get("start_s"), "peak_vram_bytes": point.get("peak_vram_bytes"),
            "host_rss_after_start_bytes": point.get("host_rss_after_start_bytes"),
            "log_figures_gib": point.get("log_figures_gib"), "probe_date": (probe or {}).get("date")}


def disturbed(res: Path, name: str, budget: int) -> str | None:
    """Why a point is not comparable, or None: SGLang saw less free memory at load than the ballast leaves
    (another process was on the card and, with it, on the CPU), or it did not start."""
    point = load(res / f"{name}.json")
    if not isinstance(point, dict):
        return None
    free = (point.get("log_figures_gib") or {}).get("load_begin_avail")
    if free is not None and free < budget - 1.0:
        return (f"another process held the card during it: {free} GiB free at load against ~{budget - 0.7:.1f} "
                "with the ballast alone (a device command of another helper ran on the same machine)")
    if point.get("up_rc") != 0:
        return f"did not start (vramkit up exit {point.get('up_rc')}): {str(point.get('error'))[:200]}"
    return None


def llama_point(res: Path, name: str) -> dict | None:
    probe = load(res / f"{name}.probe.json")
    if not isinstance(probe, dict):
        return None
    return {"name": name, "figures": probe_figures(probe),
            "start_s": float((res / f"{name}.start_s").read_text()) if (res / f"{name}.start_s").exists() else None,
            "vram_used_mib_with_ballast": (res / f"{name}.smi.txt").read_text().strip()
            if (res / f"{name}.smi.txt").exists() else None}


def best(points: list[dict]) -> dict | None:
    ok = [p for p in points if p and p["figures"]["decode_tok_s"]]
    return max(ok, key=lambda p: p["figures"]["decode_tok_s"]) if ok else None


def versions(res: Path) -> dict:
    f = next((p for p in (res / "logs" / "site.txt", res / "site.txt") if p.exists()), None)
    site = f.read_text(errors="replace") if f else ""
    kt = next((ln.split(None, 1)[1] for ln in site.splitlines() if ln.startswith("kt_kernel ")), "0.5.1")
    return {"sglang": "0.5.15.post1", "kt_kernel": kt,
            "llama_cpp": "as vendored by the llama-cpp-python 0.3.36 sdist (commit 0c1e570), built with "
                         "GGML_CUDA=ON CMAKE_CUDA_ARCHITECTURES=90 GGML_NATIVE=ON"}


def device(res: Path) -> str:
    host = (res / "host.txt").read_text(errors="replace") if (res / "host.txt").exists() else ""
    gpu = next((ln for ln in host.splitlines() if "H100" in ln or "H200" in ln), "").strip()
    cpu = next((ln.split(":", 1)[1].strip() for ln in host.splitlines() if ln.startswith("Model name")), "")
    return f"{gpu}; CPU {cpu}"


LLAMA_SETTINGS = ("-c 32768 -np 4 -kvu -fa on -ctk q8_0 -ctv q8_0 -t {t} (llama-server, 4 slots sharing one "
                  "32K KV cache; requests: token ids, greedy, EOS ignored, no prompt cache)")


METRICS = ("decode_tok_s", "decode_tok_s_8k", "ttft_30k_s", "aggregate_4_streams_tok_s")
LOWER_IS_BETTER = ("ttft_30k_s",)


def llama_best(modes: dict[str, dict]) -> tuple[dict, dict]:
    """llama.cpp's best per metric over its modes (--fit, --n-cpu-moe swept), and which mode gave each."""
    best: dict = {}
    which: dict = {}
    for key in METRICS + ("ttft_512_s", "ttft_8k_s", "decode_tok_s_30k"):
        vals = [(f[key], m) for m, f in modes.items() if f and f.get(key)]
        if vals:
            v, m = (min if key in LOWER_IS_BETTER or key.startswith("ttft") else max)(vals)
            best[key], which[key] = v, m
        else:
            best[key] = None
    return best, which


def sweep_note(res: Path, budget: int, ncmoe: str | None, pairing: Pairing = Q4) -> str:
    if ncmoe is None:
        return ""
    n = int(ncmoe)
    if n == 0:
        return "--fit off -ngl 99: every layer's experts on the GPU"
    lower = res / f"{pairing.llama.format(b=budget)}-ncmoe{n - 1}.evidence.txt"
    oom = lower.exists() and "out of memory" in lower.read_text(errors="replace")
    return (f"--fit off -ngl 99: the experts of the first {n} layers on the CPU"
            + (f"; {n - 1} did not start (out of memory)" if oom else ""))


def kit_weights(p: dict) -> str:
    """The kit's weights at a point, in words (its GPU experts' format; the CPU experts' method, if any)."""
    gptq = p["gpu_expert_dtype"].startswith("GPTQ")
    kernel = "moe_wna16 (the triton MoE kernel)" if "moe_wna16" in p["gpu_expert_dtype"] else "marlin MoE"
    src = ("from Qwen's GPTQ-Int4 quantization_config on this shape (dummy load, float16 activations, experts on the GPU "
           f"through SGLang's {kernel})" if gptq else "from a block-FP8 config (dummy load, experts on the GPU in FP8)")
    return src + (f" and KT's {p['kt_method']} layout for the CPU experts" if p["kt_method"]
                  else ", every expert on the GPU (the plan drops the hybrid mode: no KT)")


def compare(res: Path, budget: int, pairing: Pairing = Q4) -> dict | None:
    kits = [p for p in (kit_point(res, n) for n in pairing.kits(budget)) if p and not disturbed(res, p["name"], budget)]
    full = [p for p in kits if all(p["figures"][k] for k in METRICS)]
    kit_best = best(full)
    lname = pairing.llama.format(b=budget)
    fit = llama_point(res, f"{lname}-fit")
    sweep = llama_point(res, f"{lname}-best")
    ncmoe = (res / f"{lname}-best-ncmoe.txt").read_text().strip() \
        if (res / f"{lname}-best-ncmoe.txt").exists() else None
    modes = {"--fit on": fit["figures"] if fit else None,
             f"--n-cpu-moe {ncmoe}": sweep["figures"] if sweep else None}
    if not (fit or sweep) and (pairing is not Q4 or not kit_best):   # a pairing needs its llama.cpp side
        return None
    threads = 14
    date = (kit_best or {}).get("probe_date") or ""
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
               + (f"; each figure the median of {repeats} rounds with fresh prompts (moe_probe.py --repeat)"
                  if (repeats := rounds(res, budget)) > 1 else "") + ". "
               "vramkit: the best configuration measured with every figure (the moe preset as planned for the "
               "checkpoint, or with a lever: whole layers on the GPU, 2 deferred experts); llama.cpp: its best per "
               "figure over --fit and --n-cpu-moe "
               "(swept down to the lowest that starts)",
        "engines": {},
        "llamacpp_bench": bench_rows(res, budget, pairing),
    }
    if kit_best:
        k = kit_best
        out["engines"]["vramkit"] = {**{key: k["figures"][key] for key in METRICS},
            "more": {key: k["figures"][key] for key in ("ttft_512_s", "ttft_8k_s", "decode_tok_s_30k")},
            "settings": {"point": k["name"], "vramkit_up": "vramkit up --runtime native " + " ".join(k["vramkit_up_args"] or []),
                         "env": k["env"], "kt_num_gpu_experts": k["planned_gpu_experts_per_layer"],
                         "kt_cpuinfer": threads if k["kt_method"] else 0, "kt_method": k["kt_method"],
                         "gpu_expert_dtype": k["gpu_expert_dtype"], "activations": k["activations"]},
            "start_s": k["start_s"], "peak_vram_bytes": k["peak_vram_bytes"],
            "host_rss_after_start_bytes": k["host_rss_after_start_bytes"], "log_figures_gib": k["log_figures_gib"],
            "other_points": [{"point": p["name"], **p["figures"]} for p in kits if p is not k]}
    if fit or sweep:
        lb, which = llama_best(modes)
        out["engines"]["llamacpp"] = {**{key: lb[key] for key in METRICS},
            "more": {key: lb[key] for key in ("ttft_512_s", "ttft_8k_s", "decode_tok_s_30k")},
            "mode_of_each": which,
            "settings": {"server": "llama-server -m <gguf> " + LLAMA_SETTINGS.format(t=threads),
                         "modes": {"--fit on": "llama.cpp picks the offload (default margin 1024 MiB)",
                                   f"--n-cpu-moe {ncmoe}": sweep_note(res, budget, ncmoe, pairing)},
                         "n_cpu_moe_swept_best": int(ncmoe) if ncmoe else None},
            "by_mode": {m: f for m, f in modes.items() if f},
            "start_s": {m: p["start_s"] for m, p in (("--fit on", fit), (f"--n-cpu-moe {ncmoe}", sweep)) if p},
            "vram_used_mib_with_ballast": {m: p["vram_used_mib_with_ballast"]
                                           for m, p in (("--fit on", fit), (f"--n-cpu-moe {ncmoe}", sweep)) if p}}
    out["ratios"] = ratios(out)
    out["budget_ms_per_token"] = budgets(out, res, budget)
    return out


def rounds(res: Path, budget: int) -> int:
    """How many rounds each probe of this card's session ran (moe_probe.py --repeat; 1 before it existed)."""
    probes = [load(p) for p in res.glob(f"*{budget}*.probe.json")]
    return min((p.get("repeat", 1) for p in probes if isinstance(p, dict)), default=1)


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
        layers = 48 if k["settings"]["kt_method"] else 0          # no KT: no CPU round trip at all
        if layers and k["settings"]["env"] and any("VRAMKIT_KT_GPU_LAYERS" in x for x in k["settings"]["env"]):
            layers = 48 - (k["settings"].get("kt_num_gpu_experts") or 0) * 48 // 128
        if sync_us and layers:
            out["vramkit"]["derived_sync_ms"] = round(layers * float(sync_us) / 1000, 2)
            out["vramkit"]["derived_sync_note"] = (f"derived: {layers} MoE layers with CPU experts x {sync_us} us "
                                                   "(config/engine.toml kt_layer_sync_us, fitted by fit_kt.py)")
    return out


def fmt(x, unit="") -> str:
    return "-" if x is None else (f"{x:,.1f}{unit}" if isinstance(x, float) else f"{x}{unit}")


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
        ratio = f"{a / bb:.2f}x" if a and bb else "-"
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
                     + (f"; planned {s['kt_num_gpu_experts']} GPU experts per layer ({s['gpu_expert_dtype']}), "
                        f"KT {s['kt_method']} on the CPU, {s['kt_cpuinfer']} threads" if s["kt_method"] else
                        f"; every expert on the GPU ({s['gpu_expert_dtype']}): the plan holds them all beside the "
                        "pool and drops the hybrid mode (no kt-kernel, no CPU round trip)"))
        for p in k.get("other_points", []):
            lines.append(f"  - also measured, {p['point']}: decode {fmt(p['decode_tok_s'])} / {fmt(p['decode_tok_s_8k'])} "
                         f"tok/s (0 / 8K), TTFT 30K {fmt(p['ttft_30k_s'])} s, 4 streams "
                         f"{fmt(p['aggregate_4_streams_tok_s'])} tok/s")
    if ll:
        lines.append(f"- llama.cpp: `{ll['settings']['server']}`, in two modes (the table takes its best per row):")
        for mode, f in ll.get("by_mode", {}).items():
            lines.append(f"  - `{mode}` ({ll['settings']['modes'].get(mode, '')}): decode {fmt(f['decode_tok_s'])} / "
                         f"{fmt(f['decode_tok_s_8k'])} tok/s (0 / 8K), TTFT 30K {fmt(f['ttft_30k_s'])} s, 4 streams "
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


LEVERS = (("k16-layers", "whole layers' experts on the GPU (VRAMKIT_KT_GPU_LAYERS=auto: the last 16 of 48 layers "
                         "all on the GPU, no CPU round trip there; the other 32 all on the CPU) instead of 43 "
                         "experts in every layer"),
          ("k16-defer2", "--kt-max-deferred-experts-per-token 2 (the 2 lowest-weighted of a token's CPU experts "
                         "finish during the next layer; changes the numerics: issue 18 item 3 checks it)"),
          ("k16-layers-defer2", "both of the above"),
          ("k16-defer1", "--kt-max-deferred-experts-per-token 1"),
          ("k16-t16", "KT threads 16 instead of 14"),
          ("k16-chunk8k", "--chunked-prefill-size 8192 instead of 4096 (TTFT)"))


# a lever this session could not measure, measured in a later one (its section below): that session, point, words
MEASURED_LATER = {"k16-t16": ("moe-vs-llamacpp-q8", "k16-int8-t16", "with AMXINT8 CPU experts (the 8-bit section, last)")}


def measured_later(name: str, out_dir: Path) -> str:
    if name not in MEASURED_LATER:
        return ""
    d, point, words = MEASURED_LATER[name]
    probe = load(session_dir(out_dir, d) / f"{point}.probe.json")
    f = probe_figures(probe) if isinstance(probe, dict) else None
    return f"; measured since {words}: {fmt(f['decode_tok_s'])} tok/s at depth 0" if f else ""


INT8_DIR = "moe-vs-llamacpp-int8"      # the AMXINT8 session's points (`int8` below), beside moe-vs-llamacpp/
INT8_POINTS = (("k16-int8", "AMXINT8 (KT's INT8 layout, converted from the checkpoint: lossy), the preset otherwise "
                            "as planned"),
               ("k16-int8-layers-defer2", "AMXINT8 + whole layers' experts on the GPU (VRAMKIT_KT_GPU_LAYERS=auto) + "
                                          "--kt-max-deferred-experts-per-token 2"))
FP8_REF = "moe/moe-16g-fp8-amx"        # the FP8 point (the preset's method before), run_moe.sh, 2026-11-23
DECODE_GOAL = 25.0


def preset_method() -> str:
    import tomllib
    return str(tomllib.loads((ROOT / "config" / "presets.toml").read_text())["presets"]["moe"]["kt_method"])


def method_rows(base: Path, out_dir: Path) -> list[str]:
    """The CPU-expert method at 16 GiB: FP8 (its committed point), AMXINT4 (this file's preset row) and the AMXINT8
    session's points, each with the figures the preset's default is chosen on."""
    d = session_dir(out_dir, INT8_DIR)
    if not d.is_dir():
        return []
    res_gpu = RESULTS
    fp8 = {"name": FP8_REF, "figures": probe_figures(load(res_gpu / f"{FP8_REF}.probe.json")),   # type: ignore[arg-type]
           "planned_gpu_experts_per_layer": (load(res_gpu / "moe" / "plan-moe-fp8.json") or {}).get("hybrid", {})
           .get("num_gpu_experts"), **{k: (load(res_gpu / f"{FP8_REF}.json") or {}).get(k) for k in  # type: ignore[union-attr]
                                      ("peak_vram_bytes", "host_rss_after_start_bytes", "host_rss_peak_bytes")}}
    fp8_date = str((load(res_gpu / f"{FP8_REF}.probe.json") or {}).get("date", ""))[:10]  # type: ignore[union-attr]
    a4 = kit_point(base, "k16")
    if a4:
        a4["host_rss_peak_bytes"] = (load(base / "k16.json") or {}).get("host_rss_peak_bytes")  # type: ignore[union-attr]
    rows = [("FP8 (the checkpoint itself, not lossy)", fp8, f"{fp8_date} (run_moe.sh; moe/)"),
            ("AMXINT4 (converted, lossy)", a4, f"{str((a4 or {}).get('probe_date', ''))[:10]}, the session above")]
    date = ""
    for name, label in INT8_POINTS:
        why = disturbed(d, name, 16)
        p = kit_point(d, name)
        if p:
            p["host_rss_peak_bytes"] = (load(d / f"{name}.json") or {}).get("host_rss_peak_bytes")  # type: ignore[union-attr]
            date = date or str(p.get("probe_date") or "")[:10]
        rows.append((label, None if why else p,
                     why or ("this one (moe-vs-llamacpp-int8/)" if p else
                             "not run: the device time allotted to this work was spent")))
    out = ["", "## The CPU method at 16 GiB: AMXINT8 beside FP8 and AMXINT4 (the moe preset's default)", "",
           f"AMXINT8 points: another host session ({date or 'not run'}; `STEPS=\"setup amxint8 amxint8-levers\" "
           "run_moe_vs_llamacpp.sh`, data in moe-vs-llamacpp-int8/): KT's AMXINT8 layout written there from random "
           "experts (tools/make_random_checkpoint.py --kt-layout AMXINT8), the GPU experts FP8 as the preset has them "
           "(dummy weights of the FP8 config), started by `vramkit up --runtime native --preset moe --kt-method "
           "AMXINT8`, 14 KT threads. Decode d0: 128 tokens after a 512-token prompt; 8K: the 64 after an 8,192-token "
           "one; GPU peak: NVML above the ballast; host RSS: the server's process tree. Accuracy (kt-accuracy.md, "
           "random-weight proxy, MoE layer output error / top-1 / KL mean): FP8 4.67 % / 96.6 % / 0.0037, AMXINT8 "
           "converted from FP8 5.38 % / 96.8 % / 0.0041, AMXINT4 from FP8 27.8 % / 85.4 % / 0.032.", "",
           "| CPU experts | GPU experts / layer | decode d0 tok/s | decode 8K tok/s | TTFT 8K s | TTFT 30K s | "
           "4 streams tok/s | GPU peak GiB | host RSS after start / peak GiB | session |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def gib(x):
        return f"{x / GiB:.2f}" if x else "-"
    for label, p, note in rows:
        if not p:
            out.append(f"| {label} | {note} | | | | | | | | |")
            continue
        f = p["figures"]
        out.append(f"| {label} | {p.get('planned_gpu_experts_per_layer') or '-'} | {fmt(f['decode_tok_s'])} | "
                   f"{fmt(f['decode_tok_s_8k'])} | {fmt(f['ttft_8k_s'])} | {fmt(f['ttft_30k_s'])} | "
                   f"{fmt(f['aggregate_4_streams_tok_s'])} | {gib(p.get('peak_vram_bytes'))} | "
                   f"{gib(p.get('host_rss_after_start_bytes'))} / {gib(p.get('host_rss_peak_bytes'))} | {note} |")
    i8 = rows[2][1]
    if i8:
        f, ff = i8["figures"], fp8["figures"]
        meets = (f["decode_tok_s"] or 0) >= DECODE_GOAL
        faster = bool(f["ttft_8k_s"] and ff["ttft_8k_s"] and f["ttft_8k_s"] < ff["ttft_8k_s"] / 2)
        out += ["", f"AMXINT8 {'meets' if meets else 'misses'} the decode goal (>= {DECODE_GOAL:.0f} tok/s at 16 GB: "
                f"{fmt(f['decode_tok_s'])}) and prefills an 8K prompt in {fmt(f['ttft_8k_s'])} s against FP8's "
                f"{fmt(ff['ttft_8k_s'])} s ({ff['ttft_8k_s'] / f['ttft_8k_s']:.0f}x). "
                + ("Both met: with accuracy within the proxy's noise of FP8, it qualifies as the preset's default. "
                   if meets and faster else "Not both met: it does not qualify as the preset's default. ")
                + f"The moe preset's default CPU method: {preset_method()} (config/presets.toml)."]
    return out


GPTQ_DIR = "moe-vs-llamacpp-gptq"     # 2026-11-27: the int4 GPU-experts lever (STEPS="setup llama-16 llama-24 gptq")
GPTQ_POINTS = (
    ("k24-gptq", "", "24 GiB: GPTQ-Int4, every expert on the GPU (the plan drops the hybrid mode)"),
    ("k16-gptq", "", "16 GiB: GPTQ-Int4 GPU experts, 86 per layer (the plan's split), AMXINT8 CPU experts"),
    ("k16-gptq-layers", "", "16 GiB: the same with whole layers on the GPU (VRAMKIT_KT_GPU_LAYERS=auto: 32 of 48)"),
    ("k16-gptq-layers-defer2", "", "16 GiB: whole layers + --kt-max-deferred-experts-per-token 2"),
    ("k16-gptq-int4", "", "16 GiB: whole layers, AMXINT4 CPU experts (short probe)"),
    ("k16-gptqbf-layers", "run2", "16 GiB: whole layers, SGLang's --dtype bfloat16 (marlin compiled for bf16)"),
    ("k16-fp8f16-layers", "run2", "16 GiB, diagnostic: the FP8 config with float16 activations, whole layers, "
                                  "AMXINT8 (short probe)"),
    ("k24-gptq-again", "run3", "24 GiB: GPTQ-Int4 on the GPU again (a third machine)"),
    ("k24-gptq-kv32", "run3", "24 GiB: the same, --triton-attention-num-kv-splits 32 (SGLang's default 8)"),
)


def gptq_rows(out_dir: Path) -> list[str]:
    """The int4 GPU-experts lever's points, each as measured or why it did not run (its error line)."""
    d = session_dir(out_dir, GPTQ_DIR)
    if not d.is_dir():
        return []
    out = ["", "## int4 GPU experts: a GPTQ-Int4 checkpoint (2026-11-27, moe-vs-llamacpp-gptq/)", "",
           "Qwen's GPTQ-Int4 quantization_config (group 128, sym; attention and experts 4-bit) on this shape, dummy "
           "weights, started by `vramkit up --runtime native --preset moe --model-path <that config>`; the CPU "
           "experts, where there are any, in KT's AMXINT8 layout (kt-kernel 0.5.1 has no GPTQ_INT4 CPU kernels). The "
           "marlin JIT kernels compiled first (~500 s on 16 cores, beside the llama.cpp build), nothing measured "
           "meanwhile. llama.cpp beside them in the same host session: moe-vs-llamacpp-24g.md (24 GiB); at 16 GiB "
           "llama-server --n-cpu-moe 11 decoded "
           + ", ".join(f"{fmt(probe_figures(load(d / sub / 'llama-16-best.probe.json'))['decode_tok_s'])} tok/s "  # type: ignore[arg-type]
                       f"({'first' if not sub else 'second'} machine)" for sub in ("", "run2")
                       if (d / sub / "llama-16-best.probe.json").exists()) + ".", "",
           "| point | decode d0 tok/s | decode 8K tok/s | TTFT 30K s | 4 streams tok/s | what happened |",
           "| --- | --- | --- | --- | --- | --- |"]
    for name, sub, label in GPTQ_POINTS:
        point = load(d / sub / f"{name}.json")
        if not isinstance(point, dict):
            out.append(f"| {label} | | | | | not run |")
            continue
        if point.get("up_rc") != 0:
            out.append(f"| {label} | | | | | did not start (vramkit up exit {point.get('up_rc')}): "
                       f"{str(point.get('error'))[:160]} |")
            continue
        f = probe_figures(load(d / sub / f"{name}.probe.json"))  # type: ignore[arg-type]
        out.append(f"| {label} | {fmt(f['decode_tok_s'])} | {fmt(f['decode_tok_s_8k'])} | {fmt(f['ttft_30k_s'])} | "
                   f"{fmt(f['aggregate_4_streams_tok_s'])} | started in {point.get('start_s')} s |")
    def fig(sub: str, name: str, key: str) -> float:
        return probe_figures(load(d / sub / f"{name}.probe.json"))[key]  # type: ignore[arg-type]
    base8, kv8 = fig("run3", "k24-gptq-again", "decode_tok_s_8k"), fig("run3", "k24-gptq-kv32", "decode_tok_s_8k")
    base30, kv30 = fig("run3", "k24-gptq-again", "decode_tok_s_30k"), fig("run3", "k24-gptq-kv32", "decode_tok_s_30k")
    whole = [fig("", n, "decode_tok_s") for n in ("k16-gptq-layers", "k16-gptq-layers-defer2", "k16-gptq-int4")]
    fp8_layers = probe_figures(load(d.parent / "moe-vs-llamacpp" / "k16-layers.probe.json"))["decode_tok_s"]  # type: ignore[arg-type]
    out += ["", "What it shows:", "",
            "- At 24 GiB the int4 checkpoint holds every expert on the card: no KT, no CPU round trip; that is the "
            "kit's best 24 GiB configuration (moe-vs-llamacpp-24g.md), and the planner now drops the hybrid mode "
            "wherever every expert fits beside the pool.",
            "- The 8K gap at 24 GiB is the GPU host's decode attention: its archive runs SGLang's triton backend "
            "(no FA3), which splits each request's KV in 8 parts by default; 32 (same machine, one after the other) "
            f"took one stream after an 8K prompt from {fmt(base8)} to {fmt(kv8)} tok/s and after 30K from "
            f"{fmt(base30)} to {fmt(kv30)}, with the short-prompt and 4-stream figures unchanged. llama.cpp was not "
            "rebuilt on that machine (the device time left would not cover its build), so the side-by-side table "
            f"keeps the first machine's untuned {fmt(fig('', 'k24-gptq', 'decode_tok_s_8k'))}; config/sglang.toml's "
            "GPU-host flags now carry the 32. A user's card runs FA3 or FlashInfer instead.",
            "- At 16 GiB SGLang 0.5.15.post1 cannot pair marlin MoE with KT's per-layer split: the KT wrapper "
            "masks a token's CPU experts to id -1 for the GPU kernel, which the triton FP8 kernel skips and the "
            "marlin kernel reads out of bounds (illegal memory access while the decode CUDA graph is captured). "
            "The planner now runs such a split on SGLang's moe_wna16 instead (next section).",
            f"- With whole layers (no split inside a layer) it starts, but decodes {min(whole):.0f}-{max(whole):.0f} "
            f"tok/s against {fmt(fp8_layers)} for the FP8 checkpoint's whole layers (moe-vs-llamacpp/k16-layers), "
            "erratic from one context to the next. The GPTQ MoE kernel takes only the checkpoint's float16 (bfloat16 "
            "activations stop at an assertion), and the FP8 config run with float16 activations decoded "
            f"{fmt(fig('run2', 'k16-fp8f16-layers', 'decode_tok_s'))} tok/s: float16 costs part of it; the rest is "
            "not explained by these runs (the CPU experts, KT's sync and the GPU layers are the same code as the FP8 "
            "runs; kt-kernel keeps its buffers in bfloat16, so every CPU layer converts both ways). Not a lever on "
            "this stack."]
    return out


WNA16_DIR = "moe-vs-llamacpp-wna16"   # 2026-11-27, second session: STEPS="setup llama-16 llama-24 wna16"
WNA16_POINTS = (
    ("k16-wna16", "16 GiB: GPTQ-Int4 GPU experts split N per layer as planned (--moe-kernel auto: moe_wna16), "
                  "AMXINT8 CPU experts on 14 threads"),
    ("k16-wna16-defer2", "16 GiB: the same + --kt-max-deferred-experts-per-token 2"),
    ("k24-gptq-kv32", "24 GiB: every expert on the GPU, marlin as planned, 32 KV splits (config/sglang.toml)"),
    ("k24-wna16", "24 GiB: the same with --moe-kernel wna16 (the kernel lever at 4 streams)"),
)


def wna16_rows(out_dir: Path) -> list[str]:
    """The moe_wna16 session: the split marlin could not run, beside llama.cpp in the same session."""
    d = session_dir(out_dir, WNA16_DIR)
    if not d.is_dir():
        return []
    probes = {b: load(d / f"llama-{b}-best.probe.json") for b in (16, 24)}
    ll = {b: probe_figures(pr) for b, pr in probes.items() if isinstance(pr, dict)}
    out = ["", f"## GPTQ experts split per layer on moe_wna16 (2026-11-27, {WNA16_DIR}/)", "",
           "SGLang's moe_wna16 method runs the same GPTQ-Int4 files on the triton MoE kernel, which skips the KT "
           "wrapper's masked CPU experts (filter_expert) where marlin reads them out of bounds; linear layers stay on "
           "marlin. The planner picks it for a split GPTQ/AWQ layer (`--moe-kernel auto`) and lays the experts out as "
           "moe_wna16.py does (no repack). llama.cpp in the same host session: "
           + "; ".join(f"{b} GiB --n-cpu-moe {(d / f'llama-{b}-best-ncmoe.txt').read_text().strip()} decoded "
                       f"{fmt(f['decode_tok_s'])} / {fmt(f['decode_tok_s_8k'])} tok/s (d0 / 8K), 4 streams "
                       f"{fmt(f['aggregate_4_streams_tok_s'])}" for b, f in ll.items()) + ".", "",
           "| point | decode d0 tok/s | decode 8K tok/s | TTFT 30K s | 4 streams tok/s | GPU experts / layer | "
           "peak GPU (measured / planned) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, label in WNA16_POINTS:
        p = kit_point(d, name)
        if p is None:
            out.append(f"| {label} | did not start or not run | | | | | |")
            continue
        f = p["figures"]
        up = (d / f"{name}.up.txt").read_text(errors="replace")
        planned = re.search(r"peak GPU memory\s*\S\s*([\d.]+) GiB", up)
        peak = p["peak_vram_bytes"]
        out.append(f"| {label} | {fmt(f['decode_tok_s'])} | {fmt(f['decode_tok_s_8k'])} | {fmt(f['ttft_30k_s'])} | "
                   f"{fmt(f['aggregate_4_streams_tok_s'])} | {p['planned_gpu_experts_per_layer']} | "
                   f"{peak / GiB:.2f} / {planned.group(1) if planned else '-'} GiB |")
    k16, k24, w24 = (kit_point(d, n) for n in ("k16-wna16", "k24-gptq-kv32", "k24-wna16"))
    if k16 and k24 and w24:
        out += ["", "What it shows:", "",
                f"- The split runs: {k16['planned_gpu_experts_per_layer']} of 128 int4 experts per layer on the GPU "
                f"(FP8: 43), {fmt(k16['figures']['decode_tok_s'])} tok/s at depth 0, the kit's fastest 16 GiB point "
                "without deferred experts; the whole-layers GPTQ runs on marlin decoded 11-27 (previous section).",
                f"- At 24 GiB marlin stays: moe_wna16 decoded {fmt(w24['figures']['decode_tok_s'])} tok/s against "
                f"{fmt(k24['figures']['decode_tok_s'])} and {fmt(w24['figures']['aggregate_4_streams_tok_s'])} at 4 "
                f"streams against {fmt(k24['figures']['aggregate_4_streams_tok_s'])}, so the planner picks it only "
                "where a layer is split.",
                four_stream_bound(k24, max((f["aggregate_4_streams_tok_s"] or 0 for f in (
                    probe_figures(load(d / "llama-24-fit.probe.json")), ll.get(24)) if f), default=None))]  # type: ignore[arg-type]
    diag = d if (d / "again").is_dir() else RESULTS / WNA16_DIR   # later machines' points, committed beside it
    l16 = probes[16]
    again, gen = load(diag / "again" / "k16-wna16-again.probe.json"), load(diag / "gensweep" / "k16-wna16-gen.probe.json")
    if isinstance(again, dict) and isinstance(gen, dict) and k16:
        a = probe_figures(again)
        t512 = [r["decode_tok_s"] for r in again["ttft"] if r.get("prompt_tokens") == 512]
        sweep = [(r["completion_tokens"], r["decode_tok_s"]) for r in gen["gen_sweep"] if r.get("decode_tok_s")]
        first = k16["figures"]
        rates = [v for _, v in sweep]
        ll512 = [r["decode_tok_s"] for r in l16["ttft"] if r.get("prompt_tokens") == 512] if isinstance(l16, dict) else []
        llf = ll.get(16, {})
        out += [
            f"- Request to request, this point's single-stream decode varies by about a fifth. In this session "
            f"k16-wna16 decoded {fmt(first['decode_tok_s'])} tok/s over 128 tokens after start and "
            f"{fmt(first['decode_tok_s_8k'])} over 64 after an 8K prompt (more context only adds work). Two later "
            "machines, the same point (again/, gensweep/):",
            f"  - again/: {fmt(a['decode_tok_s'])} over 128 tokens after start, "
            f"{fmt(t512[0] if t512 else None)} over 64 after the TTFT 512 prompt, "
            f"{fmt(again['decode_again']['per_stream_tok_s'])} over 128 at the end: not a slow start;",
            "  - gensweep/: requests of " + ", ".join(f"{n}" for n, _ in sweep) + " tokens after a 512-token prompt, "
            "one after another: " + ", ".join(fmt(v) for v in rates) + f" tok/s ({min(rates):.1f}-{max(rates):.1f}, "
            "the two 64-token ones included): no trend with the length generated.",
            "  - So one decode measurement of the hybrid mode carries about +-20 % by itself (llama.cpp at --n-cpu-moe "
            f"11 in this session: {fmt(llf.get('decode_tok_s'))} and {fmt(ll512[0] if ll512 else None)} tok/s over 128 "
            "and 64 tokens after a 512-token prompt), part of what the AMXINT8 rows of kt-estimate.md miss by; the "
            "comparison tables take one request per figure for both engines."]
    return out


def four_stream_bound(k24: dict, ll24: float | None) -> str:
    """Derived, not measured: the most 4 streams can decode with every int4 expert on the card, from the measured
    batch-1 step and the expert bytes a batch of 4 adds (4 tokens route to ~29 distinct experts a layer, 1 to 8),
    read at the card's full memory bandwidth (config/gpus.toml); against the 2x goal over llama-server."""
    from vramkit import catalog
    from vramkit.core.model.arch import expected_distinct_experts
    bw = catalog.gpu("h100-80gb").bandwidth_bytes_s
    step1 = 1 / k24["figures"]["decode_tok_s"]
    distinct = expected_distinct_experts(EXPERTS, 8, 4)
    extra = (distinct - 8) * 48 * GPTQ4_EXPERT
    step4 = step1 + extra / bw
    goal = 2 * ll24 if ll24 else None
    need = 4 / goal - extra / bw if goal else None
    return (f"- 4 streams at 24 GiB (derived from the measured batch-1 step, not measured): 4 tokens touch "
            f"~{distinct:.0f} distinct experts a layer against 8, "
            f"{extra / 1e9:.2f} GB more int4 expert reads a step, {extra / bw * 1e3:.2f} ms at the card's full "
            f"{bw / 1e12:.2f} TB/s (routing uniform, as random weights route; a real router's skew reads fewer); on the measured {step1 * 1e3:.2f} ms batch-1 step that caps 4 streams at "
            f"~{4 / step4:.0f} tok/s (measured {fmt(k24['figures']['aggregate_4_streams_tok_s'])})"
            + (f", short of the goal's {goal:.0f} (2x llama-server's best, {fmt(ll24)}): "
               f"that needs a batch-1 step of {need * 1e3:.2f} ms or less, {1 - need / step1:.0%} under today's, "
               "before any batching loss" if goal else "") + ".")


def levers(res: Path, out_dir: Path | None = None) -> str:
    base = kit_point(res, "k16")
    out = ["# The kit's levers at 16 GiB, each against the preset as planned (issue 18 item 2)", "",
           "Same host session as moe-vs-llamacpp-16g.json (benchmarks/gpu/run_moe_vs_llamacpp.sh); one change per "
           "row; decode at depth 0 is 128 tokens after a 512-token prompt, at 8K the 64 after an 8,192-token one.", "",
           "| lever | decode d0 tok/s | decode 8K tok/s | TTFT 30K s | 4 streams tok/s | vs preset (d0 / 8K / TTFT) |",
           "| --- | --- | --- | --- | --- | --- |"]

    def row(label, f, ref):
        def rel(key, inv=False):
            a, b = f.get(key), (ref or {}).get(key)
            if not a or not b:
                return "-"
            return f"{(b / a if inv else a / b) - 1:+.0%}"
        return (f"| {label} | {fmt(f['decode_tok_s'])} | {fmt(f['decode_tok_s_8k'])} | {fmt(f['ttft_30k_s'])} | "
                f"{fmt(f['aggregate_4_streams_tok_s'])} | {rel('decode_tok_s')} / {rel('decode_tok_s_8k')} / "
                f"{rel('ttft_30k_s', inv=True)} |")
    ref = base["figures"] if base else None
    if base:
        out.append(row("preset as planned (43 GPU experts per layer in FP8, AMXINT4 on 14 threads)", ref, None))
    for name, label in LEVERS:
        p = kit_point(res, name)
        why = disturbed(res, name, 16)
        if why:
            out.append(f"| {label} | not measured: {why}{measured_later(name, out_dir or RESULTS)} | | | | |")
        elif p:
            out.append(row(label, p["figures"], ref))
        else:
            out.append(f"| {label} | not run: the device time allotted to this work was spent | | | | |")
    od = out_dir or RESULTS
    return "\n".join(out + closing(res) + method_rows(res, od) + gptq_rows(od) + wna16_rows(od) + q8_rows(od)) + "\n"


GiB = 2**30
AMXINT4_EXPERT = 3 * 2048 * 768 // 2 + 4 * (2 * 768 + 2048)      # KT's int4 layout, one f32 scale per row
GPTQ4_EXPERT = 3 * 2048 * 768 // 2 + 3 * 2048 * 768 // 128 * 2 + 3 * 2048 * 768 // 128 // 2   # g128 f16 scales, int4 zeros
FP8_EXPERT = 3 * 2048 * 768 + 4 * (2 * 6 * 16 + 16 * 6)           # block-128 f32 scales


def closing(res: Path) -> list[str]:
    """The per-token budgets of both engines and what would close the rest: every figure either measured in
    this run (named) or derived from them and the fitted constants (labelled)."""
    import tomllib
    eng = tomllib.loads((ROOT / "config" / "engine.toml").read_text())
    sync_us, eff = float(eng["kt_layer_sync_us"]), float(eng["kt_cpu_read_efficiency"])
    bw = {int(r["threads"]): r["bytes_per_s"] for r in (load(res / "membw-anchor.json") or [])}
    base, lay, dfr = (kit_point(res, n) for n in ("k16", "k16-layers", "k16-defer2"))
    ll = llama_point(res, "llama-16-best")
    ncm = (res / "llama-16-best-ncmoe.txt").read_text().strip() if (res / "llama-16-best-ncmoe.txt").exists() else None
    if not (base and lay and ll and bw.get(14) and ncm):
        return []
    ms = {k: 1000 / p["figures"]["decode_tok_s"] for k, p in (("preset", base), ("layers", lay), ("llama", ll))}
    read = bw[14] * eff
    cpu_layers = 48 - 43 * 48 // 128
    t_sync = cpu_layers * sync_us / 1000
    t_cpu = cpu_layers * 8 * AMXINT4_EXPERT / read * 1000
    t_rest = ms["layers"] - t_sync - t_cpu
    fp8_layers = 43 * 48 // 128
    int4_layers = min(48, int(fp8_layers * FP8_EXPERT / GPTQ4_EXPERT))
    cpu4 = 48 - int4_layers
    t4 = t_rest + cpu4 * sync_us / 1000 + cpu4 * 8 * AMXINT4_EXPERT / read * 1000
    out = ["", "## Per-token budgets and what would close the rest", "",
           f"Measured (1000 / decode tok/s at depth 0): the preset {ms['preset']:.1f} ms, whole layers on the GPU "
           f"{ms['layers']:.1f} ms, llama.cpp at --n-cpu-moe {ncm} {ms['llama']:.1f} ms (llama-bench's tg128 "
           "beside it in moe-vs-llamacpp-16g.md)"
           + (f", deferred experts 2 {1000 / dfr['figures']['decode_tok_s']:.1f} ms" if dfr else "") + ".", "",
           f"Derived split of the whole-layers point ({cpu_layers} layers with CPU experts, fitted constants of "
           f"config/engine.toml): GPU<->CPU round trips {cpu_layers} x {sync_us:.0f} us = {t_sync:.1f} ms; CPU "
           f"experts {cpu_layers} x 8 x {AMXINT4_EXPERT / 2**20:.2f} MiB read at {read / 1e9:.0f} GB/s (14-thread "
           f"read x {eff}) = {t_cpu:.1f} ms; the rest (attention, router, GPU experts, launches) {t_rest:.1f} ms. "
           f"llama.cpp keeps {48 - int(ncm)} of 48 layers' experts on the GPU in the same memory (Q4_K_M, "
           "2.7 MiB per expert against FP8's 4.5), and its CPU layers cost no such round trip.", "",
           "What would close it (derived, not measured):", "",
           f"- int4 GPU experts (a GPTQ-Int4 checkpoint: SGLang's marlin MoE on the GPU, kt-kernel's GPTQ_INT4 on the "
           f"CPU reading the same files): {FP8_EXPERT / GPTQ4_EXPERT:.2f}x the experts per GiB, so ~{int4_layers} "
           f"layers on the GPU instead of {fp8_layers}; the same split gives ~{t4:.1f} ms ({1000 / t4:.0f} tok/s). "
           "Tried on 2026-11-27 with AMXINT8 CPU experts (kt-kernel 0.5.1 has no GPTQ_INT4 CPU kernels): the "
           "last section; on this SGLang it does not close the gap at 16 GiB, and at 24 GiB it removes KT "
           "altogether (moe-vs-llamacpp-24g.md).",
           gptq_cpu_line(),
           q8_peer_line(),
           (f"- deferred experts on top (they change the numerics: issue 18 item 3): measured alone they took "
            f"{ms['preset'] - 1000 / dfr['figures']['decode_tok_s']:.1f} ms off the preset's token, more than its "
            f"derived CPU-read share ({48 * 8 * 85 / 128 * AMXINT4_EXPERT / read * 1000:.1f} ms): the GPU stops "
            "waiting for those experts, so part of the round trip is hidden too. With whole layers or int4 experts "
            "not measured; it is the next run to make (the driver's levers list has it)." if dfr else
            "- deferred experts: not measured."),
           f"- the round trip itself: {sync_us:.0f} us per layer (fitted) is kt-kernel's submit / wait on the CUDA "
           "stream; it is the term left once the CPU share shrinks, and it sits in kt-kernel, not in the kit.",
           "- TTFT: llama.cpp's prefill runs the CPU layers' experts on the GPU (weights streamed over PCIe per "
           "512-token batch); SGLang 0.5.15.post1's KT path computes them on the CPU (1.3-1.5K tok/s here) and has no "
           "flag to move prefill to the GPU (its kt_* flags are six: weight path, method, cpuinfer, threadpool "
           "count, GPU experts, deferred experts). Fewer CPU layers (int4 GPU experts) shorten it in proportion.",
           "- at 24 GiB llama.cpp holds every expert on the GPU (--n-cpu-moe 0, 17.3 GiB); with int4 GPU experts "
           "the kit would too (no KT at all): the FP8 checkpoint (29 GiB) cannot.", ""]
    return out


def q8_peer_line() -> str:
    """llama.cpp in the kit's 8-bit class (a Q8_0 file), derived from its own committed Q4_K_M points, and the
    accuracy figures that make it the like-for-like peer (peer-accuracy/, peer_accuracy.py)."""
    sys.path.insert(0, str(ROOT))
    from tools import make_random_gguf as g
    cfgs = {b: load(RESULTS / f"moe-vs-llamacpp-{b}g.json") for b in (16, 24)}
    peer = load(RESULTS / "peer-accuracy" / "accuracy-cpu.json")
    if not all(cfgs.values()) or not isinstance(peer, dict):
        return "- the 8-bit peer (llama.cpp on a Q8_0 file): not derived (a committed comparison is missing)"
    tg = {b: next((r["tok_s"] for r in c["llamacpp_bench"] if r["test"] == "tg128" and r["depth"] == 0
                   and r["threads"] == 14), None) for b, c in cfgs.items()}
    n4 = {b: c["engines"]["llamacpp"]["settings"]["n_cpu_moe_swept_best"] for b, c in cfgs.items()}
    cfg = json.loads((ROOT / "config/models/qwen3-coder-30b-a3b-instruct/config.json").read_text())

    def sizes(layout: str) -> tuple[dict[int, int], int]:
        exp: dict[int, int] = {}
        rest = 0
        for name, shape, kind in g.tensors(cfg, layout):
            if "_exps" in name:
                i = int(name.split(".")[1])
                exp[i] = exp.get(i, 0) + g.nbytes(shape, kind)
            else:
                rest += g.nbytes(shape, kind)
        return exp, rest
    (e4, r4), (e8, r8) = sizes("Q4_K_M"), sizes("Q8_0")
    if not (tg[16] and tg[24]) or n4[24] != 0 or not n4[16]:
        return "- the 8-bit peer: not derived (llama-bench's tg128 at 14 threads or the 24 GiB all-GPU point missing)"
    t0, t16 = 1000 / tg[24], 1000 / tg[16]
    top_k = cfg["num_experts_per_tok"] / cfg["num_experts"]
    cpu_bytes = sum(e4[i] for i in range(n4[16])) * top_k       # the experts one token reads on the CPU layers
    rate = cpu_bytes / ((t16 - t0) / 1000)                      # llama.cpp's own CPU-expert read rate, measured
    room = sum(e4[i] for i in range(n4[16], 48)) - (r8 - r4)    # the same GPU memory, Q8_0's larger other weights
    on_gpu, used = 0, 0
    for i in range(47, -1, -1):                                 # --n-cpu-moe moves the FIRST layers to the CPU
        if used + e8[i] > room:
            break
        used, on_gpu = used + e8[i], on_gpu + 1
    n8 = 48 - on_gpu
    t8 = t0 + n8 * e8[0] * top_k / rate * 1000
    err = {k: 100 * sum(v := peer["methods"][k]["moe_layer_rel_l2_prefill"]) / len(v)
           for k in ("Q4_K_M (llama.cpp)", "Q8_0 (llama.cpp)", "FP8 0-42 (GPU) + AMXINT8<-FP8 (CPU)")}
    # the preset as served at 16 GiB (AMXINT8, 43 FP8 GPU experts, amx build), decode after ~512 tokens, every session
    est = load(RESULTS / "kt-estimate.json") or {}
    by = {q["name"]: q for q in est.get("points", [])}
    kit = sorted(m["tok_s"] for m in est.get("measurements", []) if m["context"] < 1024
                 and (q := by.get(m["point"])) and q["method"] == "AMXINT8" and q["build"] == "amx"
                 and q["gpu_experts"] == 43)
    kit_said = (f", against the preset's measured {kit[0]:.1f}-{kit[-1]:.1f} tok/s ({len(kit)} sessions, "
                "kt-estimate.json)" if kit else "")
    return (f"- accuracy: llama.cpp's rows above run a Q4_K_M file, whose experts err {err['Q4_K_M (llama.cpp)']:.1f} % "
            f"per MoE layer on the accuracy proxy against {err['FP8 0-42 (GPU) + AMXINT8<-FP8 (CPU)']:.1f} % for the "
            "preset as served (peer-accuracy/). In the preset's 8-bit class llama.cpp reads a Q8_0 file "
            f"({err['Q8_0 (llama.cpp)']:.1f} %); derived from its own llama-bench points (tg128, 14 threads: "
            f"{tg[16]:.1f} tok/s at --n-cpu-moe {n4[16]}, {tg[24]:.1f} with every expert on the GPU, two sessions), its "
            f"CPU layers read their experts at {rate / 1e9:.0f} GB/s; with Q8_0's twice the bytes ~{on_gpu} layers' "
            f"experts fit where {48 - n4[16]} of Q4_K_M's did, so --n-cpu-moe {n8} and ~{t8:.1f} ms a token "
            f"({1000 / t8:.0f} tok/s, derived, not measured; more if its Q8_0 kernels read faster than its Q4_K ones)"
            f"{kit_said}.{q8_measured_said(n8, t8)}")


SPREAD = 0.2     # the kit's single-stream decode, request to request on one server (the wna16 section: 36.5-54.1)
Q8_DIR = "moe-vs-llamacpp-q8"     # 2026-11-27, fifth session: the 8-bit class, both engines (STEPS="setup llama-q8 ...")
Q8_LEVERS = (("k16-int8", "the preset as planned (43 FP8 GPU experts per layer, AMXINT8 on 14 threads)"),
             ("k16-int8-layers", "whole layers' experts on the GPU (VRAMKIT_KT_GPU_LAYERS=auto)"))


def q8_rows(out_dir: Path) -> list[str]:
    """The 8-bit class at 16 GiB: the preset and its whole-layer twin beside llama.cpp on a Q8_0 file, one session,
    and the KT-threads point the same machine ran next (its probe only: the device time ended during it)."""
    d = session_dir(out_dir, Q8_DIR)
    c = load(out_dir / "moe-vs-llamacpp-q8-16g.json") or load(RESULTS / "moe-vs-llamacpp-q8-16g.json")
    if not d.is_dir() or not isinstance(c, dict) or not c["engines"].get("llamacpp"):
        return []
    ll = c["engines"]["llamacpp"]
    out = ["", f"## The 8-bit class at 16 GiB: the preset beside llama.cpp on a Q8_0 file ({c['date'][:10]}, {Q8_DIR}/)",
           "", "llama.cpp's Q4_K_M experts err 2.2x as much as the preset's on the accuracy proxy (peer-accuracy/); "
           "its Q8_0 file is the like-for-like peer. One host session, the table in moe-vs-llamacpp-q8-16g.md; KT's "
           "AMXINT8 layout was removed before the Q8_0 file was written (the disk holds one of them).", "",
           "| point | decode d0 tok/s | decode 8K tok/s | TTFT 30K s | 4 streams tok/s |", "| --- | --- | --- | --- | --- |"]
    for name, label in Q8_LEVERS:
        p = kit_point(d, name)
        f = p["figures"] if p else None
        out.append(f"| {label} | " + (" | ".join(fmt(f[k]) for k in METRICS) if f else "did not start | | |") + " |")
    t16 = load(d / "k16-int8-t16.probe.json")
    if isinstance(t16, dict):
        f = probe_figures(t16)
        out.append(f"| the preset with KT threads 16 (every physical core; the same machine, next command) | "
                   f"{fmt(f['decode_tok_s'])} | not measured | not measured | {fmt(f['aggregate_4_streams_tok_s'])} |")
    for mode, f in ll["by_mode"].items():
        out.append(f"| llama.cpp `{mode}` | " + " | ".join(fmt(f[k]) for k in METRICS) + " |")
    k = c["engines"]["vramkit"]
    bud = c["budget_ms_per_token"]
    tg = {r["threads"]: r["tok_s"] for r in c["llamacpp_bench"] if r["test"] == "tg128" and r["depth"] == 0}
    lay = kit_point(d, "k16-int8-layers")
    r0 = c["ratios"]["decode_vs_llamacpp"]
    k8, k30 = k["decode_tok_s_8k"], k["more"]["decode_tok_s_30k"]
    ttft = {m: f["ttft_30k_s"] for m, f in ll["by_mode"].items() if f.get("ttft_30k_s")}
    fastest = min(ttft, key=ttft.__getitem__) if ttft else None
    out += ["", "What it shows:", "",
            (f"- Decode at depth 0: {fmt(k['decode_tok_s'])} against {fmt(ll['decode_tok_s'])} tok/s ({r0:.2f}x; per "
             f"token {bud['vramkit']['measured_ms_per_token_depth0']} against "
             f"{bud['llamacpp']['measured_ms_per_token_depth0']} ms), "
             + ("parity within the kit's own request-to-request spread (about a fifth, the section above)"
                if abs(1 - r0) <= SPREAD else "outside the kit's own request-to-request spread (about a fifth)")
             + "; llama-bench's tg128 gave " + ", ".join(f"{v:.1f} at {t} threads" for t, v in sorted(tg.items()))
             + "."),
            (f"- After an 8K prompt the preset decoded {fmt(k8)} tok/s"
             + (f", slower than its own {fmt(k30)} after 30K in the same run (more context only adds work, so the 8K "
                "row carries the spread, not a context cost)" if k8 and k30 and k8 < k30 else "")
             + (f"; its whole-layer twin decoded {fmt(lay['figures']['decode_tok_s_8k'])} there "
                f"({lay['figures']['decode_tok_s_8k'] / ll['decode_tok_s_8k']:.2f}x llama.cpp's "
                f"{fmt(ll['decode_tok_s_8k'])}) and {fmt(lay['figures']['decode_tok_s'])} at depth 0" if lay else "")
             + "."),
            f"- TTFT 30K: {fmt(k['ttft_30k_s'])} s against llama.cpp's best {fmt(ll['ttft_30k_s'])} s ("
            + ", ".join(f"`{m}` {fmt(v)} s" for m, v in ttft.items()) + "). llama.cpp computes its CPU layers' experts "
            "on the GPU during prefill (weights over PCIe per batch); SGLang's KT path computes them on the CPU"
            + (f"; of llama.cpp's two placements `{fastest}` is the faster prefill" if fastest else "") + ".",
            f"- 4 streams: {fmt(k['aggregate_4_streams_tok_s'])} against {fmt(ll['aggregate_4_streams_tok_s'])} tok/s "
            f"({c['ratios']['aggregate_4_vs_llamacpp']:.2f}x; the goal is 2x). Four tokens read up to 4x8 experts per "
            "layer on the CPU, so the CPU share grows with the batch in both engines (derived).",
            f"- KT threads on every physical core collapse decode (the row above; `vramkit up`'s warm-up requests took "
            f"{warmups(d, 'k16-int8-t16')} against {warmups(d, 'k16-int8')} at 14 threads). The likely cause, not "
            "measured: SGLang's scheduler and tokenizer processes then share those cores with KT's spinning workers. "
            "`vramkit plan` and `vramkit up` now refuse `--kt-cpuinfer` >= the physical cores with one line (exit "
            "64, the bad-input code); the plan's own choice stays physical cores minus 2."]
    return out


def warmups(d: Path, name: str) -> str:
    """`vramkit up`'s warm-up request times at a point, as it printed them ("warm-up: 2634 ms, 1010 ms, ...")."""
    up = d / f"{name}.up.txt"
    m = re.search(r"^warm-up: (.+)$", up.read_text(errors="replace"), re.M) if up.exists() else None
    return m.group(1).strip() if m else "-"


def q8_measured_said(n8_derived: int, t8_derived_ms: float) -> str:
    """The 8-bit pairing as measured (moe-vs-llamacpp-q8-16g.json), against the derivation just made."""
    c = load(RESULTS / "moe-vs-llamacpp-q8-16g.json")
    if not isinstance(c, dict) or not c["engines"].get("llamacpp") or not c["engines"].get("vramkit"):
        return " The driver's llama-q8 step measures both in one session."
    ll, k = c["engines"]["llamacpp"], c["engines"]["vramkit"]
    n = ll["settings"]["n_cpu_moe_swept_best"]
    tg = next((r["tok_s"] for r in c["llamacpp_bench"] if r["test"] == "tg128" and r["depth"] == 0
               and r["threads"] == 14), None)
    by = ll["by_mode"]
    said = (f" Measured {c['date'][:10]} (moe-vs-llamacpp-q8-16g.md, one session, both engines): the lowest "
            f"--n-cpu-moe that starts is {n} (derived {n8_derived})"
            + (f", llama-bench tg128 at 14 threads {tg:.1f} tok/s ({(1000 / t8_derived_ms) / tg - 1:+.0%} for the "
               "derivation)" if tg else "")
            + "; llama-server " + ", ".join(f"{f['decode_tok_s']:.1f} tok/s with {m}" for m, f in by.items())
            + f"; the kit's {k['settings']['point']} {k['decode_tok_s']:.1f} tok/s in the same session "
            f"({c['ratios']['decode_vs_llamacpp']:.2f}x llama.cpp's best at depth 0, "
            f"{c['ratios']['decode_8k_vs_llamacpp']:.2f}x at 8K, {c['ratios']['aggregate_4_vs_llamacpp']:.2f}x at 4 "
            "streams).")
    return said


def gptq_cpu_line() -> str:
    """kt-kernel's GPTQ_INT4 CPU kernels against AMXINT8's, from the committed kernel-level runs (kt-accuracy.json:
    the H100 host, 14 threads, 43 GPU experts) and the ISA scan (kt-isa.json: which classes each release has)."""
    acc, isa = load(RESULTS / "kt-accuracy.json"), load(RESULTS / "kt-isa.json")
    if not isinstance(acc, dict) or not isinstance(isa, dict):
        return "- kt-kernel's GPTQ_INT4 CPU kernels: not measured."
    ms = {(r["method"], r.get("kernel_class")): (r["cpu_ms_per_token_median"], f"{run['kt_kernel']}'s {run['kt_variant']}")
          for run in acc["cpu_expert_time"].values() for r in run["runs"] if r.get("threads") == 14 and "error" not in r}
    (gptq, gb), (int8, _) = ms[("GPTQ_INT4", "AVX2GPTQInt4_MOE")], ms[("AMXINT8", "AMXInt8_MOE")]
    classes = {c for b in isa["builds"] for c in b["moe_classes"] if "GPTQ" in c}
    newest = max((b["wheel"].split("-")[1] for b in isa["builds"]), key=lambda v: [int(x) for x in v.split(".")[:3]])
    return (f"- kt-kernel's GPTQ_INT4 CPU kernels (reading the GPTQ files as they are, lossless against them): every "
            f"release up to {newest} has them only as {', '.join(sorted(c.removesuffix('_MOE') for c in classes))} "
            f"(kt-isa.md: AVX2 / AVX-VNNI-256 code, no AMX or AVX-512 GPTQ class), and on the H100 host's CPU they took "
            f"{gptq:.1f} ms of CPU-expert time per token against AMXINT8's {int8:.1f} ms ({gb} build, kt-accuracy.md: "
            f"kernel level, 14 threads, 43 GPU experts), {gptq / int8:.1f}x with half the bytes: they would lengthen "
            "the token, not shorten it (derived).")


def report(res: Path, out_dir: Path, budgets_: tuple[int, ...] = (16, 24), evd_name: str = "moe-vs-llamacpp",
           with_levers: bool = True) -> list[Path]:
    res = untar(res)                             # the archive the device call brought back, or a folder
    written = []
    evd = out_dir / evd_name
    evd.mkdir(parents=True, exist_ok=True)
    for pairing, budget in ((p, b) for p in PAIRINGS for b in budgets_):
        c = compare(res, budget, pairing)
        if c is None:
            continue
        c["evidence_dir"] = evd_name
        stem = out_dir / f"{pairing.stem}-{budget}g"
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


LEVERS_DIR = "moe-vs-llamacpp"     # 2026-11-24: the preset and each lever at 16 GiB, beside llama.cpp


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


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("evidence", "report", "int8"):
        print("usage: moe_vs_llamacpp_report.py evidence|report|int8 RES_DIR [--out DIR]", file=sys.stderr)
        return 64
    res = Path(argv[1])
    if argv[0] == "evidence":
        for p in evidence(res):
            print(p)
        return 0
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else RESULTS
    if argv[0] == "report":     # --budgets 24 --evidence DIR --no-levers: a later run beside the first one's files
        bud = tuple(int(x) for x in argv[argv.index("--budgets") + 1].split(",")) if "--budgets" in argv else (16, 24)
        evd = argv[argv.index("--evidence") + 1] if "--evidence" in argv else "moe-vs-llamacpp"
        written = report(res, out, bud, evd, "--no-levers" not in argv)
    else:
        written = int8(res, out)
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
