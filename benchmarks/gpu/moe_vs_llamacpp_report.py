"""The kit against llama.cpp on the same host, shape and emulated card (issue 18 items 1, 2, 6).

    python3 benchmarks/gpu/moe_vs_llamacpp_report.py evidence RES_DIR      # on the GPU host (run_moe_vs_llamacpp.sh)
    python3 benchmarks/gpu/moe_vs_llamacpp_report.py report RES_DIR [--out benchmarks/results/gpu]

`evidence` trims every server log in RES_DIR to the lines that show the expert split, the KT threads and the
memory figures (SGLang's and llama.cpp's), as NAME.evidence.txt beside the point's JSON. `report` reads the
points run_moe_vs_llamacpp.sh wrote (moe_point.py / moe_probe.py JSON, llama-bench JSON) and writes, per
budget, moe-vs-llamacpp-{16,24}g.json / .md / .png, the evidence files beside them, and
moe-vs-llamacpp-levers.md (what each kit lever gave at 16 GiB). Every number is a measurement from that run;
the per-token budgets are labelled derived (1000 / decode tok/s, split by the fitted sync constant).
"""
from __future__ import annotations

import json
import re
import shutil
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
NAMES = {"k16": 16, "k24": 24}


def trim(text: str, pattern: re.Pattern) -> str:
    keep = [ln.rstrip()[:400] for ln in text.splitlines() if pattern.search(ln)]
    # drop request-by-request noise (SGLang's per-batch lines, llama-server's per-request slot lines)
    keep = [ln for ln in keep if "Decode batch" not in ln and "Prefill batch" not in ln
            and "slot update_slots" not in ln and "slot launch_slot" not in ln and "print_timing" not in ln]
    if len(keep) > MAX_LINES:
        keep = keep[:MAX_LINES // 2] + [f"... {len(keep) - MAX_LINES} lines left out ..."] + keep[-MAX_LINES // 2:]
    return "\n".join(keep) + "\n"


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


def bench_rows(res: Path, budget: int) -> list[dict]:
    rows = []
    for f in (f"llama-{budget}-bench-d0-8k.json", f"llama-{budget}-bench-d30k.json"):
        for r in load(res / f) or []:
            rows.append({"test": f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}",
                         "depth": r["n_depth"], "threads": r["n_threads"], "tok_s": round(r["avg_ts"], 2),
                         "stddev": round(r["stddev_ts"], 2), "reps": len(r.get("samples_ts", []))})
    return rows


def kit_point(res: Path, name: str) -> dict | None:
    point = load(res / f"{name}.json")
    if not isinstance(point, dict) or point.get("up_rc") != 0:
        return None
    probe = load(res / f"{name}.probe.json")
    up = (res / f"{name}.up.txt").read_text(errors="replace") if (res / f"{name}.up.txt").exists() else ""
    cmd = next((ln.strip() for ln in up.splitlines() if "sglang.launch_server" in ln), "")
    return {"name": name, "figures": probe_figures(probe if isinstance(probe, dict) else None),
            "vramkit_up_args": point.get("vramkit_up_args"), "env": point.get("env"),
            "sglang_command": cmd, "start_s": point.get("start_s"), "peak_vram_bytes": point.get("peak_vram_bytes"),
            "host_rss_after_start_bytes": point.get("host_rss_after_start_bytes"),
            "log_figures_gib": point.get("log_figures_gib"), "probe_date": (probe or {}).get("date")}


def gpu_experts_from_cmd(cmd: str) -> int | None:
    m = re.search(r"--kt-num-gpu-experts (\d+)", cmd)
    return int(m.group(1)) if m else None


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
    site = (res / "logs" / "site.txt").read_text(errors="replace") if (res / "logs" / "site.txt").exists() else ""
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


