"""`vramkit kt-placement`: the hybrid MoE mode's GPU experts chosen by recorded routing (core/plan/kt_placement.py).

    vramkit kt-placement DUMP.pt --model qwen3-coder-30b-a3b-instruct-fp8 --gpu-experts 43 --out placement.json
    vramkit up --preset moe ... --kt-placement placement.json      # SGLang's --init-expert-location placement.json

It prints the share of the recorded routing the GPU would take, SGLang's default against the placed map. `vramkit
up` runs the file where the router's ids reach it: 0.5.15.post1's Qwen3-MoE maps them only on its DeepEP /
two-batch-overlap paths, and the kit's kt-kernel adapter maps them on the one-GPU forward (checked on a GPU for the
architectures core/plan/kt_placement.py lists; any other is refused).

DUMP is what SGLang's expert-distribution recorder wrote for this model (a server started with
`--extra-args "--expert-distribution-recorder-mode stat --expert-distribution-recorder-buffer-size -1"`: every
forward pass kept, where the default keeps the last 1000; POST /start_expert_distribution_record, your workload,
POST /dump_expert_distribution_record; the .pt lands in $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR, default /tmp).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from vramkit import catalog
from vramkit.core.plan import kt_placement as kp
from vramkit.errors import Exit, VramkitError


def register(sub) -> None:
    p = sub.add_parser("kt-placement", help="hybrid MoE: keep each layer's most-routed experts on the GPU (a "
                                            "placement file for `vramkit up --kt-placement`)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dump", help="SGLang's expert-distribution dump (.pt), or a .json with its logical_count")
    p.add_argument("--model", required=True, help="the catalogued model (or config folder) the server ran")
    p.add_argument("--gpu-experts", type=int, metavar="N", help="experts per layer on the GPU (the plan's "
                                                                "kt_num_gpu_experts): say what share of the recorded "
                                                                "routing they take, trivial map against this one")
    p.add_argument("--out", required=True, help="the placement file to write (SGLang's --init-expert-location)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from vramkit.adapters.expert_dump import RECORD_FLAGS, read_counts, ring_full
    model = catalog.model(args.model)
    if model.moe is None:
        raise VramkitError(f"{model.name} has no routed experts", "kt-placement is for an MoE model",
                           Exit.BAD_INPUT)
    layers, experts = model.num_layers, model.moe.num_experts
    if args.gpu_experts is not None and not 0 <= args.gpu_experts <= experts:
        raise VramkitError(f"--gpu-experts {args.gpu_experts} is outside 0..{experts}",
                           "give the plan's kt_num_gpu_experts", Exit.BAD_INPUT)
    out = Path(args.out)
    if out.exists() and not args.force:
        raise VramkitError(f"{out} exists", "choose another --out, or add --force to replace it", Exit.BAD_INPUT)
    raw, steps, written = read_counts(args.dump)
    counts = kp.check_counts(raw, layers, experts, args.dump)
    mapping = kp.hot_first(counts)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    try:
        tmp.write_text(kp.sglang_json(mapping))
        tmp.replace(out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise VramkitError(f"cannot write {out}: {e.strerror}", "choose a writable --out", Exit.BAD_FILE) from None
    print(f"wrote {out}: {layers} layers, each layer's {experts} experts most-routed first "
          f"({sum(map(sum, counts)):.0f} routed tokens x experts counted)")
    if args.gpu_experts is not None:
        n = args.gpu_experts
        before = kp.gpu_share(counts, kp.trivial(layers, experts), n)
        after = kp.gpu_share(counts, mapping, n)
        print(f"with {n} GPU experts per layer the GPU takes {after:.1%} of the recorded routing "
              f"(experts 0..{n - 1}, SGLang's default: {before:.1%}; uniform routing: {n / experts:.1%})")
    if ring_full(written, steps):
        print(f"warning: {args.dump} is a full ring of {steps} forward passes, SGLang's default recorder buffer: "
              f"earlier passes of the workload may have been overwritten; record with --extra-args \"{RECORD_FLAGS}\" "
              "to count every pass")
    print(f"{kp.SPEED}: start with --kt-placement {out} and without it, `make bench` each, then `make bench-compare`")
    return 0
