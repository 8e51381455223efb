"""kt-kernel's CPU-expert time per decoded token, per method, build and thread count (issue 18 items 4, 5).

    python3 benchmarks/gpu/kt_decode_bench.py --methods FP8,AMXINT4 --threads 14,6 --gpu-experts 43 --out R.json

Qwen3-Coder-30B-A3B's MoE layer at its full shape (128 experts of 2048 x 768, top-8), --layers distinct random
layers (default 8, 3.8 GB as FP8: far past any L3, so cycling them 6 times per token reads host RAM like the
model's 48), experts 0..N-1 masked as on the GPU (the kernel skips them, as in the server), one batch-1
forward per layer through kt-kernel's own classes (kt_accuracy.KtLayer), random routing per token. Reported:
ms of CPU-expert work per token (48 MoE layers), and the CPU side's prefill rate (one --prefill chunk through
each layer, scaled to 48 layers; the server's prefill also has the GPU's share and the copies). This is the kernel side alone, without SGLang: a server's
decode time is derived from it in the report (labelled), not measured here.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kt_accuracy import Kt, KtLayer  # noqa: E402

E, H, INTER, TOPK, MOE_LAYERS = 128, 2048, 768, 8, 48


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="FP8,AMXINT4")
    ap.add_argument("--threads", default="14,6")
    ap.add_argument("--gpu-experts", type=int, default=43)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--prefill", type=int, default=512, help="tokens of one prefill chunk timed per layer (0: none)")
    ap.add_argument("--max-len", type=int, default=4096, help="chunked prefill size (the preset's)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)
    weights = [[(torch.randn(*s, generator=g, device=dev) * 0.02).to(torch.bfloat16).cpu()
                for s in ((E, INTER, H), (E, INTER, H), (E, H, INTER))] for _ in range(a.layers)]
    res = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "gpu_experts": a.gpu_experts, "layers": a.layers,
           "tokens": a.tokens, "moe_layers_per_token": MOE_LAYERS, "runs": []}
    out = res["runs"]
    res["host"] = host()
    # one folder for the whole run: AMXINT4/8 layouts converted at the first thread count are read by the later
    # ones (the server reads a layout `make kt-convert` wrote with nproc threads)
    work = tempfile.mkdtemp(prefix="ktbench-")
    for threads in (int(t) for t in a.threads.split(",")):
        kt = Kt(threads)       # one CPUInfer per process in the server; a new pool per thread count here
        res.update(kt_kernel=kt.version, kt_variant=kt.variant, kt_so=os.path.basename(kt.so))
        for method in a.methods.split(","):
            row = {"method": method, "threads": threads, "variant": kt.variant}
            try:
                t0 = time.time()
                layers = [KtLayer(kt, method, i, *weights[i], a.max_len, work, "bf16", TOPK, dev, a.gpu_experts)
                          for i in range(a.layers)]
                row["load_s"] = round(time.time() - t0, 1)
                row["kernel_class"] = layers[0].cls_name
                if method.startswith("AMXINT"):
                    row["layout_converted_here"] = layers[0].converted_here
                rng = torch.Generator().manual_seed(1)
                x = (torch.randn(1, H, generator=rng)).to(torch.bfloat16)
                per_token = []
                for tok in range(a.tokens + 4):
                    t1 = time.perf_counter()
                    for li in range(MOE_LAYERS):
                        ids = torch.randperm(E, generator=rng)[:TOPK][None]
                        w = torch.rand(1, TOPK, generator=rng)
                        layers[li % a.layers](x, ids, w / w.sum())
                    if tok >= 4:
                        per_token.append(time.perf_counter() - t1)
                per_token.sort()
                row["cpu_ms_per_token_median"] = round(1e3 * per_token[len(per_token) // 2], 3)
                row["cpu_ms_per_token_min"] = round(1e3 * per_token[0], 3)
                if a.prefill:     # one chunk through each distinct layer, scaled to the model's 48
                    xs = torch.randn(a.prefill, H, generator=rng).to(torch.bfloat16)
                    ids = torch.stack([torch.randperm(E, generator=rng)[:TOPK] for _ in range(a.prefill)])
                    w = torch.rand(a.prefill, TOPK, generator=rng)
                    w = w / w.sum(-1, keepdim=True)
                    t2 = time.perf_counter()
                    for layer in layers:
                        layer(xs, ids, w)
                    per_layer = (time.perf_counter() - t2) / a.layers
                    row["prefill_tok_s"] = round(a.prefill / (per_layer * MOE_LAYERS), 1)
                del layers
            except Exception as ex:
                row["error"] = f"{type(ex).__name__}: {ex}"[:300]
            out.append(row)
            print(json.dumps(row), flush=True)
            a.out.write_text(json.dumps(res, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0


def host() -> dict:
    """The machine the figures belong to: CPU model, cores this process may use, torch and the card if any."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "unknown")
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


if __name__ == "__main__":
    sys.exit(main())
