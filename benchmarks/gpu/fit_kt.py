"""Fit the hybrid MoE decode estimate's constants and check them on runs not used to fit them (issue 18 item 5).

    python3 benchmarks/gpu/fit_kt.py          # writes benchmarks/results/gpu/kt-estimate.{json,md}

Every committed KT run on the GPU host (POINTS below: its point JSON, probe JSON and that session's host
bandwidth sweep) is re-planned by the core planner exactly as it ran (the card's free memory from the server's
log, the preset's knobs and the run's --kt-* flags, the session's `membw` sweep, the kt-kernel build), which
gives each decode measurement's derived terms (GPU bytes, CPU-expert bytes, host read at the thread count, KV
bytes per token of context). The three fitted constants of core/plan/kt_hybrid.py's estimate:

    t = t_gpu + context x kv_bytes / attention_read + max(t_gpu_experts, cpu_bytes x pace / (read(threads) x eff))
        + moe_layers x sync

(pace: the method's and build's measured CPU-expert time per byte, KtConstants.cpu_time_factor, not fitted)

are the weighted least-squares solution (relative error) over the measurements of the runs marked "fit"; the
others are held out and only compared. SGLang's own host RAM (the server tree's RSS right after start minus
every expert as kt-kernel holds it, minus the mapped checkpoint for the methods that read it) is the mean over
the fitted runs. config/engine.toml carries the result (kt_* keys); tests/unit/test_kt_estimate.py checks that
it equals this fit and that every held-out run is within the issue's bars.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moe_session import last_flag, plan_split, ran_whole_layers  # noqa: E402

from vramkit import catalog  # noqa: E402
from vramkit.core.plan import kt_hybrid as kt  # noqa: E402
from vramkit.core.plan.planner import FOUR_STREAM_CONTEXT, Knobs, Plan, Target, plan  # noqa: E402
from vramkit.core.sglang_log import EMBED_MOVED, INT4_TOOK  # noqa: E402

GiB = 2**30
RES = ROOT / "benchmarks" / "results" / "gpu"
OUT_JSON = RES / "kt-estimate.json"
OUT_MD = RES / "kt-estimate.md"
H100_CORES = 16


@dataclass(frozen=True)
class Point:
    name: str
    role: str                    # "fit" or "held-out"
    point: str | None            # moe_point.py's JSON (memory, RSS, log figures); None: started by hand
    probe: str                   # moe_probe.py's JSON
    membw: str                   # that session's `membw.sweep` JSON
    knobs: dict                  # over the preset's (kt_method, kt_num_gpu_experts, kt_cpuinfer, ...)
    build: str = "amx"           # kt-kernel build it ran (KT_KERNEL_CPU_VARIANT)
    kt_kernel: str = "0.5.1"     # the kt-kernel release it ran
    rss_end_read: bool = False   # its point JSON has host_rss_peak_bytes: despite the name, ONE reading of the
                                     # server tree's RSS once the probe ended (moe_point.py; a sampled maximum,
                                     # host_rss_max_sampled_bytes, only after 2026-11-27's seventh session)
    free_gib: float | None = None   # "Load weight begin. avail mem" when the point JSON lacks it
    weights: str | None = None      # "checkpoint" or "dummy" where the point JSON cannot say (started by hand)
    note: str = ""
    gpu_checkpoint: str = "fp8"  # the checkpoint's config the GPU side ran: "fp8", or "gptq" (Qwen's GPTQ-Int4
                                 # quantization_config on the same shape, as run_moe_vs_llamacpp.sh writes it)
    kv_splits: int = 8           # SGLang's --triton-attention-num-kv-splits: its default 8, or the 32 config/sglang.toml
                                 # gives the GPU host since 2026-11-27 02:01 (commit 3fb1d49; every session after it)
    gpu: str = "h100-80gb"       # the card it ran on (config/gpus.toml): the H100 host until 2026-11-28's twentieth
                                 # session, an H200 of the same host CPU since
    decode_isa: str | None = None   # the int4 decode kernel's build where forced apart from kt-kernel's
                                    # (VRAMKIT_INT4_ISA=avx2): the decode is planned for a host of that ISA, whose
                                    # pace the plan takes; memory and RSS as the server ran (kt-kernel's build)


ANCHOR_SWEEP = "host bandwidth: the anchor session's sweep (same host type), not re-measured"
# the H200 machines' points: the sweep of an H200 machine (moe-vs-llamacpp-q8/h200-lt16/, 2026-11-28, twenty-first
# session: 118.6 GB/s at 12 threads where the H100 host's anchor gives ~94), the pairing's own machine not swept
H200_SWEEP_FILE = "moe-vs-llamacpp-q8/h200-lt16/membw-session.json"
H200_SWEEP = ("host bandwidth: another H200 machine's sweep (h200-lt16, same CPU by lscpu), the pairing's own not "
              "measured")
# the FP8 preset's prompt path as it comes since 2026-11-28's twentieth session (auto, its FP8 values in int8)
AS_IT_COMES = {"kt_gpu_prefill": "auto", "kt_prefill_fp8": "int8"}
M = "moe/"
T = "kt-threads/"
L = "kt-llamafile/"
W = "moe-vs-llamacpp-wna16/"
Q = "moe-vs-llamacpp-q8/"
B = "moe-budget/"


def int4_preset_point(name: str, run: str, point: str, cpu_decode: str, note: str, decode_isa: str | None = None
                      ) -> Point:
    """A held-out start of the GPTQ preset as it comes on an H200 (moe-vs-llamacpp-int4/RUN/POINT, seeded by name,
    the session's own sweep), its CPU layers' decode named (--kt-cpu-decode int4 or kt)."""
    d = f"moe-vs-llamacpp-int4/{run}/"
    return Point(name, "held-out", f"{d}{point}.json", f"{d}{point}.probe.json", f"{d}membw-session.json",
                 {"kt_method": "AMXINT8", "kt_gpu_prefill": "auto", "kt_cpu_decode": cpu_decode}, rss_end_read=True,
                 decode_isa=decode_isa, note=f"{note}, on an H200; seeded by name; this machine's own sweep",
                 gpu_checkpoint="gptq", kv_splits=32, gpu="h200-141gb")


POINTS = (
    # 2026-11-23, kt-kernel 0.5.1, 16 GB emulated, 14 threads (benchmarks/gpu/run_moe.sh kit)
    Point("int4-amx-16g", "fit", M + "moe-16g-int4-amx.json", M + "moe-16g-int4-amx.probe.json",
          M + "membw-h100-host.json", {"kt_method": "AMXINT4"}),
    Point("fp8-amx-16g", "fit", M + "moe-16g-fp8-amx.json", M + "moe-16g-fp8-amx.probe.json",
          M + "membw-h100-host.json", {"kt_method": "FP8"}),
    Point("fp8-avx512-16g", "held-out", M + "moe-16g-fp8-avx512.json", M + "moe-16g-fp8-avx512.probe.json",
          M + "membw-h100-host.json", {"kt_method": "FP8"}, build="avx512"),
    # session 1: SGLang started by hand (run_moe.sh probe), 32 GPU experts
    Point("fp8-amx-g32-16g", "held-out", None, M + "probe-session1/kt-amx-g32.probe.json",
          M + "probe-session1/membw-h100-host.json", {"kt_method": "FP8", "kt_num_gpu_experts": 32}, free_gib=15.31,
          note="started by hand, not through vramkit up", weights="checkpoint"),
    # 2026-11-24, another host session (helper moe's anchor run, benchmarks/gpu/run_anchor.sh): 16 and 24 GB
    Point("int4-amx-16g-b", "held-out", "anchor/k16-t14.json", "anchor/k16-t14.probe.json", "anchor/membw.json",
          {"kt_method": "AMXINT4"}, rss_end_read=True),
    Point("int4-amx-24g-b", "held-out", "anchor/k24-t14.json", "anchor/k24-t14.probe.json", "anchor/membw.json",
          {"kt_method": "AMXINT4"}, rss_end_read=True),
    # 2026-11-24, a third host session (run_moe_vs_llamacpp.sh STEPS="setup amxint8 ..."): AMXINT8 CPU experts, the
    # first server run of that method; that session did not sweep the host bandwidth: the anchor session's sweep
    Point("int8-amx-16g-c", "held-out", "moe-vs-llamacpp-int8/k16-int8.json", "moe-vs-llamacpp-int8/k16-int8.probe.json",
          "moe-vs-llamacpp-int8/membw-anchor.json", {"kt_method": "AMXINT8"}, rss_end_read=True,
          note=ANCHOR_SWEEP),
    # 2026-11-26, three more host sessions (run_moe_vs_llamacpp.sh STEPS="setup threads" / "setup threads24"), each
    # with its own bandwidth sweep at 1-16 threads: the thread term (6 against 14 KT threads) and the card term
    # (16 and 24 GiB) on AMXINT8, the preset's method, and AMXINT4; none of them was used to fit a constant
    Point("int8-amx-16g-t6", "held-out", T + "s1/k16-int8-t6.json", T + "s1/k16-int8-t6.probe.json", T + "s1/membw.json",
          {"kt_method": "AMXINT8"}, rss_end_read=True),
    Point("int8-amx-16g-t14", "held-out", T + "s2/k16-int8-t14.json", T + "s2/k16-int8-t14.probe.json",
          T + "s2/membw.json", {"kt_method": "AMXINT8"}, rss_end_read=True),
    Point("int4-amx-16g-t6", "held-out", T + "s2/k16-int4-t6.json", T + "s2/k16-int4-t6.probe.json", T + "s2/membw.json",
          {"kt_method": "AMXINT4"}, rss_end_read=True),
    Point("int8-amx-24g-t6", "held-out", T + "s3/k24-int8-t6.json", T + "s3/k24-int8-t6.probe.json", T + "s3/membw.json",
          {"kt_method": "AMXINT8"}, rss_end_read=True),
    Point("int8-amx-24g-t14", "held-out", T + "s3/k24-int8-t14.json", T + "s3/k24-int8-t14.probe.json",
          T + "s3/membw.json", {"kt_method": "AMXINT8"}, rss_end_read=True),
    # a fourth (STEPS="setup avx512"): AMXINT8 on the AVX-512 build forced, its layout written by that build
    Point("int8-avx512-16g", "held-out", T + "s4/k16-int8-avx512.json", T + "s4/k16-int8-avx512.probe.json",
          "anchor/membw.json", {"kt_method": "AMXINT8"}, build="avx512", rss_end_read=True,
          note=ANCHOR_SWEEP),
    # 2026-11-26 (this file's second session that day, run_moe_vs_llamacpp.sh STEPS="setup llamafile llamafile24"
    # and "setup llamafile30k"): LLAMAFILE_Q8_0, kt-kernel's llamafile backend reading a Q8_0 GGUF, on the avx2 build
    # forced (the method `--cpu-isa avx2` plans) and on the amx build; no sweep: the anchor session's
    Point("q8-avx2-16g", "held-out", L + "s1/k16-q8-avx2.json", L + "s1/k16-q8-avx2.probe.json", "anchor/membw.json",
          {"kt_method": "LLAMAFILE_Q8_0"}, build="avx2", rss_end_read=True,
          note=ANCHOR_SWEEP),
    Point("q8-amx-16g", "held-out", L + "s1/k16-q8-amx.json", L + "s1/k16-q8-amx.probe.json", "anchor/membw.json",
          {"kt_method": "LLAMAFILE_Q8_0"}, rss_end_read=True,
          note=ANCHOR_SWEEP),
    Point("q8-avx2-24g", "held-out", L + "s1/k24-q8-avx2.json", L + "s1/k24-q8-avx2.probe.json", "anchor/membw.json",
          {"kt_method": "LLAMAFILE_Q8_0"}, build="avx2", rss_end_read=True,
          note=ANCHOR_SWEEP),
    # 2026-11-27 (run_moe_vs_llamacpp.sh STEPS="setup llama-16 llama-24 wna16"): GPTQ-Int4 GPU experts split per
    # layer on SGLang's moe_wna16, 88 of 128, AMXINT8 CPU experts; its 2-deferred-experts twin is not scored (the
    # estimate does not model deferral); no sweep: the anchor session's
    Point("int8-amx-16g-gptq", "held-out", W + "k16-wna16.json", W + "k16-wna16.probe.json",
          W + "membw-anchor.json", {"kt_method": "AMXINT8"}, rss_end_read=True, note=ANCHOR_SWEEP,
          gpu_checkpoint="gptq", kv_splits=32),
    Point("q8-avx2-16g-b", "held-out", L + "s2/k16-q8-avx2-full.json", L + "s2/k16-q8-avx2-full.probe.json",
          "anchor/membw.json", {"kt_method": "LLAMAFILE_Q8_0"}, build="avx2", rss_end_read=True,
          note=ANCHOR_SWEEP),
    # 2026-11-27, fifth session (run_moe_vs_llamacpp.sh STEPS="setup llama-q8 avx2-070"): the preset as planned beside
    # llama.cpp on a Q8_0 file, and LLAMAFILE_Q8_0 on kt-kernel 0.7.0's avx2 build (no AVX-512 code in it) forced;
    # its whole-layer twin (k16-int8-layers) is not scored: the estimate plans N experts in every layer
    Point("int8-amx-16g-q8s", "held-out", Q + "k16-int8.json", Q + "k16-int8.probe.json", Q + "membw-anchor.json",
          {"kt_method": "AMXINT8"}, rss_end_read=True, note=ANCHOR_SWEEP, kv_splits=32),
    Point("q8-avx2-070-16g", "held-out", Q + "k16-q8-avx2-070.json", Q + "k16-q8-avx2-070.probe.json",
          Q + "membw-anchor.json", {"kt_method": "LLAMAFILE_Q8_0"}, build="avx2", kt_kernel="0.7.0",
          rss_end_read=True, note=ANCHOR_SWEEP, kv_splits=32),
    # 2026-11-27, sixth session (run_moe_vs_llamacpp.sh STEPS="setup profile", then "setup amxint8 amxint8-levers" on the
    # same machine, then "setup med16 kthreads" on another; benchmarks/results/gpu/moe-budget/): the GPTQ split and the
    # preset again, each profiled before its probe, and the GPTQ split with every figure the median of 3 rounds
    Point("int8-amx-16g-gptq-b", "held-out", B + "run1/k16-wna16-prof.json", B + "run1/k16-wna16-prof.probe.json",
          "anchor/membw.json", {"kt_method": "AMXINT8"}, rss_end_read=True, note=ANCHOR_SWEEP,
          gpu_checkpoint="gptq", kv_splits=32),
    Point("int8-amx-16g-d", "held-out", B + "run2/k16-int8.json", B + "run2/k16-int8.probe.json", "anchor/membw.json",
          {"kt_method": "AMXINT8"}, rss_end_read=True, note=ANCHOR_SWEEP, kv_splits=32),
    Point("int8-amx-16g-gptq-med3", "held-out", B + "med3/k16-wna16.json", B + "med3/k16-wna16.probe.json",
          "anchor/membw.json", {"kt_method": "AMXINT8"}, rss_end_read=True,
          note=ANCHOR_SWEEP + "; every decode the median of 3 rounds", gpu_checkpoint="gptq", kv_splits=32),
    # 2026-11-27, seventh session, one machine (STEPS="setup kcores", then "setup thp" twice): the GPTQ split at 14, 10,
    # 12 and 8 KT threads (12 and 8 died after their 4-stream rounds: their decode after 512 tokens only), then with
    # transparent huge pages "always" / the host's "madvise"; every decode the median of 3 rounds
    *(Point(f"int8-amx-16g-gptq-t{t}", "held-out", f"{B}kcores/k16-wna16-t{t}.json", f"{B}kcores/k16-wna16-t{t}.probe.json",
            "anchor/membw.json", {"kt_method": "AMXINT8", "kt_cpuinfer": t}, rss_end_read=True,
            note=ANCHOR_SWEEP + "; every decode the median of 3 rounds", gpu_checkpoint="gptq", kv_splits=32)
      for t in (14, 10, 12, 8)),
    *(Point(f"int8-amx-16g-gptq-{tag}", "held-out", f"{B}{folder}/k16-wna16-thp-{thp}.json",
            f"{B}{folder}/k16-wna16-thp-{thp}.probe.json", "anchor/membw.json", {"kt_method": "AMXINT8"},
            rss_end_read=True, note=ANCHOR_SWEEP + f"; THP {thp}; every decode the median of 3 rounds",
            gpu_checkpoint="gptq", kv_splits=32)
      for tag, folder, thp in (("thp-a", "thp-a", "always"), ("thp-b", "thp-b", "madvise"), ("thp-c", "thp-b", "always"))),
    # 2026-11-27, tenth session, two machines (STEPS="setup seedcheck mf90 lbest16", "setup mf90 layers-pair",
    # "setup layers-pair"; DUMMY_BY_NAME=1: dummy weights seeded by parameter name, each layer's router its own): the
    # GPTQ split at mem_fraction 0.85 (88 GPU experts) and 0.90 (96), 10 and 12 KT threads (their whole-layer twins
    # below); every decode the median of 3 rounds
    *(Point(f"int8-amx-16g-gptq-seed-{tag}", "held-out", f"{B}{pt}.json", f"{B}{pt}.probe.json",
            f"{B}{pt.split('/')[0]}/membw-anchor.json", {"kt_method": "AMXINT8"}, rss_end_read=True,
            note=ANCHOR_SWEEP + "; every decode the median of 3 rounds", gpu_checkpoint="gptq", kv_splits=32)
      for tag, pt in (("a", "seed/k16-wna16-seed"), ("b85", "seed-mf90/k16-wna16-mf85"),
                      ("b90", "seed-mf90/k16-wna16-mf90"), ("b-t10", "seed-mf90/k16-wna16-split-t10"),
                      ("c-t10", "seed-layers/k16-wna16-split-t10"), ("c-t12", "seed-layers/k16-wna16-split-t12"))),
    # Whole layers (kt_gpu_layers = "auto", the adapter's VRAMKIT_KT_GPU_LAYERS): the estimate's own term for them,
    # the GPU side's step (kt_whole_layer_step_us), fitted on seed-layers' 12-thread server alone; the other
    # whole-layer servers held out. Not scored: the GPTQ checkpoint's at 14 KT threads (moe-vs-llamacpp-gptq/
    # k16-gptq-layers: the oversubscription stall the adapter warns about, 7.7 ms a CPU layer) and the deferred twins
    Point("layers-int8-amx-16g-gptq-seed-t12", "fit", f"{B}seed-layers/k16-wna16-layers-t12.json",
          f"{B}seed-layers/k16-wna16-layers-t12.probe.json", f"{B}seed-layers/membw-anchor.json", {"kt_method": "AMXINT8"},
          rss_end_read=True, note=ANCHOR_SWEEP + "; every decode the median of 3 rounds", gpu_checkpoint="gptq",
          kv_splits=32),
    Point("layers-int8-amx-16g-gptq-seed-t10", "held-out", f"{B}seed-layers/k16-wna16-layers-t10.json",
          f"{B}seed-layers/k16-wna16-layers-t10.probe.json", f"{B}seed-layers/membw-anchor.json", {"kt_method": "AMXINT8"},
          rss_end_read=True, note=ANCHOR_SWEEP + "; every decode the median of 3 rounds", gpu_checkpoint="gptq",
          kv_splits=32),
    # 2026-11-27, eleventh session (moe-budget/best16, one machine, seeded by name, medians of 3 rounds): the kit's
    # best beside llama.cpp (GPTQ whole layers, 12 threads) and the preset's FP8 checkpoint split and as whole layers;
    # then moe-budget/marlin, another machine: whole layers on moe_wna16 and on marlin
    *(Point(f"{tag}", "held-out", f"{B}{pt}.json", f"{B}{pt}.probe.json", f"{B}{pt.split('/')[0]}/membw-anchor.json",
            {"kt_method": "AMXINT8"}, rss_end_read=True, note=ANCHOR_SWEEP + "; every decode the median of 3 rounds",
            gpu_checkpoint=ck, kv_splits=32)
      for tag, pt, ck in (("int8-amx-16g-fp8-seed-d", "best16/k16-int8-split", "fp8"),
                          ("layers-int8-amx-16g-fp8-seed-d", "best16/k16-int8-whole", "fp8"),
                          ("layers-int8-amx-16g-gptq-seed-d-t12", "best16/k16-wna16-layers-t12", "gptq"),
                          ("layers-int8-amx-16g-gptq-seed-e-t12", "marlin/k16-wna16-layers-t12", "gptq"),
                          ("layers-int8-amx-16g-gptq-marlin-seed-e-t12", "marlin/k16-marlin-layers-t12", "gptq"))),
    # 2026-11-27, twelfth session (kt-rawint4/run1, seeded by name, medians of 3 rounds): whole layers on marlin with
    # RAWINT4 CPU layers (the GPTQ checkpoint's own int4 values, kt_repack). Its point JSON and server log went with
    # the machine; the run's knobs and the free memory are its `vramkit up` output's (up.txt: the plan's NVML reading
    # at start, 15.33 GiB, where the other points take SGLang's "avail mem" at load, 0.02 GiB lower on this ballast)
    Point("layers-raw4-amx-16g-gptq-marlin-seed-t12", "held-out", None,
          "kt-rawint4/run1/k16-marlin-layers-raw4-t12.probe.json", "anchor/membw.json",
          {"kt_method": "RAWINT4", "kt_cpuinfer": 12, "mem_fraction": 0.90, "kt_gpu_layers": "auto",
           "moe_kernel": "marlin", "kt_num_gpu_experts": 95}, free_gib=15.33, weights="dummy by name",
          note=ANCHOR_SWEEP + "; every decode the median of 3 rounds; started through vramkit up, its point JSON lost",
          gpu_checkpoint="gptq", kv_splits=32),
    # 2026-11-27, fourteenth session (moe-vs-llamacpp-ggml/run1 and run2, two machines, one round each, SGLang's one-seed
    # dummy weights: a whole layer's CPU work does not depend on the routing): whole layers on marlin, AMXINT8, 12
    # threads, each session's own host bandwidth sweep (membw-anchor.json)
    *(Point(f"layers-int8-amx-16g-gptq-marlin-{tag}", "held-out", f"moe-vs-llamacpp-ggml/{run}/k16-marlin-layers-t12.json",
            f"moe-vs-llamacpp-ggml/{run}/k16-marlin-layers-t12.probe.json", f"moe-vs-llamacpp-ggml/{run}/membw-anchor.json",
            {"kt_method": "AMXINT8"}, rss_end_read=True, note="one round; host bandwidth measured that session",
            gpu_checkpoint="gptq", kv_splits=32)
      for tag, run in (("g1", "run1"), ("g2", "run2"))),
    # 2026-11-28, fifteenth session (moe-vs-llamacpp-mf/run1, one machine, one round each, SGLang's one-seed dummy
    # weights): whole layers on marlin at mem_fraction 0.93 (37 GPU layers), 0.95 with 2048-token chunks (38) and 0.90
    # (35, its weight load under torch's memory recorder); then moe-vs-llamacpp-preset, another machine: the moe preset
    # as it comes (0.93), seeded by name
    *(Point(f"layers-int8-amx-16g-gptq-marlin-{tag}", "held-out", f"moe-vs-llamacpp-mf/run1/{pt}.json",
            f"moe-vs-llamacpp-mf/run1/{pt}.probe.json", "moe-vs-llamacpp-mf/run1/membw-anchor.json",
            {"kt_method": "AMXINT8", **extra}, rss_end_read=True, note="one round; host bandwidth measured that session",
            gpu_checkpoint="gptq", kv_splits=32)
      for tag, pt, extra in (("mf93", "k16-marlin-layers-mf93", {}),
                             ("mf95-c2048", "k16-marlin-layers-mf95-c2048", {"chunked_prefill": 2048}),
                             ("g3", "k16-marlin-layers-t12", {}))),
    Point("layers-int8-amx-16g-gptq-marlin-preset", "held-out", "moe-vs-llamacpp-preset/k16-preset.json",
          "moe-vs-llamacpp-preset/k16-preset.probe.json", "moe-vs-llamacpp-preset/membw-anchor.json",
          {"kt_method": "AMXINT8"}, rss_end_read=True, note="one round; the preset as it comes; seeded by name",
          gpu_checkpoint="gptq", kv_splits=32),
    # 2026-11-28, sixteenth session (moe-gpu-prefill/, two machines, one round each, seeded by name): the preset as it
    # comes on each, and on run2's machine the preset with the CPU layers' prompt chunks on the GPU (--kt-gpu-prefill
    # 256: one GPU layer fewer for its staging set, its pinned copies in host RAM)
    *(Point(f"layers-int8-amx-16g-gptq-marlin-{tag}", "held-out", f"moe-gpu-prefill/{run}/{pt}.json",
            f"moe-gpu-prefill/{run}/{pt}.probe.json", f"moe-gpu-prefill/{run}/membw-anchor.json",
            {"kt_method": "AMXINT8", **extra}, rss_end_read=True, note=f"{rounds}; {what}; seeded by name",
            gpu_checkpoint="gptq", kv_splits=32)
      for tag, run, pt, rounds, what, extra in (
          ("preset-p1", "run1", "k16-preset", "one round", "the preset as it comes", {}),
          ("preset-p2", "run2", "k16-preset", "one round", "the preset as it comes", {}),
          ("prefill", "run2", "k16-prefill", "one round", "--kt-gpu-prefill 256", {"kt_prefill_pin": "alloc"}),
          # the seventeenth session (run3, a third machine): the preset as it comes, the path on by itself (auto), and
          # with --kt-gpu-prefill 0, each the median of 3 starts; RSS and memory of the first start
          ("preset-p3", "run3", "k16-preset", "median of 3 starts", "the preset as it comes, the path on (auto)",
           {"kt_gpu_prefill": "auto", "kt_prefill_pin": "alloc"}),
          ("kt-prompts-p3", "run3", "k16-kt-prompts", "median of 3 starts", "--kt-gpu-prefill 0", {}))),
    # 2026-11-28, eighteenth session, two machines, one round each, seeded by name: the preset's FP8 checkpoint as it
    # came then (prompts on kt-kernel; moe-vs-llamacpp-q8/run2/, beside llama.cpp on Q8_0) and with the FP8 prompt
    # path after the adapter's staging fix (moe-gpu-prefill/fp8-server/, one GPU layer fewer; the copies in PyTorch's
    # pinned allocator, as the adapter pinned them then). run2's path server, run
    # before the fix, is not scored: its staging set took 0.6 GiB more than the plan (its pool a third short)
    *(Point(f"layers-int8-amx-16g-fp8-{tag}", "held-out", f"{run}/{pt}.json", f"{run}/{pt}.probe.json",
            f"{run}/membw-anchor.json", {"kt_method": "AMXINT8", **extra}, rss_end_read=True,
            note=f"one round; {what}; seeded by name", gpu_checkpoint="fp8", kv_splits=32)
      for tag, run, pt, what, extra in (
          ("preset-q2", "moe-vs-llamacpp-q8/run2", "k16-int8-preset", "the preset as it came, prompts on kt-kernel",
           {"kt_gpu_prefill": 0}),
          ("prefill-fix", "moe-gpu-prefill/fp8-server", "k16-int8-prefill", "--kt-gpu-prefill 1024",
           {"kt_gpu_prefill": 1024, "kt_prefill_pin": "alloc", "kt_prefill_fp8": "w8a8"}),
          # the same path with each host copy registered at its own size (VRAMKIT_KT_PREFILL_PIN=register, the default
          # since), the preset as it comes (auto takes the path); a third machine of the kind
          ("register", "moe-gpu-prefill/fp8-register", "k16-int8-register", "the preset as it comes, the path on "
           "(auto), its copies registered", {"kt_gpu_prefill": "auto", "kt_prefill_pin": "register",
                                              "kt_prefill_fp8": "w8a8"}))),
    # 2026-11-28, twentieth session, an H200 machine (the same host CPU): the FP8 path's int8 arithmetic, the default
    # since, beside llama.cpp on Q8_0 (moe-vs-llamacpp-q8/h200/); one round, seeded by name
    Point("layers-int8-amx-16g-fp8-int8-h200", "held-out", "moe-vs-llamacpp-q8/h200/k16-int8-prefill-int8.json",
          "moe-vs-llamacpp-q8/h200/k16-int8-prefill-int8.probe.json", H200_SWEEP_FILE,
          {"kt_method": "AMXINT8", "kt_gpu_prefill": 1024, "kt_prefill_fp8": "int8"}, rss_end_read=True,
          note="one round; --kt-gpu-prefill 1024 --kt-prefill-fp8 int8, on an H200; seeded by name; " + H200_SWEEP,
          gpu_checkpoint="fp8", kv_splits=32, gpu="h200-141gb"),
    # 2026-11-28, twenty-first session, a second H200 machine: the FP8 preset as it comes (the int8 path by auto)
    # beside llama.cpp on Q8_0 (moe-vs-llamacpp-q8/h200-b/); one round, seeded by name
    Point("layers-int8-amx-16g-fp8-preset-h200b", "held-out", "moe-vs-llamacpp-q8/h200-b/k16-int8-preset.json",
          "moe-vs-llamacpp-q8/h200-b/k16-int8-preset.probe.json", H200_SWEEP_FILE,
          {"kt_method": "AMXINT8", **AS_IT_COMES}, rss_end_read=True,
          note="one round; the preset as it comes, on an H200; seeded by name; " + H200_SWEEP,
          gpu_checkpoint="fp8", kv_splits=32, gpu="h200-141gb"),
    # 2026-11-28, twenty-second session, three more H200 machines, each with its own host-read sweep (the first
    # pairing machines so measured; moe-vs-llamacpp-q8/): the preset as it comes (h200-c: its llama.cpp servers lost
    # with the machine; h200-fp8cpu), and beside it on one machine the preset's CPU experts read from the FP8
    # checkpoint as is (--kt-method FP8 as whole layers, the first such server), again on a fourth machine
    *(Point(f"layers-{name}", "held-out", f"{Q}{run}/{pt}.json", f"{Q}{run}/{pt}.probe.json",
            f"{Q}{run}/membw-session.json", {"kt_method": method, **AS_IT_COMES}, rss_end_read=True,
            note=f"one round; {what}, on an H200; {seed}; this machine's own sweep", gpu_checkpoint="fp8",
            kv_splits=32, gpu="h200-141gb")
      for name, run, pt, what, method, seed in (
          ("int8-amx-16g-fp8-preset-h200c", "h200-c", "k16-int8-preset", "the preset as it comes", "AMXINT8",
           "seeded by name"),
          ("int8-amx-16g-fp8-preset-h200d", "h200-fp8cpu", "k16-int8-preset", "the preset as it comes", "AMXINT8",
           "seeded by name"),
          ("fp8-amx-16g-h200d", "h200-fp8cpu", "k16-fp8cpu", "--kt-method FP8 (the checkpoint as is)", "FP8",
           "seeded by name"),
          # run without VRAMKIT_DUMMY_SEED_BY_NAME (by oversight): SGLang's dummy GPU side, every layer routing alike
          ("fp8-amx-16g-h200e", "h200-fp8cpu-b", "k16-fp8cpu", "--kt-method FP8 (the checkpoint as is)", "FP8",
           "SGLang's dummy load"))),
    # 2026-11-28, twenty-third session, a fifth H200 machine with its own sweep: the preset as it comes beside
    # llama.cpp on Q8_0 (moe-vs-llamacpp-q8/h200-med/, STEPS="setup med8"), each figure the median of 3 rounds
    Point("layers-int8-amx-16g-fp8-preset-h200med", "held-out", f"{Q}h200-med/k16-int8-preset.json",
          f"{Q}h200-med/k16-int8-preset.probe.json", f"{Q}h200-med/membw-session.json",
          {"kt_method": "AMXINT8", **AS_IT_COMES}, rss_end_read=True,
          note="medians of 3 rounds; the preset as it comes, on an H200; seeded by name; this machine's own sweep",
          gpu_checkpoint="fp8", kv_splits=32, gpu="h200-141gb"),
    # 2026-11-28, twenty-fourth session (moe-vs-llamacpp-q8/h200-embhost*/, STEPS="setup embhost", medians of 3 rounds
    # but the third start's one): on one machine the token embeddings in pinned host RAM (--kt-embed-host on, 18 GPU
    # layers; the server's log says so), the preset with them on the GPU (17), the embeddings in host RAM again; a
    # machine lost after its preset
    *(Point(f"layers-{name}", "held-out", f"{Q}{run}/{pt}.json", f"{Q}{run}/{pt}.probe.json",
            f"{Q}{run}/membw-session.json", {"kt_method": "AMXINT8", **AS_IT_COMES}, rss_end_read=True,
            note=f"{rounds}; {what}, on an H200; seeded by name; this machine's own sweep", gpu_checkpoint="fp8",
            kv_splits=32, gpu="h200-141gb")
      for name, run, pt, what, rounds in (
          ("int8-amx-16g-fp8-preset-h200m1", "h200-embhost-m1", "k16-int8-preset", "the preset as it came",
           "medians of 3 rounds"),
          ("int8-amx-16g-fp8-embhost-h200f", "h200-embhost", "k16-int8-embhost", "--kt-embed-host on",
           "medians of 3 rounds"),
          ("int8-amx-16g-fp8-preset-h200f", "h200-embhost", "k16-int8-preset", "the preset as it came",
           "medians of 3 rounds"),
          ("int8-amx-16g-fp8-embhost-h200f2", "h200-embhost/second-start", "k16-int8-embhost",
           "--kt-embed-host on, the machine's third start", "one round"))),
    # 2026-11-28, twenty-fifth session (moe-vs-llamacpp-gptq/h200-embhost/, STEPS="setup embhost4", REPEAT=1): the moe
    # preset on the GPTQ-Int4 config with the token embeddings in pinned host RAM (auto, 38 GPU layers; the server's log
    # says so), then with them on the GPU (--kt-embed-host off, 36), one H200 machine, one round each. Their prompt
    # path's copies registered at their own size (kt_prefill_pin's default since the eighteenth session: the knob's
    # default here); planned with PyTorch's power-of-two allocator until the twenty-sixth session, which put the plan
    # 0.97-1.16 GiB (10-12 %) over their RSS
    *(Point(f"layers-int8-amx-16g-gptq-{tag}-h200g", "held-out", f"moe-vs-llamacpp-gptq/h200-embhost/{pt}.json",
            f"moe-vs-llamacpp-gptq/h200-embhost/{pt}.probe.json", "moe-vs-llamacpp-gptq/h200-embhost/membw-session.json",
            {"kt_method": "AMXINT8", "kt_gpu_prefill": "auto"}, rss_end_read=True,
            note=f"one round; {what}, on an H200; seeded by name; this machine's own sweep", gpu_checkpoint="gptq",
            kv_splits=32, gpu="h200-141gb")
      for tag, pt, what in (("embhost", "k16-preset", "the preset as it comes, the embeddings in host RAM (auto)"),
                            ("embgpu", "k16-preset-embgpu", "--kt-embed-host off"))),
    # 2026-11-28, twenty-sixth session (moe-vs-llamacpp-gptq/h200-embhost-llama/, EMBHOST_CONTROL=0 EMBHOST_LLAMA=1
    # REPEAT=3 STEPS="setup embhost4"): the same preset as it comes (38 GPU layers) beside llama.cpp's Q4_K_M pair on
    # another H200 machine, each figure the median of 3 rounds
    Point("layers-int8-amx-16g-gptq-embhost-h200h", "held-out", "moe-vs-llamacpp-gptq/h200-embhost-llama/k16-preset.json",
          "moe-vs-llamacpp-gptq/h200-embhost-llama/k16-preset.probe.json",
          "moe-vs-llamacpp-gptq/h200-embhost-llama/membw-session.json",
          {"kt_method": "AMXINT8", "kt_gpu_prefill": "auto"}, rss_end_read=True,
          note="medians of 3 rounds; the preset as it comes, the embeddings in host RAM (auto), on an H200; seeded by "
               "name; this machine's own sweep", gpu_checkpoint="gptq", kv_splits=32, gpu="h200-141gb"),
    # 2026-11-28, twenty-seventh session (moe-vs-llamacpp-gptq/h200-embhost-i/, EMBHOST_CONTROL=0 REPEAT=3
    # STEPS="setup embhost4 stagesnap", then STEPS="setup embhost4" again on the same machine: second-start/): the same
    # preset as it comes on a machine not seen when the best-reading rule was written, twice, each with its own sweeps
    *(Point(f"layers-int8-amx-16g-gptq-embhost-{tag}", "held-out", f"moe-vs-llamacpp-gptq/{run}/k16-preset.json",
            f"moe-vs-llamacpp-gptq/{run}/k16-preset.probe.json", f"moe-vs-llamacpp-gptq/{run}/membw-session.json",
            {"kt_method": "AMXINT8", "kt_gpu_prefill": "auto"}, rss_end_read=True,
            note=f"medians of 3 rounds; the preset as it comes, the embeddings in host RAM (auto), on an H200{what}; "
                 "seeded by name; this machine's own sweep", gpu_checkpoint="gptq", kv_splits=32, gpu="h200-141gb")
      for tag, run, what in (("h200i", "h200-embhost-i", ""),
                             ("h200i2", "h200-embhost-i/second-start", ", the machine's second start"))),
    # 2026-11-28, twenty-eighth session (moe-vs-llamacpp-gptq/h200-stagesnap-j/ and -k/, two machines, DUMMY_BY_NAME=1
    # SNAP_PRESET=0 STAGESNAP_ALL=1 STEPS="setup stagesnap poolcheck"): each load under torch's memory recorder (the
    # adapter stops it at the load's end), then the SHORT probe: one decode after 512 tokens and one after 8K
    Point("layers-int8-amx-16g-gptq-kt-prompts-h200j", "held-out", "moe-vs-llamacpp-gptq/h200-stagesnap-j/k16-kt-prompts-snap.json",
          "moe-vs-llamacpp-gptq/h200-stagesnap-j/k16-kt-prompts-snap.probe.json",
          "moe-vs-llamacpp-gptq/h200-stagesnap-j/membw-session.json", {"kt_method": "AMXINT8", "kt_gpu_prefill": 0},
          rss_end_read=True, note="one round; the GPTQ preset with --kt-gpu-prefill 0, its load recorded, on an H200; "
          "seeded by name; this machine's own sweep", gpu_checkpoint="gptq", kv_splits=32, gpu="h200-141gb"),
    Point("layers-int8-amx-16g-fp8-preset-h200k", "held-out", "moe-vs-llamacpp-gptq/h200-stagesnap-k/k16-fp8-preset-snap.json",
          "moe-vs-llamacpp-gptq/h200-stagesnap-k/k16-fp8-preset-snap.probe.json",
          "moe-vs-llamacpp-gptq/h200-stagesnap-k/membw-session.json", {"kt_method": "AMXINT8", "kt_gpu_prefill": "auto"},
          rss_end_read=True, note="one round; the FP8 preset as it comes, its load recorded, on an H200; seeded by "
          "name; this machine's own sweep", kv_splits=32, gpu="h200-141gb"),
    # 2026-11-29, twenty-ninth session (moe-vs-llamacpp-q8/h200-realload/ and -b/, two machines, DUMMY_BY_NAME=1
    # STEPS="setup realload"): the preset with its CPU experts read from a written FP8 checkpoint (--kt-method FP8),
    # first loaded from that checkpoint on disk (no --load-format dummy), then on dummy weights of its config, each
    # load recorded; -b after the adapter's int8 requantization moved to the GPU and its reader closes the files
    *(Point(f"layers-fp8-amx-16g-{tag}", "held-out", f"{Q}{run}/k16-fp8cpu-{how}.json",
            f"{Q}{run}/k16-fp8cpu-{how}.probe.json", f"{Q}{run}/membw-session.json", {"kt_method": "FP8", **AS_IT_COMES},
            rss_end_read=True, note=f"one round; --kt-method FP8, {what}, its load recorded, on an H200; "
            "this machine's own sweep", kv_splits=32, gpu="h200-141gb")
      for tag, run, how, what in (
          ("real-h200l", "h200-realload", "real", "the checkpoint loaded from disk"),
          ("dummy-h200l", "h200-realload", "dummy", "dummy weights seeded by name"),
          ("real-h200m", "h200-realload-b", "real", "the checkpoint loaded from disk, int8 requantized on the GPU"),
          ("dummy-h200m", "h200-realload-b", "dummy", "dummy weights seeded by name, int8 requantized on the GPU"))),
    # 2026-11-29, thirtieth session (moe-vs-llamacpp-int4/r1/ and r3/, one H200 machine, DUMMY_BY_NAME=1 STEPS="setup
    # lint4", then REPEAT=3 INT4_BENCH=0 the same): the GPTQ preset as it comes with its CPU layers' decode on the kit's
    # int4 kernel (--kt-cpu-decode int4, whose pace constant is its kernel bench's, not fitted here), then without it
    *(int4_preset_point(f"layers-{dec}-amx-16g-gptq-preset-h200n{rnd}", f"r{rnd}", pt, knob,
                        f"{'medians of 3 rounds' if rnd == 3 else 'one round'}; the GPTQ preset as it comes{what}")
      for rnd in (1, 3) for dec, pt, knob, what in (
          ("int4dec", "k16-preset-int4", "int4", ", its CPU layers' decode on the int4 kernel (--kt-cpu-decode int4)"),
          ("int8", "k16-preset", "kt", ""))),
    # 2026-11-29, thirty-first session (moe-vs-llamacpp-int4/r4/, another H200 machine, DUMMY_BY_NAME=1 REPEAT=3
    # STEPS="setup lint4", after the kernel's FMA chains, AVX2 vector width and mutex): the same pair, and the int4
    # kernel's AVX2 build forced in the server (VRAMKIT_INT4_ISA=avx2; its pace constant is the AVX2 bench's, isa/):
    # planned for an AVX2 host, whose decode estimate takes that pace (kt-kernel's method plays no part in the decode
    # there; its prompt chunks ran on the AMX build)
    *(int4_preset_point(f"layers-{dec}-amx-16g-gptq-preset-h200o", "r4", pt, knob,
                        f"medians of 3 rounds; the GPTQ preset as it comes{what}", None if isa == "amx" else isa)
      for dec, pt, knob, isa, what in (
          ("int4dec", "k16-preset-int4", "int4", "amx", ", its CPU layers' decode on the int4 kernel"),
          ("int4dec-avx2", "k16-preset-int4-avx2", "int4", "avx2",
           ", its CPU layers' decode on the int4 kernel's AVX2 build (forced; kt-kernel's AMX build for prompts)"),
          ("int8", "k16-preset", "kt", "amx", ""))),
    # the same machine right after (moe-vs-llamacpp-int4/realload/, STEPS="setup realload-gptq" twice, REALS=real then
    # dummy): a random GPTQ-Int4 checkpoint loaded from disk, its CPU layers' int4 decode reading the same files, then
    # dummy weights of its config; each load recorded, one round, the SHORT probe
    *(Point(f"layers-int4dec-amx-16g-gptq-{how}-h200o", "held-out", f"moe-vs-llamacpp-int4/realload/k16-gptq-{how}.json",
            f"moe-vs-llamacpp-int4/realload/k16-gptq-{how}.probe.json", f"moe-vs-llamacpp-int4/realload/{sweep}",
            {"kt_method": "AMXINT8", "kt_gpu_prefill": "auto"}, rss_end_read=True,
            note=f"one round; the GPTQ preset as it comes (int4 decode by auto), {what}, its load recorded, on an "
            "H200; this machine's own sweep", gpu_checkpoint="gptq", kv_splits=32, gpu="h200-141gb")
      for how, sweep, what in (("real", "membw-session.json", "the checkpoint loaded from disk"),
                               ("dummy", "membw-session-b.json", "dummy weights seeded by name"))),
    # 2026-11-29, thirty-second session (moe-vs-llamacpp-int4/r5/, another H200 machine, DUMMY_BY_NAME=1 REPEAT=3
    # INT4_SWEEP=1 INT4_THREADS="14 16 6:1"): the preset with the int4 decode at the plan's 12 KT threads, at 14, and
    # at 6 (one round; 16 was refused by `vramkit up`), then r5-again/ on the same machine right after: the int4 point
    # again and its kt-kernel twin
    *(int4_preset_point(f"layers-{dec}-amx-16g-gptq-preset-h200p{tag}", run, pt, knob,
                        f"{rounds}; the GPTQ preset as it comes{what}")
      for dec, tag, run, pt, knob, rounds, what in (
          ("int4dec", "", "r5", "k16-preset-int4", "int4", "medians of 3 rounds", ", its CPU layers' decode on the int4 kernel"),
          ("int4dec", "-t14", "r5", "k16-preset-int4-t14", "int4", "medians of 3 rounds",
           ", its CPU layers' decode on the int4 kernel, 14 KT threads"),
          ("int4dec", "-t6", "r5", "k16-preset-int4-t6", "int4", "one round",
           ", its CPU layers' decode on the int4 kernel, 6 KT threads"),
          ("int4dec", "-b", "r5-again", "k16-preset-int4", "int4", "medians of 3 rounds",
           ", its CPU layers' decode on the int4 kernel, started again"),
          ("int8", "-b", "r5-again", "k16-preset", "kt", "medians of 3 rounds", ""))),
    # 2026-11-29, thirty-third session (moe-vs-llamacpp-int4/r6/, another H200 machine, LLAMA_CPU_VARIANTS=1
    # DUMMY_BY_NAME=1 REPEAT=3 INT4_KT=0 INT4_BENCH=0 STEPS="setup int4isa lint4"): the preset with the int4 decode, and
    # with the kernel's AVX2 build forced (after its masked nibbles; the plan's AVX2 pace is this machine's bench, r6/)
    *(int4_preset_point(f"layers-{dec}-amx-16g-gptq-preset-h200q", "r6", pt, "int4",
                        f"medians of 3 rounds; the GPTQ preset as it comes{what}", isa)
      for dec, pt, isa, what in (
          ("int4dec", "k16-preset-int4", None, ", its CPU layers' decode on the int4 kernel"),
          ("int4dec-avx2", "k16-preset-int4-avx2", "avx2",
           ", its CPU layers' decode on the int4 kernel's AVX2 build (forced; kt-kernel's AMX build for prompts)"))),
    # 2026-11-29, thirty-fourth session (moe-vs-llamacpp-int4/r7/, another H200 machine, DUMMY_BY_NAME=1 REPEAT=3
    # INT4_KT=0 INT4_AVX2=0 INT4_MASKED=1 STEPS="setup int4ab int4isa lint4"): the kernel as it now is (down's units by
    # expert, units in runs; the plan's int4 pace is this machine's bench), and its AVX-512 build with the masked
    # nibbles (VRAMKIT_INT4_ISA=masked: an AVX-512 build, planned with the same pace)
    *(int4_preset_point(f"layers-{dec}-amx-16g-gptq-preset-h200r", "r7", pt, "int4",
                        f"medians of 3 rounds; the GPTQ preset as it comes{what}")
      for dec, pt, what in (
          ("int4dec", "k16-preset-int4", ", its CPU layers' decode on the int4 kernel as it now is"),
          ("int4dec-masked", "k16-preset-int4-masked",
           ", its CPU layers' decode on the int4 kernel's masked AVX-512 build (VRAMKIT_INT4_ISA=masked)"))),
    # 2026-11-29, thirty-fifth session (moe-vs-llamacpp-int4/r8/, another H200 machine, DUMMY_BY_NAME=1 REPEAT=3
    # INT4_KT=0 INT4_AVX2=0 INT4_BENCH=0 INT4_SHARE=auto STEPS="setup gshare lint4"): the preset as it comes (its
    # share point, part of each CPU layer's experts on the GPU over the bus, is not planned: not a point here)
    int4_preset_point("layers-int4dec-amx-16g-gptq-preset-h200s", "r8", "k16-preset-int4", "int4",
                      "medians of 3 rounds; the GPTQ preset as it comes, its CPU layers' decode on the int4 kernel"),
    Point("layers-int8-amx-16g-gptq-t10", "held-out", f"{B}layers-t10/k16-wna16-layers-t10.json",
          f"{B}layers-t10/k16-wna16-layers-t10.probe.json", f"{B}layers-t10/membw-anchor.json", {"kt_method": "AMXINT8"},
          rss_end_read=True, note=ANCHOR_SWEEP, gpu_checkpoint="gptq", kv_splits=32),
    Point("layers-int4-amx-16g", "held-out", "moe-vs-llamacpp/k16-layers.json", "moe-vs-llamacpp/k16-layers.probe.json",
          "moe-vs-llamacpp/membw-anchor.json", {"kt_method": "AMXINT4"}, rss_end_read=True, note=ANCHOR_SWEEP),
    Point("layers-int8-amx-16g", "held-out", Q + "k16-int8-layers.json", Q + "k16-int8-layers.probe.json",
          Q + "membw-anchor.json", {"kt_method": "AMXINT8"}, rss_end_read=True, note=ANCHOR_SWEEP, kv_splits=32),
)

# SGLang's batch-1 decode attention on the GPU host with 8 and with 32 KV splits, measured without KT: the same server
# config at 24 GiB (every GPTQ-Int4 expert on the GPU) one after the other on one machine, decode after 512, 8K and 30K
# tokens (moe-vs-llamacpp-gptq/run3/: k24-gptq-again ran 8 splits, k24-gptq-kv32 32)
KV_SPLITS_AB = {8: "moe-vs-llamacpp-gptq/run3/k24-gptq-again.probe.json", 32: "moe-vs-llamacpp-gptq/run3/k24-gptq-kv32.probe.json"}


def load(rel: str) -> dict | list:
    return json.loads((RES / rel).read_text())


def target_for(p: Point, free_bytes: int, readings: list[dict] | None = None) -> Target:
    """The run's card and host; its host read the session's sweep (p.membw), or `readings` in its place."""
    sweep = tuple((r["threads"], float(r["bytes_per_s"])) for r in (readings or load(p.membw)))
    host = kt.HostCpu(isa=p.build, isa_source="the GPU host" + (f" ({p.build} build forced)" if p.build != "amx" else ""),
                      read_bytes_s=sweep, read_source=f"measured that session ({p.membw})", physical_cores=H100_CORES,
                      kt_kernel=p.kt_kernel)
    return Target(gpu=catalog.gpu(p.gpu), gpu_free_bytes=free_bytes, host=host,
                  host_ram_available_bytes=120 * GiB)


def run_knobs(run: dict | None, p: Point) -> dict:
    """The knobs a run was started with: the point's, its `vramkit up` --kt-* flags, and the GPU experts the kit
    rendered for it (its plan JSON beside the point, when there is one: what ran, whatever today's planner says)."""
    knobs = dict(p.knobs)
    args = (run or {}).get("vramkit_up_args", [])
    for flag, key, cast in (("--kt-method", "kt_method", str), ("--kt-cpuinfer", "kt_cpuinfer", int),
                            ("--kt-num-gpu-experts", "kt_num_gpu_experts", int)):
        if (value := last_flag(args, flag)) is not None:
            knobs[key] = cast(value)
    knobs.setdefault("kt_cpuinfer", threads_ran(p))
    # the GPU prompt path: as the run asked (--kt-gpu-prefill), else off: every point before the preset's "auto"
    # (2026-11-28, sixteenth session) ran without it
    knobs.setdefault("kt_gpu_prefill", int(last_flag(args, "--kt-gpu-prefill") or 0))
    knobs.setdefault("mem_fraction", fraction_ran(run, p))
    logged = evidence(p)
    # the token embeddings: where the server's log says the adapter moved them (the preset's "auto" since 2026-11-28's
    # twenty-fourth session, or --kt-embed-host on), else on the GPU, as every point before ran
    knobs.setdefault("kt_embed_host", "on" if EMBED_MOVED in logged else "off")
    knobs.setdefault("kt_gpu_layers", "auto" if ran_whole_layers((run or {}).get("env"), args, logged) else "off")
    # the CPU layers' decode: the int4 kernel where the server's log says it took the layers (or the run's
    # environment asked for it; --kt-cpu-decode, the moe preset's auto since 2026-11-29's thirtieth session), else
    # kt-kernel's method, as every run before it
    knobs.setdefault("kt_cpu_decode", "int4" if re.search(INT4_TOOK, logged)
                     or "VRAMKIT_KT_CPU_DECODE=int4" in (run or {}).get("env", []) else "kt")
    # the GPTQ checkpoint's GPU experts: the kernel it ran (--moe-kernel, else the MoE method SGLang's log names for
    # a GPU layer, else moe_wna16: what auto gave every hybrid GPTQ run until whole layers took marlin, 2026-11-27's
    # eleventh session)
    if p.gpu_checkpoint == "gptq":
        said = re.search(r"quant_method=(GPTQMarlinMoEMethod|MoeWNA16Method)", logged)   # SGLang's own line, if any
        by_log = {"GPTQMarlinMoEMethod": "marlin", "MoeWNA16Method": "wna16"}.get(said.group(1) if said else "")
        knobs.setdefault("moe_kernel", last_flag(args, "--moe-kernel") or by_log or "wna16")
    if p.point and (RES / p.point.replace(".json", ".plan.json")).exists():
        ran = load(p.point.replace(".json", ".plan.json")).get("hybrid") or {}
        if "num_gpu_experts" in ran:
            knobs.setdefault("kt_num_gpu_experts", int(ran["num_gpu_experts"]))
    elif p.point and (up := RES / p.point.replace(".json", ".up.txt")).exists() \
            and (split := plan_split(up.read_text(errors="replace"))):      # `vramkit up`'s plan table
        knobs.setdefault("kt_num_gpu_experts", split[0])
    return knobs


def evidence(p: Point) -> str:
    """The point's trimmed server log beside its JSON (NAME.evidence.txt), "" where it has none; read once."""
    return _evidence(p.point)


@cache
def _evidence(point: str | None) -> str:
    ev = RES / point.replace(".json", ".evidence.txt") if point else None
    return ev.read_text(errors="replace") if ev is not None and ev.exists() else ""


def threads_ran(p: Point) -> int:
    """The KT threads the server ran: its log's worker pool ("[numa:threads][0:N]" in the trimmed evidence), else
    the plan's rule when it ran (every committed point before 2026-11-27's seventh session: 16 cores - 2 = 14)."""
    m = re.search(r"\[numa:threads\]\[0:(\d+)\]", evidence(p))
    return int(m.group(1)) if m else H100_CORES - 2


# The moe preset's mem_fraction_static until 2026-11-27's tenth session (0.90 since: moe-budget/seed-mf90); a point
# whose evidence predates the server_args line ran it
FRACTION_BEFORE = 0.85


def fraction_ran(run: dict | None, p: Point) -> float:
    """The mem_fraction_static the server ran: its `vramkit up --mem-fraction`, else its log's server_args (the trimmed
    evidence), else the preset's value when it ran (FRACTION_BEFORE)."""
    if (asked := last_flag((run or {}).get("vramkit_up_args", []), "--mem-fraction")) is not None:
        return float(asked)
    m = re.search(r"mem_fraction_static=([0-9.]+)", evidence(p))
    return float(m.group(1)) if m else FRACTION_BEFORE


def decode_point(p: Point) -> Point:
    """The point as its decode is planned: where the int4 kernel's build was forced (decode_isa), on a host of that
    ISA, whose int4 pace the plan takes; else the point."""
    return replace(p, build=p.decode_isa) if p.decode_isa else p


def plan_for(p: Point, readings: list[dict] | None = None) -> tuple[Plan, dict | None]:
    """The plan for a point's run; its host read `readings`, else its session's (read_for)."""
    run = load(p.point) if p.point else None
    readings = readings or read_for(p)
    free_gib = run["log_figures_gib"]["load_begin_avail"] if run else p.free_gib
    knobs = Knobs(**(catalog.presets()["moe"].knobs | run_knobs(run, p)))
    return plan(model_for(p), target_for(p, int(free_gib * GiB), readings), knobs, catalog.engine(),
                with_alternatives=False), run


# --- the host-read input on machines that swept more than once -------------------------------------------------------
# Since 2026-11-28's twenty-fourth session the driver sweeps each machine three ways before its servers (one round, 3
# rounds, 3 rounds with the threads bound: membw-session-r3.json beside the one-round membw-session.json), and since
# the twenty-sixth once more after them (membw-session-end.json). On these virtual machines the sweeps disagree by up
# to a third at one thread count (an idle one's one-round readings fall in two modes: membw-noise/h200.json). The
# estimate reads each thread count's best reading of the session, as `vramkit host --bandwidth` reads a host (each
# count's best of membw.HOST_ROUNDS rounds). That rule was chosen on the points in READ_RULE_CHOSEN_ON, after seeing
# their errors (twenty-sixth session), and checked on the points swept later (twenty-seventh: h200-embhost-i/); the
# section of kt-estimate.md reports the two apart, beside the one-round sweep's errors. The fitted constants' runs
# (the H100 host's anchor sweep, one round) are not touched by it
READ_RULE_CHOSEN_ON = frozenset({
    "layers-int8-amx-16g-fp8-preset-h200med", "layers-int8-amx-16g-fp8-preset-h200m1",
    "layers-int8-amx-16g-fp8-embhost-h200f", "layers-int8-amx-16g-fp8-preset-h200f",
    "layers-int8-amx-16g-fp8-embhost-h200f2", "layers-int8-amx-16g-gptq-embhost-h200g",
    "layers-int8-amx-16g-gptq-embgpu-h200g", "layers-int8-amx-16g-gptq-embhost-h200h"})
SWEEPS_R3 = "membw-session-r3.json"
SWEEP_END = "membw-session-end.json"


def session_sweeps(p: Point) -> dict[str, list[dict]] | None:
    """A point's session sweeps where its machine took more than one, by kind; None where it took one."""
    r3 = (RES / p.membw).parent / SWEEPS_R3
    if not p.membw.endswith("membw-session.json") or not r3.exists():
        return None
    more = load(str(r3.relative_to(RES)))
    out = {"one round": load(p.membw), "3 rounds": more["rounds"], "3 rounds, threads bound": more["pinned"]}
    if (end := r3.parent / SWEEP_END).exists():     # the driver's sweep after the servers (since 2026-11-28, 26th)
        out["one round, servers stopped"] = load(str(end.relative_to(RES)))
    return out


def read_for(p: Point) -> list[dict]:
    """The host read a point's estimate takes: each count's best reading of its session where the machine swept more
    than once (best_reading), else its one sweep (p.membw)."""
    sweeps = session_sweeps(p)
    return best_reading(sweeps) if sweeps else load(p.membw)


def best_reading(sweeps: dict[str, list[dict]]) -> list[dict]:
    """Each thread count of the one-round sweep at the best reading any of the session's sweeps gave it."""
    best: dict[int, float] = {}
    for runs in sweeps.values():
        for r in runs:
            best[r["threads"]] = max(best.get(r["threads"], 0.0), float(r["bytes_per_s"]))
    return [{"threads": r["threads"], "bytes_per_s": best[r["threads"]]} for r in sweeps["one round"]]


def read_input_check(k: kt.KtConstants, splits_rate: dict[int, float], plans: dict[str, Plan]) -> dict:
    """Each held-out point with more than one sweep: its decodes' estimate error with the one-round sweep and with the
    session's best reading (the main table's: `plans`, each point's plan as compute() made it), summed up over all,
    over the runs the rule was chosen on and over the runs that checked it."""
    out = []
    for p in POINTS:
        if p.role != "held-out" or (sweeps := session_sweeps(p)) is None:
            continue
        row: dict = {"point": p.name, "sweeps": str((RES / p.membw).parent.relative_to(RES)),
                     "rule": "chosen on" if p.name in READ_RULE_CHOSEN_ON else "checked on"}
        decodes = measurements(p)
        for key, pl in (("one_round", plan_for(decode_point(p), sweeps["one round"])[0]),
                        ("session_best", plans[p.name])):
            h = pl.hybrid
            assert h is not None
            row["threads"] = int(h.cpuinfer_threads)
            row[f"read_gbs_{key}"] = round(h.host_read_bytes_s / 1e9, 1)
            row[f"errors_{key}"] = [round(predict(terms(pl, m["context"], p.kv_splits), k, splits_rate) / m["tok_s"] - 1,
                                          4) for m in decodes]
        out.append(row)

    def summary(key: str, rule: str | None = None) -> dict:
        errs = [abs(e) for r in out if rule in (None, r["rule"]) for e in r[f"errors_{key}"]]
        return {"n": len(errs), "mean_abs": round(sum(errs) / len(errs), 4) if errs else None,
                "over_20pct": int(sum(e > 0.20 for e in errs))}
    return {"points": out, "one_round": summary("one_round"), "session_best": summary("session_best"),
            "by_rule": {rule: {"one_round": summary("one_round", rule), "session_best": summary("session_best", rule)}
                        for rule in ("chosen on", "checked on")}}


def gptq_coder_config() -> dict:
    """The coder's config.json with Qwen's GPTQ-Int4 quantization_config and dtype (group 128, sym; attention and
    experts 4-bit): run_moe_vs_llamacpp.sh writes it as /tmp/ck/gptqcfg, the GPTQ points' model."""
    cfg = json.loads((ROOT / "config/models/qwen3-coder-30b-a3b-instruct/config.json").read_text())
    q = json.loads((ROOT / "config/models/qwen3-30b-a3b-gptq-int4/config.json").read_text())
    cfg["quantization_config"], cfg["torch_dtype"] = q["quantization_config"], q["torch_dtype"]
    return cfg


def model_for(p: Point):
    """The model the run served: the catalogued FP8 coder, or the GPTQ config above."""
    if p.gpu_checkpoint == "fp8":
        return catalog.model("qwen3-coder-30b-a3b-instruct-fp8")
    from vramkit.hf_config import parse_config
    return parse_config(gptq_coder_config(), name="gptqcfg")


def measurements(p: Point) -> list[dict]:
    """Each single-stream decode of the probe: (context it decoded at, tok/s). The context is the prompt plus
    half the generated tokens (the mean depth of the decode)."""
    probe = load(p.probe)
    out = []
    for d in probe["decode"]:
        if d["streams"] == 1 and d["per_stream_tok_s"]:
            r = d["requests"][0]
            out.append({"what": f"decode after {r['prompt_tokens']}", "context": r["prompt_tokens"] + r["completion_tokens"] // 2,
                        "tok_s": d["per_stream_tok_s"]})
    for r in probe.get("ttft", []):
        if r.get("ok") and r.get("decode_tok_s") and r["prompt_tokens"] > 1024:   # the 512 one: the decode above
            out.append({"what": f"decode at depth {r['prompt_tokens']}",
                        "context": r["prompt_tokens"] + r["completion_tokens"] // 2, "tok_s": r["decode_tok_s"]})
    return out


def four_streams(p: Point) -> float | None:
    """The probe's aggregate decode of 4 concurrent requests (tok/s, summed over the streams), None where it ran none
    or one of them failed."""
    d = next((x for x in load(p.probe)["decode"] if x["streams"] == 4), None)
    if d is None or not d.get("aggregate_tok_s") or not all(r.get("ok", True) for r in d.get("requests", [])):
        return None
    return d["aggregate_tok_s"]


def four_stream_spread(fours: list[dict]) -> dict[str, list[float]]:
    """measured / estimate, its least and greatest, by CPU method and placement ("AMXINT8 whole layers")."""
    out: dict[str, list[float]] = {}
    for r in fours:
        key = f"{r['method']} {'whole layers' if r['gpu_layers'] else 'split'}"
        ratio = r["tok_s"] / r["plan_tok_s"]
        lo, hi = out.get(key, [ratio, ratio])
        out[key] = [round(min(lo, ratio), 3), round(max(hi, ratio), 3)]
    return dict(sorted(out.items()))


def terms(pl: Plan, context: int, kv_splits: int = 8) -> dict:
    """The estimate's derived parts for a plan at a context (constants left out)."""
    h = pl.hybrid
    assert h is not None
    return {"gpu_s": h.decode_gpu_s, "gpu_experts_s": h.decode_gpu_experts_s,
            "cpu_bytes": h.cpu_bytes_per_token * h.decode_cpu_time_factor,   # a lesser build: measured slowdown
            "read": h.host_read_bytes_s, "layers": h.moe_layers - h.gpu_layers,   # the layers that sync
            "kv_bytes": context * pl.kv_bytes_per_token, "kv_splits": kv_splits, "gpu_layers": h.gpu_layers}


def attention_read_by_splits() -> dict[int, float]:
    """The KV read rate (bytes/s) of batch-1 decode attention at each split count of KV_SPLITS_AB: the least-squares
    slope through the origin of (each deeper decode's step - the step after the 512-token prompt) over the KV bytes
    the deeper one reads more. Measured, not fitted on a KT run."""
    gptq = next(p for p in POINTS if p.gpu_checkpoint == "gptq")
    per_token = plan_for(gptq)[0].kv_bytes_per_token
    out = {}
    for splits, rel in KV_SPLITS_AB.items():
        rows = {r["prompt_tokens"]: (r["prompt_tokens"] + r["completion_tokens"] // 2, 1.0 / r["decode_tok_s"])
                for r in load(rel)["ttft"] if r.get("ok") and r.get("decode_tok_s")}
        c0, t0 = rows.pop(512)
        xy = [((c - c0) * per_token, t - t0) for c, t in rows.values()]
        out[splits] = sum(x * x for x, _ in xy) / sum(x * y for x, y in xy)
    return out


def predict(t: dict, k: kt.KtConstants, splits_rate: dict[int, float] | None = None) -> float:
    """tok/s: the fitted constants; a server with 32 KV splits reads its KV at the rate measured for 32 (the fit's
    points all ran SGLang's default 8, whose rate is the fitted constant)."""
    return _estimate(t, k, splits_rate, k.whole_layer_step_s).tok_s


def _estimate(t: dict, k: kt.KtConstants, splits_rate: dict[int, float] | None, step_s: float) -> kt.DecodeEstimate:
    """The plan's own DecodeEstimate from a run's terms and these constants (its `seconds` says what overlaps); the
    whole-layer step given apart, so the fit can leave it out."""
    attn = k.attention_read_bytes_s if t.get("kv_splits", 8) == 8 else (splits_rate or {})[t["kv_splits"]]
    return kt.DecodeEstimate(gpu_s=t["gpu_s"], context_s=t["kv_bytes"] / attn, gpu_experts_s=t["gpu_experts_s"],
                             cpu_experts_s=t["cpu_bytes"] / (t["read"] * k.cpu_read_efficiency),
                             sync_s=t["layers"] * k.layer_sync_s, host_read_bytes_s=t["read"],
                             cpu_bytes_per_token=int(t["cpu_bytes"]), gpu_layers=t.get("gpu_layers", 0), step_s=step_s)


def fit(rows: list[dict]) -> tuple[float, float, float]:
    """(efficiency, sync s, attention B/s): weighted least squares of the seconds per token, weights 1/measured."""
    import numpy as np
    a = np.array([[r["t"]["cpu_bytes"] / r["t"]["read"], r["t"]["layers"], r["t"]["kv_bytes"]] for r in rows])
    y = np.array([1.0 / r["tok_s"] - r["t"]["gpu_s"] for r in rows])
    w = np.array([r["tok_s"] for r in rows])         # relative error: divide each row by the measured seconds
    x, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    if (x <= 0).any():
        raise SystemExit(f"fit gave a non-positive constant: {x} (more varied points needed)")
    return 1.0 / x[0], x[1], 1.0 / x[2]


def main() -> int:
    result = compute()
    OUT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    OUT_MD.write_text(markdown(result))
    print(json.dumps(result["constants"]))
    return 0


def gpu_weights(p: Point, run: dict | None = None) -> str:
    """What the GPU side served: "dummy" (SGLang's --load-format dummy: every layer's router the same, moe-budget.md),
    "dummy by name" (the same with the kt_compat adapter's VRAMKIT_DUMMY_SEED_BY_NAME=1: each layer's drawn apart) or
    "checkpoint" (a random checkpoint on disk, tools/make_random_checkpoint.py: each layer's drawn apart), from the
    `vramkit up` arguments and environment its point JSON (`run`, read here when not given) keeps."""
    if p.weights is not None:
        return p.weights
    r = (run or load(p.point)) if p.point else {}
    if last_flag(r.get("vramkit_up_args", []), "--load-format") != "dummy":
        return "checkpoint"
    return "dummy by name" if "VRAMKIT_DUMMY_SEED_BY_NAME=1" in r.get("env", []) else "dummy"


def _seeded_misses(res: dict) -> str:
    """Which way the held-out "dummy by name" rows miss, per placement and CPU method, in words: "the split's AMXINT8
    21 rows all faster than the estimate, whole layers' AMXINT8 15 rows 7 slower than it, 8 faster, ..." (whole
    layers have their own fitted step; RAWINT4's kernel reads below the host's bandwidth: kt-rawint4/README.md)."""
    kind = {q["name"]: ("whole layers' " if q["gpu_layers"] else "the split's ") + q["method"] for q in res["points"]}
    rows: dict[str, list[float]] = {}
    for r in res["measurements"]:
        if r["role"] == "held-out" and r["gpu_weights"] == "dummy by name":
            rows.setdefault(kind[r["point"]], []).append(r["error"])
    said = []
    for k, errs in rows.items():
        slower = sum(e > 0 for e in errs)
        way = ("all faster than the estimate" if not slower else "all slower than it" if slower == len(errs) else
               f"{slower} slower than it, {len(errs) - slower} faster")
        said.append(f"{k} {len(errs)} rows {way}")
    return ", ".join(said)


def compute() -> dict:
    """The fit and every comparison, as the JSON this script writes."""
    base = catalog.engine().kt
    assert base is not None
    rows, points, fours = [], [], []
    plans: dict[str, Plan] = {}
    for p in POINTS:
        pl, run = plan_for(p)
        # the decode's plan: the run's, or where the int4 kernel's build was forced, a host of that ISA's
        dpl = plan_for(decode_point(p))[0] if p.decode_isa else pl
        plans[p.name] = dpl
        h = pl.hybrid
        assert h is not None and dpl.hybrid is not None
        weights = gpu_weights(p, run)
        if (agg := four_streams(p)) is not None:     # 4 requests after 512-token prompts: their mean depth
            moe = model_for(p).moe
            assert moe is not None
            fours.append({"point": p.name, "method": h.kt_method, "gpu_layers": h.gpu_layers, "gpu_weights": weights,
                          "tok_s": agg, "experts": (moe.num_experts, moe.top_k),
                          "t": terms(dpl, FOUR_STREAM_CONTEXT, p.kv_splits)})
        for m in measurements(p):
            rows.append({"point": p.name, "role": p.role, "gpu_weights": weights, **m,
                         "t": terms(dpl, m["context"], p.kv_splits)})
        rec = {"name": p.name, "role": p.role, "method": h.kt_method,
               "build": p.build + (f"; int4 decode {p.decode_isa}" if p.decode_isa else ""),
               "gpu_experts": h.num_gpu_experts,
               "threads": h.cpuinfer_threads, "gpu_layers": h.gpu_layers, "note": p.note,
               "host_experts_bytes": h.host_experts_bytes,
               "host_checkpoint_bytes": h.host_checkpoint_bytes, "host_pinned_bytes": h.host_pinned_bytes,
               "host_prefill_bytes": h.host_prefill_bytes, "host_embed_bytes": h.host_embed_bytes,
               "host_int4_bytes": h.host_int4_bytes,
               "compile_pool": h.compile_pool}
        if run:
            lf = run["log_figures_gib"]
            rec |= {"weights_gib": lf["weights"], "plan_weights_gib": pl.weights_bytes / GiB,
                    "kv_tokens": lf["kv_tokens"], "plan_kv_tokens": pl.kv_pool_tokens,
                    # a server that died during its probe (no RSS at its end: 0) has one RSS sample, taken at a
                    # moment the start does not pin (before or after kt-kernel frees its load buffers); shown, not
                    # compared
                    "rss_after_start_bytes": run.get("host_rss_after_start_bytes") if run["host_rss_peak_bytes"] else None,
                    "rss_unscored_bytes": None if run["host_rss_peak_bytes"] else run.get("host_rss_after_start_bytes"),
                    # the run's peak is the larger of its two readings: RSS right after start (conversion and load
                    # buffers still held) and RSS once the probe ended (host_rss_peak_bytes, one reading)
                    "rss_peak_bytes": max(run["host_rss_peak_bytes"], run.get("host_rss_after_start_bytes") or 0)
                    if p.rss_end_read and run["host_rss_peak_bytes"] else None}
        points.append(rec)
    # a decode more than 10 % slower than the same server's decode at a LONGER context is not the context's doing (more
    # context only adds work): each depth is another prompt, and the kit's rate depends on the prompt (moe-budget.md,
    # the prompt table: the same seeded prompts on 6 servers, the fastest 1.65x the slowest at one depth). Until
    # 2026-11-27 such a decode was left unscored as a changed server state; it is scored like every other and noted
    for r in rows:
        longer = [q["tok_s"] for q in rows if q["point"] == r["point"] and q["context"] > r["context"]]
        r["inconsistent"] = bool(longer) and r["tok_s"] < 0.9 * max(longer)
    fitted = [r for r in rows if r["role"] == "fit" and not r["t"]["gpu_layers"]]
    eff, sync, attn = fit(fitted)
    own = [q["rss_after_start_bytes"] - q["host_experts_bytes"] - q["host_checkpoint_bytes"] - q["host_pinned_bytes"]
           - q["host_prefill_bytes"] for q in points if q["role"] == "fit" and not q["gpu_layers"] and q.get("rss_after_start_bytes")
           and q["compile_pool"]]
    sglang_host = sum(own) / len(own)
    k = replace(base, cpu_read_efficiency=eff, layer_sync_s=sync, attention_read_bytes_s=attn,
                sglang_host_bytes=int(sglang_host))
    splits_rate = attention_read_by_splits()
    # whole layers' own term: the mean of what the fitted whole-layer run's seconds leave over the split's terms
    left = [1.0 / r["tok_s"] - _estimate(r["t"], k, splits_rate, 0.0).seconds
            for r in rows if r["role"] == "fit" and r["t"]["gpu_layers"]]
    k = replace(k, whole_layer_step_s=sum(left) / len(left))
    for r in rows:
        r["kv_splits"] = r["t"]["kv_splits"]
        r["plan_tok_s"] = predict(r.pop("t"), k, splits_rate)
        r["error"] = r["plan_tok_s"] / r["tok_s"] - 1
    for r in fours:     # derived from the batch-1 estimate, nothing fitted to these: every one held out
        r["plan_tok_s"] = _estimate(r.pop("t"), k, splits_rate, k.whole_layer_step_s).aggregate_tok_s(
            4, *r.pop("experts"))
        r["error"] = r["plan_tok_s"] / r["tok_s"] - 1
    for q in points:
        if q.get("rss_after_start_bytes"):
            # SGLang's own as the plan gives it on the measured host: less the compile pool where none starts
            # (and the token embeddings' pinned copy where they moved, as the plan's host RAM counts it)
            q["plan_rss_bytes"] = q["host_experts_bytes"] + q["host_checkpoint_bytes"] + q["host_pinned_bytes"] \
                + q["host_prefill_bytes"] + q["host_embed_bytes"] + q["host_int4_bytes"] \
                + kt.sglang_own_bytes(k.sglang_host_bytes, None, q["compile_pool"])[0]
            q["rss_error"] = q["plan_rss_bytes"] / q["rss_after_start_bytes"] - 1
            if q.get("rss_peak_bytes"):
                q["rss_peak_error"] = q["plan_rss_bytes"] / q["rss_peak_bytes"] - 1
    result = {
        "what": "hybrid MoE decode estimate: fitted constants and the error on fitted and held-out runs (issue 18)",
        "script": "benchmarks/gpu/fit_kt.py",
        "constants": {"kt_cpu_read_efficiency": round(eff, 3), "kt_layer_sync_us": round(sync * 1e6, 1),
                      "kt_attention_read_gbs": round(attn / 1e9, 1), "kt_sglang_host_mib": round(sglang_host / 2**20),
                      "kt_whole_layer_step_us": round(k.whole_layer_step_s * 1e6, 1)},
        "attention_read_gbs_measured_by_kv_splits": {str(n): round(v / 1e9, 1) for n, v in splits_rate.items()},
        "fitted_on": sorted({r["point"] for r in rows if r["role"] == "fit"}),
        "held_out": sorted({r["point"] for r in rows if r["role"] == "held-out"}),
        "measurements": rows, "points": points,
        "four_streams": fours, "four_stream_spread": four_stream_spread(fours),
        "host_read_input": read_input_check(k, splits_rate, plans),
    }
    return result


def _dummy_layer_routing() -> tuple[float, float, float] | None:
    """moe-budget.json's median correlation of each layer's recorded routing with layer 0's, on SGLang's one-seed dummy
    weights and on those seeded by name, and the latter's prompt span (None before it exists)."""
    path = RES / "moe-budget.json"
    if not path.exists():
        return None
    d = json.loads(path.read_text())
    seeded = d["seeded"]
    return (d["dummy_layer_routing"]["corr_with_layer0_median"], seeded["layer_routing"]["corr_with_layer0_median"],
            seeded["prompt_span"]["kit_split"])


def markdown(res: dict) -> str:
    c = res["constants"]
    lines = ["# Hybrid MoE decode estimate: fitted and held-out error (issue 18)", "",
             "Written by `benchmarks/gpu/fit_kt.py` from the committed KT runs on the H100 host (Qwen3-Coder-30B-A3B, "
             "random-weight FP8 checkpoint, card emulated at 16/24 GB). Constants (config/engine.toml): CPU read "
             f"efficiency {c['kt_cpu_read_efficiency']}, per-layer sync {c['kt_layer_sync_us']} us, attention read "
             f"{c['kt_attention_read_gbs']} GB/s, SGLang's own host RAM {c['kt_sglang_host_mib']} MiB; whole layers "
             f"only, the GPU side's step {c['kt_whole_layer_step_us']} us, fitted on the one whole-layer run marked "
             "fit (the three above on the split's fitted runs alone). Measured, not fitted: each method's CPU-expert "
             "time per byte against FP8's on the AMX build (" + ", ".join(
                 f"{m} {v}x" for m, v in catalog.engine().kt.method_cpu_time) + "; kt-accuracy.json cpu_expert_time; the kit's int4 decode kernel's from its benches beside AMXINT8's, "
                 "moe-vs-llamacpp-int4/r1/ and isa/), "
             "and a lesser build's against the AMX build's (" + ", ".join(
                 f"{b} {v}x" for b, v in catalog.engine().kt.build_cpu_time) + "): the CPU-expert bytes count at "
             "that pace.", "",
             "Attention with 32 KV splits (config/sglang.toml's GPU-host flags since 2026-11-27; the fitted runs ran "
             "SGLang's default 8): measured without KT on one machine, the same 24 GiB server with 8 and with 32 "
             "splits (moe-vs-llamacpp-gptq/run3/), the extra step after 8K and 30K over the extra KV read: "
             + ", ".join(f"{n} splits {v} GB/s" for n, v in res["attention_read_gbs_measured_by_kv_splits"].items())
             + f" (the fitted constant: {c['kt_attention_read_gbs']}). The runs with 32 use the measured 32-split rate.",
             "", "| run | role | GPU weights | method (build) | GPU experts | threads | KV splits | decode measured at | "
             "measured tok/s | estimate | error |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    by = {q["name"]: q for q in res["points"]}
    for r in res["measurements"]:
        q = by[r["point"]]
        flag = " (slower than the same server after a longer prompt: another prompt, moe-budget.md)" if r["inconsistent"] else ""
        lines.append(f"| {r['point']} | {r['role']} | {r['gpu_weights']} | {q['method']} ({q['build']}) | {q['gpu_experts']} | {q['threads']} "
                     f"| {r['kv_splits']} | {r['context']:,} tokens | {r['tok_s']:.1f} | {r['plan_tok_s']:.1f} | {r['error']:+.1%}{flag} |")
    for role in ("fit", "held-out"):
        errs = [abs(r["error"]) for r in res["measurements"] if r["role"] == role]
        if errs:
            lines.append(f"\n{role}: {len(errs)} measurements, worst |error| {max(errs):.1%}, mean {sum(errs) / len(errs):.1%}")
    lines.append("\nby the GPU side's weights:")
    for role in ("fit", "held-out"):
        for w in dict.fromkeys(r["gpu_weights"] for r in res["measurements"]):
            errs = [abs(r["error"]) for r in res["measurements"] if r["role"] == role and r["gpu_weights"] == w]
            if errs:
                lines.append(f"- {role}, {w}: {len(errs)} measurements, worst |error| {max(errs):.1%}, mean "
                             f"{sum(errs) / len(errs):.1%}")
    if (routing_all := _dummy_layer_routing()) is not None:
        routing, routing_apart, span = routing_all
        lines += ["", "GPU weights: \"checkpoint\" is a random checkpoint on disk (tools/make_random_checkpoint.py: "
                  "each layer's router drawn apart); \"dummy\" is SGLang's --load-format dummy, which seeds every "
                  "parameter alike and so gives every layer the same router: each layer's recorded routing correlates "
                  f"{routing:.2f} with layer 0's (median; moe-budget.md). A token then goes to nearly the same experts "
                  "in all 48 layers instead of averaging over 48 draws, so one request's rate can move with its prompt "
                  "more than with layers that route apart (derived; the checkpoint runs recorded no routing). Each row is one request (or a median of three) and the estimate is the mean over "
                  "prompts, so the dummy rows' error carries that spread. \"dummy by name\" is the same load with the "
                  "kt_compat adapter's VRAMKIT_DUMMY_SEED_BY_NAME=1 (each parameter drawn by its name: each layer's "
                  f"routing correlates {routing_apart:.2f} with layer 0's and the prompt span is {span:.2f}x; "
                  f"moe-budget.md): {_seeded_misses(res)}; there a row's error is the estimate's own, not the "
                  "prompt's."]
    lines += ["", "| run | role | weights GiB log / plan | KV tokens log / plan | host RSS after start / plan "
              "| larger of RSS after start and RSS once the probe ended / plan |", "| --- | --- | --- | --- | --- | --- |"]
    for q in res["points"]:
        if "weights_gib" in q:
            rss = (f"{q['rss_after_start_bytes'] / GiB:.1f} / {q['plan_rss_bytes'] / GiB:.1f} GiB ({q['rss_error']:+.1%})"
                   if q.get("rss_after_start_bytes") else
                   f"{q['rss_unscored_bytes'] / GiB:.1f} GiB, one sample (the server died in its probe: not compared)"
                   if q.get("rss_unscored_bytes") else "-")
            peak = (f"{q['rss_peak_bytes'] / GiB:.1f} / {q['plan_rss_bytes'] / GiB:.1f} GiB ({q['rss_peak_error']:+.1%})"
                    if q.get("rss_peak_bytes") else "-")
            lines.append(f"| {q['name']} | {q['role']} | {q['weights_gib']:.2f} / {q['plan_weights_gib']:.2f} "
                         f"({q['plan_weights_gib'] / q['weights_gib'] - 1:+.1%}) | {q['kv_tokens']:,} / "
                         f"{q['plan_kv_tokens']:,} ({q['plan_kv_tokens'] / q['kv_tokens'] - 1:+.1%}) | {rss} | {peak} |")
    lines += ["", "## Four requests decoding together (derived, every run held out)", "",
              "The plan's aggregate estimate (kt_hybrid DecodeEstimate.aggregate_tok_s): the batch-1 estimate's expert "
              "terms times the distinct experts 4 tokens name in a layer (3.64x one token's 8 of 128, routing drawn "
              "uniformly), each stream's own KV read, the per-step terms once; nothing fitted to these runs. Against "
              "each committed run's 4-stream probe (4 requests after 512-token prompts, tok/s summed):", "",
              "| run | method | placement | measured tok/s | estimate | measured / estimate |", "| --- | --- | --- | --- | --- | --- |"]
    for r in res["four_streams"]:
        lines.append(f"| {r['point']} | {r['method']} | {'whole layers' if r['gpu_layers'] else 'split'} | "
                     f"{r['tok_s']:.1f} | {r['plan_tok_s']:.1f} | {r['tok_s'] / r['plan_tok_s']:.2f}x |")
    lines += ["", "By method and placement (the spread the plan prints, kt_hybrid.AGGREGATE_SPREAD): " + "; ".join(
        f"{k} {lo:.3f}-{hi:.3f}x" for k, (lo, hi) in res["four_stream_spread"].items()) + "."]
    hr = res["host_read_input"]
    if hr["points"]:
        lines += ["", "## The host-read input on machines that swept more than once", "",
                  "Since 2026-11-28 the driver sweeps each machine three ways before its servers: one round, 3 rounds, "
                  "and 3 rounds with the threads bound one to a core (`membw-session-r3.json`), and since that day's "
                  "twenty-sixth session once more, 5 rounds, after them (`membw-session-end.json`). On these virtual "
                  "machines the sweeps disagree by up to a third at one thread count; an idle one's one-round readings "
                  "fell in two modes that far apart (`membw-noise/h200.json`). The estimate reads each thread count's "
                  "best reading of the session, as `vramkit host --bandwidth` reads a host (each count's best of 5 "
                  "rounds); the fitted constants' runs took one sweep on the H100 host and are not touched. That rule "
                  "was chosen after seeing the errors of the runs marked \"chosen on\" (one-round sweep against "
                  "best reading) and checked on the runs swept later, marked \"checked on\". Each held-out decode's "
                  "error with the one-round sweep and with the session's best reading (the main table's):", "",
                  "| run | rule | sweeps | threads | host read GB/s: one round / session's best | errors: one round | "
                  "errors: session's best |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in hr["points"]:
            lines.append(f"| {r['point']} | {r['rule']} | `{r['sweeps']}/` | {r['threads']} | "
                         f"{r['read_gbs_one_round']:.1f} / {r['read_gbs_session_best']:.1f} | "
                         + " ".join(f"{e:+.1%}" for e in r["errors_one_round"]) + " | "
                         + " ".join(f"{e:+.1%}" for e in r["errors_session_best"]) + " |")
        lines.append("")
        for rule, sums in hr["by_rule"].items():
            one, best = sums["one_round"], sums["session_best"]
            if one["n"]:
                lines.append(f"- the runs the rule was {rule}: {one['n']} decodes, mean |error| {one['mean_abs']:.1%} "
                             f"with the one-round sweep, {best['mean_abs']:.1%} with the session's best reading; "
                             f"outside 20 %: {one['over_20pct']} and {best['over_20pct']}.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
