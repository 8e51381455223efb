"""The accuracy side of the side-by-side (issue 18): llama.cpp's files and the kit's served splits on one proxy.

    python3 benchmarks/gpu/peer_accuracy.py --add RUN.json [RUN.json ...]   # merge kt_accuracy.py runs, then write
    python3 benchmarks/gpu/peer_accuracy.py                                 # rewrite README.md from the JSON

The speed comparison (moe-vs-llamacpp-*.md) runs llama.cpp on a Q4_K_M file and the kit on its own formats; this
says what each computes with. Every row is a kt_accuracy.py run on the dev host's CPU with the proxy, seed,
positions and reference of `../kt-llamafile/accuracy-cpu.json` (checked: the same reference distribution), so the
rows of both files are one table: llama.cpp's Q4_K_M and Q8_0 expert values (quantized by ggml itself,
benchmarks/gpu/ggml_quant.py), and the kit's configurations as served (experts 0..N-1 in the GPU's format, the rest
through kt-kernel), beside the single-method rows already there.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RES = ROOT / "benchmarks/results/gpu"
OUT = RES / "peer-accuracy"
KIT = RES / "kt-llamafile/accuracy-cpu.json"
SAME = ("layers", "positions", "decode_positions", "weights", "seed")

# (row, which JSON holds it: "kit" KIT, "here" OUT's, what it is in the speed comparison)
ROWS = (
    ("BF16", "kit", "floor: bf16 experts through kt-kernel (the CPU kernels' own rounding)"),
    ("FP8 (GPU)", "kit", "the FP8 checkpoint's own values (what the kit reads; no conversion)"),
    ("FP8_W8A8 (GPU)", "here", "the FP8 checkpoint as SGLang's GPU kernels compute it: FP8 weights, and each GEMM's "
                               "input rounded to FP8 per 128 values (the GPU's experts; with the GPU prompt path, the "
                               "CPU layers' prompt chunks too)"),
    ("INT8_W8A16<-FP8 (GPU)", "here", "the FP8 checkpoint's values requantized to int8 per row and 128 inputs, bf16 "
                                      "inputs: the GPU prompt path's default (`--kt-prefill-fp8 int8`) for the CPU "
                                      "layers' prompt chunks (SGLang's moe_wna16 8-bit kernel; run on the H200 host: "
                                      "../moe-gpu-prefill/fp8-bench/h200/, ../moe-vs-llamacpp-q8/h200-b/)"),
    ("FP8_W8A8 layer 3 (GPU) + AMXINT8<-FP8 layers 0-2 (CPU)", "here",
     "**the kit's 16 GB preset as served**: whole layers, the experts of the last 17 of 48 layers FP8 on the GPU as "
     "SGLang computes them, the others' converted to AMXINT8 on the CPU; here 1 of the proxy's 4 layers"),
    ("FP8 layer 3 (GPU) + AMXINT8<-FP8 layers 0-2 (CPU)", "here", "the same, the GPU's inputs left in bf16 as the FP8 "
                                                                "rows' are: what SGLang's input rounding adds"),
    ("FP8 0-42 (GPU) + AMXINT8<-FP8 (CPU)", "here", "the preset's split placement (`--kt-gpu-layers off`; the preset "
                                                 "before whole layers): 43 FP8 experts per layer on the GPU, inputs in "
                                                 "bf16, 85 converted to AMXINT8 on the CPU"),
    ("AMXINT8<-FP8", "kit", "every expert AMXINT8 converted from the FP8 checkpoint (the preset's CPU side alone)"),
    ("LLAMAFILE_Q8_0<-FP8", "kit", "the AVX2 method: Q8_0 blocks from the FP8 checkpoint"),
    ("GPTQ_INT4 0-87 (GPU) + AMXINT8<-FP8 (CPU)", "here", "the kit's GPTQ-Int4 split (k16-wna16): 88 GPTQ-Int4 "
                                                       "experts per layer on the GPU (round to nearest, group 128: a "
                                                       "real GPTQ checkpoint is better), 40 AMXINT8 on the CPU"),
    ("GPTQ_INT4 layers 1-3 (GPU) + AMXINT8<-FP8 layer 0 (CPU)", "here",
     "**the kit's fastest 16 GB row** (k16-wna16-layers-t12): whole layers, the experts of 36 of 48 layers GPTQ-Int4 "
     "on the GPU (round to nearest), the first 12 layers' AMXINT8 on the CPU; here 3 of the proxy's 4 layers"),
    ("GPTQ_INT4 (GPU)", "here", "**the kit's 24 GB row** (k24-gptq-kv32): every expert GPTQ-Int4 on the GPU (round to "
                                "nearest, group 128), no hybrid mode"),
    ("RAWINT4", "here", "kt-kernel 0.5.1's group-wise int4 (AMXInt4_KGroup_MOE, group 32, bf16 scales; Kimi-K2's form; "
                        "not planned by the kit): every expert on the CPU"),
    ("Q8_0 (llama.cpp)", "here", "llama.cpp reading a Q8_0 file (its speed beside the preset: "
                                 "../moe-vs-llamacpp-q8-16g.md)"),
    ("Q4_K_M (llama.cpp)", "here", "**llama.cpp's file in the speed comparison**: Q4_K gate/up, Q6_K down on the layers "
                                "llama-quantize picks (here layers 2 and 3 of 4; 24 of 48 in the model)"),
)


def load(path: Path) -> dict:
    return json.loads(path.read_text())


# The bf16 reference of one proxy on two hosts: the same model, tokens and seed, its matmuls' last bits as each CPU's
# oneDNN kernels round them. 2026-11-28's rows (another dev host) drew a mean top-1 probability of 0.283443 against
# 0.283825: 0.13 %. Each row is scored against its own process's reference, so rows of one proxy within this stay one
# table; a different proxy (SAME) or a reference further off is refused.
REFERENCE_TOL = 0.005          # relative, on the mean top-1 probability


def same_proxy(a: dict, b: dict) -> bool:
    ra, rb = a["reference"]["mean_top1_prob"], b["reference"]["mean_top1_prob"]
    return all(a.get(k) == b.get(k) for k in SAME) and abs(ra - rb) <= REFERENCE_TOL * rb


def add(runs: list[Path]) -> None:
    kit = load(KIT)
    out = load(OUT / "accuracy-cpu.json") if (OUT / "accuracy-cpu.json").exists() else {
        **{k: v for k, v in kit.items() if k not in ("methods", "invocations", "kt_kernel", "kt_variant", "kt_so",
                                                     "kt_classes", "threads", "date", "torch", "python")},
        "what": "llama.cpp's files and the kit's served splits vs a bf16 reference (on the CPU); RANDOM-WEIGHT PROXY "
                "of Qwen3-Coder-30B-A3B, the same as ../kt-llamafile/accuracy-cpu.json",
        "methods": {}, "invocations": []}
    for path in runs:
        run = load(path)
        if not same_proxy(run, kit):
            differ = [k for k in SAME if run.get(k) != kit.get(k)]
            raise SystemExit(
                f"{path}: not the proxy of {KIT.relative_to(ROOT)}: "
                + (f"its {', '.join(differ)} differ -> run kt_accuracy.py with --layers 4 --positions 1024 --seed 0"
                   if differ else
                   f"its reference differs (mean top-1 probability {run['reference']['mean_top1_prob']:.8f} against "
                   f"{kit['reference']['mean_top1_prob']:.8f}, more than {REFERENCE_TOL:.1%} apart: more than "
                   "the bf16 reference's rounding on another host) -> check the proxy's settings and run it again"))
        out["methods"].update(run["methods"])
        out["invocations"] = [i for i in out["invocations"] if not set(i["methods"]) & set(run["methods"])]
        out["invocations"].append({"methods": list(run["methods"]), "seconds": run.get("seconds"),
                                   "date": run["date"], "kt_kernel": run.get("kt_kernel"),
                                   "kt_variant": run.get("kt_variant"), "threads": run["threads"],
                                   "reference_top1": run["reference"]["mean_top1_prob"],
                                   "torch": run["torch"], "python": run["python"], "cpu": run["cpu"]})
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "accuracy-cpu.json").write_text(json.dumps(out, indent=1) + "\n")


# the 16 GB preset as served (FP8 whole layers on the GPU through SGLang's kernels, AMXINT8 on the CPU): the row the
# README's "which to run" paragraph reads (vramkit/generated.py)
SERVED = "FP8_W8A8 layer 3 (GPU) + AMXINT8<-FP8 layers 0-2 (CPU)"


def rows() -> dict[str, dict]:
    """ROWS' rows that ran, by name: from the JSON here ("here") or the kit's CPU-run table ("kit"), each read once."""
    methods = {"here": load(OUT / "accuracy-cpu.json")["methods"], "kit": load(KIT)["methods"]}
    return {name: r for name, src, _ in ROWS if (r := methods[src].get(name)) and "error" not in r}


def layer_error(r: dict) -> float:
    return sum(r["moe_layer_rel_l2_prefill"]) / len(r["moe_layer_rel_l2_prefill"])


def gpu_check(fmt: str) -> str:
    """The GPU bench's one-layer check of the FP8 prompt path's arithmetic on the H200 host (gpu_prefill_bench.py)."""
    bench = RES / "moe-gpu-prefill" / "fp8-bench" / "h200" / f"gpu-prefill-bench-{fmt}.json"
    return f"{100 * json.loads(bench.read_text())['check_64_tokens']['rel_l2']:.2f} %"


def q8_speed() -> str:
    """Where llama.cpp on Q8_0 ran beside the kit's preset (moe_vs_llamacpp_report.py's 8-bit pairing), or not."""
    c = RES / "moe-vs-llamacpp-q8-16g.json"
    if not c.exists():
        return "that run, at 16 GiB beside the kit's 8-bit points, is staged (`run_moe_vs_llamacpp.sh` " \
               "STEPS=\"setup llama-q8\"), not measured."
    eng = load(c)["engines"]
    return (f"measured beside the kit's preset at 16 GiB (../moe-vs-llamacpp-q8-16g.md), it decoded "
            f"{eng['llamacpp']['decode_tok_s']:.1f} tok/s against the preset's {eng['vramkit']['decode_tok_s']:.1f}.")


def findings(ran: dict[str, dict]) -> list[str]:
    """What the table says, its figures computed here from the rows."""
    e = {name: layer_error(r) for name, r in ran.items()}
    preset, peer = SERVED, "Q4_K_M (llama.cpp)"
    fast, q8 = "GPTQ_INT4 layers 1-3 (GPU) + AMXINT8<-FP8 layer 0 (CPU)", "Q8_0 (llama.cpp)"
    bf16_in, amx = "FP8 layer 3 (GPU) + AMXINT8<-FP8 layers 0-2 (CPU)", "AMXINT8<-FP8"
    if not {preset, peer, fast, q8, "FP8 (GPU)", "FP8_W8A8 (GPU)", bf16_in, amx, "RAWINT4", "GPTQ_INT4 (GPU)"} <= set(e):
        return []
    w8 = ran["FP8_W8A8 (GPU)"]
    amx4 = 100 * layer_error(load(RES / "kt-accuracy.json")["methods"]["AMXINT4"])
    q8_kernels = 100 * layer_error(load(KIT)["methods"]["LLAMAFILE_Q8_0"])     # the same Q8_0 through llamafile
    return ["What it shows:",
            f"- llama.cpp's Q4_K_M experts err {e[peer] / e[preset]:.1f}x as much as the kit's 16 GB preset as served "
            f"({100 * e[peer]:.2f} % against {100 * e[preset]:.2f} %): the speed comparison sets a 4.5-bit file against "
            "the kit's 8-bit default, so its 16 GB rows are not like for like in accuracy.",
            f"- The kit's fastest 16 GB row (whole layers, GPTQ-Int4 on the GPU) errs {e[fast] / e[peer]:.1f}x as much as Q4_K_M "
            f"({100 * e[fast]:.2f} %): round-to-nearest int4 with one scale per 128 weights against Q4_K's scale and "
            "minimum per 32 (and Q6_K down on half the layers). A real GPTQ checkpoint narrows this; the proxy "
            "cannot say by how much.",
            f"- At 24 GiB the kit's row holds every expert GPTQ-Int4 ({100 * e['GPTQ_INT4 (GPU)']:.2f} %, "
            f"{e['GPTQ_INT4 (GPU)'] / e[peer]:.1f}x Q4_K_M's): its decode parity there is not at equal accuracy either.",
            f"- No int4 CPU method of kt-kernel 0.5.1 reaches Q4_K_M: its group-wise RAWINT4 errs {100 * e['RAWINT4']:.2f} %"
            f" (one scale per 32, no minimum), AMXINT4 {amx4:.1f} % (one scale per row; ../kt-accuracy.md, the GPU run's "
            "own draw of the proxy).",
            f"- llama.cpp in the preset's 8-bit class is its Q8_0 file ({100 * e[q8]:.2f} %, made from bf16 weights; the "
            f"kit's FP8 checkpoint itself errs {100 * e['FP8 (GPU)']:.2f} %): " + q8_speed(),
            "- llama.cpp's matmul kernels also round the activations to 8 bits (CPU and CUDA MMQ); these rows leave "
            f"that out (through kt-kernel's llamafile kernels, which do it, Q8_0 from bf16 gave {q8_kernels:.2f} % against "
            f"{100 * e[q8]:.2f} % here), so llama.cpp's rows are floors for its own error.",
            f"- SGLang's FP8 kernels round each GEMM's input to FP8 too: the FP8 checkpoint as they compute it errs "
            f"{100 * e['FP8_W8A8 (GPU)']:.2f} % (top-1 {100 * w8['top1_agreement']:.1f} %) against {100 * e['FP8 (GPU)']:.2f} % "
            f"with bf16 inputs, so the preset as served errs {100 * e[preset]:.2f} % against {100 * e[bf16_in]:.2f} % "
            f"without that rounding. kt-kernel's AMXINT8 from FP8 ({100 * e[amx]:.2f} %) is the closer of the two to "
            "bf16. With `--kt-prefill-fp8 w8a8` the GPU prompt path computes the CPU layers' prompt chunks as "
            "SGLang's GPU layers do, at the first row's error instead of AMXINT8's; decode stays on kt-kernel.",
            f"- By default (`--kt-prefill-fp8 int8`) the path computes those chunks from the FP8 values requantized to int8 per "
            f"row and 128 inputs, with bf16 inputs: {100 * e['INT8_W8A16<-FP8 (GPU)']:.2f} %, closer to bf16 than "
            f"AMXINT8 ({100 * e[amx]:.2f} %) and within {100 * (e['INT8_W8A16<-FP8 (GPU)'] - e['FP8 (GPU)']):.2f} "
            f"points of the FP8 values themselves. On the H200 host's one-layer check it erred {gpu_check('fp8-int8')} "
            f"against w8a8's {gpu_check('fp8')} (../moe-gpu-prefill/fp8-bench/h200/), and `auto` takes it "
            "(../moe-vs-llamacpp-q8/h200-b/).", ""]


def table(ran: dict[str, dict]) -> list[str]:
    lines = ["| configuration | what it is | MoE-layer error (rel. L2, mean of layers) | top-1 agreement | "
             "KL mean / p99 (nats) |", "| --- | --- | --- | --- | --- |"]
    for name, _, what in ROWS:
        r = ran.get(name)
        if r is None:
            lines.append(f"| {name} | {what} | not run | | |")
            continue
        lines.append(f"| {name} | {what} | {100 * layer_error(r):.2f} % | {100 * r['top1_agreement']:.1f} % | "
                     f"{r['kl_mean']:.4f} / {r['kl_p99']:.4f} |")
    return lines


def readme() -> str:
    res = load(OUT / "accuracy-cpu.json")
    inv = "; ".join(f"{', '.join(i['methods'])} ({i['date']}, torch {i['torch']}"
                    + (f", kt-kernel {i['kt_kernel']} {i['kt_variant']} build" if i.get("kt_kernel") else "")
                    + (f", {i['threads']} threads" if i.get("kt_kernel") else "")
                    + (f", its reference's mean top-1 probability {i['reference_top1']:.4f}" if i.get("reference_top1")
                       else "") + ")" for i in res["invocations"])
    return "\n".join([
        "# What each engine computes with: llama.cpp's files beside the kit's configurations (issue 18)", "",
        "**A random-weight proxy** of Qwen3-Coder-30B-A3B (its layer shape cut to 4 layers, weights N(0, 0.02); real "
        "checkpoints have outlier channels that random ones lack, so each error here is a floor, not a forecast), "
        "1,024 teacher-forced positions, against every expert in bf16. Measured on the dev host's CPU "
        f"({res['cpu']}) by `benchmarks/gpu/kt_accuracy.py`; rows from `accuracy-cpu.json` here ({inv}) and from "
        "`../kt-llamafile/accuracy-cpu.json` (the same proxy, seed and reference: `benchmarks/gpu/peer_accuracy.py` "
        f"checks it; a row's own bf16 reference may differ in its last bits on another host, within "
        f"{REFERENCE_TOL:.1%} of the mean top-1 probability {load(KIT)['reference']['mean_top1_prob']:.4f}, and each row is "
        "scored against its own). llama.cpp's rows: each expert matrix quantized by llama.cpp's own `ggml_quantize_chunk` (what "
        "llama-quantize calls, no importance matrix; `benchmarks/gpu/build_ggml.sh` builds it from the llama.cpp "
        "source the GPU host's llama-bench was built from), decoded by the gguf package, computed by torch. Only the "
        "experts differ between rows: attention stays bf16 (llama.cpp's Q4_K_M also quantizes attention and the "
        "output matrix; the kit's FP8 checkpoint has FP8 attention).", "",
        *table(ran := rows()), "", *findings(ran),
        "Checks beside it: `quantize-check.txt`, the real llama-quantize (built by `build_ggml.sh DIR check`) types "
        "every tensor of a 48-layer qwen3moe Q4_K_M as `tools/make_random_gguf.py` (the GPU host's GGUF) and "
        "`ggml_quant.py` do; `ggml-selfcheck.json`, the binding's Q8_0 and Q4_0 blocks are byte for byte the gguf "
        "package's own quantizer's.", "",
        "To run it again (about 35 min on 2 cores; one row with kt-kernel layers a process: two in one outgrow the host's 24 GiB):", "",
        "```bash",
        "bash benchmarks/gpu/build_ggml.sh /tmp/ggml            # libggml-base.so from llama-cpp-python 0.3.36's sdist",
        "A='--device cpu --layers 4 --positions 1024 --decode-positions 16 --threads 2 --no-fp8-gpu --methods'",
        "G='--ggml-lib /tmp/ggml/lib/libggml-base.so'",
        ".venv/bin/python benchmarks/gpu/kt_accuracy.py $A '' --ggml-layouts Q4_K_M $G --out /tmp/q4.json",
        ".venv/bin/python benchmarks/gpu/kt_accuracy.py $A '' --ggml-layouts Q8_0 $G --out /tmp/q8.json",
        ".venv/bin/python benchmarks/gpu/kt_accuracy.py $A '' --split 'FP8:43:AMXINT8<-FP8' --out /tmp/s1.json",
        ".venv/bin/python benchmarks/gpu/kt_accuracy.py $A '' --split 'GPTQ_INT4:88:AMXINT8<-FP8' --out /tmp/s2.json",
        ".venv/bin/python benchmarks/gpu/kt_accuracy.py $A '' --whole-layers 'GPTQ_INT4:3:AMXINT8<-FP8' --out /tmp/w3.json",
        ".venv/bin/python benchmarks/gpu/kt_accuracy.py $A RAWINT4 --out /tmp/r4.json",
        ".venv/bin/python benchmarks/gpu/kt_accuracy.py $A '' --gpu-formats GPTQ_INT4 --out /tmp/g4.json",
        ".venv/bin/python benchmarks/gpu/kt_accuracy.py $A '' --gpu-formats FP8_W8A8 --out /tmp/w8.json",
        ".venv/bin/python benchmarks/gpu/kt_accuracy.py $A '' --whole-layers 'FP8_W8A8:1:AMXINT8<-FP8' --out /tmp/w1.json",
        ".venv/bin/python benchmarks/gpu/kt_accuracy.py $A '' --whole-layers 'FP8:1:AMXINT8<-FP8' --out /tmp/w1b.json",
        ".venv/bin/python benchmarks/gpu/peer_accuracy.py --add /tmp/q4.json /tmp/q8.json /tmp/s1.json /tmp/s2.json "
        "/tmp/w3.json /tmp/r4.json /tmp/g4.json /tmp/w8.json /tmp/w1.json /tmp/w1b.json",
        "```", "",
        "Written by `benchmarks/gpu/peer_accuracy.py`.", ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--add", nargs="*", type=Path, default=[], help="kt_accuracy.py result JSONs to merge first")
    a = ap.parse_args(argv)
    if a.add:
        add(a.add)
    (OUT / "README.md").write_text(readme())
    return 0


if __name__ == "__main__":
    sys.exit(main())
