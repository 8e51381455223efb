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
    assert f"{q4k:.2f} ms against {q4k_kt:.2f} ms" in readme and f"{q8:.2f} against {int8:.2f}" in readme
    per_layer = _per_layer("ggml-q4k-per-layer-dev-host.json")
    assert json.loads((DIR / "ggml-q4k-per-layer-dev-host.json").read_text())["per_layer_calls"] is True
    assert f"({per_layer[1]:.2f} called layer by layer" in readme
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
