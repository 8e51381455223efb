"""The issue-12 table and plot from the committed GPU-host data (benchmarks/results/gpu/moe/):

    python3 benchmarks/gpu/moe_report.py      # writes benchmarks/results/gpu/moe-16g-summary.md and .png

Measured: every figure read from the point / probe JSON files (each written by moe_point.py on the H100
host). Planned: today's planner for that host (replan-*.json: `vramkit plan --json --preset moe --gpu
h100-80gb --gpu-free-gib 15.31 --host-read-gbs 93.0 --kt-cpuinfer 14 --host-ram-gib 100 [--kt-method FP8]`; the plans made
there before the decode constants were fitted are plan-moe-*.json). Derived (labelled):
the layer-offload estimate and the consumer-DDR5 estimate, from the planner of that day (core/moe_offload.py then;
today the core planner plans the hybrid mode: core/plan/kt_hybrid.py, and benchmarks/gpu/fit_kt.py checks it).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RES = ROOT / "benchmarks" / "results" / "gpu"
DATA = RES / "moe"
POINTS = [  # name, CPU-expert method, kt-kernel build, plan file
    ("moe-16g-int4-amx", "AMXINT4", "AMX", "replan-AMXINT4.json"),
    ("moe-16g-fp8-amx", "FP8", "AMX", "replan-FP8.json"),
    ("moe-16g-fp8-avx512", "FP8", "AVX-512-BF16", "replan-FP8.json"),
]
ISSUE_OFFLOAD_TOK_S = 1.21   # issue 12: Qwen3-30B-A3B bf16, --cpu-offload-gb 40, 24 GB emulated, same H100 host


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def rows() -> list[dict]:
    out = []
    for name, method, build, plan_file in POINTS:
        point, probe, plan = load(f"{name}.json"), load(f"{name}.probe.json"), load(plan_file)
        dec = {d["streams"]: d for d in probe["decode"]}
        ttft = {t["prompt_tokens"]: t.get("ttft_s") for t in probe["ttft"]}
        out.append({
            "name": name, "method": method, "build": build,
            "gpu_experts": plan["hybrid"]["num_gpu_experts"], "threads": plan["hybrid"]["cpuinfer_threads"],
            "decode": {n: dec[n]["per_stream_tok_s"] for n in dec}, "aggregate": {n: dec[n]["aggregate_tok_s"] for n in dec},
            "ttft": ttft, "peak_gib": point["peak_vram_bytes"] / 2**30, "plan_peak_gib": plan["peak_vram_bytes"] / 2**30,
            "weights_gib": point["log_figures_gib"]["weights"], "plan_weights_gib": plan["weights_bytes"] / 2**30,
            "kv_tokens": point["log_figures_gib"]["kv_tokens"], "plan_kv_tokens": plan["kv_pool_tokens"],
            "rss_gib": point["host_rss_peak_bytes"] / 2**30, "plan_host_gib": plan["hybrid"]["host_ram_bytes"] / 2**30,
            "plan_decode": plan["hybrid"]["decode_tok_s"] if method == plan["hybrid"]["kt_method"] else None,
            "plan_offload": plan["hybrid"].get("layer_offload_decode_tok_s", plan["hybrid"].get("offload_decode_tok_s")),
        })
    return out


def f(x, d=1) -> str:
    return "-" if x is None else f"{x:,.{d}f}"


def markdown(rs: list[dict], bw: list[dict]) -> str:
    best = max(r["bytes_per_s"] for r in bw) / 1e9
    one = min(bw, key=lambda r: r["threads"])["bytes_per_s"] / 1e9
    lines = [
        "# Qwen3-Coder-30B-A3B on an emulated 16 GB card: experts split GPU / host RAM (issue 12)",
        "",
        "H100 80GB HBM3 host, all but 16 GiB held by ballast.py; SGLang 0.5.15.post1 + kt-kernel 0.5.1 + the kit's",
        "adapter, started by `vramkit up --runtime native --preset moe` from a random-weight block-FP8 checkpoint",
        "written there (tools/make_random_checkpoint.py). GPU experts: FP8 from the checkpoint; CPU experts in",
        "the method's layout. Host: 16 cores, measured read bandwidth "
        f"{best:.1f} GB/s (16 threads), {one:.1f} GB/s (1 thread). Data: benchmarks/results/gpu/moe/.",
        "",
        "| CPU experts (kt-kernel build) | GPU experts / layer, threads | decode tok/s 1 / 2 / 4 streams (per stream) "
        "| aggregate at 4 | TTFT 512 / 8K / 30K | GPU peak NVML (plan) | weights on GPU (plan) | KV tokens (plan) "
        "| host RSS (plan: CPU experts) | plan decode |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rs:
        d, t = r["decode"], r["ttft"]
        lines.append(
            f"| {r['method']} ({r['build']}) | {r['gpu_experts']}, {r['threads']} | "
            f"{f(d.get(1))} / {f(d.get(2))} / {f(d.get(4))} | {f(r['aggregate'].get(4))} | "
            f"{f(t.get(512), 2)} / {f(t.get(8192), 1)} / {f(t.get(30000), 1)} s | "
            f"{r['peak_gib']:.2f} ({r['plan_peak_gib']:.2f}) GiB | {r['weights_gib']:.2f} ({r['plan_weights_gib']:.2f}) GiB | "
            f"{r['kv_tokens']:,} ({r['plan_kv_tokens']:,}) | {r['rss_gib']:.1f} ({r['plan_host_gib']:.1f}) GiB | "
            f"{f(r['plan_decode'])} |")
    top = rs[0]
    lines += [
        "",
        f"- Layer offload beside it: the issue's measured run (Qwen3-30B-A3B bf16, `--cpu-offload-gb 40`, 24 GB, same "
        f"host) decoded {ISSUE_OFFLOAD_TOK_S} tok/s: the AMXINT4 split is {top['decode'][1] / ISSUE_OFFLOAD_TOK_S:.0f}x "
        f"that. The same FP8 checkpoint with `--cpu-offload-gb 18` on 16 GB was started in this session but the device "
        f"lease ended before it reported; the planner derives {top['plan_offload']:.1f} tok/s for it on this host "
        f"({top['decode'][1] / top['plan_offload']:.0f}x) (derived, not measured).",
        "- Host RSS counts the server's whole process tree, the mmapped checkpoint pages included (FP8 reads the "
        "experts from the checkpoint itself); the plan column is the CPU experts in the method's layout alone.",
        "- TTFT with FP8 CPU experts: kt-kernel 0.5.1's FP8 path computes prefill about 60 tokens/s; its AMXINT4 path "
        "~1,400 tokens/s. That is why the preset uses AMXINT4 (converted once: `make kt-convert`).",
        "- 30K with FP8 was not run (projected over 8 minutes at the measured prefill rate).",
    ]
    return "\n".join(lines) + "\n"


def plot(rs: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for r in rs:
        xs = sorted(r["decode"])
        a.plot(xs, [r["decode"][x] for x in xs], marker="o", label=f"{r['method']} ({r['build']})")
        ts = sorted(k for k, v in r["ttft"].items() if v)
        b.plot(ts, [r["ttft"][k] for k in ts], marker="o", label=f"{r['method']} ({r['build']})")
    a.axhline(ISSUE_OFFLOAD_TOK_S, color="grey", ls="--", label="layer offload (issue's run)")
    a.axhline(25, color="red", ls=":", label="target 25 tok/s")
    a.set(xlabel="concurrent streams", ylabel="decode tok/s per stream", title="Decode, emulated 16 GB (H100 host)")
    b.set(xlabel="prompt tokens", ylabel="time to first token (s)", xscale="log", yscale="log", title="TTFT")
    a.legend(fontsize=8)
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    rs = rows()
    bw = load("membw-h100-host.json")
    (RES / "moe-16g-summary.md").write_text(markdown(rs, bw))
    plot(rs, RES / "moe-16g-summary.png")
    print(f"wrote {RES / 'moe-16g-summary.md'} and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
