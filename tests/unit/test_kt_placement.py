"""The hybrid mode's expert placement (core/plan/kt_placement.py, `vramkit kt-placement`, `--kt-placement`): each
layer's most-routed experts in the GPU's physical slots, from SGLang's expert-distribution dump, rendered as SGLang's
--init-expert-location (its real parser's resolution of that flag: tests/integration/test_sglang_parser.py), and
refused before start where neither the pinned SGLang nor the kit's adapter routes through it
(kt_placement.ADAPTER_DISPATCHED)."""
from __future__ import annotations

import json
from typing import NamedTuple

import pytest

from vramkit import catalog
from vramkit.cli import main
from vramkit.core.plan import kt_placement as kp
from vramkit.errors import Exit, VramkitError

MOE = "qwen3-coder-30b-a3b-instruct-fp8"


def _load(name: str, rel: str):
    from repo_modules import load_module
    return load_module(rel, name)


def _moe_plan():
    """The moe preset with AMXINT8 on the H100 host's free memory at 16 GiB, split (a placement's plan: 43 GPU
    experts a layer)."""
    from vramkit.core.plan.planner import Knobs, Target, plan
    from vramkit.launch import hybrid
    model = catalog.model(MOE)
    return model, plan(model, Target(gpu=catalog.gpu("h100-80gb"), gpu_free_bytes=int(15.31 * 2**30),
                                     host=hybrid.REFERENCE_HOST, host_ram_available_bytes=128 * 2**30),
                       Knobs(**(catalog.presets()["moe"].knobs | {"kt_method": "AMXINT8", "kt_gpu_layers": "off"})),
                       catalog.engine(),
                       with_alternatives=False)


def test_hot_first_orders_each_layer_by_count_and_raises_the_gpu_share():
    counts = [[1, 5, 5, 0], [0, 0, 2, 9]]
    m = kp.hot_first(counts)
    assert m == [[1, 2, 0, 3], [3, 2, 0, 1]]          # most first, a tie to the lower id
    assert kp.gpu_share(counts, kp.trivial(2, 4), 2) == pytest.approx(6 / 22)
    assert kp.gpu_share(counts, m, 2) == pytest.approx(21 / 22)
    assert kp.gpu_share(counts, m, 4) == pytest.approx(1.0)


@pytest.mark.parametrize("counts, why", [
    ([[1, 2]], "1 x [2]"),                       # one layer short
    ([[1, 2], [3]], "not 2 layers x 2 experts"),
    ([[1, -2], [3, 4]], ">= 0"),
    ([[0, 0], [0, 0]], "not all 0"),
    ([[1, float("nan")], [3, 4]], "finite"),
    ([[1, "x"], [3, 4]], "not a number"),
])
def test_counts_of_another_shape_or_kind_are_refused(counts, why):
    with pytest.raises(VramkitError) as e:
        kp.check_counts(counts, 2, 2, "dump.pt")
    assert e.value.code == Exit.BAD_FILE and why in e.value.line()


@pytest.mark.parametrize("text", [
    "{not json", '{"physical_to_logical_map": [[0, 1]], "made_by": "x"}', '{"physical_to_logical_map": [[0, 0], [1, 0]]}',
    '{"physical_to_logical_map": [[0, 1]]}', '{"physical_to_logical_map": [[0, true], [1, 0]]}',
])
def test_a_placement_file_sglang_would_misread_is_refused(text):
    with pytest.raises(VramkitError) as e:
        kp.read_sglang_json(text, 2, 2, "p.json")
    assert e.value.code == Exit.BAD_FILE


def test_the_written_file_is_what_sglang_reads_back():
    m = [[1, 0], [0, 1]]
    assert kp.read_sglang_json(kp.sglang_json(m), 2, 2, "p.json") == m
    assert list(json.loads(kp.sglang_json(m))) == ["physical_to_logical_map"]   # SGLang passes every key on


def _dump(tmp_path, layers, experts, steps=3):
    """What SGLang's recorder writes: torch.save of a dict, logical_count [steps, layers, experts]."""
    import torch
    g = torch.Generator().manual_seed(1)
    counts = torch.randint(0, 50, (steps, layers, experts), generator=g)
    counts[:, :, 7] += 1000                     # expert 7 of every layer is the hottest
    path = tmp_path / "expert_distribution_recorder_1.pt"
    torch.save({"rank": 0, "logical_count": counts, "average_utilization_rate_over_window": None}, path)
    return path, counts.sum(dim=0).tolist()