def compare(res: Path, budget: int) -> dict | None:
    kit_names = [n for n in ([f"k{budget}"] + ([f"k{budget}-layers"] if budget == 16 else []))]
    kits = [kit_point(res, n) for n in kit_names]
    kit_best = best([k for k in kits if k])
    fit = llama_point(res, f"llama-{budget}-fit")
    sweep = llama_point(res, f"llama-{budget}-best")
    ncmoe = (res / f"llama-{budget}-best-ncmoe.txt").read_text().strip() \
        if (res / f"llama-{budget}-best-ncmoe.txt").exists() else None
    lbest = best([p for p in (fit, sweep) if p])
    if not kit_best and not lbest:
        return None
    threads = 14
    date = (kit_best or {}).get("probe_date") or ""
    out = {
        "budget_gib": budget,
        "device": device(res) + f"; card memory emulated at {budget} GiB free by the same ballast "
                                "(shared/gpu/ballast.py) for both engines",
        "model": "Qwen3-Coder-30B-A3B shape (48 layers, 128 experts, top-8), random weights: the kit's from a "
                 "block-FP8 config (dummy load, experts on the GPU in FP8) and KT's AMXINT4 layout; llama.cpp's "
                 "a Q4_K_M-typed GGUF (tools/make_random_gguf.py, 17.3 GiB)",
        "date": date, "versions": versions(res),
        "how": "benchmarks/gpu/run_moe_vs_llamacpp.sh, one host session; decode_tok_s: 1 stream, 512-token prompt, "
               "128 tokens, client-side 1/TPOT; decode_tok_s_8k: the 64 tokens after an 8,192-token prompt; "
               "ttft_30k_s: a 30,000-token prompt; aggregate_4_streams_tok_s: 4 concurrent 512-token prompts, "
               "sum of per-stream decode rates",
        "engines": {},
        "llamacpp_bench": bench_rows(res, budget),
    }
    if kit_best:
        k = kit_best
        out["engines"]["vramkit"] = {**{key: k["figures"][key] for key in (
            "decode_tok_s", "decode_tok_s_8k", "ttft_30k_s", "aggregate_4_streams_tok_s")},
            "more": {key: k["figures"][key] for key in ("ttft_512_s", "ttft_8k_s", "decode_tok_s_30k")},
            "settings": {"point": k["name"], "vramkit_up": "vramkit up --runtime native " + " ".join(k["vramkit_up_args"] or []),
                         "env": k["env"], "sglang_command": k["sglang_command"],
                         "kt_num_gpu_experts": gpu_experts_from_cmd(k["sglang_command"])},
            "start_s": k["start_s"], "peak_vram_bytes": k["peak_vram_bytes"],
            "host_rss_after_start_bytes": k["host_rss_after_start_bytes"], "log_figures_gib": k["log_figures_gib"],
            "other_points": [{"point": p["name"], **p["figures"]} for p in kits if p and p is not k]}
    if lbest:
        which = "--fit on" if lbest is fit else f"--fit off -ngl 99 --n-cpu-moe {ncmoe}"
        out["engines"]["llamacpp"] = {**{key: lbest["figures"][key] for key in (
            "decode_tok_s", "decode_tok_s_8k", "ttft_30k_s", "aggregate_4_streams_tok_s")},
            "more": {key: lbest["figures"][key] for key in ("ttft_512_s", "ttft_8k_s", "decode_tok_s_30k")},
            "settings": {"server": "llama-server " + LLAMA_SETTINGS.format(t=threads) + " " + which,
                         "n_cpu_moe_swept_best": int(ncmoe) if ncmoe else None},
            "start_s": lbest["start_s"], "vram_used_mib_with_ballast": lbest["vram_used_mib_with_ballast"],
            "both_modes": {"fit": fit["figures"] if fit else None,
                           f"n_cpu_moe_{ncmoe}": sweep["figures"] if sweep else None}}
    out["ratios"] = ratios(out)
    out["budget_ms_per_token"] = budgets(out)
    return out


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


def budgets(c: dict) -> dict:
    """Per-token time at batch 1 (measured: 1000 / decode tok/s), and for the kit the part the fitted sync
    constant accounts for (derived: MoE layers with CPU experts x config/engine.toml's kt_sync_us)."""
    out = {}
    for eng, e in c["engines"].items():
        if e.get("decode_tok_s"):
            out[eng] = {"measured_ms_per_token_depth0": round(1000 / e["decode_tok_s"], 2)}
            if e.get("decode_tok_s_8k"):
                out[eng]["measured_ms_per_token_8k"] = round(1000 / e["decode_tok_s_8k"], 2)
    k = c["engines"].get("vramkit")
    if k and "vramkit" in out:
        try:
            import tomllib
            eng = tomllib.loads((ROOT / "config" / "engine.toml").read_text())
            sync_us = float(next(v for key, v in _flat(eng) if key.endswith("kt_sync_us")))
        except (OSError, StopIteration, ValueError):
            sync_us = None
        layers = 48
        if k["settings"]["env"] and any("VRAMKIT_KT_GPU_LAYERS" in x for x in k["settings"]["env"]):
            n = k["settings"].get("kt_num_gpu_experts") or 0
            layers = 48 - n * 48 // 128
        if sync_us:
            out["vramkit"]["derived_sync_ms"] = round(layers * sync_us / 1000, 2)
            out["vramkit"]["derived_sync_note"] = (f"{layers} MoE layers with CPU experts x {sync_us:.0f} us "
                                                   "(config/engine.toml kt_sync_us, fitted by fit_kt.py): derived")
    return out


