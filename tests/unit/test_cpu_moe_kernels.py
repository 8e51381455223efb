"""benchmarks/results/gpu/cpu-moe-kernels/: the table and the claims its README and the main README make are the JSONs'."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "benchmarks" / "results" / "gpu" / "cpu-moe-kernels"


def _per_layer(name: str, method: str | None = None) -> dict[int, float]:
    """ms per layer by thread count: the median token's time over the 48 MoE layers."""
    runs = [r for f in sorted(DIR.glob(name)) for r in json.loads(f.read_text())["runs"]
            if method is None or r["method"] == method]
    return {r["threads"]: r["cpu_ms_per_token_median"] / 48 for r in runs}


def test_the_readme_table_is_the_runs():
    table = (DIR / "README.md").read_text()
    for f, label, weights in (("ggml-q4k-dev-host.json", "ggml, Q4_K", "CPU_REPACK"),
                              ("ggml-q4k-per-layer-dev-host.json", "ggml, Q4_K, called per layer", "CPU_REPACK"),
                              ("ggml-q4k-plain-dev-host.json", "ggml, Q4_K", "CPU"),
                              ("ggml-q8_0-dev-host.json", "ggml, Q8_0", "CPU")):
        res = json.loads((DIR / f).read_text())
        assert res["buffer"] == weights and res["host"]["cores"] == 2 and res["host"]["gpu"] is None
        assert all(r["layer_rel_l2_vs_numpy"] < 0.02 for r in res["runs"])   # it computes the layer, within Q8_K rounding
        t = _per_layer(f)
        pre = next(r["prefill_tok_s"] for r in res["runs"] if r["threads"] == 1)
        assert f"| `{f}` | {label} | {weights} | {res['layers']} | {t[1]:.2f} ms | {t[2]:.2f} ms | {pre} tok/s |" \
            in table
    for method in ("AMXINT8", "LLAMAFILE_Q4_K"):
        t = _per_layer("kt-dev-host-t*.json", method)
        pre = next(r["prefill_tok_s"] for r in json.loads((DIR / "kt-dev-host-t1.json").read_text())["runs"]
                   if r["method"] == method)
        assert f"kt-kernel, {method} |" in table and f"| 2 | {t[1]:.2f} ms | {t[2]:.2f} ms | {pre} tok/s |" in table
        assert t[2] > t[1]      # the README's reason to read the 1-thread column: kt-kernel slower on both cores


def test_the_ratios_quoted_are_the_runs():
    text = " ".join((DIR / "README.md").read_text().split())
    readme = " ".join((ROOT / "README.md").read_text().split())
    q4k, q4k_kt = _per_layer("ggml-q4k-dev-host.json")[1], _per_layer("kt-dev-host-t*.json", "LLAMAFILE_Q4_K")[1]
    q8, int8 = _per_layer("ggml-q8_0-dev-host.json")[1], _per_layer("kt-dev-host-t*.json", "AMXINT8")[1]
    said = (f"ggml's Q4_K layer takes {q4k / q4k_kt:.2f}x kt-kernel's Q4_K layer ({q4k_kt / q4k:.1f}x faster), and its "
            f"Q8_0 layer {q8 / int8:.2f}x kt-kernel's AMXINT8 ({int8 / q8:.1f}x)")
    assert said in text
    assert f"on the dev host's one thread ggml was {q4k_kt / q4k:.1f}x faster" in readme
    per_layer = _per_layer("ggml-q4k-per-layer-dev-host.json")
    assert json.loads((DIR / "ggml-q4k-per-layer-dev-host.json").read_text())["per_layer_calls"] is True
    cost = max(abs(1000 * (per_layer[t] - _per_layer("ggml-q4k-dev-host.json")[t])) for t in (1, 2))
    assert cost < 7 and "takes within 7 us of the one-graph run at either thread count" in text


def test_the_prefill_sentence_is_the_runs():
    text = " ".join((DIR / "README.md").read_text().split())

    def pre(f: str, method: str | None = None) -> float:
        return next(r["prefill_tok_s"] for r in json.loads((DIR / f).read_text())["runs"]
                    if r["threads"] == 1 and (method is None or r["method"] == method))
    q4k, plain, kt = pre("ggml-q4k-dev-host.json"), pre("ggml-q4k-plain-dev-host.json"), \
        pre("kt-dev-host-t1.json", "LLAMAFILE_Q4_K")
    assert f"ggml's Q4_K chunk runs at {q4k} tokens/s ({plain} from the plain buffer" in text
    assert f"kt-kernel's at {kt}" in text and q4k > kt