def test_kt_placement_writes_the_hot_first_map_from_a_real_dump(tmp_path, capsys):
    model = catalog.model(MOE)
    layers, experts = model.num_layers, model.moe.num_experts
    dump, counts = _dump(tmp_path, layers, experts)
    out = tmp_path / "placement.json"
    assert main(["kt-placement", str(dump), "--model", MOE, "--gpu-experts", "43", "--out", str(out)]) == 0
    m = kp.read_sglang_json(out.read_text(), layers, experts, str(out))
    assert all(row[0] == 7 for row in m) and m == kp.hot_first(counts)
    said = capsys.readouterr().out
    share = kp.gpu_share(counts, m, 43)
    assert f"takes {share:.1%} of the recorded routing" in said and "uniform routing: 33.6%" in said
    assert kp.SPEED in said and f"--kt-placement {out} and without it" in said     # what a placement gave, measured


@pytest.mark.parametrize("steps, unwritten, warned", [(1000, 0, True), (1000, 1, False), (1200, 0, False)])
def test_a_full_default_recorder_ring_is_said(tmp_path, capsys, steps, unwritten, warned):
    """SGLang's recorder keeps its last 1000 forward passes unless --expert-distribution-recorder-buffer-size says
    otherwise (rows not written yet are zeros): a dump with all 1000 written may have lost the workload's start."""
    import torch
    model = catalog.model(MOE)
    dump, _ = _dump(tmp_path, model.num_layers, model.moe.num_experts, steps=steps)
    if unwritten:
        d = torch.load(dump, weights_only=True)
        d["logical_count"][-unwritten:] = 0
        torch.save(d, dump)
    assert main(["kt-placement", str(dump), "--model", MOE, "--out", str(tmp_path / "p.json")]) == 0
    said = capsys.readouterr().out
    assert ("full ring of 1000 forward passes" in said) is warned
    assert ("--expert-distribution-recorder-buffer-size -1" in said) is warned


def test_kt_placement_keeps_an_existing_file_and_writes_nothing_from_a_bad_dump(tmp_path, capsys):
    model = catalog.model(MOE)
    dump, _ = _dump(tmp_path, model.num_layers, model.moe.num_experts)
    out = tmp_path / "placement.json"
    out.write_text("mine")
    assert main(["kt-placement", str(dump), "--model", MOE, "--out", str(out)]) == Exit.BAD_INPUT
    assert out.read_text() == "mine"
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a torch file")
    fresh = tmp_path / "fresh.json"
    assert main(["kt-placement", str(bad), "--model", MOE, "--out", str(fresh)]) == Exit.BAD_FILE
    wrong, _ = _dump(tmp_path, 4, 8)
    assert main(["kt-placement", str(wrong), "--model", MOE, "--out", str(fresh)]) == Exit.BAD_FILE
    assert not list(tmp_path.glob("fresh.json*"))
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 3


def test_a_placement_renders_sglang_s_flag_and_is_checked_before_start(tmp_path, monkeypatch):
    from vramkit.launch import hybrid
    model, p = _moe_plan()
    good = tmp_path / "placement.json"
    n = p.hybrid.num_gpu_experts
    good.write_text(kp.sglang_json([list(range(n, 128)) + list(range(n)) for _ in range(model.num_layers)]))
    hy = hybrid.for_plan(p, "/w", placement=str(good), layers=model.num_layers, architecture=model.architecture)
    args = hy.args("m")
    assert args[args.index("--init-expert-location") + 1] == str(good.resolve())
    # the pinned SGLang's Qwen3-MoE one-GPU forward does not map the router's ids; the kit's adapter does
    name, ok, detail = hy.placement_check()
    assert ok and f"{model.num_layers} of {model.num_layers} layers keep other experts" in detail
    assert "adapter maps the router's ids" in detail and kp.SPEED in detail
    monkeypatch.setenv(hybrid.PLACEMENT_DISPATCH_ENV, "0")                    # the adapter's dispatch turned off
    name, ok, detail = hy.placement_check()
    assert not ok and "is a valid map" in detail and "only on its DeepEP / two-batch-overlap paths" in detail
    assert "turned off (VRAMKIT_KT_PLACEMENT_DISPATCH=0)" in detail
    monkeypatch.delenv(hybrid.PLACEMENT_DISPATCH_ENV)
    parts = hy.compose_parts("services/sglang-kt")
    assert "--init-expert-location" in parts["args"] and any(str(good.resolve()) in v for v in parts["extra_volumes"])
    good.write_text(kp.sglang_json(kp.trivial(3, 128)))
    assert hybrid.for_plan(p, "/w", placement=str(good), layers=model.num_layers).placement_check()[1] is False
    assert hybrid.for_plan(p, "/w", placement=str(tmp_path / "none.json")).placement_check()[1] is False
    assert "--init-expert-location" not in hybrid.for_plan(p, "/w").args("m")


