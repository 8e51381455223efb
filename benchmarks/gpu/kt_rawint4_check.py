"""Does kt-kernel's RAWINT4 kernel compute a GPTQ-Int4 checkpoint's values once the kit repacks them (issue 18)?

    KT_KERNEL_CPU_VARIANT=amx python3 benchmarks/gpu/kt_rawint4_check.py --out R.json

One MoE layer of Qwen3-Coder-30B-A3B's shape (16 of its 128 experts, 2048 x 768, top-8): random bf16 experts, each
Linear quantized to GPTQ-Int4 (round to nearest, group 128, symmetric: nibbles 0..15, the nibble 0 meaning -8),
repacked by vramkit/core/model/kt_repack.py into RAWINT4, run by kt-kernel's AMXInt4_KGroup_MOE for 1 and 64
tokens, and compared with torch computing the layer from the GPTQ values as SGLang reads them. Cases:
- nibble0_kept/groupG: the nibble 0 repacked as it is (floor 0), scale groups of G (32, and the checkpoint's 128);
- kit_repack/group32: the kit's repack (-8 raised to -7), against the GPTQ values as they are: what a user gets;
  `repack_only` is that change alone, computed by torch (no kernel); `kernel_only` the kernel against torch on
  the repacked values.
Reported: relative L2 error of the layer's output.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import kt_accuracy as ka  # noqa: E402

from vramkit.core.model import kt_repack  # noqa: E402

E, H, INTER, TOPK, GROUP = 16, 2048, 768, 8, 128
PROJ = ("gate", "up", "down")


def torch_layer(packed: dict):
    w = {n: torch.stack([kt_repack.rawint4_values(p, s) for p, s in packed[n]]).to(torch.bfloat16) for n in PROJ}
    return lambda x, ids, wts: ka.Model.moe_torch(w["gate"], w["up"], w["down"], x, ids, wts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    w, x, ids, wts = ka.one_layer_case(E, H, INTER, TOPK)
    wts = wts.float()
    gptq = {n: [(qw, sc.to(torch.float16)) for qw, sc in (ka.gptq_rtn(t[e]) for e in range(E))] for n, t in w.items()}
    ref_w = {n: torch.stack([kt_repack.gptq_values(qw, sc, GROUP) for qw, sc in gptq[n]]).to(torch.bfloat16)
             for n in PROJ}
    kt = ka.Kt(a.threads)
    weights = sum(qw.numel() * 8 for n in PROJ for qw, _ in gptq[n])
    res = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "kt_kernel": kt.version, "variant": kt.variant,
           "so": Path(kt.so).name, "shape": f"{E} experts of {INTER} x {H}, top-{TOPK}, GPTQ group {GROUP} (round "
           "to nearest, symmetric)", "cases": {}}
    layers: list = []

    def batches(f, ref) -> dict:
        return {f"batch_{b}": round(ka.rel_l2(f(x[:b].contiguous(), ids[:b].contiguous(), wts[:b].contiguous()),
                                              ref(x[:b], ids[:b], wts[:b])), 5) for b in (1, 64)}

    def gptq_ref(xx, ii, ww):
        return ka.Model.moe_torch(ref_w["gate"], ref_w["up"], ref_w["down"], xx, ii, ww)
    for name, floor, og in (("nibble0_kept/group32", 0, 32), ("nibble0_kept/group128", 0, GROUP),
                            ("kit_repack/group32", kt_repack.NIBBLE_FLOOR, 32)):
        packed = {n: [] for n in PROJ}
        raised = 0
        for n in PROJ:
            for qw, sc in gptq[n]:
                p, s, r = kt_repack.gptq_to_rawint4(qw, sc, GROUP, og, floor=floor)
                packed[n].append((p, s))
                raised += r
        case: dict = {"share_raised_to_minus_7": round(raised / weights, 5)}
        try:
            run = ka.KtLayer(kt, "RAWINT4", 0, w["gate"], w["up"], w["down"], 64, "/tmp", rawint4=packed)
            layers.append(run)      # kept: kt-kernel's MOE classes are not freed mid-run (kt_llamafile_check.py)
            case["kernel_vs_gptq"] = batches(run, gptq_ref)
            if floor:
                case["repack_only"] = batches(torch_layer(packed), gptq_ref)
                case["kernel_only"] = batches(run, torch_layer(packed))
        except Exception as e:          # a group the kernel refuses: recorded, the other cases still run
            case["error"] = f"{type(e).__name__}: {e}"[:300]
        res["cases"][name] = case
        print(name, case, flush=True)
    res["share_of_minus_8"] = round(sum(int((kt_repack.unpack(qw, 0) == 0).sum()) for n in PROJ
                                        for qw, _ in gptq[n]) / weights, 5)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