def _flat(d: dict, prefix: str = ""):
    for key, v in d.items():
        if isinstance(v, dict):
            yield from _flat(v, prefix + key + ".")
        else:
            yield prefix + key, v


def fmt(x, unit="") -> str:
    return "-" if x is None else (f"{x:,.1f}{unit}" if isinstance(x, float) else f"{x}{unit}")


def markdown(c: dict) -> str:
    b = c["budget_gib"]
    k, ll = c["engines"].get("vramkit", {}), c["engines"].get("llamacpp", {})
    rows = [("decode, 1 stream, depth 0 (tok/s)", "decode_tok_s", ">= 1.0x"),
            ("decode, 1 stream, depth 8K (tok/s)", "decode_tok_s_8k", ">= 1.0x"),
            ("TTFT, 30K-token prompt (s)", "ttft_30k_s", "<= llama.cpp"),
            ("aggregate decode, 4 streams (tok/s)", "aggregate_4_streams_tok_s", ">= 2x")]
    lines = [f"# The kit against llama.cpp at {b} GiB (issue 18)", "",
             f"Measured {c['date']} on {c['device']}.", "", c["model"] + ".", "",
             "| | vramkit (kit's best) | llama.cpp (best) | kit / llama.cpp | goal |", "| --- | --- | --- | --- | --- |"]
    for label, key, goal in rows:
        a, bb = k.get(key), ll.get(key)
        ratio = "-" if not a or not bb else (f"{bb / a:.2f}x faster" if key.startswith("ttft") and bb < a
                                             else f"{a / bb:.2f}x" if not key.startswith("ttft") else f"{bb / a:.2f}")
        lines.append(f"| {label} | {fmt(a)} | {fmt(bb)} | {ratio} | {goal} |")
    lines += ["", "Settings:", ""]
    if k:
        lines.append(f"- vramkit ({k['settings']['point']}): `{k['settings']['vramkit_up']}`"
                     + (f" with {', '.join(k['settings']['env'])}" if k['settings']['env'] else "")
                     + f"; {k['settings']['kt_num_gpu_experts']} GPU experts per layer (FP8), KT AMXINT4 on the CPU")
    if ll:
        lines.append(f"- llama.cpp: `{ll['settings']['server']}`; --n-cpu-moe swept to {ll['settings']['n_cpu_moe_swept_best']}")
        bm = ll.get("both_modes", {})
        for mode, f in bm.items():
            if f:
                lines.append(f"  - {mode}: decode {fmt(f['decode_tok_s'])} / {fmt(f['decode_tok_s_8k'])} tok/s (0 / 8K), "
                             f"TTFT 30K {fmt(f['ttft_30k_s'])} s, 4 streams {fmt(f['aggregate_4_streams_tok_s'])} tok/s")
    if c["llamacpp_bench"]:
        lines += ["", "llama-bench (same --n-cpu-moe, -fa 1, q8_0 KV):", "", "| test | depth | threads | tok/s |",
                  "| --- | --- | --- | --- |"]
        lines += [f"| {r['test']} | {r['depth']:,} | {r['threads']} | {r['tok_s']:.1f} ± {r['stddev']:.1f} |"
                  for r in c["llamacpp_bench"]]
    bud = c.get("budget_ms_per_token", {})
    if bud:
        lines += ["", "Per-token time at batch 1 (measured = 1000 / decode tok/s; the sync share is derived):", ""]
        for eng, v in bud.items():
            extra = f"; of which ~{v['derived_sync_ms']} ms GPU<->CPU round trips ({v['derived_sync_note']})" \
                if "derived_sync_ms" in v else ""
            lines.append(f"- {eng}: {v['measured_ms_per_token_depth0']} ms at depth 0"
                         + (f", {v['measured_ms_per_token_8k']} ms at 8K" if "measured_ms_per_token_8k" in v else "")
                         + extra)
    lines += ["", "Evidence: the `*.evidence.txt` files beside this one (trimmed server logs: expert split, "
              "threads, memory).", ""]
    return "\n".join(lines)