def test_the_committed_gpu_host_figures_are_the_command_s_on_its_counts(tmp_path, capsys):
    """benchmarks/results/gpu/moe-budget/hot-rec/: SGLang's recorder on the GPU host (one request, the GPTQ split, 88
    GPU experts per layer), its counts summed over steps; kt-placement.txt is what the command printed there."""
    d = catalog.CONFIG_DIR.parent / "benchmarks" / "results" / "gpu" / "moe-budget" / "hot-rec"
    said_there = (d / "kt-placement.txt").read_text().splitlines()[1]
    out = tmp_path / "p.json"
    assert main(["kt-placement", str(d / "expert-counts.json"), "--model", MOE, "--gpu-experts", "88",
                 "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == said_there
    assert "78.9%" in said_there and "default: 70.6%" in said_there


def test_the_speed_the_plan_quotes_is_the_committed_run_s():
    """kp.SPEED's two figures are moe-budget.json's paired medians (benchmarks/gpu/moe_budget.py over moe-budget/hot/,
    the placement against the trivial map request by request); the in-sample gain must be the larger, or the note
    would steer users the wrong way."""
    d = json.loads((catalog.CONFIG_DIR.parent / "benchmarks" / "results" / "gpu" / "moe-budget.json").read_text())
    ps = d["placement_speed"]
    ins, oos = ps["recorded_prompts"]["single_median"], ps["other_prompts"]["single_median"]
    assert f"{ins:.2f}x the trivial map on the prompts it was recorded on" in kp.SPEED
    assert f"{oos:.2f}x on other prompts" in kp.SPEED
    assert ins > 1 > oos and ps["gpu_share_recorded"]["placed"] > ps["gpu_share_recorded"]["trivial"]


def test_the_readme_quotes_the_committed_placement_and_whole_layer_runs():
    """README's hand-written paragraphs on the placement's speed and on whole layers at 10 KT threads carry
    moe-budget.json's figures (a rerun that changes them fails here until the prose follows)."""
    root = catalog.CONFIG_DIR.parent
    d = json.loads((root / "benchmarks" / "results" / "gpu" / "moe-budget.json").read_text())
    readme = " ".join((root / "README.md").read_text().split())
    ps, w = d["placement_speed"], d["whole_layers_t10"]
    m = ps["medians"]
    for said in (f"{100 * ps['gpu_share_recorded']['placed']:.1f} % of that routing",
                 f"(trivial map: {100 * ps['gpu_share_recorded']['trivial']:.1f} %)",
                 f"decoded **{ps['recorded_prompts']['single_median']:.2f}x** the trivial map",
                 f"medians {m['k16-wna16-hot-rec']['decode_tok_s']:.1f} against "
                 f"{m['k16-wna16-triv-rec']['decode_tok_s']:.1f} tok/s) and "
                 f"{ps['recorded_prompts']['four_median']:.2f}x at 4 streams",
                 f"decoded **{ps['other_prompts']['single_median']:.2f}x** "
                 f"({round(ps['other_prompts']['single_faster'] * ps['other_prompts']['single_pairs'])} of "
                 f"{ps['other_prompts']['single_pairs']} requests faster; {m['k16-wna16-hot']['decode_tok_s']:.1f} "
                 f"against {m['k16-wna16-triv']['decode_tok_s']:.1f} tok/s) and "
                 f"{ps['other_prompts']['four_median']:.2f}x at 4 streams",
                 f"each CPU layer took {w['wait_per_cpu_layer_ms']['t10']:.2f} ms and the step "
                 f"{w['step_ms']['t10']:.1f} ms instead of {w['step_ms']['t14']:.1f}",
                 f"decoded {min(w['single_stream_tok_s']['whole_layers']):.1f}-"
                 f"{max(w['single_stream_tok_s']['whole_layers']):.1f} tok/s on three prompts where the per-layer "
                 f"split decoded {min(w['single_stream_tok_s']['per_layer_split']):.1f}-"
                 f"{max(w['single_stream_tok_s']['per_layer_split']):.1f}",
                 f"({w['paired_with_split_t10']['single_median']:.2f}x paired), with 4 streams at "
                 f"{w['paired_with_split_t10']['four_median']:.2f}x and TTFT after 8K "
                 f"{w['ttft_s']['8192']['whole_layers']:.2f} s against {w['ttft_s']['8192']['per_layer_split']:.2f}"):
        assert said in readme, said
    s12, s10 = d["seeded"]["whole_layers"]["12"], d["seeded"]["whole_layers"]["10"]
    for said in (f"whole layers decoded {s12['paired_with_split']['single_median']:.2f}x the split at 12 KT threads "
                 f"({s12['figures']['decode_tok_s']:.1f} against {s12['split_figures']['decode_tok_s']:.1f} tok/s; "
                 f"4 streams {s12['paired_with_split']['four_median']:.2f}x; TTFT for 30K "
                 f"{s12['figures']['ttft_30k_s']:.1f} s against {s12['split_figures']['ttft_30k_s']:.1f}) and "
                 f"{s10['paired_with_split']['single_median']:.2f}x at 10, with {s12['host_rss_peak_gb']:.0f} GB of "
                 f"host RAM at peak against {s12['split_host_rss_peak_gb']:.0f}",):
        assert said in readme, said


def test_the_whole_layer_speed_the_plan_quotes_is_the_committed_run_s():
    """kt_hybrid.WHOLE_LAYER_SPEED (the plan's whole-layer alternative) carries moe-budget.json's paired medians."""
    from vramkit.core.plan import kt_hybrid as kt
    d = json.loads((catalog.CONFIG_DIR.parent / "benchmarks" / "results" / "gpu" / "moe-budget.json").read_text())
    w = d["seeded"]["whole_layers"]["12"]
    assert (f"{w['paired_with_split']['single_median']:.2f}x the split single-stream, "
            f"{w['paired_with_split']['four_median']:.2f}x at 4 streams, {w['host_rss_peak_gb']:.0f} GB of host RAM "
            f"against {w['split_host_rss_peak_gb']:.0f}") in kt.WHOLE_LAYER_SPEED


def test_the_split_speed_the_plan_quotes_is_the_committed_run_s_and_the_preset_takes_the_faster_placement():
    """kt_hybrid.SPLIT_SPEED (the plan's split alternative under the moe preset's whole layers) carries moe-budget/
    best16's pair on the preset's own checkpoint, and the preset places whole layers because that run decoded them
    faster with less host RAM."""
    from vramkit.core.plan import kt_hybrid as kt
    d = json.loads((catalog.CONFIG_DIR.parent / "benchmarks" / "results" / "gpu" / "moe-budget.json").read_text())
    fp = d["seeded"]["best16"]["fp8"]
    sp, w, s = fp["paired_split_with_whole"], fp["whole_figures"], fp["split_figures"]
    assert (f"{sp['single_median']:.2f}x single-stream, {sp['four_median']:.2f}x at 4 streams, a first token "
            f"{s['ttft_8k_s'] / w['ttft_8k_s']:.2f}x the time after 8K and {s['ttft_30k_s'] / w['ttft_30k_s']:.2f}x "
            f"after 30K, {fp['split_host_rss_peak_gb']:.1f} GB of host RAM against {fp['whole_host_rss_peak_gb']:.1f}"
            ) in kt.SPLIT_SPEED
    assert catalog.preset("moe").knobs["kt_gpu_layers"] == "auto"
    assert fp["paired_whole_with_split"]["single_median"] > 1
    assert fp["whole_host_rss_peak_gb"] < fp["split_host_rss_peak_gb"]


def test_the_moe_preset_takes_the_memory_fraction_its_runs_measured_faster_and_within_the_card():
    """config/presets.toml's moe mem_fraction: 0.90 ran against 0.85 on one machine (moe-budget/seed-mf90: faster request
    by request), then 0.93 against 0.90 on another (moe-vs-llamacpp-mf/run1: whole layers on marlin, 37 GPU layers
    against 35); each peaked through a 30K prompt under the emulated 16 GiB (17.18 GB)."""
    res = catalog.CONFIG_DIR.parent / "benchmarks" / "results" / "gpu"
    mf = json.loads((res / "moe-budget.json").read_text())["seeded"]["mem_fraction_090"]
    assert mf["paired_with_085"]["single_median"] > 1 and mf["paired_with_085"]["four_median"] > 1
    assert mf["peak_vram_gb"]["0.90"] < 16 * 2**30 / 1e9
    assert catalog.preset("moe").knobs["mem_fraction"] == 0.93
    run = res / "moe-vs-llamacpp-mf" / "run1"
    probe = {n: json.loads((run / f"k16-marlin-layers-{n}.probe.json").read_text()) for n in ("mf93", "t12")}
    d1 = {n: next(x for x in p["decode"] if x["streams"] == 1)["per_stream_tok_s"] for n, p in probe.items()}
    agg = {n: next(x for x in p["decode"] if x["streams"] == 4)["aggregate_tok_s"] for n, p in probe.items()}
    assert d1["mf93"] > d1["t12"] and agg["mf93"] > agg["t12"]
    assert all(x["ok"] for x in probe["mf93"]["ttft"]) and max(x["prompt_tokens"] for x in probe["mf93"]["ttft"]) >= 30000
    assert json.loads((run / "k16-marlin-layers-mf93.json").read_text())["peak_vram_bytes"] < 16 * 2**30


def test_a_placement_for_a_plan_without_the_hybrid_mode_is_said_unused():
    """A card that holds every expert (the 80 GB one for the FP8 checkpoint) plans no hybrid mode: the flag is noted,
    not silently dropped and not refused (a script may pass it to every card size)."""
    from vramkit.core.plan.request import PlanRequest
    from vramkit.launch.resolve import resolve
    r = resolve(PlanRequest(preset="moe", gpu="h100-80gb", host_ram_gib=64, kt_placement="p.json",
                            knobs={"kt_gpu_layers": "off"}))
    assert r.hybrid is None and any("--kt-placement p.json not used" in n for n in r.plan.notes)
    assert any("--kt-gpu-layers off not used" in n for n in r.plan.notes)       # asked for, so said too
    assert not any("--kt-gpu-layers" in n for n in resolve(PlanRequest(preset="moe", gpu="h100-80gb")).plan.notes)
    small = resolve(PlanRequest(preset="moe", gpu="rtx-4060-ti-16gb", host_ram_gib=64, kt_placement="p.json",
                                knobs={"kt_gpu_layers": "off"}))
    assert small.hybrid is not None and small.hybrid.placement == "p.json"
    said = [n for n in small.plan.notes if "--kt-placement" in n]       # used, and what the estimate leaves out
    assert len(said) == 1 and f"first {small.plan.hybrid.num_gpu_experts} experts" in said[0]
    assert "does not count the placement" in said[0]


def test_a_placement_under_the_preset_s_whole_layers_is_refused_before_start(tmp_path):
    """The moe preset places whole layers: a GPU layer holds all its experts and a CPU layer none, so a map of which
    experts sit on the GPU within a layer has nothing to place; the check fails and names the split."""
    from vramkit.core.plan.request import PlanRequest
    from vramkit.launch.resolve import resolve
    f = tmp_path / "p.json"
    f.write_text(kp.sglang_json([list(range(128))] * catalog.model(MOE).num_layers))
    r = resolve(PlanRequest(preset="moe", gpu="rtx-4060-ti-16gb", host_ram_gib=64, kt_placement=str(f)))
    assert r.plan.hybrid.gpu_layers > 0 and not any("--kt-placement" in n for n in r.plan.notes)
    name, ok, detail = r.hybrid.placement_check()
    assert (name, ok) == ("kt-placement", False) and detail.endswith(
        "-> add --kt-gpu-layers off (the split) or start without --kt-placement")


def test_the_check_counts_a_layer_whose_gpu_experts_are_only_reordered_as_unmoved(tmp_path, monkeypatch):
    from vramkit.launch import hybrid
    model, p = _moe_plan()
    n, layers = p.hybrid.num_gpu_experts, model.num_layers
    rows = [list(reversed(range(n))) + list(range(n, 128)) for _ in range(layers - 1)]
    rows.append([127] + list(range(1, n)) + [0] + list(range(n, 127)))      # expert 127 swapped in for 0
    f = tmp_path / "p.json"
    f.write_text(kp.sglang_json(rows))
    ok, detail = hybrid.for_plan(p, "/w", placement=str(f), layers=layers,
                                 architecture=model.architecture).placement_check()[1:]
    assert ok and detail.split(": ")[1].startswith(f"1 of {layers} layers keep other experts")


def test_only_an_architecture_whose_dispatch_was_checked_on_a_gpu_takes_a_placement():
    """SGLang 0.5.15.post1's Qwen3-MoE calls TopK without ExpertLocationDispatchInfo on its one-GPU forward (read in
    its qwen3_moe.py): the adapter's dispatch was checked for it on the GPU host; any other architecture is refused."""
    assert kp.unapplied(catalog.model(MOE).architecture) is None
    assert "turned off" in kp.unapplied(catalog.model(MOE).architecture, adapter_dispatch=False)
    why = kp.unapplied("DeepseekV3ForCausalLM")
    assert "wrong outputs" in why and "checked only for Qwen3MoeForCausalLM" in why
    # the check it names is committed, and says what the table says
    d = catalog.CONFIG_DIR.parent / "benchmarks" / "results" / "gpu" / "moe-budget" / "hotcheck"
    c = json.loads((d / "placement-check.json").read_text())
    placed, stock, rounding = (c[f"{n}.probe.json"]["first_token_logprob_abs_diff_mean"]
                               for n in ("hc-placed", "hc-placed-sglang", "hc-g32"))
    assert placed < 2 * rounding < stock and c["hc-trivial-dispatch.probe.json"]["prompts_identical"] == 1


def test_the_adapter_s_dispatch_maps_the_router_s_ids_only_under_a_placement(monkeypatch, capsys):
    """The placement dispatch (services/sglang-kt/kt_compat, off with VRAMKIT_KT_PLACEMENT_DISPATCH=0): select_experts gets the layer's
    ExpertLocationDispatchInfo where its caller (Qwen3-MoE's one-GPU forward) gave none, and only when the server runs
    a non-trivial --init-expert-location. SGLang's modules are stood in for (the pinned SGLang needs CUDA to import)."""
    import sys
    import types
    compat = _load("vramkit_kt_compat_placement", "services/sglang-kt/kt_compat/vramkit_kt_compat.py")
    server = types.SimpleNamespace(init_expert_location="trivial")
    fakes = {"sglang": types.ModuleType("sglang"), "sglang.srt": types.ModuleType("sglang.srt"),
             "sglang.srt.server_args": types.ModuleType("sglang.srt.server_args"),
             "sglang.srt.eplb": types.ModuleType("sglang.srt.eplb"),
             "sglang.srt.eplb.expert_location_dispatch": types.ModuleType("sglang.srt.eplb.expert_location_dispatch")}
    fakes["sglang.srt.server_args"].get_global_server_args = lambda: server
    fakes["sglang.srt.eplb.expert_location_dispatch"].ExpertLocationDispatchInfo = types.SimpleNamespace(
        init_new=lambda layer_id: ("dispatch", layer_id))
    for name, mod in fakes.items():
        monkeypatch.setitem(sys.modules, name, mod)
    import torch

    class Out(NamedTuple):                            # SGLang's StandardTopKOutput's fields
        topk_weights: object
        topk_ids: torch.Tensor
        router_logits: object

    def select_experts(hidden_states, router_logits, topk_config, **kw):
        info = kw.get("expert_location_dispatch_info")
        # SGLang's static dispatch indexes an int64 map: int64 ids come back (its CUDA path casts nothing back)
        return Out(info, torch.tensor([[3, 1]], dtype=torch.int64 if info else torch.int32), None)

    def patched():
        topk = types.ModuleType("sglang.srt.layers.moe.topk")
        topk.select_experts = select_experts
        compat.patch_sglang_topk(topk)
        compat.patch_sglang_topk(topk)                # idempotent: wrapped once
        return topk

    call = dict(hidden_states=0, router_logits=0, topk_config=0, layer_id=7)
    topk = patched()
    assert topk.select_experts(**call).topk_weights is None        # trivial map: SGLang's own behaviour
    server.init_expert_location = "/p/kt-placement.json"
    assert topk.select_experts(**call).topk_weights is None        # read once per server: its map does not change
    topk = patched()
    assert "vramkit_kt_compat" not in capsys.readouterr().err        # nothing said under the trivial map
    out = topk.select_experts(**call)
    topk.select_experts(**call)
    said = capsys.readouterr().err.splitlines()                       # once, in the server's log
    assert len(said) == 1 and "--init-expert-location /p/kt-placement.json" in said[0]
    assert out.topk_weights == ("dispatch", 7)
    assert out.topk_ids.dtype == torch.int32 and out.topk_ids.tolist() == [[3, 1]]   # what the KT wrapper's kernels take
    given = topk.select_experts(**call | {"expert_location_dispatch_info": "given"})
    assert given.topk_weights == "given" and given.topk_ids.dtype == torch.int64    # a caller's own dispatch: untouched
    assert topk.select_experts(**call | {"layer_id": None}).topk_weights is None
    monkeypatch.delenv(compat.DISPATCH_ENV, raising=False)
    assert compat._patch_for(compat.SGLANG_TOPK) is compat.patch_sglang_topk   # on unless turned off
    monkeypatch.setenv(compat.DISPATCH_ENV, "0")
    assert compat._patch_for(compat.SGLANG_TOPK) is None


def test_dummy_weights_are_seeded_by_name_only_when_asked(monkeypatch):
    """The benchmark proxy's switch (its fill is checked with SGLang's own code: tests/integration/
    test_dummy_weights.py): off by default, so a user's server never sees it."""
    compat = _load("vramkit_kt_compat", "services/sglang-kt/kt_compat/vramkit_kt_compat.py")
    monkeypatch.delenv(compat.DUMMY_ENV, raising=False)
    assert compat._patch_for(compat.SGLANG_LOADER) is None
    monkeypatch.setenv(compat.DUMMY_ENV, "1")
    assert compat._patch_for(compat.SGLANG_LOADER) is compat.patch_dummy_loader
    seeds = {compat.seed_by_name(f"model.layers.{i}.mlp.gate.weight") for i in range(48)}
    assert len(seeds) == 48 and compat.seed_by_name("x") == compat.seed_by_name("x")


def test_placement_check_tells_rounding_from_other_experts():
    """benchmarks/gpu/placement_check.py compare: the same tokens with log-probabilities a rounding apart (a correct
    placement) against tokens that part ways (experts computed with other experts' weights)."""
    pc = _load("placement_check", "benchmarks/gpu/placement_check.py")
    base = {"greedy": [{"seed": 1, "tokens": [5, 6, 7, 8], "logprobs": [-0.1, -0.2, -0.3, -0.4]},
                       {"seed": 2, "tokens": [9, 9], "logprobs": [-1.0, -1.0]}]}
    near = {"greedy": [{"seed": 1, "tokens": [5, 6, 7, 8], "logprobs": [-0.1, -0.21, -0.3, -0.4]},
                       {"seed": 2, "tokens": [9, 9], "logprobs": [-1.0, -1.02]}]}
    apart = {"greedy": [{"seed": 1, "tokens": [5, 3, 3, 3], "logprobs": [-0.5, -2.0, -2.0, -2.0]},
                        {"seed": 2, "tokens": [4, 4], "logprobs": [-3.0, -3.0]}, {"seed": 3, "tokens": [1]}]}
    c = pc.compare(base, near)
    assert c["prompts"] == 2 and c["prompts_identical"] == 1 and c["positions_agreeing_before_divergence"] == 1
    assert c["logprob_abs_diff_max"] == pytest.approx(0.02)
    d = pc.compare(base, apart)
    assert d["prompts_identical"] == 0 and d["positions_agreeing_before_divergence"] == pytest.approx(1 / 6, abs=1e-3)
    assert d["logprob_abs_diff_max"] == pytest.approx(0.4)
    # the first generated token: the one forward every server ran on the same prompt
    assert c["first_token_logprob_abs_diff_max"] == 0 and d["first_token_logprob_abs_diff_max"] == pytest.approx(2.0)
    assert d["first_token_logprob_abs_diff_mean"] == pytest.approx(1.2)
    with pytest.raises(ValueError, match="no greedy request in common"):
        pc.compare(base, {"greedy": []})
