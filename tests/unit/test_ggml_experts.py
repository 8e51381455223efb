"""The adapter's opt-in ggml CPU experts (services/sglang-kt/kt_compat/vramkit_ggml_experts.py): what it refuses, how it
reads a layer from a GGUF, and the committed server runs its README quotes (benchmarks/results/gpu/moe-vs-llamacpp-ggml/).
The C shim itself runs in benchmarks/gpu/ggml_experts_check.py (it needs ggml built for the CPU: build_ggml.sh DIR cpu,
minutes), on the dev host and on the GPU host before every server run of it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from repo_modules import load_module

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "benchmarks" / "results" / "gpu" / "moe-vs-llamacpp-ggml"


@pytest.fixture(scope="module")
def vge():
    with pytest.MonkeyPatch.context() as mp:     # its sibling vramkit_host_experts, as the server's path has it
        mp.syspath_prepend(str(ROOT / "services" / "sglang-kt" / "kt_compat"))
        yield load_module("services/sglang-kt/kt_compat/vramkit_ggml_experts.py")


@pytest.fixture(scope="module")
def layer_gguf(tmp_path_factory):
    """blk.3's expert tensors of a 4-expert, 256-wide MoE layer, Q8_0 blocks (gguf-py's own quantizer)."""
    import gguf
    from gguf.quants import quantize
    path = tmp_path_factory.mktemp("gguf") / "layer.gguf"
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    rng = np.random.default_rng(0)
    for proj, (rows, cols) in (("gate", (64, 256)), ("up", (64, 256)), ("down", (256, 64))):
        blocks = quantize(rng.standard_normal((4, rows, cols)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(f"blk.3.ffn_{proj}_exps.weight", blocks, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_layer_is_read_with_its_types_and_blocks(vge, layer_gguf):
    from gguf import GGUFReader
    blocks = vge.gguf_blocks(GGUFReader(str(layer_gguf)), 3, experts=4, hidden=256, inter=64)
    assert {p: t for p, (t, _) in blocks.items()} == {"gate": 8, "up": 8, "down": 8}       # GGML_TYPE_Q8_0
    assert all(data.nbytes == 4 * 64 * 256 // 32 * 34 for _, data in blocks.values())    # Q8_0: 34 bytes a 32


@pytest.mark.parametrize("layer, shape, said", [
    (4, (256, 64, 4), "the GGUF has no blk.4.ffn_gate_exps.weight: it is not this model's"),
    (3, (512, 64, 4), "blk.3.ffn_gate_exps.weight is (256, 64, 4), the model's is (512, 64, 4)"),
])
def test_a_gguf_of_another_model_is_refused_in_one_line(vge, layer_gguf, layer, shape, said):
    from gguf import GGUFReader
    hidden, inter, experts = shape
    with pytest.raises(ValueError) as e:
        vge.gguf_blocks(GGUFReader(str(layer_gguf)), layer, experts=experts, hidden=hidden, inter=inter)
    assert str(e.value) == said


HF = {"num_experts": 4, "num_experts_per_tok": 2, "hidden_size": 256, "moe_intermediate_size": 64}


@pytest.mark.parametrize("deferred, placed, said", [
    (2, False, "layer 5 defers 2 experts a token; ggml layers defer none"),
    (0, True, "takes the trivial expert placement only"),
])
def test_what_the_ggml_path_cannot_compute_is_refused_before_anything_loads(vge, monkeypatch, deferred, placed, said):
    monkeypatch.setattr(vge, "engine", lambda threads: pytest.fail("loaded an engine for a refused layer"))
    with pytest.raises(ValueError, match=said):
        vge.wrap(object(), 5, HF, 12, deferred, placed)


def test_a_missing_shim_says_how_to_build_it(vge, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"libvramkit_ggml_experts.so is missing: build it with "
                                         r"benchmarks/gpu/build_ggml.sh DIR cpu"):
        vge.Shim(tmp_path)
    monkeypatch.setattr(vge, "_ENGINE", [])
    monkeypatch.delenv(vge.LIB_ENV, raising=False)
    with pytest.raises(ValueError, match=f"needs {vge.LIB_ENV}"):
        vge.engine(4)


def _probe(run: str, point: str) -> dict:
    d = json.loads((RUNS / run / f"{point}.probe.json").read_text())
    dec = {x["streams"]: x for x in d["decode"]}
    return {"d1": dec[1]["per_stream_tok_s"], "agg4": dec[4]["aggregate_tok_s"],
            "after": {x["prompt_tokens"]: x["decode_tok_s"] for x in d["ttft"]},
            "ttft": {x["prompt_tokens"]: x["ttft_s"] for x in d["ttft"]}}


def test_the_readme_tables_are_the_probes():
    text = (RUNS / "README.md").read_text()
    for run, point in (("run2", "k16-marlin-layers-ggml-t12"), ("run2", "k16-marlin-layers-t12"),
                       ("run2", "k16-marlin-layers-ggml-kt4"), ("run1", "k16-marlin-layers-t12")):
        p = _probe(run, point)
        assert f"{p['d1']:.2f}" in text and f"{p['agg4']:.1f}" in text
        ttft = " / ".join(f"{p['ttft'][n]:.2f}" for n in (512, 8192, 30000))
        assert ttft in text, (point, ttft)
    ggml, kt = _probe("run2", "k16-marlin-layers-ggml-t12"), _probe("run2", "k16-marlin-layers-t12")
    ratios = [ggml["d1"] / kt["d1"]] + [ggml["after"][n] / kt["after"][n] for n in (512, 8192, 30000)]
    said = (f"{ratios[0]:.2f}x on the 128-token decode, {ratios[1]:.2f}x, {ratios[2]:.2f}x and {ratios[3]:.2f}x on the "
            f"64-token decodes after 512, 8K and 30K, {ggml['agg4'] / kt['agg4']:.2f}x at 4 streams")
    assert said in " ".join(text.split())
    env = json.loads((RUNS / "run2" / "k16-marlin-layers-ggml-t12.json").read_text())["env"]
    assert any(e.startswith("VRAMKIT_KT_GGML=") for e in env)
    assert not json.loads((RUNS / "run2" / "k16-marlin-layers-t12.json").read_text())["env"]
    evidence = (RUNS / "run2" / "k16-marlin-layers-ggml-t12.evidence.txt").read_text()
    assert evidence.count("vramkit_ggml_experts: layer ") == 13 and "Capture target decode CUDA graph end" in evidence


def test_run1_against_llamacpp_reads_as_the_main_table_does():
    text = " ".join((RUNS / "README.md").read_text().split())
    kit, fit, best = (_probe("run1", p) for p in ("k16-marlin-layers-t12", "llama-16-fit", "llama-16-best"))
    top = lambda key, n=None: max(x[key] if n is None else x[key][n] for x in (fit, best))   # noqa: E731
    said = (f"{kit['d1'] / top('d1'):.2f}x decode at depth 0, {kit['after'][8192] / top('after', 8192):.2f}x after "
            f"8K, {kit['after'][30000] / top('after', 30000):.2f}x after 30K, TTFT at 30K "
            f"{kit['ttft'][30000] / min(fit['ttft'][30000], best['ttft'][30000]):.2f}x llama.cpp's (--fit's), "
            f"{kit['agg4'] / top('agg4'):.2f}x its aggregate at 4 streams")
    assert said in text
    assert (RUNS / "run1" / "llama-16-best-ncmoe.txt").read_text().strip() == "11"
    refused = json.loads((RUNS / "run1" / "k16-wna16-layers-t12.json").read_text())
    assert refused["up_rc"] == 13 and "0.35 GiB" in (RUNS / "run1" / "k16-wna16-layers-t12.up.txt").read_text()


def test_the_main_readme_reads_the_gap_from_these_runs():
    readme = " ".join((ROOT / "README.md").read_text().split())
    kit, best = _probe("run1", "k16-marlin-layers-t12"), _probe("run1", "llama-16-best")
    ggml, kt = _probe("run2", "k16-marlin-layers-ggml-t12"), _probe("run2", "k16-marlin-layers-t12")
    assert f"{kit['d1']:.1f} against {best['d1']:.1f} tok/s at depth 0 ({kit['d1'] / best['d1']:.2f}x)" in readme
    assert f"({ggml['d1']:.2f} against {kt['d1']:.2f} tok/s)" in readme
    kit_ms, llama_ms = 1000 / kit["d1"], 1000 / best["d1"]
    gpu_kit, gpu_llama = 4.9, 3.9          # moe-budget.md's profiled GPU kernels; llama.cpp at --n-cpu-moe 0
    assert f"the kit's {kit_ms:.2f} ms token is ~{gpu_kit} ms" in readme
    assert f"plus 13 CPU layers at ~{(kit_ms - gpu_kit) / 13:.2f} ms" in readme
    assert f"llama.cpp's {llama_ms:.2f} ms is {gpu_llama} ms" in readme
    assert f"plus 11 CPU layers at ~{(llama_ms - gpu_llama) / 11:.2f} ms" in readme
    budget = (ROOT / "benchmarks/results/gpu/moe-budget.md").read_text()
    assert "| 1 | 120.7 (19.5-145.1) | 118.4 | 4.9 |" in budget        # the whole-layer profile's GPU kernels
    assert "3.9 ms with every expert on the GPU (--n-cpu-moe 0)" in budget

    ttft24 = json.loads((ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-24g.json").read_text())["engines"]["vramkit"]
    per_layer = (kit["ttft"][30000] - ttft24["ttft_30k_s"]) / 13
    assert f"~{per_layer:.2f} s a CPU layer gives ~{ttft24['ttft_30k_s'] + 11 * per_layer:.1f} and " \
        f"~{ttft24['ttft_30k_s'] + 10 * per_layer:.1f} s, against {kit['ttft'][30000]:.2f} at 13" in readme


@pytest.mark.parametrize("frac, chunk, layers, left", [(0.90, 4096, 35, None), (0.93, 4096, 36, 0.75),
                                                       (0.95, 2048, 37, 0.45)])
def test_the_more_gpu_layers_the_readme_names_are_the_plan_s(tmp_path, capsys, frac, chunk, layers, left):
    """The plan the README's gap paragraph and the driver's lmf step quote: the coder's GPTQ-Int4 shape (the config
    the GPU host's runs load), 15.31 GiB free, whole layers on marlin, AMXINT8 on 12 threads; 0.90 is what run1 ran."""
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    from fit_kt import gptq_coder_config

    from vramkit.cli import main
    (tmp_path / "config.json").write_text(json.dumps(gptq_coder_config()))
    rc = main(["plan", "--preset", "moe", "--model", str(tmp_path), "--gpu", "h100-80gb", "--gpu-free-gib", "15.31",
               "--kt-gpu-layers", "auto", "--kt-method", "AMXINT8", "--kt-cpuinfer", "12", "--kt-gpu-prefill", "0",
               "--kt-embed-host", "off", "--host-cores", "16",
               "--host-ram-gib", "120", "--cpu-isa", "amx", "--mem-fraction", str(frac), "--chunked-prefill",
               str(chunk), "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert rc == 0 and plan["fits"] and plan["hybrid"]["gpu_layers"] == layers
    evidence = (RUNS / "run1" / "k16-marlin-layers-t12.evidence.txt").read_text()
    assert "(35 layers, no CPU round trip)" in evidence            # what run1's server, at 0.90, placed
    if left is not None:
        readme = " ".join((ROOT / "README.md").read_text().split())
        step = "4096" if chunk == 4096 else "2048"
        assert f"{layers} GPU layers" in readme or f"chunks {layers}" in readme
        assert f"{left:.2f} GiB" in readme and f"a {step}-token step" in readme
        assert plan["startup_free_bytes"] / 2**30 == pytest.approx(left, abs=0.005)