def plot(c: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = [("decode_tok_s", "decode d0\n(tok/s)"), ("decode_tok_s_8k", "decode 8K\n(tok/s)"),
            ("aggregate_4_streams_tok_s", "4 streams\n(tok/s)"), ("ttft_30k_s", "TTFT 30K\n(s)")]
    fig, axes = plt.subplots(1, len(keys), figsize=(11, 3.4))
    for ax, (key, label) in zip(axes, keys, strict=True):
        vals = [c["engines"].get(e, {}).get(key) or 0 for e in ("vramkit", "llamacpp")]
        ax.bar(["vramkit", "llama.cpp"], vals, color=["#4c72b0", "#dd8452"])
        ax.set_title(label, fontsize=9)
        for i, v in enumerate(vals):
            ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    fig.suptitle(f"Qwen3-Coder-30B-A3B shape, card emulated at {c['budget_gib']} GiB (one H100 host run)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def levers(res: Path) -> str:
    base = kit_point(res, "k16")
    rows = [("k16-layers", "whole layers' experts on the GPU (VRAMKIT_KT_GPU_LAYERS=auto: 16 of 48 layers, "
                           "no CPU round trip there) instead of 43 experts in every layer"),
            ("k16-defer2", "--kt-max-deferred-experts-per-token 2"),
            ("k16-defer1", "--kt-max-deferred-experts-per-token 1"),
            ("k16-t16", "KT threads 16 instead of 14"),
            ("k16-chunk8k", "--chunked-prefill-size 8192 instead of 4096 (TTFT)")]
    out = ["# The kit's levers at 16 GiB, each against the preset as planned (issue 18 item 2)", "",
           "Same run as moe-vs-llamacpp-16g.json; one change per row.", "",
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
        out.append(row("preset as planned (43 GPU experts per layer, 14 threads)", ref, None))
    for name, label in rows:
        p = kit_point(res, name)
        if p:
            out.append(row(label, p["figures"], ref))
        elif (res / f"{name}.json").exists():
            err = (load(res / f"{name}.json") or {}).get("error", "")
            out.append(f"| {label} | did not start: {str(err)[:160]} | | | | |")
        else:
            out.append(f"| {label} | not run (the session's device time ran out first) | | | | |")
    return "\n".join(out) + "\n"


def report(res: Path, out_dir: Path) -> list[Path]:
    if res.suffix == ".tgz":
        tmp = out_dir / ".moe-vs-llamacpp-tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(res) as t:
            t.extractall(tmp, filter="data")
        res = tmp
    written = []
    evd = out_dir / "moe-vs-llamacpp"
    evd.mkdir(parents=True, exist_ok=True)
    for budget in (16, 24):
        c = compare(res, budget)
        if c is None:
            continue
        stem = out_dir / f"moe-vs-llamacpp-{budget}g"
        stem.with_suffix(".json").write_text(json.dumps(c, indent=1) + "\n")
        stem.with_suffix(".md").write_text(markdown(c))
        try:
            plot(c, stem.with_suffix(".png"))
            written.append(stem.with_suffix(".png"))
        except ImportError:
            pass
        written += [stem.with_suffix(".json"), stem.with_suffix(".md")]
    (out_dir / "moe-vs-llamacpp-levers.md").write_text(levers(res))
    written.append(out_dir / "moe-vs-llamacpp-levers.md")
    # the points' own files beside the comparison: probes, point JSONs, llama-bench, evidence
    for p in sorted(res.glob("*")):
        if p.is_file() and (p.suffix in (".json", ".txt") and not p.name.endswith(".up.txt")) or p.name.endswith(".up.txt"):
            shutil.copy(p, evd / p.name)
    return written


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("evidence", "report"):
        print("usage: moe_vs_llamacpp_report.py evidence|report RES_DIR [--out DIR]", file=sys.stderr)
        return 64
    res = Path(argv[1])
    if argv[0] == "evidence":
        for p in evidence(res):
            print(p)
        return 0
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else ROOT / "benchmarks" / "results" / "gpu"
    for p in report(res, out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
