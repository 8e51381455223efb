"""The README's derived bound on the 4-stream aggregate at 16 GiB with 8-bit experts (issue 18's >= 2x goal): the
bytes 4 tokens' experts read per CPU layer over the pairing machine's measured host read, from the committed files."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from vramkit import catalog
from vramkit.core.plan import kt_hybrid as kt

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
from moe_session import whole_gpu_layers_logged  # noqa: E402

RUN = ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-q8/h200-med"
Q8_0_BYTES_PER_WEIGHT = 34 / 32          # ggml's Q8_0 block: 32 int8 weights and an fp16 scale


def test_the_readme_s_four_stream_bound_is_the_committed_sweep_over_the_experts_bytes():
    model = catalog.model("qwen3-coder-30b-a3b-instruct-fp8")
    moe = model.moe
    assert moe is not None
    factor = kt.distinct_expert_factor(moe.num_experts, moe.top_k, 4)
    sweeps = json.loads((RUN / "membw-session-r3.json").read_text())
    best = lambda t: max(r["bytes_per_s"] for k in ("rounds", "pinned") for r in sweeps[k] if r["threads"] == t)  # noqa: E731
    pairing = json.loads((ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-q8-16g.json").read_text())["engines"]
    evidence = (RUN / "k16-int8-preset.evidence.txt").read_text()
    gpu_layers = whole_gpu_layers_logged(evidence)
    assert gpu_layers is not None
    kit_layers, llama_layers = len(moe.moe_layers) - gpu_layers, 28       # --n-cpu-moe 28, the pairing's best
    kit_expert = kt.cpu_expert_bytes(model, "AMXINT8")
    llama_expert = 3 * model.hidden_size * moe.expert_intermediate * Q8_0_BYTES_PER_WEIGHT
    kit = 4 / (kit_layers * moe.top_k * factor * kit_expert / best(12))
    llama = 4 / (llama_layers * moe.top_k * factor * llama_expert / best(14))
    goal = 2 * pairing["llamacpp"]["aggregate_4_streams_tok_s"]
    most = math.floor(4 / goal * best(12) / (moe.top_k * factor * kit_expert))
    assert kit < goal and llama < goal          # the goal is above what host memory can feed either engine
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"{best(12) / 1e9:.1f} GB/s at 12 threads, {best(14) / 1e9:.1f} at 14) that alone bounds the preset's "
            f"aggregate ({kit_layers} CPU layers of AMXINT8 experts, {kit_expert / 1e6:.2f} MB each) to {kit:.1f} tok/s "
            f"and llama.cpp's ({llama_layers} CPU layers of Q8_0, {llama_expert / 1e6:.2f} MB each) to {llama:.1f}") in readme
    assert (f"they measured {pairing['vramkit']['aggregate_4_streams_tok_s']:.1f} and "
            f"{pairing['llamacpp']['aggregate_4_streams_tok_s']:.1f}. Twice llama-server's "
            f"{pairing['llamacpp']['aggregate_4_streams_tok_s']:.1f} is {goal:.1f} tok/s") in readme
    assert f"at most {most} CPU layers of 8-bit experts and no GPU time, {kit_layers - most} more GPU layers" in readme
    assert f"(~{(kit_layers - most) * 128 * 3 * model.hidden_size * moe.expert_intermediate / 2**30:.1f} GiB)" in readme
