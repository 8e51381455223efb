"""The moe preset's mem_fraction 0.93 (issue 18, 2026-11-28): what the plan gives on every 16 GB card it knows, the runs
that chose it (benchmarks/results/gpu/moe-vs-llamacpp-mf/, moe-vs-llamacpp-preset/) read as their README says, and
the report reading a point's whole layers from the adapter's own log line when the preset placed them."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from vramkit import catalog
from vramkit.core.plan import kt_hybrid as kt
from vramkit.core.plan.planner import Knobs, Target, plan

ROOT = Path(__file__).resolve().parents[2]
RES = ROOT / "benchmarks" / "results" / "gpu"
MF = RES / "moe-vs-llamacpp-mf"
# the comparison the lpreset run made, the main table until 2026-11-28's seventeenth session (moe-gpu-prefill/run3 since)
PRESET_CMP = RES / "moe-vs-llamacpp-preset" / "comparison-16g.json"
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))


def _probe(path: Path) -> dict:
    d = json.loads(path.read_text())
    dec = {x["streams"]: x for x in d["decode"]}
    return {"d1": dec[1]["per_stream_tok_s"], "agg4": dec[4]["aggregate_tok_s"],
            "after": {x["prompt_tokens"]: x["decode_tok_s"] for x in d["ttft"]},
            "ttft": {x["prompt_tokens"]: x["ttft_s"] for x in d["ttft"]}}


def _sixteen_gb_cards() -> list[str]:
    return [name for name, g in catalog.gpus().items() if 15 * 2**30 < g.memory_total_bytes < 17.5 * 2**30]


# a desktop with AMX and 8 cores beside the card (the CPU side does not move the GPU figures tested here)
DESKTOP = kt.HostCpu(isa="amx", isa_source="test", read_bytes_s=((1, 20e9), (8, 60e9)), read_source="test",
                     physical_cores=8, kt_kernel="0.5.1")


def _moe_plan(gpu: str, **knobs):
    preset = catalog.presets()["moe"].knobs
    return plan(catalog.model(catalog.presets()["moe"].model),
                Target(gpu=catalog.gpu(gpu), host=DESKTOP, host_ram_available_bytes=120 * 2**30),
                Knobs(**(preset | knobs)), catalog.engine(), with_alternatives=False)


def test_the_preset_takes_093_and_keeps_the_margin_on_every_16_gb_card():
    assert catalog.presets()["moe"].knobs["mem_fraction"] == 0.93
    cards = _sixteen_gb_cards()
    assert len(cards) >= 8
    margin = catalog.engine().runtime_margin
    for gpu in cards:
        at93, at90 = _moe_plan(gpu), _moe_plan(gpu, mem_fraction=0.90)
        assert at93.fits and at93.headroom_bytes >= margin, gpu
        # the larger fraction buys GPU experts and never loses any
        assert at93.hybrid.num_gpu_experts >= at90.hybrid.num_gpu_experts, gpu


def test_095_misses_the_margin_on_the_default_card_even_with_2048_token_chunks():
    """Why 0.95 is not the default though it measured faster after 8K (the README's words)."""
    p = _moe_plan("rtx-5060-ti-16gb", mem_fraction=0.95, chunked_prefill=2048)
    assert not p.fits and p.headroom_bytes < catalog.engine().runtime_margin
    assert any("256 MiB margin" in r for r in p.reasons)
    text = " ".join((MF / "README.md").read_text().split())
    assert f"{p.headroom_bytes >> 20} MiB on the RTX 5060 Ti 16GB" in text


@pytest.mark.parametrize("point, layers", [("k16-marlin-layers-mf93", 37), ("k16-marlin-layers-mf95-c2048", 38),
                                           ("k16-marlin-layers-t12", 35)])
def test_run1_rows_are_its_probes_and_logs(point, layers):
    text = (MF / "README.md").read_text()
    p = _probe(MF / "run1" / f"{point}.probe.json")
    row = next(ln for ln in text.splitlines() if ln.startswith(f"| `{point}`"))
    assert f"| {layers} |" in row and f"{p['d1']:.2f}" in row and f"{p['agg4']:.1f}" in row
    assert " / ".join(f"{p['ttft'][n]:.2f}" for n in (512, 8192, 30000)) in row
    assert " / ".join(f"{p['after'][n]:.1f}" for n in (512, 8192, 30000)) in row
    evidence = (MF / "run1" / f"{point}.evidence.txt").read_text()
    assert f"({layers} layers, no CPU round trip)" in evidence
    point_json = json.loads((MF / "run1" / f"{point}.json").read_text())
    assert point_json["up_rc"] == 0 and f"{point_json['peak_vram_bytes'] / 1e9:.2f} GB" in row


def test_run1_ratios_read_as_the_main_table_does():
    text = " ".join((MF / "README.md").read_text().split())
    fit, best = (_probe(MF / "run1" / f"{n}.probe.json") for n in ("llama-16-fit", "llama-16-best"))
    top = lambda f: max(f(fit), f(best))       # noqa: E731
    low = lambda f: min(f(fit), f(best))       # noqa: E731
    said = []
    for point in ("k16-marlin-layers-mf93", "k16-marlin-layers-mf95-c2048"):
        k = _probe(MF / "run1" / f"{point}.probe.json")
        said.append((k["d1"] / top(lambda x: x["d1"]), k["after"][8192] / top(lambda x: x["after"][8192]),
                     k["ttft"][30000] / low(lambda x: x["ttft"][30000]), k["agg4"] / top(lambda x: x["agg4"])))
    a, b = said
    assert (f"at 0.93 {a[0]:.2f}x decode at depth 0, {a[1]:.2f}x after 8K, TTFT at 30K {a[2]:.2f}x, {a[3]:.2f}x at 4 "
            f"streams; at 0.95 with 2048-token chunks {b[0]:.2f}x, {b[1]:.2f}x, {b[2]:.2f}x and {b[3]:.2f}x") in text


def test_the_preset_run_was_the_main_table_and_ran_the_preset_as_it_comes():
    c = json.loads(PRESET_CMP.read_text())
    kit = c["engines"]["vramkit"]
    assert kit["settings"]["point"] == "k16-preset" and kit["settings"]["gpu_layers"] == 37
    up = kit["settings"]["vramkit_up"]
    assert "--mem-fraction" not in up and "--kt-gpu-layers" not in up and "--kt-method" not in up
    evidence = (RES / "moe-vs-llamacpp-preset" / "k16-preset.evidence.txt").read_text()
    assert "mem_fraction_static=0.93" in evidence and "(37 layers, no CPU round trip)" in evidence
    r = c["ratios"]
    text = " ".join((MF / "README.md").read_text().split())
    assert (f"| decode, depth 0 | {kit['decode_tok_s']:.1f} |" in text
            and f"{r['decode_vs_llamacpp']:.2f}x |" in text and f"{r['aggregate_4_vs_llamacpp']:.2f}x |" in text)
    # derived budget: both engines at 11 CPU layers; the README's split of the per-token time
    ms = c["budget_ms_per_token"]
    kit_ms, llama_ms = ms["vramkit"]["measured_ms_per_token_depth0"], ms["llamacpp"]["measured_ms_per_token_depth0"]
    assert f"11 CPU layers at ~{(kit_ms - 4.9) / 11:.2f} ms" in text
    assert f"plus 11 CPU layers at ~{(llama_ms - 3.9) / 11:.2f} ms" in text


def test_whole_layers_are_read_from_the_adapter_s_line_when_no_flag_asked_for_them():
    from moe_session import ran_whole_layers, whole_gpu_layers_logged
    evidence = (RES / "moe-vs-llamacpp-preset" / "k16-preset.evidence.txt").read_text()
    assert whole_gpu_layers_logged(evidence) == 37
    assert ran_whole_layers([], ["--preset", "moe"], evidence)
    assert not ran_whole_layers([], ["--preset", "moe"], "KTEPWrapperMethod ... kt_num_gpu_experts=43")
    split = (RES / "moe-vs-llamacpp-gptq" / "k16-gptq.evidence.txt").read_text()
    assert whole_gpu_layers_logged(split) is None


def test_fit_kt_plans_the_preset_point_on_marlin_from_its_log():
    """The preset point names no --moe-kernel: its server's log line says marlin, so the held-out plan is marlin's
    (on moe_wna16 its host RAM would be planned 57 % over, with the compile pool)."""
    import fit_kt
    p = next(x for x in fit_kt.POINTS if x.name == "layers-int8-amx-16g-gptq-marlin-preset")
    run = json.loads((RES / p.point).read_text())
    knobs = fit_kt.run_knobs(run, p)
    assert knobs["moe_kernel"] == "marlin" and knobs["kt_gpu_layers"] == "auto" and knobs["mem_fraction"] == 0.93
    est = json.loads((RES / "kt-estimate.json").read_text())
    row = next(q for q in est["points"] if q["name"] == p.name)
    assert abs(row["plan_weights_gib"] / row["weights_gib"] - 1) < 0.01


def test_the_four_stream_bound_is_the_measured_runs_arithmetic():
    """The README's derivation, from the committed comparison: distinct experts of 4 tokens under independent
    routing, the CPU share of a batch-1 token (measured token time less the profiled GPU share), the bound it sets."""
    c = json.loads(PRESET_CMP.read_text())
    kit, ll = c["engines"]["vramkit"], c["engines"]["llamacpp"]
    text = " ".join((MF / "README.md").read_text().split())
    factor = 128 * (1 - (120 / 128) ** 4) / 8
    cpu_kit = 1000 / kit["decode_tok_s"] - 4.9
    cpu_ll = 1000 / ll["by_mode"]["--n-cpu-moe 11"]["decode_tok_s"] - 3.9
    assert f"{128 * (1 - (120 / 128) ** 4):.1f} distinct experts, {factor:.2f}x" in text
    assert f"{1000 / kit['decode_tok_s']:.2f} - 4.9 = {cpu_kit:.2f} ms" in text
    assert f"~{cpu_kit * factor:.1f} ms a step" in text
    assert f"~{4000 / (cpu_kit * factor):.0f} tok/s aggregate" in text
    assert f"{cpu_ll:.2f} ms, so ~{cpu_ll * factor:.1f} ms and at most ~{4000 / (cpu_ll * factor):.0f} tok/s" in text
    assert kit["aggregate_4_streams_tok_s"] < 4000 / (cpu_kit * factor)            # the bound holds on the run
    assert ll["by_mode"]["--n-cpu-moe 11"]["aggregate_4_streams_tok_s"] < 4000 / (cpu_ll * factor)
    goal = 2 * ll["aggregate_4_streams_tok_s"]
    assert f"{goal:.1f} tok/s, a {4000 / goal:.1f} ms step" in text
    assert f"at most {4000 / goal / factor:.2f} ms at batch 1" in text


def test_the_gpu_prefill_derivation_is_the_committed_figures():
    """The README's derived first token with the CPU layers' prompt on the GPU: the 24 GiB run's TTFT (every layer on
    the GPU) plus the copies of 11 layers' GPTQ-Int4 experts per 4096-token chunk at the measured pinned copy rate."""
    from vramkit.generated import _pinned_copy_gbs
    c16 = json.loads(PRESET_CMP.read_text())
    c24 = json.loads((RES / "moe-vs-llamacpp-24g.json").read_text())
    import fit_kt

    from vramkit.core.memory.weight_load import replay_load
    from vramkit.core.model.arch import weight_layout
    model = fit_kt.model_for(next(x for x in fit_kt.POINTS if x.name == "layers-int8-amx-16g-gptq-marlin-g3"))
    priced, _ = kt.moe_kernel(model, "marlin", 95, True)      # 95 a layer as whole layers: 35 on the GPU
    load = replay_load(weight_layout(priced, 1, 262144, 132, "triton_kernels",
                                     gpu_experts=kt.gpu_expert_counts(model, 95, True)))
    layer_gib = load.live_by_role["experts"] / 35 / 2**30   # one layer's GPTQ-Int4 experts as marlin holds them
    chunks = -(-30000 // 4096)
    copied = 11 * chunks * layer_gib * 2**30 / 1e9
    rate = _pinned_copy_gbs()
    text = " ".join((MF / "README.md").read_text().split())
    assert f"11 layers x {chunks} chunks x {layer_gib:.2f} GiB = {copied:.1f} GB" in text
    assert f"measured {rate:.1f} GB/s" in text and f"that is {copied / rate:.2f} s" in text
    t24 = c24["engines"]["vramkit"]["ttft_30k_s"]
    assert f"TTFT ~{t24 + copied / rate:.1f} s and ~{t24 + copied / 25:.1f} s against llama.cpp's " \
        f"{c16['engines']['llamacpp']['ttft_30k_s']:.1f} s" in text
    assert f"The kit's TTFT for 30K is {c16['engines']['vramkit']['ttft_30k_s']:.1f} s" in text
