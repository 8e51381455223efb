"""Does kt-kernel's llamafile backend compute llama.cpp's Q4_K blocks right (issue 18, the Q4_K CPU-layer lever)?

    KT_GGML_LIB=/tmp/ggml/lib/libggml-base.so python3 benchmarks/gpu/kt_llamafile_check.py --out R.json

One MoE layer of Qwen3-Coder-30B-A3B's shape (16 of its 128 experts, 2048 x 768, top-8), random bf16 experts. Each
type's blocks are handed to kt-kernel's llamafile MOE class as a GGUF's tensors would be (kt_accuracy.KtLayer), and
its output for 64 tokens is compared with torch computing the layer from the values those blocks decode to (gguf-py:
the format's own error left out, the kernel's left in; llamafile also rounds the activations to 8 bits). Q4_K blocks
come from llama.cpp's own quantizer (build_ggml.sh's libggml-base.so), Q8_0 from the gguf package's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kt_accuracy as ka  # noqa: E402
from ggml_quant import Ggml  # noqa: E402

E, H, INTER, TOPK = 16, 2048, 768, 8


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    w, x, ids, wts = ka.one_layer_case(E, H, INTER, TOPK)
    ggml = Ggml(os.environ["KT_GGML_LIB"])
    kt = ka.Kt(a.threads)
    res = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "kt_kernel": kt.version, "variant": kt.variant,
           "ggml": ggml.version, "shape": f"{E} experts of {INTER} x {H}, top-{TOPK}, 64 tokens", "rel_l2": {}}
    for method, kind in ka.LLAMAFILE_TYPES.items():
        ref_w = {n: torch.from_numpy(ggml.roundtrip(t.float().numpy(), kind)).to(torch.bfloat16) for n, t in w.items()}
        out = ka.KtLayer(kt, method, 0, w["gate"], w["up"], w["down"], 64, "/tmp")(x, ids, wts)
        ref = ka.Model.moe_torch(ref_w["gate"], ref_w["up"], ref_w["down"], x, ids, wts)
        res["rel_l2"][method] = round(ka.rel_l2(out, ref), 5)
        print(method, res["rel_l2"][method], flush=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