GPU_HOST = (("ggml-q4_k-gpu-host.json", None, "ggml, Q4_K, one graph a token", "CPU_REPACK"),
            ("ggml-q4_k-per-layer-gpu-host.json", None, "ggml, Q4_K, called per layer", "CPU_REPACK"),
            ("ggml-q8_0-gpu-host.json", None, "ggml, Q8_0", "CPU"),
            ("kt-gpu-host.json", "AMXINT8", "kt-kernel, AMXINT8", "its layout"),
            ("kt-gpu-host.json", "LLAMAFILE_Q4_K", "kt-kernel, LLAMAFILE_Q4_K", "llama.cpp's Q4_K blocks"))


def _prefill(f: str, threads: int, method: str | None = None) -> float:
    return next(r["prefill_tok_s"] for r in json.loads((DIR / f).read_text())["runs"]
                if r["threads"] == threads and (method is None or r["method"] == method))


def test_the_gpu_host_table_is_the_runs():
    table = (DIR / "README.md").read_text()
    for f, method, label, weights in GPU_HOST:
        res = json.loads((DIR / f).read_text())
        assert res["host"]["cores"] == 16 and res["host"]["gpu"].startswith("NVIDIA H100") and res["layers"] == 8
        if method is None:
            assert res["buffer"] == weights and all(r["layer_rel_l2_vs_numpy"] < 0.02 for r in res["runs"])
        t = _per_layer(f, method)
        cells = " | ".join(f"**{t[n]:.2f} ms**" if f"**{t[n]:.2f} ms**" in table and n == 12 else f"{t[n]:.2f} ms"
                           for n in (8, 12, 16))
        assert f"| `{f}` | {label} | {weights} | {cells} | {_prefill(f, 12, method)} tok/s |" in table


def test_the_gpu_host_claims_are_the_runs():
    text = " ".join((DIR / "README.md").read_text().split())
    readme = " ".join((ROOT / "README.md").read_text().split())
    graph, calls = _per_layer("ggml-q4_k-gpu-host.json")[12], _per_layer("ggml-q4_k-per-layer-gpu-host.json")[12]
    int8, q4k = _per_layer("kt-gpu-host.json", "AMXINT8")[12], _per_layer("kt-gpu-host.json", "LLAMAFILE_Q4_K")[12]
    assert (f"ggml's Q4_K layer takes {calls:.2f}-{graph:.2f} ms, kt-kernel's AMXINT8 {int8:.2f}: "
            f"{calls / int8:.2f}-{graph / int8:.2f}x") in text
    assert f"{12 * calls:.1f}-{12 * graph:.1f} thread-ms" in text and f"({12 * int8:.1f} thread-ms here" in text
    pre, pre8 = _prefill("ggml-q4_k-per-layer-gpu-host.json", 12), _prefill("kt-gpu-host.json", 12, "AMXINT8")
    assert (f"ggml's Q4_K layer took {calls:.2f} ms called layer by layer, against {int8:.2f} for kt-kernel's AMXINT8 "
            f"and {q4k:.2f} for its Q4_K, with a prompt path at {pre:.0f} tokens/s against AMXINT8's {pre8:.0f}") \
        in readme
    assert f"({pre8} against {_prefill('ggml-q4_k-gpu-host.json', 12)} tokens/s)" in text
    t14 = json.loads((DIR / "ggml-q4_k-t14-gpu-host.json").read_text())["runs"]
    assert f"ggml alone at 14 threads takes {t14[0]['ms_per_layer']:.2f} ms" in text and t14[0]["threads"] == 14
    assert _per_layer("kt-gpu-host.json", "AMXINT8")[16] > 10 * int8       # the 16-thread collapse the text names


def test_the_shim_costs_what_the_bench_does():
    text = " ".join((DIR / "README.md").read_text().split())
    shim = {t: json.loads((DIR / f"ggml-experts-check-dev-host-t{t}.json").read_text()) for t in (1, 2)}
    bench = _per_layer("ggml-q4k-per-layer-dev-host.json")
    assert all(r["ok"] and r["threads"] == t and r["full_shape"]["experts"] == 128 for t, r in shim.items())
    ms = {t: r["full_shape"]["ms_per_layer"] for t, r in shim.items()}
    assert f"took {ms[1]:.2f} ms a layer at 1 thread and {ms[2]:.2f} at 2" in text
    assert f"against the bench's {bench[1]:.2f} and {bench[2]:.2f}" in text
    assert all(abs(ms[t] / bench[t] - 1) < 0.05 for t in (1, 2))
